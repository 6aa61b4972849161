"""Instruction counts per kernel of an AMD code object, from llvm-objdump-19's disassembly (the
matrix-core tests: which kernels hold v_mfma / v_wmma instructions)."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest


def opcode_counts(image: bytes, arch: str, tmp_path, opcode: str) -> dict:
    """{kernel: [instructions whose mnemonic starts with `opcode`, instructions but s_nop]}."""
    objdump = shutil.which("llvm-objdump-19")
    if objdump is None:
        pytest.skip("llvm-objdump-19 is not installed (apt-get install llvm-19)")
    path = tmp_path / f"{arch}.co"
    path.write_bytes(image)
    text = subprocess.run([objdump, "-d", f"--mcpu={arch}", str(path)], capture_output=True, text=True,
                          check=True).stdout
    counts, current, mnemonic = {}, None, re.compile(rf"\b{re.escape(opcode)}")
    for line in text.splitlines():
        label = re.match(r"[0-9a-f]+ <([\w.]+)>:", line)
        if label:
            current = label.group(1)
            counts[current] = [0, 0]
        elif current and line.startswith("\t") and not line.lstrip().startswith("s_nop"):
            counts[current][0] += bool(mnemonic.search(line))
            counts[current][1] += 1
    return counts
