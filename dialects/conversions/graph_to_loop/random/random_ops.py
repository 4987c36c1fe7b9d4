"""The random ops: RandomUniform(Like), RandomNormal(Like), Bernoulli and
Dropout in training mode, with onnx.reference's seed semantics.

With a `seed` attribute every run gives what onnx.reference gives: it draws
from numpy's legacy `RandomState(int(seed))` afresh on each call, so the
draws are a constant of the (static) shape, made here at compile time with
numpy itself (rand / randn / uniform are bit-exact, the same MT19937 stream
and conversions). Without a seed every run draws fresh values: a 64-bit key
from the OS (getentropy, once per run) and a splitmix64 hash of key + the
element's flat index give 53-bit uniform doubles (normals by Box-Muller) --
the distribution ONNX asks for, not numpy's stream (none is specified)."""
from __future__ import annotations

import math

import numpy as np

from ....ir.types import NONE, f32, f64, i1, i32, i64
from ..cast import emit_cast
from ..common import constant_table
from ..registry import lowering

_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)  # splitmix64's constants


def _s64(x):
    """An unsigned 64-bit constant as the signed value an i64 attribute holds."""
    return x - (1 << 64) if x >= 1 << 63 else x


def _seed(cx, op):
    s = op.attributes.get("seed")
    if s is None:
        return None
    s = float(s.value)
    if math.isnan(s):
        return None
    if not 0 <= int(s) < 2 ** 32:
        cx.fail(op, f"{op.name} seed {s} is outside numpy's RandomState range [0, 2**32)")
    return int(s)


class Draws:
    """Per-element f64 draws over `shape` (row-major flat index): `kind`
    "uniform" in [0, 1) or "normal" N(0, 1)."""

    def __init__(self, cx, op, shape, kind="uniform"):
        self.cx, self.shape, self.kind = cx, tuple(shape), kind
        seed = _seed(cx, op)
        n = int(np.prod(self.shape, dtype=np.int64))
        self.table = self.key = None
        if seed is not None:
            rs = np.random.RandomState(seed)
            vals = rs.random_sample(n) if kind == "uniform" else rs.standard_normal(n)
            self.table = constant_table(cx.L, vals.astype(np.float64), f64)
        else:
            L = cx.L
            key = L.alloc((1,), i64)
            # getentropy(2): fills the buffer from the OS, once per run
            L.op("loop.call", [key, L.op("arith.index_cast", [L.c(8)], i64)], i32, callee="getentropy")
            self.key = L.load(key, [0])
            L.op("loop.dealloc", [key])

    def _hash(self, flat, salt):
        L = self.cx.L
        c = lambda v: L.c(_s64(v), i64)  # noqa: E731
        z = L.op("arith.addi", [self.key, L.op("arith.muli", [L.op("arith.addi", [flat, c(salt)], i64),
                                                                c(_MIX[0])], i64)], i64)
        for k, sh in ((1, 30), (2, 27)):
            z = L.op("arith.muli", [L.op("arith.xori", [z, L.op("arith.shrui", [z, c(sh)], i64)], i64), c(_MIX[k])],
                     i64)
        z = L.op("arith.xori", [z, L.op("arith.shrui", [z, c(31)], i64)], i64)
        top = L.op("arith.uitofp", [L.op("arith.shrui", [z, c(11)], i64)], f64)
        return L.op("arith.mulf", [top, L.c(2.0 ** -53, f64)], f64)  # [0, 1), 53 bits

    def at(self, ivs):
        """The draw of the element at `ivs`."""
        L = self.cx.L
        flat = 0
        for iv, d in zip(ivs, self.shape):
            flat = L.add(L.mul(flat, d), iv)
        flat = L.ix(flat)
        if self.table is not None:
            return L.load(self.table, [flat])
        flat = L.op("arith.index_cast", [flat], i64)
        if self.kind == "uniform":
            return self._hash(flat, 1)
        # Box-Muller: sqrt(-2 ln(1 - u1)) cos(2 pi u2)
        u1, u2 = self._hash(flat, 1), self._hash(flat, 1 << 40)
        r = L.op("math.sqrt", [L.op("arith.mulf", [L.c(-2.0, f64), L.op(
            "math.log", [L.op("arith.subf", [L.c(1.0, f64), u1], f64)], f64)], f64)], f64)
        return L.op("arith.mulf", [r, L.op("math.cos", [L.op("arith.mulf", [u2, L.c(2 * math.pi, f64)], f64)], f64)],
                    f64)


def _affine(L, v, el, scale, shift):
    """v.astype(el) * scale + shift, in el's arithmetic (as onnx.reference:
    `res *= high - low; res += low` on the cast draws)."""
    ct = f64 if el.name == "f64" else f32
    x = emit_cast(L, emit_cast(L, v, f64, el), el, ct)
    x = L.op("arith.addf", [L.op("arith.mulf", [x, L.c(float(scale), ct)], ct), L.c(float(shift), ct)], ct)
    return emit_cast(L, x, ct, el)


@lowering("RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike")
def lower_random(cx, op):
    L = cx.L
    r = op.results[0]
    el = r.type.element
    if getattr(el, "name", None) not in ("f16", "bf16", "f32", "f64"):
        cx.fail(op, f"{op.name} makes floats, not {el}")
    uniform = "Uniform" in op.name
    if uniform:
        lo, hi = cx.attr(op, "low"), cx.attr(op, "high")
        lo, hi = (0.0 if lo is None else lo), (1.0 if hi is None else hi)
        scale, shift = hi - lo, lo
    else:
        mean, sd = cx.attr(op, "mean"), cx.attr(op, "scale")
        scale, shift = (1.0 if sd is None else sd), (0.0 if mean is None else mean)
    draws = Draws(cx, op, r.type.shape, "uniform" if uniform else "normal")
    out = cx.out(r)
    with L.loops(r.type.shape) as ivs:
        L.store(_affine(L, draws.at(ivs), el, scale, shift), out, ivs)


@lowering("Bernoulli")
def lower_bernoulli(cx, op):
    """1 with probability p. Seeded, as numpy's legacy binomial(1, p) that
    onnx.reference calls: one draw U per element, inversion on q = 1 - p
    for p <= 0.5 (1 when U > exp(log(q))), on p for p > 0.5 (0 when
    U > exp(log(p)) there). Its redraw (U - qn > p qn / q, reachable
    only through rounding, probability ~1e-16) is not modelled."""
    L = cx.L
    x, r = op.operands[0], op.results[0]
    xe, el = x.type.element, r.type.element
    draws = Draws(cx, op, x.type.shape)
    xb, out = cx.buf(x), cx.out(r)
    one, half = L.c(1.0, f64), L.c(0.5, f64)
    with L.loops(x.type.shape) as ivs:
        p = emit_cast(L, L.load(xb, ivs), xe, f64)
        u = draws.at(ivs)
        if draws.table is None:
            hit = L.op("arith.cmpf", [u, p], i1, predicate="olt")
        else:
            low = L.op("arith.cmpf", [p, half], i1, predicate="ole")
            q = L.op("arith.subf", [one, p], f64)
            small = L.op("arith.select", [low, p, q], f64)          # the inverted probability
            qn = L.op("math.exp", [L.op("math.log", [L.op("arith.subf", [one, small], f64)], f64)], f64)
            above = L.op("arith.cmpf", [u, qn], i1, predicate="ogt")
            hit = L.op("arith.select", [low, above, L.op("arith.xori", [above, L.c(1, i1)], i1)], i1)
        L.store(emit_cast(L, hit, i1, el), out, ivs)


@lowering("Dropout")
def lower_dropout(cx, op):
    """Inference (training_mode absent or false): the identity and an
    all-true mask. Training mode, possibly decided at run time: mask =
    uniform >= ratio, y = x * mask * (1 / (1 - ratio)) (onnx.reference:
    ratio 0 keeps every element)."""
    from ..common import fill
    from ..tensor.data_movement import lower_view
    L = cx.L
    ops = op.operands
    t = ops[2] if len(ops) > 2 and ops[2].type is not NONE else None
    if t is None or (cx.const(t) is not None and not bool(np.asarray(cx.const(t)).ravel()[0])):
        lower_view(cx, op)
        if len(op.results) > 1 and op.results[1].type is not NONE:
            fill(cx, cx.out(op.results[1]), 1)
        return
    x, y = ops[0], op.results[0]
    mask = op.results[1] if len(op.results) > 1 and op.results[1].type is not NONE else None
    el = x.type.element
    ct = f64 if el.name == "f64" else f32
    ratio = ops[1] if len(ops) > 1 and ops[1].type is not NONE else None
    for v, what in ((ratio, "ratio"), (t, "training_mode")):
        if v is not None and v.type.shape not in ((), (1,)):
            cx.fail(op, f"Dropout's {what} must be a scalar, got shape {v.type.shape}")
    if ratio is not None:
        rv = emit_cast(L, L.load(cx.buf(ratio), [0] * ratio.type.rank), ratio.type.element, ct)
    else:
        rv = L.c(0.5, ct)
    tv = L.op("arith.cmpi", [L.load(cx.buf(t), [0] * t.type.rank), L.c(0, t.type.element)], i1, predicate="ne")
    # training with ratio 0 is the identity too (onnx.reference)
    train = L.op("arith.andi", [tv, L.op("arith.cmpf", [rv, L.c(0.0, ct)], i1, predicate="une")], i1)
    scale = L.op("arith.divf", [L.c(1.0, ct), L.op("arith.subf", [L.c(1.0, ct), rv], ct)], ct)
    rd = emit_cast(L, rv, ct, f64)
    draws = Draws(cx, op, x.type.shape)
    xb, yb = cx.buf(x), cx.out(y)
    mb = cx.out(mask) if mask is not None else None
    with L.loops(x.type.shape) as ivs:
        keep = L.op("arith.cmpf", [draws.at(ivs), rd], i1, predicate="oge")
        keep = L.op("arith.ori", [keep, L.op("arith.xori", [train, L.c(1, i1)], i1)], i1)
        xv = emit_cast(L, L.load(xb, ivs), el, ct)
        kept = L.op("arith.select", [train, L.op("arith.mulf", [xv, scale], ct), xv], ct)
        yv = L.op("arith.select", [keep, kept, L.c(0.0, ct)], ct)
        L.store(emit_cast(L, yv, ct, el), yb, ivs)
        if mb is not None:
            L.store(keep, mb, ivs)
