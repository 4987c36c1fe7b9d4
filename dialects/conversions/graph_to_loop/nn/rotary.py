"""RotaryEmbedding (opset 23), GatherND and ReverseSequence.

RotaryEmbedding: per (batch, position, head) and pair k < rotary_dim/2 the
pair (x1, x2) (halves, or even/odd when interleaved) becomes
(cos x1 - sin x2, sin x1 + cos x2) with cos/sin = cache[position_ids[b, s], k]
(or cache[b, s, k] without position ids); dims past rotary_dim are copied."""
from __future__ import annotations

from ....ir.types import INDEX, NONE, f32, f64, i1
from ..common import data_index, is_unsigned
from ..cast import emit_cast
from ..registry import lowering


@lowering("RotaryEmbedding")
def lower_rotary(cx, op):
    L = cx.L
    x, cos, sin = op.operands[:3]
    pos = op.operands[3] if len(op.operands) > 3 and op.operands[3].type is not NONE else None
    r = op.results[0]
    xs = x.type.shape
    T = x.type.element
    ct = f64 if T.name == "f64" else f32
    if len(xs) == 4:
        B, H, S, D = xs
    elif len(xs) == 3:
        H = cx.attr(op, "num_heads")
        if not H:
            cx.fail(op, "3-D RotaryEmbedding needs num_heads")
        B, S, hd = xs
        D = hd // H
    else:
        cx.fail(op, f"RotaryEmbedding input must be rank 3 or 4, got {xs}")
    rd = cx.attr(op, "rotary_embedding_dim") or D
    if rd % 2 or rd > D:
        cx.fail(op, f"RotaryEmbedding rotary_embedding_dim {rd} must be even and <= head size {D}")
    half = rd // 2
    if cos.type.shape[-1] != half or sin.type.shape[-1] != half:
        cx.fail(op, f"RotaryEmbedding caches' last dim must be {half}")
    inter = bool(cx.attr(op, "interleaved"))
    xb, cb, sb, ob = cx.buf(x), cx.buf(cos), cx.buf(sin), cx.out(r)
    pb = cx.buf(pos) if pos is not None else None

    def at(b, h, s, d):
        return [b, h, s, d] if len(xs) == 4 else [b, s, L.add(L.mul(h, D), d)]

    with L.loops((B, S, H), vectorize_inner=False) as (b, s, h):
        if pb is not None:
            p = L.load(pb, [b, s])
            pe = pos.type.element
            pi = L.op("arith.index_castui", [p], INDEX) if is_unsigned(pe) else L.cast_index(p, pe)
            cidx = lambda k: [pi, k]  # noqa: E731
        else:
            cidx = lambda k: [b, s, k]  # noqa: E731
        with L.loop(0, half) as k:
            c = emit_cast(L, L.load(cb, cidx(k)), cos.type.element, ct)
            sn = emit_cast(L, L.load(sb, cidx(k)), sin.type.element, ct)
            if inter:
                d1 = L.mul(k, 2)
                d2 = L.add(d1, 1)
            else:
                d1, d2 = k, L.add(k, half)
            x1 = emit_cast(L, L.load(xb, at(b, h, s, d1)), T, ct)
            x2 = emit_cast(L, L.load(xb, at(b, h, s, d2)), T, ct)
            re = L.op("arith.subf", [L.op("arith.mulf", [c, x1], ct), L.op("arith.mulf", [sn, x2], ct)], ct)
            im = L.op("arith.addf", [L.op("arith.mulf", [sn, x1], ct), L.op("arith.mulf", [c, x2], ct)], ct)
            L.store(emit_cast(L, re, ct, T), ob, at(b, h, s, d1))
            L.store(emit_cast(L, im, ct, T), ob, at(b, h, s, d2))
        if rd < D:
            with L.loop(rd, D) as d:
                L.store(L.load(xb, at(b, h, s, d)), ob, at(b, h, s, d))


@lowering("GatherND")
def lower_gather_nd(cx, op):
    L = cx.L
    data, ind = op.operands[:2]
    r = op.results[0]
    ds, ish = data.type.shape, ind.type.shape
    bd = cx.attr(op, "batch_dims") or 0
    k = ish[-1]
    if bd + k > len(ds):
        cx.fail(op, f"GatherND: batch_dims {bd} + index depth {k} exceed the data rank {len(ds)}")
    db, ib, ob = cx.buf(data), cx.buf(ind), cx.out(r)
    outer = list(ish[:-1])
    inner = list(ds[bd + k:])
    with L.loops(outer, vectorize_inner=False) as ovs:
        pre = [data_index(L, L.load(ib, list(ovs) + [j]), ind.type.element, ds[bd + j]) for j in range(k)]
        with L.loops(inner, parallel_outer=False) as ivs:
            L.store(L.load(db, list(ovs[:bd]) + pre + list(ivs)), ob, list(ovs) + list(ivs))


@lowering("ReverseSequence")
def lower_reverse_sequence(cx, op):
    L = cx.L
    x, lens = op.operands[:2]
    r = op.results[0]
    ta, ba = cx.attr(op, "time_axis"), cx.attr(op, "batch_axis")
    ta = 0 if ta is None else ta
    ba = 1 if ba is None else ba
    xb, lb, ob = cx.buf(x), cx.buf(lens), cx.out(r)
    T = x.type.shape[ta]
    with L.loops(x.type.shape) as ivs:
        n = L.cast_index(L.load(lb, [ivs[ba]]), lens.type.element)
        n = L.minmax_idx("min", L.minmax_idx("max", n, 0), T)
        t = ivs[ta]
        rev = L.op("arith.cmpi", [t, n], i1, predicate="slt")
        src_t = L.op("arith.select", [rev, L.op("arith.subi", [L.op("arith.subi", [n, L.c(1)], INDEX), t], INDEX),
                                      t], INDEX)
        L.store(L.load(xb, [src_t if d == ta else iv for d, iv in enumerate(ivs)]), ob, ivs)
