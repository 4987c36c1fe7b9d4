"""Shared by Conv and the pools: padding resolution and, for one kernel
offset, the output range whose input index stays inside the image. With
static shapes these ranges are compile-time constants, so padded borders
cost no per-element test and inner loops stay branch-free."""
from __future__ import annotations

from contextlib import ExitStack


def resolve_pads(auto_pad, pads, in_sp, out_sp, kernel, strides, dilations):
    n = len(in_sp)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin = []
        for i in range(n):
            total = max(0, (out_sp[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_sp[i])
            begin.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        end = [None] * n
        return begin, end
    if auto_pad == "VALID" or not pads:
        return [0] * n, [0] * n
    return list(pads[:n]), list(pads[n:])


def valid_range(out_size, stride, off, in_size):
    """o in [lo, hi) keeps 0 <= o*stride + off < in_size."""
    lo = (-off + stride - 1) // stride if off < 0 else 0
    hi = min(out_size, (in_size - 1 - off) // stride + 1) if in_size - 1 - off >= 0 else 0
    return lo, max(lo, hi)


def window_nest(L, out_sp, in_sp, strides, offsets, body):
    """for o over the valid output window of one kernel offset:
    body(out_idx, in_idx); the innermost loop is marked vectorize."""
    ranges = [valid_range(o, s, off, i) for o, s, off, i in zip(out_sp, strides, offsets, in_sp)]
    if any(lo >= hi for lo, hi in ranges):
        return
    with ExitStack() as st:
        ivs = [st.enter_context(L.loop(lo, hi, vectorize=d == len(ranges) - 1)) for d, (lo, hi) in enumerate(ranges)]
        body(ivs, [L.add(L.mul(i, s), off) for i, s, off in zip(ivs, strides, offsets)])
