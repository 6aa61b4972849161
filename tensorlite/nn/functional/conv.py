"""Convolutions (the Tensor library's conv1d / conv2d / conv_transpose1d / conv_transpose2d)
and the sliding-block rearrangements unfold (im2col) and fold, as torch.nn.functional's."""
from __future__ import annotations

from ..._core import ints
from ...errors import ShapeError, describe
from ...ops.conv import conv1d, conv2d, conv_transpose1d, conv_transpose2d  # noqa: F401  (F.conv*)
from ...ops.joins import stack
from ...ops.views import embed
from .vision import pad


def _blocks(op, x, out_hw, kernel_size, dilation, padding, stride):
    """(kernel, dilation, padding, stride, (oh, ow) blocks) of unfold / fold, checked."""
    k, dl, p, s = (ints(op, name, v, 2, low, input=x) for name, v, low in (
        ("kernel_size", kernel_size, 1), ("dilation", dilation, 1), ("padding", padding, 0), ("stride", stride, 1)))
    o = tuple((n + 2 * pp - d * (kk - 1) - 1) // ss + 1 for n, pp, d, kk, ss in zip(out_hw, p, dl, k, s))
    if min(o) < 1:
        raise ShapeError(f"{describe(op, input=x)}: the {tuple(out_hw)} plane holds no {k} block")
    return k, dl, p, s, o


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """The sliding blocks of an (N, C, H, W) or (C, H, W) input as columns (N, C * kh * kw, L) (im2col).

    >>> import tensorlite as tl; tl.nn.functional.unfold(tl.arange(4.0).reshape(1, 1, 2, 2), 1).tolist()
    [[[0.0, 1.0, 2.0, 3.0]]]"""
    x = input if input.ndim == 4 else input.unsqueeze(0)
    if input.ndim not in (3, 4):
        raise ShapeError(f"{describe('unfold', input=input)}: expected an (N, C, H, W) or (C, H, W) input")
    k, dl, p, s, (oh, ow) = _blocks("unfold", input, x.shape[2:], kernel_size, dilation, padding, stride)
    x = pad(x, (p[1], p[1], p[0], p[0]))
    cols = [x[:, :, i * dl[0]:i * dl[0] + (oh - 1) * s[0] + 1:s[0], j * dl[1]:j * dl[1] + (ow - 1) * s[1] + 1:s[1]]
            for i in range(k[0]) for j in range(k[1])]
    out = stack(cols, 2).reshape(x.shape[0], x.shape[1] * k[0] * k[1], oh * ow)
    return out if input.ndim == 4 else out.squeeze(0)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """The inverse arrangement of unfold (overlapping values sum): (N, C * kh * kw, L) -> (N, C, H, W).

    >>> import tensorlite as tl; tl.nn.functional.fold(tl.ones(1, 4, 4), (3, 3), 2).squeeze().tolist()[1]
    [2.0, 4.0, 2.0]"""
    x = input if input.ndim == 3 else input.unsqueeze(0)
    hw = ints("fold", "output_size", output_size, 2, 1, input=input)
    k, dl, p, s, (oh, ow) = _blocks("fold", input, hw, kernel_size, dilation, padding, stride)
    if input.ndim not in (2, 3) or x.shape[1] % (k[0] * k[1]) or x.shape[2] != oh * ow:
        raise ShapeError(f"{describe('fold', input=input)}: expected (N, C * {k[0] * k[1]}, {oh * ow}) blocks of "
                         f"the {hw} output")
    n, c, (hp, wp) = x.shape[0], x.shape[1] // (k[0] * k[1]), (hw[0] + 2 * p[0], hw[1] + 2 * p[1])
    blocks = x.reshape(n, c, k[0] * k[1], oh, ow)
    out = None
    for i in range(k[0]):
        for j in range(k[1]):  # each kernel offset adds its (oh, ow) values at a strided window of the plane
            rows = embed(blocks[:, :, i * k[1] + j], (n, c, hp, ow), 2, i * dl[0], s[0])
            part = embed(rows, (n, c, hp, wp), 3, j * dl[1], s[1])
            out = part if out is None else out + part
    out = out[:, :, p[0]:p[0] + hw[0], p[1]:p[1] + hw[1]]
    return out if input.ndim == 3 else out.squeeze(0)
