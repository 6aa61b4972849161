"""Kernel compilation: kernels/<family>.hip -> the platform's code object, through its
runtime compiler (`rtc_compile`), cached.

The same source text goes to every platform's compiler; `kernels/compat.h` (and any other
header in kernels/) is handed to the compiler as an in-memory header, so
`#include "compat.h"` resolves without include paths.

Disk cache (DESIGN.md): `$TENSORLITE_CACHE_DIR`, else `$XDG_CACHE_HOME/tensorlite`, else
`~/.cache/tensorlite`, created with mode 0700. A directory there that exists but belongs
to another user, or that its group or others may write, is refused with a warning (anyone
who can write there could plant a code object whose embedded hash matches its payload):
a private per-user directory under the system temp dir is used instead (`cache_dir`). The
key hashes the source, every header, the options, the arch, the compiler (its cache name and
version: the emulated platform's hiprtc and clang-19 entries never meet) and the package
version. Each file holds a magic line, the payload's sha256 and the payload; a file that
fails the check (a truncated or damaged file) is recompiled and replaced. Writes go to a
temp file in the same directory and are renamed into place, so readers never see a partial
file, and processes that compile the same cold family at once each write a complete entry
(the last rename wins; tests/test_compile_isolation.py runs four).

hiprtc and NVRTC compile in a child process (compile_worker.py), so that a crash of the
compiler raises CompileError here instead of killing the process; a cache hit spawns nothing.

`compile_source(platform, source_name, arch)` needs no device: CI compiles every kernel
source through exactly this path on a machine without a GPU.
"""
from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Optional, Tuple

from . import compile_worker

_MAGIC = b"TLKC1\n"          # tensorlite kernel cache, format 1
_MEMORY: Dict[str, bytes] = {}
_WARNED = set()              # refusals already reported in this process


KERNEL_DIR_ENV = "TENSORLITE_KERNEL_DIR"  # a folder of kernel sources compiled instead of the package's


def kernel_dir() -> Path:
    """The package's kernels/, or the folder $TENSORLITE_KERNEL_DIR names (the emulated
    platform's mutation check compiles edited copies there: amdemu/mutate.py)."""
    override = os.environ.get(KERNEL_DIR_ENV)
    if override:
        return Path(override).resolve()
    import tensorlite.kernels
    return Path(tensorlite.kernels.__file__).resolve().parent


def _untrusted_reason(d: Path) -> Optional[str]:
    """Why the existing directory `d` must not hold cached code objects, or None: it belongs
    to another user, or its group or others may write it. (None where the OS has no POSIX
    ownership.)"""
    if not hasattr(os, "getuid"):
        return None
    st = os.stat(d)
    if st.st_uid != os.getuid():
        return f"it is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    writers = [who for who, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit]
    if writers:
        return f"{' and '.join(writers)} may write it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _private_kernels_dir(root: Path) -> Tuple[Optional[Path], str]:
    """(root/kernels, "") with both directories created with mode 0700 where missing, or
    (None, why) where either exists but is not trusted (`_untrusted_reason`)."""
    for d in (root, root / "kernels"):
        if not d.is_dir():
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                os.chmod(d, 0o700)  # mkdir's mode is masked by the umask
            except OSError:
                pass  # made by someone else in the meantime: the check below refuses it
        why = _untrusted_reason(d)
        if why is not None:
            return None, f"{d}: {why}"
    return root / "kernels", ""


def cache_dir() -> Path:
    """The directory of the disk cache, `<root>/kernels`: root is $TENSORLITE_CACHE_DIR, else
    $XDG_CACHE_HOME/tensorlite, else ~/.cache/tensorlite. A root (or kernels folder) that
    exists but belongs to another user or is writable by its group or others is refused, as
    ssh and pip refuse such folders: a warning names it and why, and the cache goes to
    tensorlite-<uid> under the system temp dir (checked the same way; where that is refused
    too, a fresh private directory for this process)."""
    root = os.environ.get("TENSORLITE_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "tensorlite")
    path, why = _private_kernels_dir(Path(root))
    if path is not None:
        return path
    fallback = Path(tempfile.gettempdir()) / f"tensorlite-{os.getuid()}"
    path, why_fallback = _private_kernels_dir(fallback)
    if path is None:
        why += f"; the fallback {why_fallback}"
        path = Path(tempfile.mkdtemp(prefix="tensorlite-")) / "kernels"   # mode 0700, ours alone
        path.mkdir(mode=0o700)
    message = (f"tensorlite: not using the kernel cache directory {root} ({why}): anyone who can write "
               f"there could plant kernels. Using {path.parent} instead.")
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, stacklevel=2)
    return path


def clear_memory_cache() -> None:
    """Forget the code objects compiled or read in this process: the next compile of each
    reads the disk cache again, as a new process would (the disk cache stays)."""
    _MEMORY.clear()


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
    # a platform that compiles with another's compiler shares its entries (amdemu: the rocm
    # platform's for hiprtc, clang.ClangAmdCompiler's for clang-19)
    parts = [getattr(plat, "cache_name", plat.name), arch, plat.rtc_version(), package_version(),
             "\0".join(options), source]
    parts += [f"{n}\0{headers[n]}" for n in sorted(headers)]
    for part in parts:
        h.update(part.encode())
        h.update(b"\0\1")  # separator, so parts cannot run into each other
    return h.hexdigest()


def load_cached(path: Path):
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
    # and two threads or processes racing on one key only duplicate work (the rename is atomic).
    path = cache_dir() / f"{key}{plat.CODE_SUFFIX}"
    payload = load_cached(path)
    if payload is None:  # missing, or truncated or damaged: os.replace puts a good one in its place
        payload = run_compiler(plat, source, name, headers, options, arch)
        try:
            _store(path, payload)
        except OSError:
            pass  # a read-only cache must not stop us from running
    _MEMORY[key] = payload
    return payload


def run_compiler(plat, source: str, name: str, headers: Dict[str, str], options, arch: str) -> bytes:
    """The platform's compiler on `source`: in a child process where it is a library that
    runs in this one (hiprtc, NVRTC: compile_worker.py), else here."""
    rebuild = compile_worker.recipe(plat)
    if rebuild is None:
        return plat.rtc_compile(source, name, headers, options)
    what = f"{name} for {arch} with {plat.rtc_version()} (options {' '.join(options)})"
    return compile_worker.compile_in_child(rebuild, source, name, headers, options, what)


def compile_source(platform, source_name: str, arch: str) -> bytes:
    """Compile kernels/<source_name> for `arch` (one of the platform's architecture names); no
    device needed."""
    source, headers = read_kernel_source(source_name)
    return compile_text(platform, source, source_name, arch, headers)


def list_kernel_sources():
    return sorted(p.name for p in kernel_dir().glob("*.hip"))


def precompile(platform, arch: str, sources=None, workers: int = None) -> Dict[str, int]:
    """Compile kernel sources (default: all) for `arch` in parallel threads; each compile runs
    in its own child process (or releases the GIL), so a cold cache fills in about the time of
    the slowest family. Returns {source: code size}."""
    plat = _platform(platform)
    sources = list(sources or list_kernel_sources())
    # a compiler that is not thread-safe (HIP 5.2's hiprtc) runs one at a time, unless each
    # compile has a process of its own
    if not plat.RTC_THREAD_SAFE and compile_worker.recipe(plat) is None:
        workers = 1
    workers = workers or min(len(sources), os.cpu_count() or 1) or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        sizes = pool.map(lambda src: len(compile_source(plat, src, arch)), sources)
        return dict(zip(sources, sizes))
