"""Conv (1-D/2-D/3-D; groups, depthwise, strides, dilations, pads, auto_pad)
as direct loops, no im2col: per (n, output channel) the output plane is
initialised with the bias, then for every input channel of its group and
every kernel offset (unrolled at compile time) a branch-free window nest
accumulates w * x over the output range that offset keeps inside the
image. The innermost loop walks the output row (unit stride).

fp32 1-D/2-D convolutions are also marked as a library call (kernels.py):
the nest above (in a one-trip root loop) stays the semantics the loop
interpreter runs; the native backend calls runtime/native/gemm.c's
tcc_conv_f32 instead: implicit-GEMM (im2col gathered straight into packed
panels, 1x1 stride-1 convs read NCHW as the GEMM operand as it is) with the
register-blocked micro-kernel, and a direct kernel for depthwise. That took
ResNet-18 from 240 ms to ~30 ms and cut its compile time (no conv nests for
LLVM to optimize)."""
from __future__ import annotations

import itertools
import math

from ....ir.types import INDEX, NONE, f32
from ..common import LOW_FLOATS, extend_low_float, is_float
from contextlib import ExitStack

import numpy as np

from ..kernels import CONV_FIELDS, annotate, pack_a_panels
from ..registry import lowering
from ..window import resolve_pads, window_nest


class ConvGeometry:
    """Shapes, strides, dilations, groups and leading pads of a Conv-like op
    with input X, weights W (M, C/group, k...) and result r."""

    def __init__(self, cx, op, X, W, r):
        self.N, self.C = X.type.shape[:2]
        self.in_sp, self.out_sp = X.type.shape[2:], r.type.shape[2:]
        self.M = W.type.shape[0]
        self.kernel = cx.attr(op, "kernel_shape") or W.type.shape[2:]
        n = len(self.in_sp)
        self.strides = cx.attr(op, "strides") or [1] * n
        self.dil = cx.attr(op, "dilations") or [1] * n
        self.group = cx.attr(op, "group") or 1
        self.begin, _ = resolve_pads(cx.attr(op, "auto_pad"), cx.attr(op, "pads"), self.in_sp, self.out_sp,
                                     self.kernel, self.strides, self.dil)
        self.Cg, self.Mg = self.C // self.group, self.M // self.group
        self.P = int(np.prod(self.out_sp, dtype=np.int64))


def direct_conv(cx, g, acc, t, init, load_w, load_x):
    """acc[n, m, o] = init(m) + sum over the group's channels c and kernel
    offsets kp of load_w(m, c, kp) * load_x(n, ic, i) (i: o's input
    position; padding contributes nothing), in type t."""
    L = cx.L
    accf = L.view(acc, (g.N, g.M, g.P))
    add, mul = ("arith.addf", "arith.mulf") if is_float(t) else ("arith.addi", "arith.muli")
    with L.loop(0, g.N) as nn, L.loop(0, g.M, parallel=True) as m:
        v0 = init(m)
        with L.loop(0, g.P, vectorize=True) as p:
            L.store(v0, accf, [nn, m, p])
        c0 = L.mul(L.op("arith.divui", [m, L.c(g.Mg)], INDEX), g.Cg) if g.group > 1 else 0
        with L.loop(0, g.Cg) as c:
            ic = L.add(c0, c)
            for kp in itertools.product(*[range(k) for k in g.kernel]):
                w = load_w(m, c, list(kp))
                offs = [k * d - b for k, d, b in zip(kp, g.dil, g.begin)]

                def body(oi, ii, w=w, ic=ic):
                    idx = [nn, m] + oi
                    L.store(L.op(add, [L.load(acc, idx), L.op(mul, [w, load_x(nn, ic, ii)], t)], t), acc, idx)
                window_nest(L, g.out_sp, g.in_sp, g.strides, offs, body, taps=math.prod(g.kernel))


@lowering("Conv")
def lower_conv(cx, op):
    X, W = op.operands[:2]
    Bv = op.operands[2] if len(op.operands) > 2 and op.operands[2].type is not NONE else None
    r = op.results[0]
    L = cx.L
    g = ConvGeometry(cx, op, X, W, r)
    n = len(g.in_sp)
    t_out = r.type.element
    low = is_float(t_out) and t_out.name in LOW_FLOATS
    t = f32 if low else t_out
    out = cx.out(r)
    acc = L.alloc(r.type.shape, f32) if low else out
    xb, wb = cx.buf(X), cx.buf(W)
    bb = cx.buf(Bv) if Bv is not None else None
    zero = L.c(0.0 if is_float(t) else 0, t)
    kernel = n in (1, 2) and all(str(v.type.element) == "f32" for v in (X, W, r)) and \
        (Bv is None or str(Bv.type.element) == "f32")
    st = ExitStack()
    if kernel:
        from ..math.matmul import library_root
        root = st.enter_context(library_root(L))
    with st:
        direct_conv(cx, g, acc, t, lambda m: extend_low_float(L, L.load(bb, [m]), Bv.type.element) if bb is not None else zero,
                    lambda m, c, kp: extend_low_float(L, L.load(wb, [m, c] + kp), W.type.element),
                    lambda nn, ic, ii: extend_low_float(L, L.load(xb, [nn, ic] + ii), X.type.element))
    if kernel:
        C, M, group = g.C, g.M, g.group
        h, w_ = (1,) + tuple(g.in_sp) if n == 1 else tuple(g.in_sp)
        oh, ow = (1,) + tuple(g.out_sp) if n == 1 else tuple(g.out_sp)
        kh, kw = (1,) + tuple(g.kernel) if n == 1 else tuple(g.kernel)
        sh, sw = (1,) + tuple(g.strides) if n == 1 else tuple(g.strides)
        ph, pw = (0,) + tuple(g.begin) if n == 1 else tuple(g.begin)
        dh, dw = (1,) + tuple(g.dil) if n == 1 else tuple(g.dil)
        wval = cx.const(W)
        packed = None
        if wval is not None and not (g.Cg == 1 and group == C):  # depthwise reads W as it is
            packed = pack_a_panels(np.asarray(wval), group)
        vals = dict(N=g.N, C=C, H=h, W=w_, M=M, KH=kh, KW=kw, OH=oh, OW=ow, SH=sh, SW=sw, PH=ph, PW=pw, DH=dh,
                    DW=dw, G=group, relu=0, apacked=int(packed is not None))
        annotate(root[0], "tcc_conv_f32", [int(vals[f]) for f in CONV_FIELDS],
                 [acc, xb, "packed" if packed is not None else wb, bb], packed=packed)
    if low:
        from ..math.matmul import truncate_into
        truncate_into(cx, acc, out)
