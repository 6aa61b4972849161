"""Which entry points of the code objects the emulated suite ran, per architecture.

A run with TENSORLITE_AMDEMU_COVERAGE=DIR leaves one file per process in DIR naming the
kernels it launched (platform.py). This module compares their union with every entry point
(`extern "C"` kernel) of every code object compiled for the architecture:

    python -m tensorlite.backends.rocm.amdemu.coverage DIR gfx90a [gfx940 gfx1100 gfx942 gfx1100-clang ...]

prints executed / total per kernel family, lists the entry points that cannot run on the
architecture with the reason, and exits 1 naming any other entry point that never ran.
"""
from __future__ import annotations

import glob
import os
import re
import sys
from typing import Dict, List, Set, Tuple

from ..hip import AmdArchitectures


def _not_launched(label: str) -> List[Tuple[re.Pattern, str]]:
    """(entry-point pattern, reason) for the kernels that exist in the code objects of `label`
    (an architecture, or architecture-compiler: gfx1100-clang) but that the storage never
    launches there (their bodies are compiled out: compat.h)."""
    from .platform import parse_target
    arch = parse_target(label)[0]
    out = [(re.compile(r"flash_((fwd|bwd)_wg|fwd_wsp?)\d+_"),
            "Hopper's warpgroup (wgmma) attention: compiled only for sm_90a (TL_HAS_WGMMA), empty elsewhere")]
    cores = AmdArchitectures().matrix_cores(arch)
    if cores is None:
        out.append((re.compile(r"flash_(fwd|bwd)_mma\d+_"),
                    f"matrix-core attention: {arch} has no MFMA or WMMA (TL_HAS_MMA), the storage takes "
                    "flash_fwd/bwd"))
    elif cores == "wmma":
        out.append((re.compile(r"flash_(fwd|bwd)_mma64_f32$"),
                    f"f32 matrix-core attention: {arch}'s WMMA takes no f32 operands (empty there), the storage "
                    "takes flash_fwd64_f32/flash_bwd64_f32"))
        out.append((re.compile(r"flash_(fwd|bwd)(64|128)_(f16|bf16)$"),
                    f"f16/bf16 attention at head dims 64/128: on {arch} the storage always takes the WMMA kernels "
                    "(flash_*_mma*) instead"))
    else:
        out.append((re.compile(r"flash_(fwd|bwd)((64|128)_(f16|bf16)|64_f32)$"),
                    f"f16/bf16 attention at head dims 64/128, f32 at 64: on {arch} the storage always takes "
                    "the MFMA kernels (flash_*_mma*) instead"))
    return out


def entry_points(label: str) -> Dict[str, Set[str]]:
    """{kernel source: its entry points} of the code objects compiled for `label` (an
    architecture, or architecture-compiler as TENSORLITE_AMDEMU takes it; cached)."""
    from ..compiler import compile_source, list_kernel_sources
    from .codeobject import CodeObject
    from .platform import AmdEmuPlatform
    plat = AmdEmuPlatform(label)
    return {src: set(CodeObject(compile_source(plat, src, plat.arch)).kernels) for src in list_kernel_sources()}


def launched(folder: str, arch: str) -> Set[str]:
    names = set()
    for path in glob.glob(os.path.join(folder, f"{arch}.*.txt")):
        with open(path) as f:
            names.update(line.strip() for line in f if line.strip())
    return names


def report(arch: str, entries: Dict[str, Set[str]], ran: Set[str]) -> Tuple[List[str], List[str]]:
    """(lines of the report, entry points that neither ran nor are excused)."""
    excuses = _not_launched(arch)
    lines, missing = [], []
    total = executed = excused = 0
    reasons: Dict[str, List[str]] = {}
    for src in sorted(entries):
        names = entries[src]
        hit = names & ran
        for name in sorted(names - hit):
            why = next((r for p, r in excuses if p.match(name)), None)
            if why is None:
                missing.append(name)
            else:
                reasons.setdefault(why, []).append(name)
                excused += 1
        lines.append(f"  {src:16s} {len(hit):5d} / {len(names):5d}")
        total, executed = total + len(names), executed + len(hit)
    head = f"{arch}: {executed} / {total} entry points executed, {excused} cannot run there, {len(missing)} not run"
    for why, names in reasons.items():
        lines.append(f"  cannot run ({len(names)}): {why}")
    if missing:
        lines.append(f"  NOT RUN ({len(missing)}): " + " ".join(missing))
    return [head] + lines, missing


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print("usage: python -m tensorlite.backends.rocm.amdemu.coverage DIR ARCH [ARCH ...]", file=sys.stderr)
        return 2
    folder, archs = argv[0], argv[1:]
    failed = False
    for arch in archs:
        ran = launched(folder, arch)
        lines, missing = report(arch, entry_points(arch), ran)
        print("\n".join(lines))
        failed |= bool(missing) or not ran
        if not ran:
            print(f"  no record of any launch for {arch} in {folder}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
