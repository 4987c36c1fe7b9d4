"""Shared by Conv and the pools: padding resolution and, for one kernel
offset, the output range whose input index stays inside the image. With
static shapes these ranges are compile-time constants, so padded borders
cost no per-element test and inner loops stay branch-free."""
from __future__ import annotations

import math
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


# LLVM fully unrolls short constant-trip loops. Around a window nest's
# innermost loop that makes one copy of its body per outer iteration, and an
# op's nests (one per kernel offset) sit side by side in one loop body (the
# (n, c) plane loop): a small output (8x8x8) times many offsets (a 5x5x5
# kernel) unrolled into one loop body of 64,000 accumulator loads and
# stores, and LLVM's loop access analysis over it (in the loop vectorizer
# and loop-load elimination) is quadratic: a 3-D AveragePool spent 510 s in
# the O3 pipeline. So when all outer loops are short (LLVM could unroll
# them: at most UNROLL_SHORT trips) and the copies summed over the offsets
# pass UNROLL_BUDGET, the outer loops are `nounroll` (that pool: 4 s).
# Longer loops LLVM does not fully unroll, and small totals are cheap:
# those nests are unchanged (the same optimized LLVM IR as before).
UNROLL_SHORT = 16
UNROLL_BUDGET = 512


def outer_unroll(out_sp, taps):
    """Whether the loops around the innermost one of `taps` window nests
    over `out_sp` may be unrolled by LLVM (see UNROLL_BUDGET)."""
    outer = list(out_sp[:-1])
    return not outer or max(outer) > UNROLL_SHORT or taps * math.prod(outer) <= UNROLL_BUDGET


def window_nest(L, out_sp, in_sp, strides, offsets, body, taps=1):
    """for o over the valid output window of one kernel offset:
    body(out_idx, in_idx); the innermost loop is marked vectorize. `taps`:
    how many such nests the caller emits (one per kernel offset), which
    decides whether the outer loops may be unrolled (outer_unroll)."""
    ranges = [valid_range(o, s, off, i) for o, s, off, i in zip(out_sp, strides, offsets, in_sp)]
    if any(lo >= hi for lo, hi in ranges):
        return
    unroll = outer_unroll(out_sp, taps)
    inner = len(ranges) - 1
    with ExitStack() as st:
        ivs = [st.enter_context(L.loop(lo, hi, vectorize=d == inner, unroll=unroll or d == inner))
               for d, (lo, hi) in enumerate(ranges)]
        body(ivs, [L.add(L.mul(i, s), off) for i, s, off in zip(ivs, strides, offsets)])
