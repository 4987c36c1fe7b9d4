"""LSTM, GRU and RNN: every direction, layout, activation, clip and optional
input of the schema, with onnxruntime's semantics where onnx's reference
ignores an attribute (sequence_lens, clip, activations, input_forget).

Per direction: one GEMM projects every time step's input at once,
XW[row(t, b), :] = X[t, b] W^T + bias (row order is X's own, so layout 1
needs no transpose); then a sequential loop over the steps does the
recurrent GEMM H_{t-1} R^T into a (batch, gates) scratch and one
elementwise pass, parallel over the batch, that applies the gates and
updates the state. Constant weights are transposed (and, for f32, packed
for gemm.c) at compile time.

sequence_lens: step s of batch entry b is time s forward and len_b - 1 - s
in reverse (each sequence reversed within its own length); steps at or
past len_b leave the state alone and write zeros to Y at time s, so every
Y element is written once. f16/bf16 compute in f32."""
from __future__ import annotations

from contextlib import ExitStack

import numpy as np

from ....ir.attributes import DenseElementsAttr
from ....ir.types import INDEX, NONE, MemRefType, TensorType, i1
from ..common import compute_type, load_as, store_as
from ..kernels import NR, annotate, gemm_params, pack_b_panels
from ..math.matmul import gemm_core, library_root
from ..registry import lowering

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
# Which of (alpha, beta) an activation takes from activation_alpha/beta:
# the lists are consumed in activation order by the activations that take
# them (as onnxruntime does). Defaults are the matching onnx ops', as the
# schema says; onnxruntime instead uses 0 for ThresholdedRelu, Affine and
# ScaledTanh, which makes the latter two constant zero.
USES = {"affine": (True, True), "leakyrelu": (True, False), "thresholdedrelu": (True, False),
        "scaledtanh": (True, True), "hardsigmoid": (True, True), "elu": (True, False)}
DEFAULTS = {"affine": (1.0, 0.0), "leakyrelu": (0.01, 0.0), "thresholdedrelu": (1.0, 0.0),
            "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0)}
KNOWN = {"sigmoid", "tanh", "relu", "softsign", "softplus"} | set(USES)


def _activations(cx, op, kind, nd):
    """[(name, alpha, beta)] per direction."""
    per = len(DEFAULT_ACTS[kind])
    names = cx.attr(op, "activations")
    names = [n.decode() if isinstance(n, bytes) else n  # schema defaults come as bytes
             for n in (DEFAULT_ACTS[kind] * nd if names is None else names)]
    if len(names) == per and nd == 2:
        names = names * 2
    if len(names) > per * nd:  # RNN's schema default lists two, for either direction count
        names = names[:per * nd]
    if len(names) != per * nd:
        cx.fail(op, f"{op.name} with {len(names)} activations (expected {per * nd})")
    alphas = list(cx.attr(op, "activation_alpha") or [])
    betas = list(cx.attr(op, "activation_beta") or [])
    acts = []
    for n in names:
        low = n.lower()
        if low not in KNOWN:
            cx.fail(op, f"{op.name} activation {n!r} has no host lowering")
        a, b = DEFAULTS.get(low, (0.0, 0.0))
        ua, ub = USES.get(low, (False, False))
        if ua and alphas:
            a = float(alphas.pop(0))
        if ub and betas:
            b = float(betas.pop(0))
        acts.append((low, a, b))
    return [acts[d * per:(d + 1) * per] for d in range(nd)]


def _act(L, act, x, t):
    name, al, be = act

    def c(v):
        return L.c(v, t)

    def op(n, *args):
        return L.op(n, list(args), t)

    def lt0(v):
        return L.op("arith.cmpf", [v, c(0.0)], i1, predicate="olt")

    if name == "sigmoid":
        return op("arith.divf", c(1.0), op("arith.addf", c(1.0), op("math.exp", op("arith.negf", x))))
    if name == "tanh":
        return op("math.tanh", x)
    if name == "relu":
        return op("arith.maximumf", x, c(0.0))
    if name == "affine":
        return op("arith.addf", op("arith.mulf", x, c(al)), c(be))
    if name == "leakyrelu":
        return L.op("arith.select", [lt0(x), op("arith.mulf", x, c(al)), x], t)
    if name == "thresholdedrelu":
        gt = L.op("arith.cmpf", [x, c(al)], i1, predicate="ogt")
        return L.op("arith.select", [gt, x, c(0.0)], t)
    if name == "scaledtanh":
        return op("arith.mulf", c(al), op("math.tanh", op("arith.mulf", x, c(be))))
    if name == "hardsigmoid":
        v = op("arith.addf", op("arith.mulf", x, c(al)), c(be))
        return op("arith.minimumf", op("arith.maximumf", v, c(0.0)), c(1.0))
    if name == "elu":
        em1 = op("arith.subf", op("math.exp", x), c(1.0))
        return L.op("arith.select", [lt0(x), op("arith.mulf", c(al), em1), x], t)
    if name == "softsign":
        return op("arith.divf", x, op("arith.addf", c(1.0), op("math.absf", x)))
    assert name == "softplus"
    return op("math.log", op("arith.addf", op("math.exp", x), c(1.0)))


def _global(L, arr, el):
    arr = np.ascontiguousarray(arr)
    return L.at_top("loop.global", MemRefType(arr.shape, el), value=DenseElementsAttr(arr, TensorType(arr.shape, el)))


def _np_el(t):
    return {"f32": np.float32, "f64": np.float64}.get(str(t), np.float32)


class _Weights:
    """Rows [j0, j1) of direction d of W or R, as the (K, N) operand of a
    GEMM: load(k, j) = M[d, j0 + j, k]. Constant f32 blocks become a global
    in gemm.c's packed-B panel layout [ceil(N/NR)][K][NR], which the nest
    reads too: the kernel can then take it as an ordinary buffer, also
    inside the time loop (an outlined function, where call-site packed
    constants are not available), and the weights are stored once. Other
    constants become a transposed, contiguous global."""

    def __init__(self, cx, v, t):
        self.cx, self.v, self.t = cx, v, t
        self.const = cx.const(v)
        self.el = v.type.element
        self.raw = cx.buf(v) if self.const is None else None
        self.blocks = {}

    def block(self, d, j0, j1):
        """(load(k, j), the packed global or None)."""
        L = self.cx.L
        if self.const is None:
            return (lambda k, j: load_as(L, self.raw, [d, L.add(j, j0), k], self.t)), None
        key = (d, j0, j1)
        packed = str(self.t) == "f32" and str(self.el) == "f32"
        if key not in self.blocks:
            arr = np.asarray(self.const)[d, j0:j1].T
            self.blocks[key] = _global(L, pack_b_panels(arr) if packed else arr, self.el)
        g = self.blocks[key]
        if not packed:
            return (lambda k, j: load_as(L, g, [k, j], self.t)), None

        def load(k, j):
            nr = L.c(NR)
            return L.load(g, [L.op("arith.divui", [j, nr], INDEX), k, L.op("arith.remui", [j, nr], INDEX)])
        return load, g


def _gemm(cx, M, N, K, load_a, wts, d, j0, C, a_buf, bias=None):
    """C[i, j] = sum_k load_a(i, k) * W_d[j0 + j, k] (+ bias[j]); natively a
    gemm.c call when the weights are constant f32."""
    L = cx.L
    t = C.type.element
    load_b, g = wts.block(d, j0, j0 + N)
    epi = None
    if bias is not None:
        def epi(v, i, j):
            return L.op("arith.addf", [v, L.load(bias, [j])], t)
    with ExitStack() as st:
        root = st.enter_context(library_root(L)) if g is not None else None
        gemm_core(cx, M, N, K, load_a, load_b, C, lambda i, j: [i, j], epi)
    if g is not None:
        params = gemm_params(M, N, K, K, 1, N, 1, N, 0, 1 if bias is not None else 0)
        annotate(root[0], "tcc_gemm_bpacked_f32", params, [C, a_buf, g, bias])


@lowering("LSTM", "GRU", "RNN")
def lower_recurrent(cx, op):
    L = cx.L
    kind = op.name.split(".")[-1]
    G = GATES[kind]
    ops = list(op.operands)

    def opt(i):
        return ops[i] if i < len(ops) and ops[i].type is not NONE else None

    X, W, R = ops[:3]
    B, SL, H0 = opt(3), opt(4), opt(5)
    C0, P = (opt(6), opt(7)) if kind == "LSTM" else (None, None)
    res = [r if r.type is not NONE else None for r in op.results] + [None] * 3
    Y, YH, YC = res[:3]

    direction = cx.attr(op, "direction") or "forward"
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("forward", "reverse", "bidirectional"):
        cx.fail(op, f"{op.name} direction {direction!r}")
    nd = 2 if direction == "bidirectional" else 1
    layout = cx.attr(op, "layout") or 0
    clip = cx.attr(op, "clip")
    lbr = kind == "GRU" and bool(cx.attr(op, "linear_before_reset"))
    input_forget = kind == "LSTM" and bool(cx.attr(op, "input_forget"))
    acts = _activations(cx, op, kind, nd)

    el = X.type.element
    t = compute_type(el)
    if layout:
        NB, T, I = X.type.shape
    else:
        T, NB, I = X.type.shape
    Hd = R.type.shape[-1]
    GH = G * Hd
    if W.type.shape[0] != nd:
        cx.fail(op, f"{op.name} direction {direction!r} with {W.type.shape[0]} weight directions")

    xv = L.view(cx.buf(X), (T * NB, I))

    def row(ti, b):
        return L.affine([(NB, ti), (1, b)]) if not layout else L.affine([(T, b), (1, ti)])

    wts, rts = _Weights(cx, W, t), _Weights(cx, R, t)
    bbuf = cx.buf(B) if B is not None else None
    bconst = cx.const(B) if B is not None else None
    pbuf = cx.buf(P) if P is not None else None
    slbuf = cx.buf(SL) if SL is not None else None

    # initial_h/c and Y_h/c: [nd, batch, hidden], or [batch, nd, hidden] under layout 1
    sidx = (lambda d, b, j: [b, d, j]) if layout else (lambda d, b, j: [d, b, j])
    yidx = (lambda ti, d, b, j: [b, ti, d, j]) if layout else (lambda ti, d, b, j: [ti, d, b, j])
    ybuf = cx.out(Y) if Y is not None else None
    yhbuf = cx.out(YH) if YH is not None else None
    ycbuf = cx.out(YC) if YC is not None else None
    h0buf = cx.buf(H0) if H0 is not None else None
    c0buf = cx.buf(C0) if C0 is not None else None

    # Biases that can join the input projection: Wb + Rb, except GRU's
    # linear_before_reset h gate, whose Rb sits inside r * (...).
    fold = np.ones(GH, bool)
    if lbr:
        fold[2 * Hd:] = False

    xw = L.alloc((T * NB, GH), t)
    rg = L.alloc((NB, GH if kind != "GRU" or lbr else 2 * Hd), t)
    rh = L.alloc((NB, Hd), t) if kind == "GRU" and not lbr else None  # r * H_{t-1}
    gh = L.alloc((NB, Hd), t) if rh is not None else None             # (r * H_{t-1}) R_h^T
    hs = L.alloc((NB, Hd), t)
    cs = L.alloc((NB, Hd), t) if kind == "LSTM" else None
    zero = L.c(0.0, t)

    for d in range(nd):
        reverse = direction == "reverse" or d == 1
        f_act = acts[d]

        # -- bias of the input projection --
        bias = None
        if B is not None:
            if bconst is not None:
                bc = np.asarray(bconst, np.float64)[d]
                bsum = bc[:GH] + np.where(fold, bc[GH:], 0.0)
                bias = _global(L, bsum.astype(_np_el(t)), t)
            else:
                bias = L.alloc((GH,), t)
                with L.loop(0, GH) as j:
                    v = load_as(L, bbuf, [d, j], t)
                    r_ = load_as(L, bbuf, [d, L.add(j, GH)], t)
                    if lbr:
                        keep = L.op("arith.cmpi", [j, L.c(2 * Hd)], i1, predicate="slt")
                        r_ = L.op("arith.select", [keep, r_, zero], t)
                    L.store(L.op("arith.addf", [v, r_], t), bias, [j])
        _gemm(cx, T * NB, GH, I, lambda i, k: load_as(L, xv, [i, k], t), wts, d, 0, xw, xv, bias)
        if bias is not None and bconst is None:
            L.op("loop.dealloc", [bias])

        # -- initial state --
        with L.loop(0, NB, parallel=True) as b:
            with L.loop(0, Hd, vectorize=True) as j:
                L.store(load_as(L, h0buf, sidx(d, b, j), t) if h0buf is not None else zero, hs, [b, j])
                if cs is not None:
                    L.store(load_as(L, c0buf, sidx(d, b, j), t) if c0buf is not None else zero, cs, [b, j])

        with L.loop(0, T) as s:
            def step_time(b):
                """(time index, in-range flag or None) of step s for entry b."""
                if slbuf is None:
                    return (L.op("arith.subi", [L.c(T - 1), s], INDEX) if reverse else s), None
                # clamped so a length past T cannot index outside Y
                n = L.minmax_idx("min", L.cast_index(L.load(slbuf, [b]), SL.type.element), T)
                live = L.op("arith.cmpi", [s, n], i1, predicate="slt")
                if not reverse:
                    return s, live
                back = L.op("arith.subi", [L.op("arith.subi", [n, L.c(1)], INDEX), s], INDEX)
                return L.op("arith.select", [live, back, s], INDEX), live

            def pre(v):
                if clip is None:
                    return v
                v = L.op("arith.maximumf", [v, L.c(-float(clip), t)], t)
                return L.op("arith.minimumf", [v, L.c(float(clip), t)], t)

            _gemm(cx, NB, rg.type.shape[1], Hd, lambda i, k: L.load(hs, [i, k]), rts, d, 0, rg, hs)

            if rh is not None:  # GRU, reset before the linear map: r first
                with L.loop(0, NB, parallel=True) as b:
                    ti, _ = step_time(b)
                    rw = row(ti, b)
                    with L.loop(0, Hd, vectorize=True) as j:
                        jr = L.add(j, Hd)
                        r = _act(L, f_act[0], pre(L.op("arith.addf", [L.load(xw, [rw, jr]), L.load(rg, [b, jr])], t)),
                                 t)
                        L.store(L.op("arith.mulf", [r, L.load(hs, [b, j])], t), rh, [b, j])
                _gemm(cx, NB, Hd, Hd, lambda i, k: L.load(rh, [i, k]), rts, d, 2 * Hd, gh, rh)

            with L.loop(0, NB, parallel=True) as b:
                ti, live = step_time(b)
                rw = row(ti, b)
                with L.loop(0, Hd, vectorize=True) as j:
                    def gate(g, extra=None):
                        jj = L.add(j, g * Hd)
                        v = L.op("arith.addf", [L.load(xw, [rw, jj]), L.load(rg, [b, jj])], t)
                        return v if extra is None else L.op("arith.addf", [v, extra], t)

                    def mul(a, b_):
                        return L.op("arith.mulf", [a, b_], t)

                    hp = L.load(hs, [b, j])
                    if kind == "RNN":
                        h = _act(L, f_act[0], pre(gate(0)), t)
                    elif kind == "GRU":
                        z = _act(L, f_act[0], pre(gate(0)), t)
                        if lbr:
                            r = _act(L, f_act[0], pre(gate(1)), t)
                            hr = L.load(rg, [b, L.add(j, 2 * Hd)])
                            if bbuf is not None:
                                hr = L.op("arith.addf", [hr, load_as(L, bbuf, [d, L.add(j, 5 * Hd)], t)], t)
                            hx = L.op("arith.addf", [L.load(xw, [rw, L.add(j, 2 * Hd)]), mul(r, hr)], t)
                        else:
                            hx = L.op("arith.addf", [L.load(xw, [rw, L.add(j, 2 * Hd)]), L.load(gh, [b, j])], t)
                        hh = _act(L, f_act[1], pre(hx), t)
                        # (1 - z) * hh + z * h_prev
                        h = L.op("arith.addf", [mul(L.op("arith.subf", [L.c(1.0, t), z], t), hh), mul(z, hp)], t)
                    else:
                        cp = L.load(cs, [b, j])

                        def peep(k, c):
                            return None if pbuf is None else mul(load_as(L, pbuf, [d, L.add(j, k * Hd)], t), c)

                        ig = _act(L, f_act[0], pre(gate(0, peep(0, cp))), t)
                        if input_forget:
                            fg = L.op("arith.subf", [L.c(1.0, t), ig], t)
                        else:
                            fg = _act(L, f_act[0], pre(gate(2, peep(2, cp))), t)
                        cg = _act(L, f_act[1], pre(gate(3)), t)
                        c = L.op("arith.addf", [mul(fg, cp), mul(ig, cg)], t)
                        og = _act(L, f_act[0], pre(gate(1, peep(1, c))), t)
                        h = mul(og, _act(L, f_act[2], c, t))
                        if live is not None:
                            c = L.op("arith.select", [live, c, cp], t)
                        L.store(c, cs, [b, j])
                    if ybuf is not None:
                        store_as(L, h if live is None else L.op("arith.select", [live, h, zero], t), ybuf,
                            yidx(ti, d, b, j))
                    L.store(h if live is None else L.op("arith.select", [live, h, hp], t), hs, [b, j])

        # -- final states --
        if yhbuf is not None or ycbuf is not None:
            with L.loop(0, NB, parallel=True) as b:
                empty = None
                if slbuf is not None:  # onnxruntime: a zero-length sequence's final state is 0, not the initial one
                    n = L.cast_index(L.load(slbuf, [b]), SL.type.element)
                    empty = L.op("arith.cmpi", [n, L.c(0)], i1, predicate="sle")
                with L.loop(0, Hd, vectorize=True) as j:
                    for src, dst in ((hs, yhbuf), (cs, ycbuf)):
                        if dst is not None:
                            v = L.load(src, [b, j])
                            store_as(L, v if empty is None else L.op("arith.select", [empty, zero, v], t), dst,
                                sidx(d, b, j))

    for buf in (xw, rg, rh, gh, hs, cs):
        if buf is not None:
            L.op("loop.dealloc", [buf])
