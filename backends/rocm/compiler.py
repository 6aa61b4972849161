"""Kernel compilation: kernels/<family>.hip -> code object (hiprtc) or cubin (NVRTC), cached.

The same source text goes to both compilers; `kernels/compat.h` (and any other header
in kernels/) is handed to the compiler as an in-memory header, so `#include "compat.h"`
resolves without include paths.

Disk cache (DESIGN.md): `$TENSORLITE_CACHE_DIR`, else `$XDG_CACHE_HOME/tensorlite`, else
`~/.cache/tensorlite`, created with mode 0700. The key hashes the source, every header,
the options, the arch, the compiler's version and the package version. Each file holds
a magic line, the payload's sha256 and the payload; a file that fails the check is
discarded and the kernel recompiled. Writes go to a temp file in the same directory and
are renamed into place, so readers never see a partial file.

`compile_source(platform, source_name, arch)` needs no device: CI compiles every kernel
for gfx90a through exactly this path.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Tuple

_MAGIC = b"TLKC1\n"          # tensorlite kernel cache, format 1
_MEMORY: Dict[str, bytes] = {}


def kernel_dir() -> Path:
    import tensorlite.kernels
    return Path(tensorlite.kernels.__file__).resolve().parent


def cache_dir() -> Path:
    root = os.environ.get("TENSORLITE_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "tensorlite")
    path = Path(root) / "kernels"
    for d in (Path(root), path):
        if not d.is_dir():
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(d, 0o700)  # mkdir's mode is masked by the umask
    return path


def package_version() -> str:
    try:
        from importlib.metadata import version
        return version("tensorlite")
    except Exception:
        import tensorlite
        return getattr(tensorlite, "__version__", "unknown")


def read_kernel_source(source_name: str) -> Tuple[str, Dict[str, str]]:
    """(source text, {header name: text}) for kernels/<source_name>."""
    kdir = kernel_dir()
    path = kdir / source_name
    if not path.is_file():
        from tensorlite.errors import CompileError
        available = sorted(p.name for p in kdir.glob("*.hip"))
        raise CompileError(f"kernel source {source_name!r} not found in {kdir}; available: {available}")
    headers = {p.name: p.read_text() for p in sorted(kdir.glob("*.h"))}
    return path.read_text(), headers


def _platform(platform):
    if isinstance(platform, str):
        from . import get_platform
        return get_platform(platform)
    return platform


def cache_key(plat, source: str, headers: Dict[str, str], options, arch: str) -> str:
    h = hashlib.sha256()
    # a platform that compiles with another's compiler shares its cache (amdemu: rocm's hiprtc)
    parts = [getattr(plat, "cache_name", plat.name), arch, plat.rtc_version(), package_version(),
             "\0".join(options), source]
    parts += [f"{n}\0{headers[n]}" for n in sorted(headers)]
    for part in parts:
        h.update(part.encode())
        h.update(b"\0\1")  # separator, so parts cannot run into each other
    return h.hexdigest()


def _load_cached(path: Path):
    """The payload if `path` holds a complete, hash-verified entry, else None."""
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    header_len = len(_MAGIC) + 65  # 64 hex digits + newline
    if not blob.startswith(_MAGIC) or len(blob) < header_len:
        return None
    digest, payload = blob[len(_MAGIC):header_len - 1].decode("ascii", "replace"), blob[header_len:]
    if hashlib.sha256(payload).hexdigest() != digest:
        return None
    return payload


def _store(path: Path, payload: bytes) -> None:
    blob = _MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def compile_text(platform, source: str, name: str, arch: str, headers: Dict[str, str] = None) -> bytes:
    """Compile `source` (named `name` in logs) for `arch`, through the memory and disk caches."""
    plat = _platform(platform)
    headers = dict(headers or {})
    options = plat.rtc_options(arch)
    key = cache_key(plat, source, headers, options, arch)
    payload = _MEMORY.get(key)
    if payload is not None:
        return payload
    # No lock around the compile itself: different sources compile in parallel (precompile),
    # and two threads racing on one key only duplicate work (the rename is atomic).
    suffix = ".cubin" if plat.name == "cuda" else ".hsaco"
    path = cache_dir() / f"{key}{suffix}"
    payload = _load_cached(path)
    if payload is None:
        if path.exists():  # corrupt or truncated: drop it, then rebuild
            try:
                path.unlink()
            except OSError:
                pass
        payload = plat.rtc_compile(source, name, headers, options)
        try:
            _store(path, payload)
        except OSError:
            pass  # a read-only cache must not stop us from running
    _MEMORY[key] = payload
    return payload


def compile_source(platform, source_name: str, arch: str) -> bytes:
    """Compile kernels/<source_name> for `arch` ('gfx90a', 'sm_90'); no device needed."""
    source, headers = read_kernel_source(source_name)
    return compile_text(platform, source, source_name, arch, headers)


def list_kernel_sources():
    return sorted(p.name for p in kernel_dir().glob("*.hip"))


def precompile(platform, arch: str, sources=None, workers: int = None) -> Dict[str, int]:
    """Compile kernel sources (default: all) for `arch` in parallel threads; the rtc call
    releases the GIL, so a cold cache fills in about the time of the slowest family.
    Returns {source: code size}."""
    plat = _platform(platform)
    sources = list(sources or list_kernel_sources())
    if not plat.RTC_THREAD_SAFE:
        workers = 1
    workers = workers or min(len(sources), os.cpu_count() or 1) or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        sizes = pool.map(lambda src: len(compile_source(plat, src, arch)), sources)
        return dict(zip(sources, sizes))
