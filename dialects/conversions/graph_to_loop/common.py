"""The toolkit every lowering uses (as onnx-mlir's ONNXToKrnlCommon):
LoopBuilder, the small vocabulary loop IR is emitted with, the element-type
predicates, and the helpers the op families share (below LoopBuilder).

Index arithmetic takes Python ints or index Values and folds when it can, so
static shapes give clean IR; scalar constants are made once per function, at
its top, so they dominate every nest."""
from __future__ import annotations

from contextlib import ExitStack, contextmanager

import numpy as np

from ...ir.attributes import DenseElementsAttr, FloatAttr, IntegerAttr, StringAttr, UnitAttr
from ...ir.core import Block, Builder, Region
from ...ir.core import Operation
from ...ir.types import INDEX, NONE, FloatType, IndexType, IntegerType, MemRefType, TensorType, f32, i64

LOW_FLOATS = ("f16", "bf16")


def is_float(t):
    return isinstance(t, FloatType)


def is_unsigned(t):
    return isinstance(t, IntegerType) and (t.is_unsigned or t.width == 1)


class LoopBuilder:
    def __init__(self, entry: Block, loc=None):
        self.entry = entry
        self.loc = loc
        self._consts = {}
        self.stack = [Builder(block=entry)]

    @property
    def b(self) -> Builder:
        return self.stack[-1]

    def op(self, name, operands=(), result_type=None, **attrs):
        """Creates `name`; returns its result if it has one, else the op."""
        attrs = {k: StringAttr(v) if isinstance(v, str) else v for k, v in attrs.items()}
        o = self.b.create(name, list(operands), [] if result_type is None else [result_type],
                          attrs or None, loc=self.loc)
        return o.results[0] if result_type is not None else o

    # -- constants -------------------------------------------------------------
    def c(self, v, t=INDEX):
        if not isinstance(v, (int, float)) and not hasattr(v, "dtype"):
            return v  # already a Value
        if isinstance(t, FloatType):
            key = (float(v), str(t), str(float(v)))
            attr = FloatAttr(float(v), t)
        else:
            key = (int(v), str(t))
            attr = IntegerAttr(int(v), t)
        hit = self._consts.get(key)
        if hit is None:
            o = Operation("arith.constant", [], [t], {"value": attr}, loc=self.loc)
            if self.entry.first is None:
                self.entry.append(o)
            else:
                self.entry.insert_before(self.entry.first, o)
            hit = self._consts[key] = o.results[0]
        return hit

    def at_top(self, name, result_type, **attrs):
        """A pure, operand-free op placed at the function's top (globals)."""
        o = Operation(name, [], [result_type], attrs, loc=self.loc)
        if self.entry.first is None:
            self.entry.append(o)
        else:
            self.entry.insert_before(self.entry.first, o)
        return o.results[0]

    # -- index arithmetic (folds Python ints) ------------------------------------
    def add(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if isinstance(b, int) and b == 0:
            return a
        if isinstance(a, int) and a == 0:
            return b
        return self.op("arith.addi", [self.c(a), self.c(b)], INDEX)

    def mul(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a * b
        if isinstance(b, int) and b == 1:
            return a
        if isinstance(a, int) and a == 1:
            return b
        if (isinstance(a, int) and a == 0) or (isinstance(b, int) and b == 0):
            return 0
        return self.op("arith.muli", [self.c(a), self.c(b)], INDEX)

    def affine(self, terms, const=0):
        """sum(coef * value) + const over index values/ints."""
        acc = const
        for coef, v in terms:
            acc = self.add(self.mul(v, coef), acc) if not isinstance(acc, int) or acc else self.mul(v, coef)
        return acc

    def ix(self, v):
        return self.c(v) if isinstance(v, int) else v

    # -- memory ------------------------------------------------------------------
    def alloc(self, shape, el):
        return self.op("loop.alloc", [], MemRefType(tuple(shape), el))

    def load(self, buf, idx=()):
        return self.op("loop.load", [buf] + [self.ix(i) for i in idx], buf.type.element)

    def store(self, v, buf, idx=()):
        self.op("loop.store", [v, buf] + [self.ix(i) for i in idx])

    def view(self, buf, shape):
        shape = tuple(shape)
        if buf.type.shape == shape:
            return buf
        return self.op("loop.view", [buf], MemRefType(shape, buf.type.element))

    # -- control flow ---------------------------------------------------------------
    @contextmanager
    def loop(self, lb, ub, step=1, parallel=False, vectorize=False, unroll=True):
        body = Block([INDEX])
        attrs = {}
        if step != 1:
            attrs["step"] = IntegerAttr(step, i64)
        if parallel:
            attrs["parallel"] = UnitAttr()
        if vectorize:
            attrs["vectorize"] = UnitAttr()
        if not unroll:
            attrs["nounroll"] = UnitAttr()
        self.b.create("loop.for", [self.ix(lb), self.ix(ub)], [], attrs, [Region([body])], loc=self.loc)
        self.stack.append(Builder(block=body))
        try:
            yield body.args[0]
        finally:
            self.stack.pop()
            body.append(_yield(self.loc))

    @contextmanager
    def at(self, block):
        """Emits into `block` (e.g. a loop body) for a while."""
        self.stack.append(Builder(block=block))
        try:
            yield
        finally:
            self.stack.pop()

    @contextmanager
    def loops(self, shape, parallel_outer=True, vectorize_inner=True):
        """A perfect nest over `shape`: the first loop with more than one
        iteration is marked parallel, the innermost `vectorize`."""
        ivs, n = [], len(shape)
        par = next((d for d, s in enumerate(shape) if s > 1), 0) if parallel_outer else -1
        with ExitStack() as st:
            for d, size in enumerate(shape):
                ivs.append(st.enter_context(self.loop(0, size, parallel=d == par,
                                                      vectorize=vectorize_inner and d == n - 1)))
            yield ivs

    # -- scalars ----------------------------------------------------------------------
    def cast_index(self, v, from_t):
        """An integer scalar to index (sign-extending)."""
        if isinstance(from_t, IndexType):
            return v
        return self.op("arith.index_cast", [v], INDEX)

    def minmax_idx(self, kind, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return min(a, b) if kind == "min" else max(a, b)
        return self.op(f"arith.{kind}si", [self.ix(a), self.ix(b)], INDEX)


def _yield(loc):
    return Operation("loop.yield", [], [], None, loc=loc)


def compute_type(el):
    """Low-precision floats compute in f32."""
    return f32 if is_float(el) and el.name in LOW_FLOATS else el


def load_as(L, buf, idx, t):
    """buf[idx], widened to the compute type t (f16/bf16 -> f32)."""
    v = L.load(buf, idx)
    return L.op("arith.extf", [v], t) if v.type != t else v


def store_as(L, v, buf, idx):
    """v into buf[idx], narrowed to the buffer's element type."""
    el = buf.type.element
    L.store(L.op("arith.truncf", [v], el) if v.type != el else v, buf, idx)


# ---- helpers shared by the lowering families --------------------------------

@contextmanager
def library_root(L):
    """A one-trip loop holding a whole lowering, so it has one root op to
    mark as a library call; yields a list that receives the root op."""
    got = []
    with L.loop(0, 1) as iv:
        yield got
    got.append(iv.block.parent_op)


def all_f32(*vals):
    """Whether every value is f32 (the library kernels' type)."""
    return all(str(v.type.element) == "f32" for v in vals)


def extend_low_float(L, v, t):
    """`v` (of element type `t`) widened to f32 when `t` is a low float."""
    return L.op("arith.extf", [v], f32) if is_float(t) and t.name in LOW_FLOATS else v


def constant_table(L, arr, el):
    """A numpy array as a `loop.global` of element type `el`."""
    arr = np.ascontiguousarray(arr)
    t = TensorType(arr.shape, el)
    return L.at_top("loop.global", MemRefType(arr.shape, el), value=DenseElementsAttr(arr, t))


def fill(cx, buf, value):
    """Every element of `buf` set to `value` (one parallel loop)."""
    L = cx.L
    el = buf.type.element
    flat = L.view(buf, (buf.type.num_elements,)) if buf.type.rank != 1 else buf
    c = L.c(float(value) if is_float(el) else int(value), el)
    with L.loop(0, buf.type.num_elements, parallel=True, vectorize=True) as i:
        L.store(c, flat, [i])


def data_index(L, v, el, dim):
    """An integer index loaded from a tensor (maybe negative, ONNX-style)
    -> an index in [0, dim). Out-of-range values are clamped, so a bad
    index reads or writes inside the buffer: the sessions refuse such
    values in model inputs (runtime/signature.py), and one computed inside
    the graph must never turn into a wild memory access."""
    i = L.op("arith.index_castui", [v], INDEX) if is_unsigned(el) else L.cast_index(v, el)
    neg = L.op("arith.cmpi", [i, L.c(0)], IntegerType(1), predicate="slt")
    i = L.op("arith.select", [neg, L.add(i, dim), i], INDEX)
    return L.minmax_idx("min", L.minmax_idx("max", i, 0), dim - 1)


def int_list(cx, op, i):
    """A constant int input, or None when absent."""
    if len(op.operands) <= i or op.operands[i].type is NONE:
        return None
    v = cx.const(op.operands[i])
    if v is None:
        cx.fail(op, f"input #{i} of {op.name} must be a constant for the host lowering")
    return [int(x) for x in np.asarray(v).ravel()]
