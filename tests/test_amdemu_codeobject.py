"""The emulated platform's code-object loader (backends/rocm/amdemu/codeobject.py).

- every kernels/*.hip compiled for gfx90a through the backend's own compile path parses,
  and each kernel's descriptor agrees with its metadata: the same kernels, LDS, scratch
  and kernarg sizes, wavefront size, register counts within what the descriptor
  allocates, an entry point inside .text at the kernel's own symbol, and USER_SGPR_COUNT
  equal to what the enable bits ask for;
- the decoders on hand-made bytes: msgpack, the descriptor's bit fields, relocations, and
  the loader's refusals.

The compiled cases need Debian's libamdhip64-dev (HIP 5.2, which carries hiprtc) and are
skipped where it is missing. Nothing here runs on AMD hardware.
"""
from __future__ import annotations

import struct

import pytest

from tensorlite.backends.rocm import compiler, get_platform
from tensorlite.backends.rocm.amdemu.codeobject import (CodeObject, KernelDescriptor, Relocation, Symbol,
                                                        apply_relocations, msgpack_decode)
from tensorlite.errors import BackendError, BackendUnavailable

ARCH = "gfx90a"
SOURCES = compiler.list_kernel_sources()
_PARSED = {}


def code_object(source: str) -> tuple:
    """(image, CodeObject) of kernels/<source> for gfx90a, compiled and parsed once a session."""
    if source not in _PARSED:
        plat = get_platform("rocm")
        try:
            _ = plat.rtc
        except BackendUnavailable as e:
            pytest.skip(f"libamdhip64/hiprtc is not installed: {e}")
        image = compiler.compile_source(plat, source, ARCH)
        _PARSED[source] = image, CodeObject.parse(image)
    return _PARSED[source]


# fields AMDGPUUsage says "Must be 0" in a code object (CP fills them in)
_MUST_BE_ZERO = ("priority", "priv", "debug_mode", "bulky", "cdbg_user", "enable_trap_handler",
                 "enable_exception_address_watch", "enable_exception_memory", "granulated_lds_size")


@pytest.mark.parametrize("source", SOURCES, ids=[f"{ARCH}-{s}" for s in SOURCES])
def test_descriptors_agree_with_metadata(source):
    _image, co = code_object(source)
    assert co.arch == ARCH and co.target.startswith(f"amdgcn-amd-amdhsa--{ARCH}")
    descriptors = {n for n, s in co.symbols.items() if s.type == "OBJECT" and n.endswith(".kd")}
    assert {k.symbol for k in co.kernels.values()} == descriptors and len(descriptors) == len(co.kernels)
    text_start, text_end = co.text
    for name, k in co.kernels.items():
        d = k.descriptor
        assert (d.group_segment_fixed_size, d.private_segment_fixed_size, d.kernarg_size) == \
            (k.group_segment_fixed_size, k.private_segment_fixed_size, k.kernarg_segment_size), name
        assert text_start <= d.entry < text_end and d.entry % 256 == 0, (name, hex(d.entry))
        assert co.function_at(d.entry) == name and co.symbols[name].vaddr == d.entry, name
        assert d.wavefront_size == k.wavefront_size == 64, name
        assert d.user_sgpr_count == d.user_sgprs_enabled, (name, d.user_sgpr_count, d.user_sgpr_layout())
        assert d.enable_sgpr_kernarg_segment_ptr or not k.args, name
        assert d.enable_private_segment or not k.private_segment_fixed_size, name
        assert not [f for f in _MUST_BE_ZERO if getattr(d, f)], (name, d)
        # gfx90a: one file of VGPRs then AGPRs from accum_offset; metadata counts the whole file
        assert k.sgpr_count <= d.sgpr_alloc_count, (name, k.sgpr_count, d.sgpr_alloc_count)
        assert k.vgpr_count - k.agpr_count <= d.accum_offset, (name, k.vgpr_count, k.agpr_count, d.accum_offset)
        assert d.accum_offset + k.agpr_count <= d.vgpr_alloc_count, (name, d.accum_offset, d.vgpr_alloc_count)
        end = 0
        for a in k.explicit_args:
            assert a["offset"] >= end, (name, a)   # in order, not overlapping
            end = a["offset"] + a["size"]
        assert end <= k.kernarg_segment_size, name


def test_memory_image_and_refusals():
    """The loaded image holds the file's bytes at every segment's vaddr; images that are not
    gfx90a-or-known AMDHSA code objects are refused with a BackendError that says why."""
    image, co = code_object("copy.hip")
    base, memory = co.memory_image()
    for seg in co.segments:
        assert memory[seg.vaddr - base:seg.vaddr - base + seg.filesz] == image[seg.offset:seg.offset + seg.filesz]
    k = next(iter(co.kernels.values()))
    again = KernelDescriptor(bytes(memory[k.descriptor.address - base:][:64]), k.descriptor.address, co.arch)
    assert again.entry == k.descriptor.entry

    def patched(offset, fmt, value):
        out = bytearray(image)
        struct.pack_into(fmt, out, offset, value)
        return bytes(out)

    for bad, message in ((b"not an elf", "not an ELF"), (patched(4, "B", 1), "64-bit little-endian"),
                         (patched(0x12, "<H", 62), "EM_AMDGPU"), (patched(0x30, "<I", 0x3E), "EF_AMDGPU_MACH 0x03e"),
                         (patched(7, "B", 0), "EI_OSABI 0")):
        with pytest.raises(BackendError, match=message):
            CodeObject.parse(bad)


def test_msgpack_decode_hand_made():
    doc = (b"\x83"                                   # fixmap of 3
           b"\xa4name" b"\xd9\x03abc"                # fixstr -> str8
           b"\xa4nums" b"\x9a\x05\xff\xcc\xc8\xcd\x01\x00\xce\x00\x01\x00\x00\xcf" + (1 << 40).to_bytes(8, "big")
           + b"\xd0\x80\xd1\x80\x00\xcb" + struct.pack(">d", 0.5) + b"\xca" + struct.pack(">f", -2.0)
           + b"\xa4misc" b"\xdc\x00\x04\xc0\xc2\xc3\xc4\x02\x01\x02")   # array16: nil false true bin8
    value, end = msgpack_decode(doc + b"\x07", 0)
    assert value == {"name": "abc", "nums": [5, -1, 200, 256, 65536, 1 << 40, -128, -32768, 0.5, -2.0],
                     "misc": [None, False, True, b"\x01\x02"]}
    assert end == len(doc) and msgpack_decode(doc + b"\x07", end) == (7, end + 1)
    assert msgpack_decode(b"\xde\x00\x01\x01\x90") == ({1: []}, 5)    # map16 holding an empty array
    with pytest.raises(ValueError, match="0xc7"):
        msgpack_decode(b"\xc7\x01\x05\x00")                              # ext8: not in the metadata subset


def _descriptor(entry_offset, rsrc1, rsrc2, rsrc3, properties, preload=0):
    return struct.pack("<III4xq20xIIIHH4x", 256, 16, 40, entry_offset, rsrc3, rsrc1, rsrc2, properties, preload)


def test_descriptor_fields_hand_made():
    # rsrc1: vgpr blocks 5, sgpr blocks 6, round 32 = 1, denorm 32 = 3, 16/64 = 2, dx10 clamp, ieee
    rsrc1 = 5 | 6 << 6 | 1 << 12 | 3 << 16 | 2 << 18 | 1 << 21 | 1 << 23
    # rsrc2: scratch, user SGPRs 7, workgroup ids x and z, work-item ids x, y, z
    rsrc2 = 1 | 7 << 1 | 1 << 7 | 1 << 9 | 2 << 11
    properties = 0b1 | 0b1000 | 1 << 6    # private segment buffer, kernarg ptr, private segment size
    d = KernelDescriptor(_descriptor(-0x100, rsrc1, rsrc2, 7 | 1 << 16, properties), 0x2000, "gfx90a")
    assert (d.entry, d.group_segment_fixed_size, d.private_segment_fixed_size, d.kernarg_size) == (0x1F00, 256, 16, 40)
    assert (d.granulated_workitem_vgpr_count, d.granulated_wavefront_sgpr_count) == (5, 6)
    assert (d.float_round_mode_32, d.float_round_mode_16_64, d.float_denorm_mode_32, d.float_denorm_mode_16_64) == \
        (1, 0, 3, 2)
    assert d.enable_dx10_clamp and d.enable_ieee_mode and not d.fp16_ovfl
    assert d.enable_private_segment and d.user_sgpr_count == 7 and d.enable_vgpr_workitem_id == 2
    assert (d.enable_sgpr_workgroup_id_x, d.enable_sgpr_workgroup_id_y, d.enable_sgpr_workgroup_id_z) == (1, 0, 1)
    assert d.user_sgpr_layout() == (("private_segment_buffer", 0, 4), ("kernarg_segment_ptr", 4, 2),
                                    ("private_segment_size", 6, 1))
    assert d.user_sgprs_enabled == 7
    assert d.system_sgpr_layout() == (("workgroup_id_x", 7), ("workgroup_id_z", 8),
                                      ("private_segment_wavefront_offset", 9))
    assert (d.accum_offset, d.tg_split, d.vgpr_alloc_count, d.sgpr_alloc_count, d.wavefront_size) == (32, 1, 48, 64, 64)
    assert d.shared_vgpr_count is None
    # gfx940: architected flat scratch, so no wavefront offset SGPR
    assert KernelDescriptor(_descriptor(0, rsrc1, rsrc2, 0, properties), 0, "gfx940").system_sgpr_layout() == \
        (("workgroup_id_x", 7), ("workgroup_id_z", 8))
    # gfx1100: wave32 doubles the VGPR granule; rsrc3 is shared_vgpr_count / inst_pref_size there
    w32 = KernelDescriptor(_descriptor(0, rsrc1, rsrc2, 3 | 5 << 4, properties | 1 << 10), 0, "gfx1100")
    w64 = KernelDescriptor(_descriptor(0, rsrc1, rsrc2, 0, properties), 0, "gfx1100")
    assert (w32.wavefront_size, w32.vgpr_alloc_count, w64.wavefront_size, w64.vgpr_alloc_count) == (32, 48, 64, 24)
    assert (w32.shared_vgpr_count, w32.inst_pref_size, w32.accum_offset, w32.tg_split) == (3, 5, None, None)
    preloading = KernelDescriptor(_descriptor(0, rsrc1, rsrc2, 0, properties, preload=2 | 1 << 7), 0, "gfx90a")
    assert (preloading.kernarg_preload_spec_length, preloading.kernarg_preload_spec_offset) == (2, 1)
    assert preloading.user_sgprs_enabled == 9
    with pytest.raises(BackendError, match="preloads 2 kernarg dwords"):
        preloading.user_sgpr_layout()


def test_relocations_hand_made():
    memory = bytearray(32)
    symbols = {"table": Symbol(0x1010, 8, "OBJECT")}
    apply_relocations(memory, 0x1000, 0x7000_0000, [Relocation(0x1000, 13, None, 0x40),      # RELATIVE64
                                                    Relocation(0x1008, 3, "table", 4),        # ABS64
                                                    Relocation(0x1018, 0, None, 0)], symbols)  # NONE
    assert struct.unpack_from("<QQQ", memory) == (0x7000_0040, 0x7000_1014, 0)
    with pytest.raises(BackendError, match="R_AMDGPU_REL32 at 0x1000 is not implemented"):
        apply_relocations(memory, 0x1000, 0, [Relocation(0x1000, 4, "table", 0)], symbols)
    with pytest.raises(BackendError, match="'elsewhere', which this code object does not define"):
        apply_relocations(memory, 0x1000, 0, [Relocation(0x1000, 3, "elsewhere", 0)], symbols)
    with pytest.raises(BackendError, match="outside the loaded segments"):
        apply_relocations(memory, 0x1000, 0, [Relocation(0x1020, 13, None, 0)], symbols)


def test_coverage_record_is_written_as_kernels_first_run(tmp_path, monkeypatch):
    """With TENSORLITE_AMDEMU_COVERAGE set, each platform object appends an entry point to its
    own file the first time it runs (nothing waits for the process to exit), and the coverage
    check reads the union of those files per architecture."""
    from tensorlite.backends.rocm.amdemu import coverage
    from tensorlite.backends.rocm.amdemu.platform import COVERAGE_ENV, AmdEmuPlatform
    monkeypatch.setenv(COVERAGE_ENV, str(tmp_path))
    first, second = AmdEmuPlatform("gfx940"), AmdEmuPlatform("gfx940")
    for plat, names in ((first, ["uexp_f32", "badd_f32", "uexp_f32"]), (second, ["cast_f32_f16"])):
        for name in names:
            plat._record_launch(name)
    files = sorted(p.read_text().split() for p in tmp_path.glob("gfx940.*.txt"))
    assert files == sorted([["uexp_f32", "badd_f32"], ["cast_f32_f16"]])
    assert coverage.launched(str(tmp_path), "gfx940") == {"uexp_f32", "badd_f32", "cast_f32_f16"}
    assert coverage.launched(str(tmp_path), "gfx90a") == set()
