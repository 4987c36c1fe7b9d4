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

from ...ir.types import INDEX, NONE, f32
from .builder import LOW_FLOATS, is_float
from contextlib import ExitStack

import numpy as np

from .kernels import CONV_FIELDS, annotate, pack_a_panels
from .registry import lowering
from .window import resolve_pads, window_nest


def _ext(L, v, t):
    return L.op("arith.extf", [v], f32) if is_float(t) and t.name in LOW_FLOATS else v


@lowering("Conv")
def lower_conv(cx, op):
    X, W = op.operands[:2]
    Bv = op.operands[2] if len(op.operands) > 2 and op.operands[2].type is not NONE else None
    r = op.results[0]
    L = cx.L
    N, C = X.type.shape[:2]
    in_sp = X.type.shape[2:]
    M = W.type.shape[0]
    kernel_shape = cx.attr(op, "kernel_shape") or W.type.shape[2:]
    n = len(in_sp)
    out_sp = r.type.shape[2:]
    strides = cx.attr(op, "strides") or [1] * n
    dil = cx.attr(op, "dilations") or [1] * n
    group = cx.attr(op, "group") or 1
    begin, _ = resolve_pads(cx.attr(op, "auto_pad"), cx.attr(op, "pads"), in_sp, out_sp, kernel_shape, strides,
                            dil)
    Cg, Mg = C // group, M // group
    t_out = r.type.element
    low = is_float(t_out) and t_out.name in LOW_FLOATS
    t = f32 if low else t_out
    out = cx.out(r)
    acc = L.alloc(r.type.shape, f32) if low else out
    xb, wb = cx.buf(X), cx.buf(W)
    bb = cx.buf(Bv) if Bv is not None else None
    P = 1
    for d in out_sp:
        P *= d
    accf = L.view(acc, (N, M, P))
    zero = L.c(0.0 if is_float(t) else 0, t)
    add, mul = ("arith.addf", "arith.mulf") if is_float(t) else ("arith.addi", "arith.muli")
    kernel = n in (1, 2) and all(str(v.type.element) == "f32" for v in (X, W, r)) and \
        (Bv is None or str(Bv.type.element) == "f32")
    st = ExitStack()
    if kernel:
        from .matmul import library_root
        root = st.enter_context(library_root(L))
    with st, L.loop(0, N) as nn:
        with L.loop(0, M, parallel=True) as m:
            init = _ext(L, L.load(bb, [m]), Bv.type.element) if bb is not None else zero
            with L.loop(0, P, vectorize=True) as p:
                L.store(init, accf, [nn, m, p])
            c0 = L.mul(L.op("arith.divui", [m, L.c(Mg)], INDEX), Cg) if group > 1 else 0
            with L.loop(0, Cg) as c:
                ic = L.add(c0, c)
                for kp in itertools.product(*[range(k) for k in kernel_shape]):
                    w = _ext(L, L.load(wb, [m, c] + list(kp)), W.type.element)
                    offs = [k * d - b for k, d, b in zip(kp, dil, begin)]

                    def body(oi, ii, w=w, ic=ic):
                        idx = [nn, m] + oi
                        x = _ext(L, L.load(xb, [nn, ic] + ii), X.type.element)
                        L.store(L.op(add, [L.load(acc, idx), L.op(mul, [w, x], t)], t), acc, idx)
                    window_nest(L, out_sp, in_sp, strides, offs, body)
    if kernel:
        h, w_ = (1,) + tuple(in_sp) if n == 1 else tuple(in_sp)
        oh, ow = (1,) + tuple(out_sp) if n == 1 else tuple(out_sp)
        kh, kw = (1,) + tuple(kernel_shape) if n == 1 else tuple(kernel_shape)
        sh, sw = (1,) + tuple(strides) if n == 1 else tuple(strides)
        ph, pw = (0,) + tuple(begin) if n == 1 else tuple(begin)
        dh, dw = (1,) + tuple(dil) if n == 1 else tuple(dil)
        wval = cx.const(W)
        packed = None
        if wval is not None and not (Cg == 1 and group == C):  # depthwise reads W as it is
            packed = pack_a_panels(np.asarray(wval), group)
        vals = dict(N=N, C=C, H=h, W=w_, M=M, KH=kh, KW=kw, OH=oh, OW=ow, SH=sh, SW=sw, PH=ph, PW=pw, DH=dh,
                    DW=dw, G=group, relu=0, apacked=int(packed is not None))
        annotate(root[0], "tcc_conv_f32", [int(vals[f]) for f in CONV_FIELDS],
                 [acc, xb, "packed" if packed is not None else wb, bb], packed=packed)
    if low:
        from .matmul import _finish
        _finish(cx, acc, out)
