"""Shape and data-movement kernels: the shape chains exporters write
(Shape/Gather/Unsqueeze/Concat/Reshape, ConstantOfShape, Range, Expand,
Slice...) and the layout ops (Transpose, Split, Tile, Pad), in numpy.
Views are returned where numpy gives one (Reshape, Expand, Slice): no kernel
writes into its operands."""
from __future__ import annotations

import math

import numpy as np
from onnx import numpy_helper

from .toolkit import axis_of, int_list, kernel


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
    # (the read-only shape operand last seen, held so that its id is not
    # reused; x's shape; the result's): one tuple, read and replaced whole
    last = [(None, None, None)]

    def reshape(x, shape):
        # A warm run at a key passes the same kept, read-only shape value
        # (executor.py): its dims are resolved once per key (3.3 -> ~1.0 us)
        seen = last[0]
        if shape is seen[0] and x.shape == seen[1]:
            return x.reshape(seen[2])
        out = _reshape_to(x, shape)
        if not shape.flags.writeable:  # a caller's array may change in place between calls
            last[0] = (shape, x.shape, out.shape)
        return out

    def _reshape_to(x, shape):
        dims = shape.tolist()
        if not allowzero and 0 in dims:  # 0 copies the input's dim
            dims = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(dims)]
        try:  # numpy's rules are ONNX's: one -1, inferred from the element count, which must match
            if min(dims, default=0) < -1:
                raise ValueError
            return x.reshape(dims)
        except ValueError:
            raise node.error(f"cannot reshape {list(x.shape)} ({x.size} elements) to {shape.tolist()}") from None
    return reshape


@kernel("Flatten")
def _flatten(node):
    axis = node.get("axis", 1)

    def flatten(x):
        a = axis_of(axis, x.ndim)
        return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))
    return flatten


@kernel("Transpose")
def _transpose(node):
    perm = node.get("perm")
    if perm is None:
        return lambda x: x.transpose()
    perm = tuple(perm)
    return lambda x: x.transpose(perm)  # the method: np.transpose's wrapper was a third of a step (2.1 us)


def _axes_op(node, fn):
    if node.opset < 13:
        axes = node.get("axes")
        return lambda x: fn(x, axes)
    return lambda x, axes=None: fn(x, None if axes is None else int_list(axes))


@kernel("Squeeze")
def _squeeze(node):
    fixed = node.attrs.get("axes") if node.opset < 13 else (node.consts[1] if len(node.consts) > 1 else None)
    if fixed is not None and node.ranks and node.ranks[0] is not None:  # constant axes: resolved once
        ax = tuple(axis_of(a, node.ranks[0]) for a in int_list(fixed))
        return lambda x, axes=None: x.squeeze(ax)

    def squeeze(x, axes):
        if axes is None:
            return np.squeeze(x)
        return np.squeeze(x, tuple(axis_of(a, x.ndim) for a in axes))
    return _axes_op(node, squeeze)


@kernel("Unsqueeze")
def _unsqueeze(node):
    fixed = node.attrs.get("axes") if node.opset < 13 else (node.consts[1] if len(node.consts) > 1 else None)
    if fixed is not None and node.ranks and node.ranks[0] is not None:
        # constant axes and a known rank: one indexing with None at the new
        # axes (a view), not np.expand_dims' wrapper (qwen2's steps 7.1 -> ~1 us)
        rank = node.ranks[0] + len(int_list(fixed))
        new = {axis_of(a, rank) for a in int_list(fixed)}
        index = tuple(None if i in new else slice(None) for i in range(rank))
        return lambda x, axes=None: x[index]

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

    fixed = node.consts[1] if len(node.consts) > 1 else None
    rank = node.ranks[0] if node.ranks else None
    if rank is not None and (fixed is not None or attr_split is not None):
        # constant sizes and a known rank (what exporters write): no per-call decoding
        sizes = int_list(fixed) if fixed is not None else list(attr_split)
        a, total = axis_of(axis, rank), sum(sizes)

        def split_fixed(x, _=None):
            if x.shape[a] != total or len(sizes) != n:
                raise node.error(f"cannot split {list(x.shape)} along axis {axis} into {sizes}")
            return _slices(x, a, sizes)
        return split_fixed

    def split(x, sizes=None):
        a = axis_of(axis, x.ndim)
        sizes = int_list(sizes) if sizes is not None else attr_split
        if sizes is None:  # equal parts (the last one smaller, opset 18's num_outputs)
            step = -(-x.shape[a] // n)
            sizes = [min(step, max(x.shape[a] - i * step, 0)) for i in range(n)]
        if sum(sizes) != x.shape[a] or len(sizes) != n:
            raise node.error(f"cannot split {list(x.shape)} along axis {axis} into {sizes}")
        return _slices(x, a, sizes)  # views, as np.split's, without its overhead (16.7 -> ~5 us in gpt2_lm)
    return split


def _slices(x, a, sizes):
    lead, out, end = (slice(None),) * a, [], 0
    for size in sizes:
        out.append(x[lead + (slice(end, end + size),)])
        end += size
    return tuple(out)


@kernel("Slice")
def _slice(node):
    # Python's slice rules are ONNX's: a negative index counts from the end,
    # then start and end clamp to [0, dim] (a negative step: [-1, dim - 1],
    # -1 meaning before the first), whatever their size.
    if node.opset < 10:
        attrs = (node.get("starts"), node.get("ends"), node.get("axes"), None)
        return lambda x: x[_index(x.ndim, *attrs)]
    c = node.consts + [None] * (5 - len(node.consts))
    if node.ranks and node.ranks[0] is not None and all(
            v is not None or not given for v, given in zip(c[1:], node.present[1:] + [False] * 4)):
        index = _index(node.ranks[0], *[None if v is None else v.tolist() for v in c[1:]])  # constants: once
        return lambda x, *_: x[index]
    return lambda x, starts, ends, axes=None, steps=None: x[_index(
        x.ndim, starts.tolist(), ends.tolist(), None if axes is None else axes.tolist(),
        None if steps is None else steps.tolist())]


def _index(ndim, starts, ends, axes, steps):
    index = [slice(None)] * ndim
    for k, (s, e) in enumerate(zip(starts, ends)):
        a = k if axes is None else axes[k]
        index[a + ndim if a < 0 else a] = slice(s, e, 1 if steps is None else steps[k])
    return tuple(index)


@kernel("Gather")
def _gather(node):
    axis = node.get("axis", 0)
    idx = node.consts[1] if len(node.consts) > 1 else None
    if isinstance(idx, np.ndarray) and idx.ndim == 0 and idx.dtype.kind in "iu":
        # a constant scalar index (a column of NonMaxSuppression's triples):
        # a basic-indexing view (0.2 us where np.take took 1.0), negative
        # and out-of-range indices as np.take takes them
        i = int(idx)
        return lambda x, _: x[(slice(None),) * axis_of(axis, x.ndim) + (i, Ellipsis)]
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
        if b == 0 and 0 < k <= x.ndim:
            # numpy's own indexing: negative indices counted from the end
            # and an out-of-range one an IndexError, as GatherND defines
            # them; 1.2 us where the general path below took 6.3 (boxes
            # [2, 60, 4] picked by NonMaxSuppression's 6 selections)
            return x[tuple(idx[..., j] for j in range(k))]
        batch = x.shape[:b]
        nb = math.prod(batch)
        xs = x.reshape((nb,) + x.shape[b:])
        ids = idx.reshape(nb, -1, k)
        ids = np.where(ids < 0, ids + np.array(x.shape[b:b + k]), ids)
        rows = np.arange(nb)[:, None]
        picked = xs[(rows,) + tuple(ids[..., j] for j in range(k))]  # [nb, m, rest...]
        return picked.reshape(idx.shape[:-1] + x.shape[b + k:])
    return gather_nd


@kernel("Expand")
def _expand(node):
    last = [(None, None, None)]  # as Reshape's: the read-only shape operand last seen, x's shape, the result's

    def expand(x, shape):
        seen = last[0]
        if shape is seen[0] and x.shape == seen[1]:
            return np.broadcast_to(x, seen[2])
        out = _expand_to(x, shape)
        if not shape.flags.writeable:
            last[0] = (shape, x.shape, out.shape)
        return out

    def _expand_to(x, shape):
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

