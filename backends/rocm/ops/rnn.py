"""A recurrent cell's step (rnn.hip): the pointwise part of an LSTM / GRU / RNN time step,
forward and backward, one launch each (F.rnn_layer runs the step's GEMMs as matmuls around it)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from tensorlite.errors import ShapeError, storage_error
from tensorlite.layout import Layout
from tensorlite.rnn_reference import GATES, MODES

from ..kernel_table import FLOATS, kernel_for
from ..launch import BLOCK, grid_for

if TYPE_CHECKING:
    from ..storage import GpuStorage

# the entry points of this family's kernel source (kernel_table.py assembles every family's)
KERNELS = {"rnn.hip": tuple(f"{op}_{t}" for op in ("rnn_cell", "rnn_cell_bwd") for t in FLOATS)}


def _address(op: str, pair, shape):
    """("ptr", address of the pair's first element) of a contiguous operand of `shape` ((rows,
    None): any row length), a null pointer for None, or ShapeError."""
    if pair is None:
        return ("ptr", 0)
    st, layout = pair
    if not layout.is_contiguous() or layout.ndim != len(shape) or \
            any(want is not None and got != want for got, want in zip(layout.shape, shape)):
        raise storage_error(ShapeError, op, f"expected a contiguous operand of shape {shape} (None: any)",
                            operand=pair)
    return ("ptr", st.addr(layout.offset))


class RnnOps:
    """GpuStorage's rnn_cell and rnn_cell_backward (the contract's in tensorlite.backend)."""

    def rnn_cell(self: GpuStorage, mode, layout, gh, b_hh, state, h_out, c_out, saved):
        n, g = layout.shape
        rows = (n, None)
        self._rnn_launch("rnn_cell", mode, n, g // GATES[mode], [
            _address("rnn_cell", (self, layout), rows), _address("rnn_cell", gh, rows),
            _address("rnn_cell", b_hh, (g,)), *(_address("rnn_cell", p, rows) for p in (state, h_out, c_out, saved))])

    def rnn_cell_backward(self: GpuStorage, mode, layout, state, cell, g_out, dh_rec, carry, dgi, dgh):
        n, g = dgi[1].shape
        self._rnn_launch("rnn_cell_bwd", mode, n, g // GATES[mode], [
            _address("rnn_cell_backward", p, (n, None))
            for p in ((self, layout), state, cell, g_out, dh_rec, carry, dgi, dgh)])

    def _rnn_launch(self: GpuStorage, entry, mode, n, h, pointers):
        """Launch rnn.hip's `entry` over the (n, h) state with its pointer arguments."""
        dev = self.device
        kernel = kernel_for(dev, f"{entry}_{self.dtype.short}", entry, x=(self, Layout((n, h))))
        if n * h:
            dev.launch(kernel, grid_for(dev, n * h), BLOCK,
                       [("int32", MODES.index(mode)), ("int64", n), ("int64", h), *pointers])
