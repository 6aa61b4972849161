"""The wave executor: runs one kernel dispatch of an AMD code object on the host.

State is held for a batch of waves at once (numpy arrays with a leading wave axis):
scalar registers `sgpr[W, 128]` indexed by the ISA's operand encoding (VCC at 106, M0 at
124 on gfx9 and 125 on gfx11, EXEC at 126), vector registers `vgpr[W, NV, L]` and accumulation registers
`agpr[W, NA, L]` (L = 64 or 32 lanes), SCC and the PC per wave. Waves at the same PC
execute each instruction together, vectorised over waves and lanes, under their EXEC
masks; the scheduler always runs the waves at the lowest PC (a straight line of them
until another wave's PC is reached), parks waves at `s_barrier`
until every live wave of their workgroup has arrived, and retires them at `s_endpgm`.
LDS is one byte array per workgroup, private memory (scratch) a host buffer addressed the
way the hardware swizzles it per lane.

Instruction semantics come from AMD's pseudocode (pcode.py) for the ALU (alu.py; its most
frequent texts through hand-written numpy forms of the same semantics, fastalu.py); the
others are implemented by hand, one module per family: memory_ops.py (LDS, global, flat,
scratch, buffer, scalar loads, atomics), lanes.py (cross-lane), scalar.py (the program's end,
barriers, waits, s_getreg, s_bitset), vector.py (v_mad_u64_u32, v_perm, v_mac, v_fma_mix,
v_trig_preop), mfma.py and wmma.py (matrix cores), rdna4.py (what gfx12 names or encodes
anew); wave.py holds what they share (Instr, WaveState, operand reads). An instruction none
covers raises `UnsupportedInstruction` naming the mnemonic and the kernel. This module loads
code objects, prepares their instructions (once per instruction's bytes) and schedules the
waves.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from tensorlite.errors import BackendError

from . import lanes, mfma, rdna4, scalar, vector, wmma
from .alu import prepare_alu, prepare_vopd
from .codeobject import arch_traits
from .decode import decode
from .memory import MemoryFault
from .memory_ops import prepare_memory
from .wave import PRIVATE_BASE, SHARED_BASE, Instr, KernelFault, UnsupportedInstruction, WaveState, field


def _prepare_by_hand(ins, ex) -> bool:
    """The instructions run by code of their family's module rather than from pseudocode;
    False if `ins` is none of them."""
    if ins.fmt.startswith("VOPD"):
        return prepare_vopd(ins, ex)
    if ins.name.startswith(("V_WMMA_", "V_SWMMAC_")):
        return wmma.prepare(ins, ex, {f: field(ins.inst, f, 0) for f in wmma.FIELDS})
    return scalar.prepare(ins, ex) or lanes.prepare(ins, ex) or vector.prepare(ins, ex) or mfma.prepare(ins, ex)


# ---- programs and dispatches -----------------------------------------------------------------

class Program:
    """A code object loaded into emulated memory: its image at a host address, a decode
    cache of prepared instructions by PC, and the kernels by name."""

    def __init__(self, image: bytes, memory, arch: str = None):
        from .codeobject import CodeObject
        from .decode import family
        self.code = CodeObject(image)
        self.arch = arch or self.code.arch
        if self.code.arch != self.arch:
            raise BackendError(f"code object is for {self.code.arch}, the emulated device is {self.arch}")
        self.family = family(self.arch)
        self.memory = memory
        base, size = min(s.vaddr for s in self.code.segments), \
            max(s.vaddr + s.memsz for s in self.code.segments) - min(s.vaddr for s in self.code.segments)
        self.host = memory.alloc(size)
        self.bias = self.host - base               # host address of vaddr 0
        _base, img = self.code.memory_image(self.bias)
        view = memory.view(self.host, size)
        view[:] = np.frombuffer(bytes(img), np.uint8)
        self.image = bytes(img)
        self.base = base
        self.kernels = self.code.kernels
        self.instrs: Dict[int, Instr] = {}   # prepared instructions by host address

    def free(self):
        self.memory.free(self.host)

    def instr(self, pc: int, ex) -> Instr:
        ins = self.instrs.get(pc)
        if ins is None:
            ins = self.instrs[pc] = self._prepare(pc, ex)
        return ins

    def _prepare(self, pc, ex) -> Instr:
        offset = pc - self.bias - self.base
        if not 0 <= offset < len(self.image):
            raise KernelFault(f"kernel {ex.kernel_name}: jump to 0x{pc:x}, outside its code object")
        # Most instructions recur (in other kernels, other code objects): a prepared one is reused
        # by its bytes and what preparing it read from the dispatch. Its size follows from its
        # first 8 bytes (encoding, literal operands), so those find the bytes to look up.
        head = (self.arch, self.image[offset:offset + 8])
        size = _SIZE_OF_HEAD.get(head)
        key = (self.arch, ex.lanes, ex.mode_register, self.image[offset:offset + size]) if size else None
        known = _PREPARED.get(key) if key else None
        if known is not None:
            return known.copy_to(pc)
        ins = self.decode_and_prepare(pc, offset, ex)
        _SIZE_OF_HEAD[head] = ins.size
        _PREPARED[(self.arch, ex.lanes, ex.mode_register, self.image[offset:offset + ins.size])] = ins
        return ins

    def decode_and_prepare(self, pc, offset, ex) -> Instr:
        """The instruction at image offset `offset` (host address pc), decoded and prepared
        anew (no cache)."""
        try:
            inst = decode(self.image, offset, self.arch)
        except BackendError as e:
            raise UnsupportedInstruction(f"kernel {ex.kernel_name} at vaddr 0x{offset + self.base:x}: {e}") from None
        ins = Instr(inst, pc, inst.size())
        fmt = ins.fmt
        try:
            if rdna4.prepare(ins, ex) or _prepare_by_hand(ins, ex):
                pass
            elif fmt in ("SMEM", "DS", "GLOBAL", "FLAT", "SCRATCH", "MUBUF") or fmt.startswith(("DS", "GLOBAL")):
                prepare_memory(ins, ex)
            elif fmt.startswith(("SOP", "VOP")):
                if fmt.startswith("VINTERP"):
                    raise UnsupportedInstruction(f"{ins.name} ({fmt})")
                prepare_alu(ins, ex)
            else:
                raise UnsupportedInstruction(f"{ins.name} ({fmt})")
        except UnsupportedInstruction as e:
            where = self.code.function_at(offset + self.base) or ex.kernel_name
            raise UnsupportedInstruction(f"the emulator does not implement {e} (kernel {ex.kernel_name}, "
                                         f"function {where}, vaddr 0x{offset + self.base:x}, {self.arch})") from None
        return ins


_SIZE_OF_HEAD: Dict[tuple, int] = {}   # (arch, first 8 bytes) -> instruction size
_PREPARED: Dict[tuple, Instr] = {}     # (arch, lanes, MODE, instruction bytes) -> a prepared Instr


class Dispatch:
    """What an instruction's preparation may ask of the launch (lanes, family, modes)."""

    def __init__(self, prog, kernel):
        self.family, self.arch, self.kernel_name = prog.family, prog.arch, kernel.name
        kd = kernel.descriptor
        self.lanes = kd.wavefront_size
        rsrc1 = kd.compute_pgm_rsrc1
        # MODE register as CP sets it from rsrc1: round (12:15) and denorm (16:19) modes,
        # DX10 clamp (21) -> MODE[8], IEEE (23) -> MODE[9]
        self.mode_register = ((rsrc1 >> 12) & 0xFF) | (((rsrc1 >> 21) & 1) << 8) | (((rsrc1 >> 23) & 1) << 9)


MAX_WAVES_PER_BATCH = 256
MAX_STEPS = 50_000_000


def launch(prog: Program, name: str, grid, block, shared_mem: int, kernarg_values: bytes, memory):
    """Run kernel `name` over grid x block (3-tuples) with its explicit kernel arguments
    already laid out in `kernarg_values` (the metadata's offsets); returns when every
    wave has ended."""
    kernel = prog.kernels.get(name)
    if kernel is None:
        raise BackendError(f"no kernel {name!r} in the code object")
    kd = kernel.descriptor
    ex = Dispatch(prog, kernel)
    L = ex.lanes
    gx, gy, gz = grid
    bx, by, bz = block
    threads = bx * by * bz
    if threads > 1024:
        raise BackendError(f"{name}: block {block} has more than 1024 threads")
    waves_per_wg = -(-threads // L)
    nwg = gx * gy * gz
    lds_bytes = kd.group_segment_fixed_size + int(shared_mem)
    lds_limit = arch_traits(prog.arch).lds_bytes
    if lds_bytes > lds_limit:
        raise BackendError(f"{name}: {lds_bytes} bytes of LDS per workgroup exceed the {lds_limit // 1024} KiB "
                           f"a workgroup of {prog.arch} has")
    lane_scratch = -(-kd.private_segment_fixed_size // 4) * 4
    if kernel.uses_dynamic_stack:
        lane_scratch += 16 * 1024  # a dynamic stack grows at run time: give it room (checked by bounds)

    # kernarg segment: explicit arguments, then the hidden ones the metadata asks for
    ksize = max(kernel.kernarg_segment_size, len(kernarg_values), 8)
    kern = memory.alloc(ksize + 64)
    kview = memory.view(kern, ksize)
    kview[:len(kernarg_values)] = np.frombuffer(kernarg_values, np.uint8)
    hidden = {"hidden_block_count_x": (gx, 4), "hidden_block_count_y": (gy, 4), "hidden_block_count_z": (gz, 4),
              "hidden_group_size_x": (bx, 2), "hidden_group_size_y": (by, 2), "hidden_group_size_z": (bz, 2),
              "hidden_remainder_x": (0, 2), "hidden_remainder_y": (0, 2), "hidden_remainder_z": (0, 2),
              "hidden_grid_dims": (sum(1 for d in (gy, gz) if d > 1) + 1, 2),
              "hidden_dynamic_lds_size": (int(shared_mem), 4),
              "hidden_shared_base": (SHARED_BASE >> 32, 4), "hidden_private_base": (PRIVATE_BASE >> 32, 4)}
    for arg in kernel.hidden_args:
        kind, off, size = arg["value_kind"], arg["offset"], arg["size"]
        value, _ = hidden.get(kind, (0, size))  # global offsets, queues, hostcall, heap: none here
        kview[off:off + size] = np.frombuffer(int(value).to_bytes(size, "little"), np.uint8)
    # the dispatch packet (hsa_kernel_dispatch_packet_t), which code object v4 reads blockDim from
    pkt = memory.alloc(64)
    pv = memory.view(pkt, 64)
    header = np.zeros(64, np.uint8)
    fields = [(2, 2, 3), (4, 2, bx), (6, 2, by), (8, 2, bz), (12, 4, gx * bx), (16, 4, gy * by), (20, 4, gz * bz),
              (24, 4, lane_scratch), (28, 4, lds_bytes), (40, 8, kern)]
    for off, size, value in fields:
        header[off:off + size] = np.frombuffer(int(value).to_bytes(size, "little"), np.uint8)
    pv[:] = header

    user = {n: (first, count) for n, first, count in kd.user_sgpr_layout()}
    system = dict(kd.system_sgpr_layout())
    nvgpr = kd.vgpr_alloc_count
    acc = kd.accum_offset
    nagpr = (nvgpr - acc) if acc is not None and nvgpr > acc else (256 if prog.family == "cdna" else 0)
    nvgpr = max(nvgpr, 8)
    wgs_per_batch = max(1, MAX_WAVES_PER_BATCH // waves_per_wg)
    scratch_host = None
    try:
        for first in range(0, nwg, wgs_per_batch):
            ids = np.arange(first, min(nwg, first + wgs_per_batch))
            nb = len(ids)
            W = nb * waves_per_wg
            st = WaveState(prog, kernel, W, L, min(nvgpr, 512), max(nagpr, 1), nb, lds_bytes, memory, prog.arch)
            st.wg = np.repeat(np.arange(nb), waves_per_wg)
            wave_in_wg = np.tile(np.arange(waves_per_wg), nb)
            wg_id = ids[st.wg]
            wid = np.stack([wg_id % gx, (wg_id // gx) % gy, wg_id // (gx * gy)], axis=1)
            if lane_scratch:
                if scratch_host is None:
                    scratch_bytes = MAX_WAVES_PER_BATCH * L * lane_scratch + 256
                    scratch_host = memory.alloc(scratch_bytes)
                st.scratch_lane_bytes = lane_scratch
                st.scratch_base = np.uint64(scratch_host) + np.arange(W, dtype=np.uint64) * np.uint64(L * lane_scratch)
            _init_registers(st, kd, user, system, wid, wave_in_wg, threads, (bx, by, bz), kern, pkt,
                            scratch_host, lane_scratch)
            if prog.family == "rdna4":
                rdna4.init_registers(st, kd, wid)
            st.pc[:] = prog.bias + kd.entry
            with np.errstate(all="ignore"):  # the ISA defines inf/nan/wraparound results: no warnings
                _run(st, prog, ex)
    finally:
        memory.free(kern)
        memory.free(pkt)
        if scratch_host is not None:
            memory.free(scratch_host)


def _init_registers(st, kd, user, system, wid, wave_in_wg, threads, block, kern, pkt, scratch_host, lane_scratch):
    L, W = st.L, st.W
    bx, by, _bz = block

    def put64(name, value):
        if name in user:
            r = user[name][0]
            st.sgpr[:, r] = np.uint32(value & 0xFFFFFFFF)
            st.sgpr[:, r + 1] = np.uint32(value >> 32)
    put64("dispatch_ptr", pkt)
    put64("kernarg_segment_ptr", kern)
    put64("queue_ptr", 0)
    put64("dispatch_id", 0)
    if "private_segment_buffer" in user:  # gfx9: the per-lane swizzled scratch descriptor
        r = user["private_segment_buffer"][0]
        base = scratch_host or 0
        st.sgpr[:, r] = np.uint32(base & 0xFFFFFFFF)
        st.sgpr[:, r + 1] = np.uint32((base >> 32) & 0xFFFF) | np.uint32(1 << 31)     # swizzle enable
        st.sgpr[:, r + 2] = np.uint32(0xFFFFFFFF)                                     # num_records
        index_stride = 3 if L == 64 else 2
        st.sgpr[:, r + 3] = np.uint32((1 << 19) | (index_stride << 21) | (1 << 23))   # element 4 B, ADD_TID
    wave_offset = np.arange(W, dtype=np.uint64) * np.uint64(L * lane_scratch)
    if "flat_scratch_init" in user:
        r = user["flat_scratch_init"][0]
        st.sgpr[:, r] = ((np.uint64(scratch_host or 0) + wave_offset) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        st.sgpr[:, r + 1] = np.uint32(lane_scratch)
    if "private_segment_size" in user:
        st.sgpr[:, user["private_segment_size"][0]] = np.uint32(lane_scratch)
    for d, axis in (("x", 0), ("y", 1), ("z", 2)):
        if f"workgroup_id_{d}" in system:
            st.sgpr[:, system[f"workgroup_id_{d}"]] = wid[:, axis].astype(np.uint32)
    if "workgroup_info" in system:
        st.sgpr[:, system["workgroup_info"]] = np.uint32(0)
    if "private_segment_wavefront_offset" in system:
        st.sgpr[:, system["private_segment_wavefront_offset"]] = wave_offset.astype(np.uint32)
    if scratch_host:  # architected flat scratch (gfx940, gfx11): FLAT_SCRATCH is the wave's base
        fs = np.uint64(scratch_host) + wave_offset
        st.sgpr[:, 102] = (fs & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        st.sgpr[:, 103] = (fs >> np.uint64(32)).astype(np.uint32)
    # work-item ids: thread t of the workgroup is lane t % L of wave t // L, packed x | y << 10 | z << 20
    t = wave_in_wg[:, None] * L + np.arange(L)[None, :]
    x, y, z = t % bx, (t // bx) % by, t // (bx * by)
    st.vgpr[:, 0, :] = (x | (y << 10) | (z << 20)).astype(np.uint32)
    live = t < threads
    ex = st.pack_lanes(slice(None), live)
    st.write_mask(slice(None), 126, ex)


def _run(st, prog, ex):
    """The scheduler: the waves at the lowest PC run next, together. They run a straight
    line of instructions without a look at the others, as long as no other wave's PC is
    passed (then the lowest PC is theirs still): the order of the instructions is the one
    a step-by-step scheduler takes."""
    steps = 0
    instrs = prog.instrs
    while True:
        runnable = ~st.done & ~st.barrier
        if not runnable.any():
            if st.done.all():
                return
            st.barrier[:] = False   # every live wave of every workgroup waits: release them
            continue
        pcs = st.pc if runnable.all() else st.pc[runnable]
        pc = int(pcs.min())
        at = pcs == pc
        if at.all():
            w = slice(None) if pcs is st.pc else np.nonzero(runnable)[0]
            limit = None
        else:
            w = np.nonzero(runnable & (st.pc == pc))[0]
            limit = int(pcs[~at].min())  # the next PC another wave waits at
        st.group, st.group_exec = w, None
        while True:
            ins = instrs.get(pc) or prog.instr(pc, ex)
            steps += 1
            try:
                if ins.control:
                    st.pc[w] = pc
                    ins.run(st, w)
                    break
                ins.run(st, w)
            except (MemoryFault, KernelFault) as e:
                from .decode import mnemonic
                vaddr = pc - prog.bias
                raise type(e)(f"{e} (kernel {ex.kernel_name}, {mnemonic(ins.inst)} at vaddr 0x{vaddr:x}, "
                              f"function {prog.code.function_at(vaddr)}, {prog.arch})") from None
            if ins.writes_exec:
                st.group_exec = None
            pc += ins.size
            if limit is not None and pc >= limit:
                st.pc[w] = pc
                break
        st.group = st.group_exec = None
        if steps > MAX_STEPS:
            raise KernelFault(f"kernel {ex.kernel_name} ran more than {MAX_STEPS} steps (an endless loop?)")

