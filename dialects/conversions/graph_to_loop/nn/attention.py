"""Attention (opset 23-25): one nest per (batch, q head, q position) row.

Follows onnx.reference's Attention step by step: Q and K each scaled by
sqrt(scale), QK^T, softcap, + the additive bias (attn_mask, causal and
sliding-window frontiers offset by the cache, nonpad_kv_seqlen padding),
softmax with fully -inf rows giving 0, rows whose bias is all -inf zeroed,
then P V. 3-D inputs are read as (batch, seq, heads * head_size) in place;
a past cache makes present K/V buffers (the outputs when requested).
Low-precision floats compute in f32 and round to their type after each step
the reference takes in that type."""
from __future__ import annotations


from ....ir.types import NONE, INDEX, f32, f64, i1
from ..common import LOW_FLOATS, is_float
from ..cast import emit_cast
from ..registry import lowering

_NEG_INF = float("-inf")


def _given(v):
    return v is not None and v.type is not NONE


@lowering("Attention")
def lower_attention(cx, op):
    L = cx.L
    opnds = list(op.operands) + [None] * (7 - len(op.operands))
    Q, K, V, mask, pk, pv, nonpad = opnds[:7]
    res = list(op.results) + [None] * (4 - len(op.results))
    Y, pres_k, pres_v, qk_out = res[:4]
    T = Q.type.element
    if not is_float(T):
        cx.fail(op, f"Attention on {T} has no host lowering")
    ct = f64 if T.name == "f64" else f32
    low = T.name in LOW_FLOATS

    def rnd(v):  # round a compute-type value to T (what a step in T gives)
        if not low:
            return v
        return L.op("arith.extf", [L.op("arith.truncf", [v], T)], ct)

    def ld(buf, idx):
        v = L.load(buf, idx)
        return emit_cast(L, v, buf.type.element, ct) if v.type != ct else v

    rank = Q.type.rank
    if rank not in (3, 4) or K.type.rank != rank or V.type.rank != rank:
        cx.fail(op, "Attention needs Q, K, V all of rank 3 or all of rank 4")
    if rank == 3:
        Hq, Hkv = cx.attr(op, "q_num_heads"), cx.attr(op, "kv_num_heads")
        if not Hq or not Hkv:
            cx.fail(op, "3-D Attention needs q_num_heads and kv_num_heads")
        B, Sq, hq = Q.type.shape
        Snew = K.type.shape[1]
        Dq, Dk, Dv = hq // Hq, K.type.shape[2] // Hkv, V.type.shape[2] // Hkv
    else:
        B, Hq, Sq, Dq = Q.type.shape
        Hkv, Snew, Dk = K.type.shape[1:]
        Dv = V.type.shape[3]
        if V.type.shape[1] != Hkv:
            cx.fail(op, "Attention with different K and V head counts has no host lowering")
    if Dq != Dk:
        cx.fail(op, f"Attention with Q head size {Dq} != K head size {Dk}")
    if Hq % Hkv:
        cx.fail(op, f"Attention with {Hq} query heads over {Hkv} kv heads (not a multiple)")
    group = Hq // Hkv
    has_past = _given(pk)
    if has_past != _given(pv):
        cx.fail(op, "Attention needs past_key and past_value together")
    if has_past and _given(nonpad):
        cx.fail(op, "Attention: nonpad_kv_seqlen cannot be combined with a past cache")
    P = pk.type.shape[2] if has_past else 0
    S = P + Snew

    # -- present K / V -------------------------------------------------------------
    def present(new, past, out, D):
        """The buffer K/V are read from ((B, Hkv, S, D) unless it is the rank-4 input)."""
        want = _given(out)
        if not has_past and not want:
            return cx.buf(new), False
        buf = cx.out(out) if want else L.alloc((B, Hkv, S, D), new.type.element)
        dst = buf
        if has_past:
            pb = cx.buf(past)
            with L.loops((B, Hkv, P, D)) as (b, h, j, d):
                L.store(L.load(pb, [b, h, j, d]), dst, [b, h, j, d])
        nb = cx.buf(new)
        with L.loops((B, Hkv, Snew, D)) as (b, h, j, d):
            src = [b, h, j, d] if rank == 4 else [b, j, L.add(L.mul(h, D), d)]
            L.store(L.load(nb, src), dst, [b, h, L.add(j, P), d])
        return buf, not want

    kb, k_tmp = present(K, pk, pres_k, Dk)
    vb, v_tmp = present(V, pv, pres_v, Dv)
    k4 = kb.type.rank == 4
    v4 = vb.type.rank == 4

    def k_at(b, h, j, d):
        return [b, h, j, d] if k4 else [b, j, L.add(L.mul(h, Dk), d)]

    def v_at(b, h, j, d):
        return [b, h, j, d] if v4 else [b, j, L.add(L.mul(h, Dv), d)]

    qb = cx.buf(Q)

    def q_at(b, h, i, d):
        return [b, h, i, d] if rank == 4 else [b, i, L.add(L.mul(h, Dq), d)]

    yb = cx.out(Y)

    def y_at(b, h, i, d):
        return [b, h, i, d] if rank == 4 else [b, i, L.add(L.mul(h, Dv), d)]

    mode = cx.attr(op, "qk_matmul_output_mode") or 0
    if _given(qk_out) and mode not in (0, 1, 2, 3):
        cx.fail(op, f"Attention qk_matmul_output_mode {mode} is not one of 0-3")
    qkb = cx.out(qk_out) if _given(qk_out) else None

    # -- attributes ------------------------------------------------------------------
    scale = cx.attr(op, "scale")
    if scale is None or "scale" not in op.attributes:
        scale = 1.0 / (Dq ** 0.5)
    import numpy as np
    sq = float(np.sqrt(np.float64(scale)))
    sq = float(np.asarray(sq).astype(_np(T)))  # Cast(sqrt(scale), T)
    softcap = float(cx.attr(op, "softcap") or 0.0)
    causal = bool(cx.attr(op, "is_causal"))
    left = cx.attr(op, "left_window_size")
    right = cx.attr(op, "right_window_size")
    left = -1 if left is None else int(left)
    right = -1 if right is None else int(right)
    sp = cx.attr(op, "softmax_precision") if "softmax_precision" in op.attributes else None
    if sp is not None:
        import onnx.helper
        spn = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(sp))
        if spn.kind != "f" and "bfloat16" not in str(spn):
            cx.fail(op, "Attention softmax_precision must be a float type")
        soft_low = spn.itemsize < 4
    else:
        soft_low = low

    def rnd_s(v):  # rounding of the softmax precision type
        return rnd(v) if soft_low and low else v

    # -- the mask --------------------------------------------------------------------
    mb = cx.buf(mask) if _given(mask) else None
    if mb is not None:
        ms = mask.type.shape
        Lm = ms[-1] if ms else 1
        if Lm > S:
            cx.fail(op, f"attn_mask's last dim {Lm} exceeds the kv length {S}")
        mel = mask.type.element
        mbool = str(mel) == "i1"
        if len(ms) > 4:
            cx.fail(op, f"attn_mask of rank {len(ms)} does not broadcast to rank 4")
    npb = cx.buf(nonpad) if _given(nonpad) else None

    zero, ninf, one = L.c(0.0, ct), L.c(_NEG_INF, ct), L.c(1.0, ct)

    def add_gate(val, allowed):
        return L.op("arith.addf", [val, L.op("arith.select", [allowed, zero, ninf], ct)], ct)

    def idx_cmp(a, b, pred):
        return L.op("arith.cmpi", [L.ix(a), L.ix(b)], i1, predicate=pred)

    def bias(b, h, i, j, offset):
        if mb is None:
            val = zero
        else:
            full = [b, h, i, j][4 - len(ms):] if ms else []
            idx = []
            for k, (iv, n) in enumerate(zip(full, ms)):
                if k == len(ms) - 1:
                    idx.append(iv if Lm == S else (0 if Lm == 1 else L.minmax_idx("min", iv, Lm - 1)))
                else:
                    idx.append(0 if n == 1 else iv)
            mv = L.load(mb, idx)
            if mbool:
                val = L.op("arith.select", [mv, zero, ninf], ct)
            else:
                val = rnd(emit_cast(L, mv, mel, ct)) if mel != ct else mv
            if Lm < S:
                val = L.op("arith.select", [idx_cmp(j, Lm, "slt"), val, ninf], ct)
        if causal:
            val = add_gate(val, idx_cmp(j, L.add(i, offset), "sle"))
        if left >= 0 or right >= 0:
            diff = L.op("arith.subi", [L.ix(L.add(i, offset)), L.ix(j)], INDEX)
            ok = None
            if left >= 0:
                ok = idx_cmp(diff, left, "sle")
            if right >= 0:
                c = idx_cmp(L.op("arith.subi", [L.c(0), diff], INDEX), right, "sle")
                ok = c if ok is None else L.op("arith.andi", [ok, c], i1)
            val = add_gate(val, ok)
        if npb is not None:
            n = L.cast_index(L.load(npb, [b]), npb.type.element)
            val = add_gate(val, idx_cmp(j, n, "slt"))
        return val

    # -- the rows ------------------------------------------------------------------------
    with L.loops((B, Hq, Sq), vectorize_inner=False) as (b, h, i):
        hk = h if group == 1 else L.op("arith.divui", [h, L.c(group)], INDEX)
        if npb is not None:
            nv = L.cast_index(L.load(npb, [b]), npb.type.element)
            offset = L.op("arith.subi", [nv, L.c(Sq)], INDEX)
        else:
            offset = P
        qrow = L.alloc((Dq,), ct)
        row = L.alloc((S,), ct)
        acc = L.alloc((4,), ct)  # bias max, score max, dot, sum
        ssq = L.c(sq, ct)
        with L.loop(0, Dq) as d:
            L.store(rnd(L.op("arith.mulf", [ld(qb, q_at(b, h, i, d)), ssq], ct)), qrow, [d])
        L.store(ninf, acc, [0])
        L.store(ninf, acc, [1])
        with L.loop(0, S) as j:
            bv = bias(b, h, i, j, offset)
            L.store(L.op("arith.maximumf", [L.load(acc, [0]), bv], ct), acc, [0])
            L.store(zero, acc, [2])
            with L.loop(0, Dq) as d:
                kv = rnd(L.op("arith.mulf", [ld(kb, k_at(b, hk, j, d)), ssq], ct))
                L.store(L.op("arith.addf", [L.load(acc, [2]), L.op("arith.mulf", [L.load(qrow, [d]), kv], ct)], ct),
                        acc, [2])
            s = rnd(L.load(acc, [2]))
            if softcap > 0:
                cap = L.c(softcap, ct)
                s = rnd(L.op("arith.mulf", [rnd(L.op("math.tanh", [rnd(L.op("arith.divf", [s, cap], ct))], ct)),
                                            cap], ct))
            if qkb is not None and mode in (0, 1):
                L.store(emit_cast(L, s, ct, T), qkb, [b, h, i, j])
            x = rnd(L.op("arith.addf", [s, bv], ct))
            if qkb is not None and mode == 2:
                L.store(emit_cast(L, x, ct, T), qkb, [b, h, i, j])
            L.store(x, row, [j])
            L.store(L.op("arith.maximumf", [L.load(acc, [1]), x], ct), acc, [1])
        m = L.load(acc, [1])
        safe = L.op("arith.select", [L.op("arith.cmpf", [m, ninf], i1, predicate="oeq"), zero, m], ct)
        L.store(zero, acc, [3])
        with L.loop(0, S) as j:
            e = rnd_s(L.op("math.exp", [rnd_s(L.op("arith.subf", [L.load(row, [j]), safe], ct))], ct))
            L.store(e, row, [j])
            L.store(L.op("arith.addf", [L.load(acc, [3]), e], ct), acc, [3])
        tot = rnd_s(L.load(acc, [3]))
        tot = L.op("arith.select", [L.op("arith.cmpf", [tot, zero], i1, predicate="oeq"), one, tot], ct)
        masked = L.op("arith.cmpf", [L.load(acc, [0]), ninf], i1, predicate="oeq")
        with L.loop(0, S) as j:
            p = rnd_s(L.op("arith.divf", [L.load(row, [j]), tot], ct))
            p = L.op("arith.select", [masked, zero, p], ct)
            if qkb is not None and mode == 3:
                L.store(emit_cast(L, p, ct, T), qkb, [b, h, i, j])
            L.store(rnd(p), row, [j])
        with L.loop(0, Dv) as d:
            L.store(zero, acc, [2])
            with L.loop(0, S) as j:
                L.store(L.op("arith.addf", [L.load(acc, [2]),
                                            L.op("arith.mulf", [L.load(row, [j]), ld(vb, v_at(b, hk, j, d))], ct)],
                              ct), acc, [2])
            L.store(emit_cast(L, L.load(acc, [2]), ct, Y.type.element), yb, y_at(b, h, i, d))
        for t in (qrow, row, acc):
            L.op("loop.dealloc", [t])
    for buf, tmp in ((kb, k_tmp), (vb, v_tmp)):
        if tmp:
            L.op("loop.dealloc", [buf])


def _np(t):
    from ....ir.types import to_numpy_dtype
    return to_numpy_dtype(t)
