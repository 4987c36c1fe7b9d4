"""Shape and data-movement kernels: the shape chains exporters write
(Shape/Gather/Unsqueeze/Concat/Reshape, ConstantOfShape, Range, Expand,
Slice...) and the layout ops (Transpose, Split, Tile, Pad), in numpy.
Views are returned where numpy gives one (Reshape, Expand, Slice): no kernel
writes into its operands."""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from .toolkit import axis_of, int_list, kernel, shapes


@kernel("Shape")
def _shape(node):
    start, end = node.get("start", 0), node.get("end")
    return lambda x: np.array(x.shape[start:end] if end is not None else x.shape[start:], np.int64)


@kernel("Size")
def _size(node):
    return lambda x: np.array(x.size, np.int64)


@kernel("Reshape")
def _reshape(node):
    allowzero = node.get("allowzero", 0)

    def reshape(x, shape):
        dims = int_list(shape)
        if not allowzero:
            dims = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(dims)]
        known = int(np.prod([d for d in dims if d != -1])) if dims else 1
        if dims.count(-1) > 1 or (-1 in dims and (known == 0 or x.size % known)) or \
                (-1 not in dims and known != x.size) or any(d < -1 for d in dims):
            raise node.error(f"cannot reshape {list(x.shape)} ({x.size} elements) to {int_list(shape)}")
        return x.reshape(dims)
    return reshape


@kernel("Flatten")
def _flatten(node):
    axis = node.get("axis", 1)

    def flatten(x):
        a = axis_of(axis, x.ndim)
        return x.reshape(int(np.prod(x.shape[:a])), -1 if x.size else int(np.prod(x.shape[a:])))
    return flatten


@kernel("Transpose")
def _transpose(node):
    perm = node.get("perm")
    return lambda x: np.transpose(x, perm)


def _axes_op(node, fn):
    if node.opset < 13:
        axes = node.get("axes")
        return lambda x: fn(x, axes)
    return lambda x, axes=None: fn(x, None if axes is None else int_list(axes))


@kernel("Squeeze")
def _squeeze(node):
    def squeeze(x, axes):
        if axes is None:
            return np.squeeze(x)
        return np.squeeze(x, tuple(axis_of(a, x.ndim) for a in axes))
    return _axes_op(node, squeeze)


@kernel("Unsqueeze")
def _unsqueeze(node):
    def unsqueeze(x, axes):
        rank = x.ndim + len(axes)
        return np.expand_dims(x, tuple(axis_of(a, rank) for a in axes))
    return _axes_op(node, unsqueeze)


@kernel("Concat")
def _concat(node):
    axis = node.get("axis")
    return lambda *xs: np.concatenate(xs, axis=axis)


@kernel("Split")
def _split(node):
    axis, n = node.get("axis", 0), node.n_results
    attr_split = node.get("split")

    def split(x, sizes=None):
        a = axis_of(axis, x.ndim)
        sizes = int_list(sizes) if sizes is not None else attr_split
        if sizes is None:  # equal parts (the last one smaller, opset 18's num_outputs)
            step = -(-x.shape[a] // n)
            sizes = [min(step, max(x.shape[a] - i * step, 0)) for i in range(n)]
        if sum(sizes) != x.shape[a] or len(sizes) != n:
            raise node.error(f"cannot split {list(x.shape)} along axis {axis} into {sizes}")
        return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=a))
    return split


@kernel("Slice")
def _slice(node):
    if node.opset < 10:
        attrs = (node.get("starts"), node.get("ends"), node.get("axes"), None)
        return lambda x: _do_slice(x, *attrs)
    return lambda x, starts, ends, axes=None, steps=None: _do_slice(
        x, int_list(starts), int_list(ends), None if axes is None else int_list(axes),
        None if steps is None else int_list(steps))


def _do_slice(x, starts, ends, axes, steps):
    index = [slice(None)] * x.ndim
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = axis_of(a, x.ndim)
        dim = x.shape[a]
        s, e = s + dim if s < 0 else s, e + dim if e < 0 else e
        if st > 0:  # ONNX clamps to [0, dim]; a negative step: start to [0, dim - 1], end to [-1, dim - 1]
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = max(min(s, dim - 1), 0), max(min(e, dim - 1), -1)
        index[a] = slice(s, e if e >= 0 else None, st)
    return x[tuple(index)]


@kernel("Gather")
def _gather(node):
    axis = node.get("axis", 0)
    return lambda x, idx: np.take(x, idx, axis=axis_of(axis, x.ndim))


@kernel("GatherElements")
def _gather_elements(node):
    axis = node.get("axis", 0)

    def gather_elements(x, idx):
        a = axis_of(axis, x.ndim)
        return np.take_along_axis(x, np.where(idx < 0, idx + x.shape[a], idx), axis=a)
    return gather_elements


@kernel("GatherND")
def _gather_nd(node):
    b = node.get("batch_dims", 0)

    def gather_nd(x, idx):
        k = idx.shape[-1]
        batch = x.shape[:b]
        nb = int(np.prod(batch))
        xs = x.reshape((nb,) + x.shape[b:])
        ids = idx.reshape(nb, -1, k)
        ids = np.where(ids < 0, ids + np.array(x.shape[b:b + k]), ids)
        rows = np.arange(nb)[:, None]
        picked = xs[(rows,) + tuple(ids[..., j] for j in range(k))]  # [nb, m, rest...]
        return picked.reshape(idx.shape[:-1] + x.shape[b + k:])
    return gather_nd


@kernel("Expand")
def _expand(node):
    def expand(x, shape):
        try:
            out = np.broadcast_shapes(x.shape, tuple(int_list(shape)))
        except ValueError:
            raise node.error(f"cannot expand {list(x.shape)} to {int_list(shape)}") from None
        return np.broadcast_to(x, out)
    return expand


@kernel("ConstantOfShape")
def _constant_of_shape(node):
    v = node.get("value")
    value = numpy_helper.to_array(v).reshape(-1)[0] if v is not None else np.float32(0)
    return lambda shape: np.full(int_list(shape), value, dtype=value.dtype)


@kernel("Range")
def _range(node):
    def range_(start, limit, delta):
        s, lim, d = start.item(), limit.item(), delta.item()
        n = max(int(np.ceil((lim - s) / d)), 0)
        return (np.arange(n, dtype=np.float64 if start.dtype.kind == "f" else np.int64) * d + s).astype(start.dtype)
    return range_


@kernel("Tile")
def _tile(node):
    return lambda x, repeats: np.tile(x, int_list(repeats))


@kernel("Pad")
def _pad(node):
    mode = node.get("mode", "constant")
    if node.opset < 11 or mode not in ("constant", "reflect", "edge", "wrap"):
        return None

    def pad(x, pads, value=None, axes=None):
        p = int_list(pads)
        ax = list(range(x.ndim)) if axes is None else [axis_of(a, x.ndim) for a in int_list(axes)]
        if any(v < 0 for v in p):
            raise NotImplementedError("negative pads")  # the reference's (a crop)
        widths = [(0, 0)] * x.ndim
        for i, a in enumerate(ax):
            widths[a] = (p[i], p[i + len(ax)])
        if mode == "constant":
            cv = value.reshape(-1)[0] if value is not None and value.size else 0
            return np.pad(x, widths, mode="constant", constant_values=cv)
        return np.pad(x, widths, mode=mode)
    return pad


@kernel("Trilu")
def _trilu(node):
    upper = node.get("upper", 1)
    return lambda x, k=None: (np.triu if upper else np.tril)(x, 0 if k is None else int(k))


@kernel("Einsum")
def _einsum(node):
    eq = node.get("equation").replace(" ", "")
    return lambda *xs: np.einsum(eq, *xs)


__all__ = ["shapes"]
