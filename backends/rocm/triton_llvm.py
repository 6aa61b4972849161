"""Code generation for AMD processors that clang-19 does not know (gfx950, MI350X/MI355X: LLVM
20 added it), by the newer LLVM inside PyPI's `triton` wheel (LLVM 23 in triton 3.8.0's
libtriton.so, with the AMDGPU backend and lld linked in).

clang.py runs clang-19 as the frontend and middle end: the HIP source is compiled for a
processor of the same ISA family that clang-19 knows (`RETARGET`: gfx942 for gfx950), with
the predefined macros of the real target (`__gfx950__`, not `__gfx942__`), the device
libraries and the real target's `__oclc_*` constants linked, optimized at -O3 and written as
LLVM IR text. This module then

- retargets that IR (`retarget`): every `"target-cpu"` becomes the real processor and the
  frontend's `"target-features"` list goes, so the processor's own features apply; the calls of
  placeholders for the processor's own intrinsics, which clang-19 cannot name (`INTRINSICS`:
  gfx950's v_mfma_f32_16x16x32_{f16,bf16}), are renamed to those intrinsics;
- generates and links the code object in a child process (`codegen`): `llvm.translate_to_asm`
  (IR text -> relocatable object, the calls triton's own AMD backend makes) and
  `amd.link_hsaco` (lld -shared). The child loads libtriton.so by its path: the `triton`
  package is never imported (its folder is a toolchain here, as the HIP headers' folder is),
  and a crash of that LLVM (a fatal error aborts the process) is a CompileError, not the
  caller's death.

The IR text of LLVM 19 is read by LLVM 23 (the IR reader upgrades older IR). What the middle
end did it did for gfx942 (the same instruction set, less gfx950's additions: its cost model
sees no gfx950-only instruction); instruction selection, scheduling, register allocation and
the encoding are gfx950's. Run as a script (`python -I triton_llvm.py ARCH LIBTRITON IN.ll
OUT.hsaco`) this file is the child; it imports nothing but the standard library.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import sys
import tempfile

RETARGET = {"gfx950": "gfx942"}  # processor clang-19 does not know -> the one its IR is made for
# Intrinsics of such a processor that clang-19 has no builtin for. The source calls a function
# declared as placeholder(intrinsic) with the intrinsic's IR signature and attributes
# (kernels/matrix_cores_amd.h); retarget renames it. Any other placeholder is an error.
INTRINSICS = {"gfx950": ("llvm.amdgcn.mfma.f32.16x16x32.f16", "llvm.amdgcn.mfma.f32.16x16x32.bf16")}
PLACEHOLDER_PREFIX = "__tl_llvm_"
LIBTRITON = ("_C", "libtriton.so")  # inside the triton package folder


def libtriton_path(include_dir):
    """libtriton.so of the triton package whose HIP headers are `include_dir`
    (<triton>/backends/amd/include), or None (headers from elsewhere, or no such file)."""
    if not include_dir:
        return None
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(include_dir))))
    path = os.path.join(package, *LIBTRITON)
    return path if os.path.isfile(path) else None


def libtriton_version(path) -> str:
    """The wheel's version and libtriton.so's sha256 as its RECORD lists them (hashing 500 MB
    per process would take seconds), else the file's size."""
    package = os.path.dirname(os.path.dirname(path))
    site = os.path.dirname(package)
    for entry in sorted(os.listdir(site)):
        if entry.startswith("triton-") and entry.endswith(".dist-info"):
            try:
                with open(os.path.join(site, entry, "RECORD")) as f:
                    for line in f:
                        if line.startswith("triton/_C/libtriton.so,"):
                            return f"{entry[:-len('.dist-info')]}, libtriton {line.split(',')[1]}"
            except OSError:
                pass
    return f"libtriton of {os.path.getsize(path)} bytes"


def frontend_macros(arch: str):
    """clang options that give the source `arch`'s predefined processor macros in a compile
    for RETARGET[arch] (what a clang that knows `arch` defines: __gfx950__, __amdgcn_processor__
    and __amdgcn_target_id__ "gfx950"; the family's, __GFX9__ and the wave size, are the same)."""
    front = RETARGET[arch]
    out = [f"-U__{front}__", f"-D__{arch}__=1"]
    for name in ("__amdgcn_processor__", "__amdgcn_target_id__"):
        out += [f"-U{name}", f'-D{name}="{arch}"']
    return out


def placeholder(intrinsic: str) -> str:
    """The C name that stands for an intrinsic: llvm.amdgcn.x.y -> __tl_llvm_amdgcn_x_y."""
    return PLACEHOLDER_PREFIX + intrinsic[len("llvm."):].replace(".", "_")


_TARGET_CPU = re.compile(r'"target-cpu"="([^"]*)"')
_TARGET_FEATURES = re.compile(r' ?"target-features"="[^"]*"')
_PLACEHOLDER = re.compile(rf"@({PLACEHOLDER_PREFIX}\w+)")


def retarget(ir: str, arch: str) -> str:
    """clang-19's IR for RETARGET[arch] -> IR for `arch`: each "target-cpu" attribute names
    `arch`, the "target-features" lists (the frontend's, of the other processor) are dropped,
    the placeholders of `arch`'s INTRINSICS become those intrinsics. ValueError if the IR names
    another processor than RETARGET[arch], or holds a placeholder of no intrinsic of `arch`."""
    found = set(_TARGET_CPU.findall(ir))
    if found - {RETARGET[arch]}:
        raise ValueError(f"the IR is for {sorted(found)}, not {RETARGET[arch]}")
    names = {placeholder(i): i for i in INTRINSICS.get(arch, ())}
    unknown = set(_PLACEHOLDER.findall(ir)) - set(names)
    if unknown:
        raise ValueError(f"the IR calls {', '.join(sorted(unknown))}: placeholders of no intrinsic of {arch} "
                         f"(triton_llvm.INTRINSICS)")
    ir = _PLACEHOLDER.sub(lambda m: "@" + names[m.group(1)], ir)
    if PLACEHOLDER_PREFIX in ir:  # spelled otherwise (quoted, in metadata): it would link as a missing symbol
        raise ValueError(f"the IR still names a {PLACEHOLDER_PREFIX}* placeholder after renaming them")
    return _TARGET_FEATURES.sub("", _TARGET_CPU.sub(f'"target-cpu"="{arch}"', ir))


def _load(path):
    """libtriton's extension module, loaded from its file without importing the triton package."""
    loader = importlib.machinery.ExtensionFileLoader("libtriton", path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location("libtriton", path, loader=loader))
    loader.exec_module(module)
    return module


def main(argv) -> int:
    arch, libtriton, ir_path, out_path = argv
    lib = _load(libtriton)
    lib.llvm.init_targets()
    with open(ir_path) as f:
        ir = retarget(f.read(), arch)
    # (IR, triple, processor, features, flags, fp fusion (no: the IR's own contract flags
    # decide, as clang's default does), object file, no dump)
    obj = lib.llvm.translate_to_asm(ir, lib.amd.TARGET_TRIPLE, arch, "", [], False, True, False)
    with tempfile.TemporaryDirectory(prefix="tensorlite-llvm-") as folder:
        rel = os.path.join(folder, "kernel.o")
        with open(rel, "wb") as f:
            f.write(obj)
        lib.amd.link_hsaco(rel, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
