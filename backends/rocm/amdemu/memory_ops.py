"""The memory instructions: LDS (DS), global, flat and scratch, buffer (MUBUF) loads and stores,
their atomics (lane by lane, in order), and scalar loads (SMEM). An address is checked against
its space (LDS bytes, scratch per lane, the host memory's buffers); a fault names it."""
from __future__ import annotations

import re

import numpy as np

from . import fastalu
from .lanes import prepare_lane_permute
from .pcode_types import f32_to_bf16_bits
from .wave import (APERTURE, PRIVATE_BASE, SHARED_BASE, Instr, KernelFault, Operand, UnsupportedInstruction, advance,
                   field, n_waves, read_operand, sext, write_vgpr)


# access size in bytes and sign extension, by the name's data-type part (both families' names)
_SIZES = {"UBYTE": (1, False), "SBYTE": (1, True), "USHORT": (2, False), "SSHORT": (2, True),
          "U8": (1, False), "I8": (1, True), "U16": (2, False), "I16": (2, True), "BYTE": (1, False),
          "SHORT": (2, False), "B8": (1, False), "B16": (2, False), "DWORD": (4, False), "B32": (4, False),
          "DWORDX2": (8, False), "B64": (8, False), "DWORDX3": (12, False), "B96": (12, False),
          "DWORDX4": (16, False), "B128": (16, False), "DWORDX8": (32, False), "DWORDX16": (64, False)}
_MEM = re.compile(r"^(?:GLOBAL|FLAT|SCRATCH|BUFFER|DS|S)_(LOAD|STORE|READ|WRITE)(2ST64|2|_2ADDR_STRIDE64|_2ADDR)?_"
                  r"(?:LDS_)?([A-Z0-9]+?)(_D16_HI|_D16)?$")

# gfx11 names its 16-bit-half accesses GLOBAL_LOAD_D16_HI_B16 where gfx9 says GLOBAL_LOAD_SHORT_D16_HI
_GFX11_D16 = re.compile(r"^(\w+?_(?:LOAD|STORE))_D16(_HI)?_([A-Z0-9]+)$")
_U32 = np.uint64(0xFFFFFFFF)


class Space:
    """Where a memory instruction's addresses point: 'global', 'lds', 'private'."""
    GLOBAL, LDS, PRIVATE = "global", "lds", "private"


def _bytes_to_words(data):
    """(n, L, size) uint8 -> list of uint64 (n, L) 32-bit words (little endian, zero padded)."""
    size = data.shape[-1]
    pad = -size % 4
    if pad:
        data = np.concatenate([data, np.zeros(data.shape[:-1] + (pad,), np.uint8)], axis=-1)
    words = np.ascontiguousarray(data).view(np.uint32)
    return [words[..., i].astype(np.uint64) for i in range(words.shape[-1])]


def _words_to_bytes(words, size):
    arr = np.stack([np.asarray(x, np.uint64).astype(np.uint32) for x in words], axis=-1)
    return np.ascontiguousarray(arr).view(np.uint8)[..., :size]


def mem_access(st, w, space, addrs, active, size, data=None):
    """Load (data None: returns (n, L, size) bytes, zeros where inactive) or store `data`
    ((n, L, size) bytes) at per-lane addresses (n, L) of `space`, lanes in `active`."""
    n, L = addrs.shape
    out = np.zeros((n, L, size), np.uint8) if data is None else None
    if not np.any(active):
        return out
    if space == Space.LDS:
        lds_bytes = st.lds.shape[1]
        a = addrs.astype(np.int64)
        if np.any(active & (a + size > lds_bytes)):
            bad = int(a[active & (a + size > lds_bytes)][0])
            raise KernelFault(f"LDS access of {size} bytes at {bad} beyond the workgroup's {lds_bytes} bytes")
        wg = st.wg[w] if not isinstance(w, slice) else st.wg
        flat = (wg[:, None] * lds_bytes + a)[active]
        cols = np.arange(size)
        lds = st.lds.reshape(-1)
        if data is None:
            out[active] = lds[flat[:, None] + cols]
        else:
            lds[flat[:, None] + cols] = data[active]
        return out
    if space == Space.PRIVATE:
        if st.scratch_lane_bytes == 0:
            raise KernelFault("private memory access in a kernel launched without scratch")
        if np.any(active & (addrs + np.uint64(size) > np.uint64(st.scratch_lane_bytes))):
            raise KernelFault(f"private access beyond the {st.scratch_lane_bytes} bytes of scratch per lane")
        base = (st.scratch_base[w] if not isinstance(w, slice) else st.scratch_base)[:, None]
        lane = st.lane[None, :]
        if size % 4 == 0:  # whole dwords, each swizzled on its own: all of them in one access
            a = addrs[..., None] + np.arange(0, size, 4, dtype=np.uint64)
            phys = base[..., None] + (a >> np.uint64(2)) * np.uint64(4 * L) + lane[..., None] * np.uint64(4) + \
                (a & np.uint64(3))
            if data is None:
                out[active] = st.memory.gather(phys[active].reshape(-1), 4, "private load").reshape(-1, size)
            else:
                st.memory.scatter(phys[active].reshape(-1), data[active].reshape(-1, 4), "private store")
            return out
        chunks = []
        for off in range(0, size, 4):  # element size 4: each dword of a lane is swizzled on its own
            a = addrs + np.uint64(off)
            phys = base + (a >> np.uint64(2)) * np.uint64(4 * L) + lane * np.uint64(4) + (a & np.uint64(3))
            chunk = min(4, size - off)
            if data is None:
                chunks.append(st.memory.gather(phys[active], chunk, "private load"))
            else:
                st.memory.scatter(phys[active], data[active][:, off:off + chunk], "private store")
        if data is None:
            out[active] = np.concatenate(chunks, axis=1)
        return out
    if data is None:
        out[active] = st.memory.gather(addrs[active].astype(np.uint64), size)
    else:
        st.memory.scatter(addrs[active].astype(np.uint64), data[active])
    return out


def flat_access(st, w, addrs, active, size, data=None):
    """FLAT: each lane's address picks LDS, private or global memory by its aperture."""
    shared = (addrs >= np.uint64(SHARED_BASE)) & (addrs < np.uint64(SHARED_BASE + APERTURE))
    private = (addrs >= np.uint64(PRIVATE_BASE)) & (addrs < np.uint64(PRIVATE_BASE + APERTURE))
    out = None
    for space, sel, base in ((Space.GLOBAL, ~(shared | private), 0), (Space.LDS, shared, SHARED_BASE),
                             (Space.PRIVATE, private, PRIVATE_BASE)):
        act = active & sel
        if np.any(act):
            r = mem_access(st, w, space, addrs - np.uint64(base), act, size, data)
            if data is None:
                out = r if out is None else np.where(act[..., None], r, out)
    if data is None and out is None:
        out = np.zeros(addrs.shape + (size,), np.uint8)
    return out


def _atomic_value(kind, old, src, cmp, bits):
    """The new memory value of one lane's atomic (Python ints of `bits` bits)."""
    m = (1 << bits) - 1
    integer = {
        "ADD": lambda: (old + src) & m, "SUB": lambda: (old - src) & m, "SWAP": lambda: src,
        "CMPSWAP": lambda: src if old == cmp else old,
        "SMIN": lambda: src if sext(src, bits) < sext(old, bits) else old,
        "SMAX": lambda: src if sext(src, bits) > sext(old, bits) else old,
        "UMIN": lambda: min(old, src), "UMAX": lambda: max(old, src),
        "AND": lambda: old & src, "OR": lambda: old | src, "XOR": lambda: old ^ src,
        "INC": lambda: 0 if old >= src else old + 1, "DEC": lambda: src if old == 0 or old > src else old - 1}
    for alias, kinds in (("SMIN", ("MIN_I32", "MIN_I64")), ("SMAX", ("MAX_I32", "MAX_I64")),
                         ("UMIN", ("MIN_U32", "MIN_U64")), ("UMAX", ("MAX_U32", "MAX_U64"))):
        if kind in kinds:
            kind = alias
    if kind in integer:
        return integer[kind]()
    if kind in ("ADD_F32", "ADD_F64"):
        dt, ut = (np.float32, np.uint32) if bits == 32 else (np.float64, np.uint64)
        r = np.array(old, ut).view(dt) + np.array(src, ut).view(dt)
        return int(np.array(r, dt).view(ut))
    if kind in ("MIN_F64", "MAX_F64", "MIN_F32", "MAX_F32"):
        dt, ut = (np.float32, np.uint32) if bits == 32 else (np.float64, np.uint64)
        a, b = np.array(old, ut).view(dt), np.array(src, ut).view(dt)
        r = (np.fmin if "MIN" in kind else np.fmax)(a, b)
        return int(np.array(r, dt).view(ut))
    if kind in ("PK_ADD_F16", "PK_ADD_BF16"):
        halves = []
        for s in (0, 16):
            a, b = (old >> s) & 0xFFFF, (src >> s) & 0xFFFF
            if kind == "PK_ADD_F16":
                r = int(np.array(np.array(a, np.uint16).view(np.float16) + np.array(b, np.uint16).view(np.float16),
                                 np.float16).view(np.uint16))
            else:
                f = np.array([a << 16, b << 16], np.uint32).view(np.float32)
                r = int(f32_to_bf16_bits(np.array([f[0] + f[1]], np.float32))[0])
            halves.append(r << s)
        return halves[0] | halves[1]
    raise UnsupportedInstruction(f"atomic {kind}")


_ATOMIC = re.compile(r"^(?:GLOBAL|FLAT|BUFFER|DS)_(?:ATOMIC_)?([A-Z0-9_]+?)(_RTN)?(_X2|_U64|_B64|_I64|_F64)?"
                     r"(_RTN)?$")
_ATOMIC_KINDS = ("CMPSWAP", "SWAP", "ADD", "SUB", "SMIN", "UMIN", "SMAX", "UMAX", "AND", "OR", "XOR", "INC", "DEC",
                 "ADD_F32", "ADD_F64", "MIN_F64", "MAX_F64", "PK_ADD_F16", "PK_ADD_BF16", "MIN_F32", "MAX_F32",
                 "MIN_I32", "MAX_I32", "MIN_U32", "MAX_U32", "ADD_U32", "SUB_U32", "CMPSWAP_B32", "SWAP_B32",
                 "AND_B32", "OR_B32", "XOR_B32", "ADD_U64", "CMPSWAP_B64", "RSUB")


def run_atomic(st, w, space, kind, bits, addrs, active, src_words, cmp_words, access=None):
    """Lane by lane, in wave then lane order (an order the hardware may also take):
    returns the old values as 32-bit word lists."""
    size = bits // 8
    n, L = addrs.shape
    old_out = [np.zeros((n, L), np.uint64) for _ in range(bits // 32)]
    access = access or (lambda a, act, d=None: mem_access(st, w, space, a, act, size, d))
    for i, j in zip(*np.nonzero(active)):
        one = np.zeros((n, L), bool)
        one[i, j] = True
        raw = access(addrs, one)[i, j]
        old = int.from_bytes(raw.tobytes(), "little")
        src = sum(int(x[i, j]) << (32 * k) for k, x in enumerate(src_words))
        cmp = sum(int(x[i, j]) << (32 * k) for k, x in enumerate(cmp_words)) if cmp_words else None
        new = _atomic_value(kind, old, src, cmp, bits)
        buf = np.zeros((n, L, size), np.uint8)
        buf[i, j] = np.frombuffer(new.to_bytes(size, "little"), np.uint8)
        access(addrs, one, buf)
        for k in range(bits // 32):
            old_out[k][i, j] = (old >> (32 * k)) & 0xFFFFFFFF
    return old_out


def _vreg_words(st, w, code, count, agpr=False):
    file = st.agpr if agpr else st.vgpr
    return [file[w, code + k, :].astype(np.uint64) for k in range(count)]


def prepare_memory(ins: Instr, ex) -> None:
    inst, fmt, name = ins.inst, ins.fmt, ins.name
    acc = bool(field(inst, "acc", 0))
    if fmt == "SMEM":
        return _prepare_smem(ins, ex)
    ins.writes_exec = False  # the others write VGPRs and memory
    if name in ("BUFFER_WBINVL1", "BUFFER_WBINVL1_VOL", "BUFFER_WBL2", "BUFFER_INV", "BUFFER_GL0_INV",
                "BUFFER_GL1_INV"):
        ins.run = advance(ins)
        return
    if fmt == "DS" and name in ("DS_BPERMUTE_B32", "DS_PERMUTE_B32", "DS_SWIZZLE_B32"):
        return prepare_lane_permute(ins, ex)
    m = _MEM.match(_GFX11_D16.sub(r"\1_\3_D16\2", name))
    atomic = None
    if m is None:
        am = _ATOMIC.match(name)
        if am is None:
            raise UnsupportedInstruction(f"{name} ({fmt})")
        kind = am.group(1)
        wide = bool(am.group(3))
        if am.group(3) == "_F64":  # GLOBAL_ATOMIC_ADD_F64 (gfx940) is a float add, not ADD_X2's integer one
            kind += "_F64"
        kind = {"ADD_U32": "ADD", "SUB_U32": "SUB", "CMPSWAP_B32": "CMPSWAP", "SWAP_B32": "SWAP",
                "AND_B32": "AND", "OR_B32": "OR", "XOR_B32": "XOR", "ADD_U64": "ADD",
                "CMPSWAP_B64": "CMPSWAP"}.get(kind, kind)
        if kind not in _ATOMIC_KINDS:
            raise UnsupportedInstruction(f"{name} ({fmt})")
        if kind in ("ADD_F64", "MIN_F64", "MAX_F64"):
            wide = True
        returns = bool(am.group(2) or am.group(4)) if fmt == "DS" else \
            bool(field(inst, "sc0", 0) or field(inst, "glc", 0))
        atomic = (kind, 64 if wide else 32, returns)
        is_load, size, signed, d16 = False, (8 if wide else 4), False, None
    else:
        is_load = m.group(1) in ("LOAD", "READ")
        try:
            size, signed = _SIZES[m.group(3)]
        except KeyError:
            raise UnsupportedInstruction(f"{name} ({fmt}): data type {m.group(3)}") from None
        d16 = m.group(4)
        two = m.group(2)
    space_of = {"DS": Space.LDS, "GLOBAL": Space.GLOBAL, "SCRATCH": Space.PRIVATE}.get(fmt.split("_")[0])
    lanes = ex.lanes

    if fmt == "DS":
        off0, off1 = field(inst, "offset0"), field(inst, "offset1")
        addr_reg, vdst = field(inst, "addr"), field(inst, "vdst")
        d0, d1 = field(inst, "data0"), field(inst, "data1")
        pairs = atomic is None and two is not None
        scale = (64 if "ST64" in (two or "") or "STRIDE64" in (two or "") else 1) * size

        # the LDS address is the 32-bit sum of the VGPR and the offset: LLVM folds an offset
        # into a negative base (LLVM 23's gfx950 code: v22 = v9 - 128, ds_read_b128 v22 offset:12672)
        def addresses(st, w):
            base = st.vgpr[w, addr_reg, :].astype(np.uint64)
            if pairs:
                return [(base + np.uint64(off0 * scale)) & _U32, (base + np.uint64(off1 * scale)) & _U32]
            return [(base + np.uint64(off0 | (off1 << 8))) & _U32]
        data_regs = [d0, d1]
    else:
        saddr = field(inst, "saddr", 0x7F)
        off_field = type(inst).offset
        offset = field(inst, "offset")
        if fmt in ("GLOBAL", "SCRATCH") or ex.family != "cdna":
            offset = sext(offset, off_field.hi - off_field.lo + 1)
        addr_reg, vdst, dreg = field(inst, "addr") if fmt != "MUBUF" else field(inst, "vaddr"), \
            field(inst, "vdst") if fmt != "MUBUF" else field(inst, "vdata"), \
            field(inst, "data") if fmt != "MUBUF" else field(inst, "vdata")
        data_regs = [dreg, dreg + size // 4 if size >= 4 else dreg]
        # FLAT (segment 0) has no SGPR base: its address is always the VGPR pair
        saddr_off = fmt == "FLAT" or (saddr in (0x7F, 124, 125) if ex.family == "cdna" else saddr == 124)
        sve = field(inst, "sve", 0)

        if fmt == "MUBUF":
            offen, idxen = field(inst, "offen"), field(inst, "idxen")
            srsrc, soffset = field(inst, "srsrc") << 2, field(inst, "soffset")
            if field(inst, "lds", 0):
                raise UnsupportedInstruction(f"{name}: buffer load to LDS")

            def addresses(st, w):
                return [_buffer_address(st, w, srsrc, soffset, offen, idxen, addr_reg, offset, size)]
        elif fmt == "SCRATCH":
            # gfx90a: the VGPR address is used when there is no SGPR one; gfx940 and gfx11 say
            # so with the SVE bit (neither register: the offset alone addresses the lane's memory)
            use_vaddr = saddr_off if ex.arch == "gfx90a" else bool(sve)

            def addresses(st, w):
                n = n_waves(st, w)
                a = np.zeros((n, lanes), np.uint64)
                if not saddr_off:
                    a = a + st.sgpr[w, saddr].astype(np.uint64)[:, None]
                if use_vaddr:
                    a = a + st.vgpr[w, addr_reg, :].astype(np.uint64)
                return [(a + np.uint64(offset & ((1 << 64) - 1))) & np.uint64(0xFFFFFFFF)]
        else:
            def addresses(st, w):
                if saddr_off:
                    a = st.vgpr[w, addr_reg, :].astype(np.uint64) | \
                        (st.vgpr[w, addr_reg + 1, :].astype(np.uint64) << np.uint64(32))
                else:
                    a = st.read_s64(w, saddr)[:, None] + st.vgpr[w, addr_reg, :].astype(np.uint64)
                return [a + np.uint64(offset & ((1 << 64) - 1))]

    def access(st, w, addrs, active, nbytes, data=None):
        if fmt == "FLAT":
            return flat_access(st, w, addrs, active, nbytes, data)
        if fmt == "MUBUF":  # the descriptor's swizzle is already in the address, per dword
            return mem_access(st, w, Space.GLOBAL, addrs, active, nbytes, data)
        return mem_access(st, w, space_of, addrs, active, nbytes, data)

    def run(st, w):
        active = st.exec_mask(w)
        addr_list = addresses(st, w)
        if atomic is not None:
            kind, bits, returns = atomic
            nw = bits // 32
            if fmt == "DS":
                src = _vreg_words(st, w, data_regs[0], nw)
                cmp = _vreg_words(st, w, data_regs[1], nw) if kind == "CMPSWAP" else None
                if kind == "CMPSWAP":  # DS_CMPST: data0 is the compare value, data1 the new one
                    src, cmp = cmp, src
            else:
                words = _vreg_words(st, w, data_regs[0], nw * (2 if kind == "CMPSWAP" else 1), acc)
                src, cmp = words[:nw], (words[nw:] if kind == "CMPSWAP" else None)
            old = run_atomic(st, w, space_of, kind, bits, addr_list[0], active, src, cmp,
                             access=lambda a, act, d=None: access(st, w, a, act, bits // 8, d))
            if returns:
                write_vgpr(st, w, vdst, old, bits, active, acc)
            return
        if is_load:
            if fmt == "MUBUF" and size > 4:
                parts = [access(st, w, _buffer_address(st, w, srsrc, soffset, offen, idxen, addr_reg, offset + k, 4),
                                active, 4) for k in range(0, size, 4)]
                raw = np.concatenate(parts, axis=-1)
            else:
                parts = [access(st, w, a, active, size) for a in addr_list]
                raw = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)
            if size % 4 == 0:  # whole dwords: straight into the registers
                dwords = np.ascontiguousarray(raw).view(np.uint32)
                file = st.agpr if acc else st.vgpr
                for k in range(dwords.shape[-1]):
                    fastalu.write_lanes(st, w, file, vdst + k, dwords[..., k], active)
                return
            words = _bytes_to_words(raw)
            if size < 4:
                v = words[0] & np.uint64((1 << (8 * size)) - 1)
                if signed:
                    v = np.asarray(sext(v.astype(np.int64), 8 * size)).astype(np.uint64) & np.uint64(0xFFFFFFFF)
                if d16:
                    prev = st.vgpr[w, vdst, :].astype(np.uint64) if not acc else st.agpr[w, vdst, :].astype(np.uint64)
                    if d16 == "_D16_HI":
                        v = (prev & np.uint64(0xFFFF)) | ((v & np.uint64(0xFFFF)) << np.uint64(16))
                    else:
                        v = (prev & np.uint64(0xFFFF0000)) | (v & np.uint64(0xFFFF))
                words = [v]
            write_vgpr(st, w, vdst, words, 32 * len(words), active, acc)
        else:
            nw = max(1, size // 4)
            regs = [data_regs[0]] if fmt != "DS" or not (two) else [data_regs[0], data_regs[1]]
            for a, reg in zip(addr_list, regs):
                if size % 4 == 0:  # whole dwords: the registers' bytes, lane by lane
                    file = st.agpr if acc else st.vgpr
                    data = np.ascontiguousarray(np.moveaxis(file[w, reg:reg + nw], 1, -1)).view(np.uint8)
                else:
                    words = _vreg_words(st, w, reg, nw, acc)
                    if d16 == "_D16_HI":
                        words = [w_ >> np.uint64(16) for w_ in words]
                    data = _words_to_bytes(words, size)
                if fmt == "MUBUF" and size > 4:
                    for k in range(0, size, 4):
                        access(st, w, _buffer_address(st, w, srsrc, soffset, offen, idxen, addr_reg, offset + k, 4),
                               active, 4, data[..., k:k + 4])
                else:
                    access(st, w, a, active, size, data)
    ins.run = run


def _buffer_address(st, w, srsrc, soffset_code, offen, idxen, vaddr, inst_offset, size):
    """MUBUF addressing (gfx9 buffer resource: base, stride, swizzle, ADD_TID, index stride,
    element size) for each lane."""
    d0, d1, d3 = (st.sgpr[w, srsrc + k].astype(np.uint64) for k in (0, 1, 3))
    base = d0 | ((d1 & np.uint64(0xFFFF)) << np.uint64(32))
    stride = (d1 >> np.uint64(16)) & np.uint64(0x3FFF)
    swizzle = (d1 >> np.uint64(31)) & np.uint64(1)
    elem = np.uint64(2) << ((d3 >> np.uint64(19)) & np.uint64(3))
    istride = np.uint64(8) << ((d3 >> np.uint64(21)) & np.uint64(3))
    add_tid = (d3 >> np.uint64(23)) & np.uint64(1)
    soff = read_operand(st, w, Operand(soffset_code, 32), False)
    n = n_waves(st, w)
    lanes = st.lane[None, :]
    v0 = st.vgpr[w, vaddr, :].astype(np.uint64)
    v1 = st.vgpr[w, vaddr + 1, :].astype(np.uint64)
    index = (v0 if idxen else np.zeros((n, st.L), np.uint64)) + add_tid[:, None] * lanes
    voff = (v1 if idxen else v0) if offen else np.zeros((n, st.L), np.uint64)
    offset = voff + np.uint64(inst_offset)
    sw = swizzle[:, None].astype(bool)
    e, s = elem[:, None], istride[:, None]
    swz = (index // s * stride[:, None] + offset // e * e) * s + index % s * e + offset % e
    lin = index * stride[:, None] + offset
    return base[:, None] + soff[:, None] + np.where(sw, swz, lin)


def _prepare_smem(ins, ex):
    inst, name = ins.inst, ins.name
    if name in ("S_DCACHE_WB", "S_DCACHE_INV", "S_DCACHE_WB_VOL", "S_DCACHE_INV_VOL", "S_GL1_INV"):
        ins.run = advance(ins)
        return
    m = re.match(r"^S_(BUFFER_)?LOAD_(DWORD(?:X\d+)?|B32|B64|B128|B256|B512)$", name)
    if not m:
        raise UnsupportedInstruction(f"{name} (SMEM)")
    size = {"DWORD": 4, "B32": 4, "DWORDX2": 8, "B64": 8, "DWORDX4": 16, "B128": 16, "DWORDX8": 32, "B256": 32,
            "DWORDX16": 64, "B512": 64}[m.group(2)]
    buffer = bool(m.group(1))
    sbase, sdata = field(inst, "sbase") << 1, field(inst, "sdata")
    ins.writes_exec = sdata + size // 4 > 126
    offset_f, soffset = field(inst, "offset"), field(inst, "soffset", 124)
    if ex.family == "cdna":
        imm, soe = field(inst, "imm", 1), field(inst, "soffset_en", 0)
        const = sext(offset_f, 21) if imm else None
        sreg = None if imm else offset_f & 0x7F
        sreg2 = soffset if soe else None
    else:
        const, sreg, sreg2 = sext(offset_f, 21), None, (None if soffset == 124 else soffset)

    def run(st, w):
        base = st.read_s64(w, sbase) & np.uint64((1 << 48) - 1) if buffer else st.read_s64(w, sbase)
        off = np.zeros(n_waves(st, w), np.int64)
        if const is not None:
            off += const
        for r in (sreg, sreg2):
            if r is not None:
                off += st.sgpr[w, r].astype(np.int64)
        addr = (base.astype(np.int64) + off).astype(np.uint64) & ~np.uint64(3)
        raw = st.memory.gather(addr, size, f"{name}")
        words = raw.view(np.uint32)
        st.sgpr[w, sdata:sdata + size // 4] = words
    ins.run = run
