"""Host-lowering hook for `gpu.lib` placeholders: emits `loop.call @gpu.<kind>`
(a cuBLAS call or a hand-written kernel template, chosen in codegen) plus the
small loop nests around it (Gemm's bias, Conv's im2col and bias), which the
generic nest-to-kernel mapping turns into kernels like any other nest."""
from __future__ import annotations

import json

from tcc.dialects.ir import attributes as A
from tcc.dialects.ir.types import INDEX, NONE, i1


def _call(cx, kind, bufs, params):
    cx.L.op("loop.call", bufs, callee=f"gpu.{kind}", params=A.StringAttr(json.dumps(params, sort_keys=True)))


def lower_lib(cx, op):
    kind = op.get_attr("kind")
    params = json.loads(op.get_attr("params"))
    ins = [None if v.type is NONE else cx.buf(v) for v in op.operands]
    r = op.results[0]
    out = cx.out(r)
    if kind == "gemm":
        _gemm(cx, op, ins, out, params)
    elif kind == "conv":
        _conv(cx, op, ins, out, params)
    elif kind == "layernorm":
        _call(cx, kind, [b for b in ins if b is not None] + [out], params)
    else:
        _call(cx, kind, [b for b in ins if b is not None] + [out], params)


def _bias(cx, out, cbuf, scale, shape):
    """out[...] = scale * c (numpy broadcast of c into shape)."""
    from tcc.dialects.conversions.graph_to_loop.math.elementwise import elementwise_nest
    L = cx.L
    t = out.type.element

    def body(vals):
        v = vals[0]
        if scale != 1.0:
            v = L.op("arith.mulf", [v, L.c(float(scale), t)], t)
        return [v]
    elementwise_nest(cx, shape, [cbuf], [out], body)


def _gemm(cx, op, ins, out, p):
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    beta = 0.0
    if c is not None and p["beta"] != 0.0:
        _bias(cx, out, c, p["beta"], out.type.shape)
        beta = 1.0
    _call(cx, "gemm", [a, b, out], {"transA": p["transA"], "transB": p["transB"], "alpha": p["alpha"],
                                     "beta": beta})


def _conv(cx, op, ins, out, p):
    L = cx.L
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    N, C, H, W = x.type.shape
    M, Cg, KH, KW = w.type.shape
    _, _, OH, OW = out.type.shape
    sh, sw = p["strides"]
    dh, dw = p["dilations"]
    ph, pw = p["pads"][0], p["pads"][1]
    K, P = C * KH * KW, OH * OW
    if (KH, KW, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0) and p["pads"][2:] == [0, 0]:
        col = L.view(x, (N, K, P))
    else:
        col = L.alloc((N, K, P), x.type.element)
        _im2col(cx, x, col, (N, C, H, W), (KH, KW), (OH, OW), (sh, sw), (dh, dw), (ph, pw))
    y = L.view(out, (N, M, P))
    beta = 0.0
    if bias is not None:
        from tcc.dialects.conversions.graph_to_loop.math.elementwise import elementwise_nest
        bv = L.view(bias, (M, 1))
        elementwise_nest(cx, (N, M, P), [bv], [y], lambda vals: [vals[0]])
        beta = 1.0
    wv = L.view(w, (M, K))
    _call(cx, "conv_gemm", [wv, col, y], {"beta": beta})


def _im2col(cx, x, col, xs, ks, os_, st, dl, pd):
    """col[n, (c*KH+ki)*KW+kj, oh*OW+ow] = x[n, c, oh*sh-ph+ki*dh, ow*sw-pw+kj*dw] or 0."""
    L = cx.L
    N, C, H, W = xs
    KH, KW = ks
    OH, OW = os_
    t = x.type.element
    colv = L.view(col, (N, C, KH, KW, OH, OW))
    zero = L.c(0.0, t)
    with L.loop(0, N, parallel=True) as n, L.loop(0, C) as c, L.loop(0, KH) as ki, L.loop(0, KW) as kj, \
            L.loop(0, OH) as oh, L.loop(0, OW) as ow:
        ih = L.add(L.add(L.mul(oh, st[0]), L.mul(ki, dl[0])), -pd[0])
        iw = L.add(L.add(L.mul(ow, st[1]), L.mul(kj, dl[1])), -pd[1])
        ok = L.op("arith.andi", [
            L.op("arith.andi", [L.op("arith.cmpi", [ih, L.c(0)], i1, predicate="sge"),
                                L.op("arith.cmpi", [ih, L.c(H)], i1, predicate="slt")], i1),
            L.op("arith.andi", [L.op("arith.cmpi", [iw, L.c(0)], i1, predicate="sge"),
                                L.op("arith.cmpi", [iw, L.c(W)], i1, predicate="slt")], i1)], i1)
        _if_store(cx, ok, lambda: L.load(x, [n, c, ih, iw]), zero, colv, [n, c, ki, kj, oh, ow])


def _if_store(cx, cond, then_value, else_value, buf, idx):
    from tcc.dialects.ir.core import Block, Region, Operation
    L = cx.L
    tb, eb = Block([]), Block([])
    ifop = L.b.create("loop.if", [cond], [], None, [Region([tb]), Region([eb])], loc=L.loc)
    with L.at(tb):
        L.store(then_value(), buf, idx)
        L.op("loop.yield")
    with L.at(eb):
        L.store(else_value, buf, idx)
        L.op("loop.yield")
    return ifop
