"""Reductions (axes as an attribute before the opset that made them an
input), ArgMax/ArgMin, CumSum, TopK: numpy."""
from __future__ import annotations

import math

import numpy as np

from .toolkit import axis_of, int_list, kernel

_AXES_INPUT_SINCE = {"ReduceSum": 13}  # the others take axes as an input from opset 18


def _reduce(fn, post=None):
    def make(node):
        keep = bool(node.get("keepdims", 1))
        noop = bool(node.get("noop_with_empty_axes", 0))
        short = node.op.split(".")[-1]
        attr_axes = node.get("axes") if node.opset < _AXES_INPUT_SINCE.get(short, 18) else None
        rank = node.ranks[0] if node.ranks else None
        const_axes = node.consts[1] if len(node.consts) > 1 else None
        if rank is not None and (attr_axes is not None or const_axes is not None):
            # constant axes and a known rank (what exporters write): resolved once;
            # llama's ReduceMean steps 9.6 -> 5.9 us (3x7x64)
            ax = attr_axes if attr_axes is not None else int_list(const_axes)
            if ax or not noop:
                ax = tuple(axis_of(a, rank) for a in ax) if ax else tuple(range(rank))
                return lambda x, axes=None: fn(x, ax, keep).astype(x.dtype, copy=False) if post is None else \
                    post(fn(x, ax, keep)).astype(x.dtype, copy=False)

        def reduce(x, axes=None):
            ax = attr_axes if axes is None else int_list(axes)
            if not ax:
                if noop:
                    return x
                ax = range(x.ndim)
            ax = tuple(axis_of(a, x.ndim) for a in ax)
            out = fn(x, ax, keep)
            return (post(out) if post else out).astype(x.dtype, copy=False)
        return reduce
    return make


kernel("ReduceSum")(_reduce(lambda x, a, k: np.sum(x, axis=a, keepdims=k)))
kernel("ReduceMean")(_reduce(lambda x, a, k: np.add.reduce(x, axis=a, keepdims=k) /
                            x.dtype.type(math.prod(x.shape[i] for i in a)) if x.dtype.kind == "f" else
                            np.mean(x, axis=a, keepdims=k)))  # np.mean's Python wrapper: 8.8 us, this 2.7
kernel("ReduceMax")(_reduce(lambda x, a, k: np.max(x, axis=a, keepdims=k)))
kernel("ReduceMin")(_reduce(lambda x, a, k: np.min(x, axis=a, keepdims=k)))
kernel("ReduceProd")(_reduce(lambda x, a, k: np.prod(x, axis=a, keepdims=k)))
kernel("ReduceL1")(_reduce(lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k)))
kernel("ReduceL2")(_reduce(lambda x, a, k: np.sqrt(np.sum(np.square(x), axis=a, keepdims=k))))
kernel("ReduceSumSquare")(_reduce(lambda x, a, k: np.sum(np.square(x), axis=a, keepdims=k)))
kernel("ReduceLogSum")(_reduce(lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k))))


def _logsumexp(x, a, k):
    m = np.max(x, axis=a, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x - m), axis=a, keepdims=True)) + m
    return out if k else np.squeeze(out, a)


kernel("ReduceLogSumExp")(_reduce(_logsumexp))


def _arg(fn):
    def make(node):
        axis, keep, last = node.get("axis", 0), bool(node.get("keepdims", 1)), bool(node.get("select_last_index", 0))

        def arg(x):
            a = axis_of(axis, x.ndim)
            if last:  # the last of equal values: search the reversed axis
                out = x.shape[a] - 1 - fn(np.flip(x, a), axis=a)
            else:
                out = fn(x, axis=a)
            out = out.astype(np.int64)
            return np.expand_dims(out, a) if keep else out
        return arg
    return make


kernel("ArgMax")(_arg(np.argmax))
kernel("ArgMin")(_arg(np.argmin))


@kernel("CumSum")
def _cumsum(node):
    exclusive, reverse = node.get("exclusive", 0), node.get("reverse", 0)

    def cumsum(x, axis):
        a = axis_of(int(axis), x.ndim)
        y = np.flip(x, a) if reverse else x
        out = np.cumsum(y, axis=a, dtype=x.dtype)
        if exclusive:
            out = np.concatenate([np.zeros_like(np.take(out, [0], axis=a)), np.take(out, range(out.shape[a] - 1), axis=a)],
                                 axis=a) if out.shape[a] else out
        return np.flip(out, a) if reverse else out
    return cumsum
