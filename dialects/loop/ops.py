"""The `loop` dialect (Krnl-like loop nests over buffers) and the scalar
`arith` and `math` dialects its bodies compute with.

Buffers are `memref<...>` values; scalars are index, iN/uiN, fN. A lowered
model is a `func.func @main_graph` whose arguments are the input buffers
followed by the output buffers (`tcc.num_outputs` says how many), ending in
an empty `func.return`.

    loop.alloc(dyn dims: index...) -> memref        {alignment = 64}
    loop.dealloc(memref)
    loop.global() -> memref                          {value = dense|dense_resource}
    loop.for(lb: index, ub: index) ({^bb0(%i: index): ... "loop.yield"()})
                                                     {step = 1, parallel?, vectorize?, nounroll?}
    loop.if(cond: i1) ({then ... loop.yield}, {else ... loop.yield})
    loop.yield()
    loop.load(memref, idx: index...) -> element
    loop.store(value, memref, idx: index...)
    loop.dim(memref) -> index                         {axis}
    loop.view(memref, dyn dims...) -> memref          same bytes, another shape (Reshape)
    loop.copy(src: memref, dst: memref)               whole-buffer copy
    loop.prefetch(buf, offset: index, count: index)   hint: flat elements [offset, offset+count) read soon
    loop.store_block(src, dst, offset: index, count: index)   src[0:count] -> dst[offset:offset+count]
                                                     (flat elements) {nontemporal?}
    loop.call(args...) -> results?                    {callee = "c_symbol"}: external kernel
    arith.* / math.*                                  MLIR's names and semantics
"""
from __future__ import annotations

from ..ir.errors import VerifyError
from ..ir.opdef import AttrDef, Dialect, OpDef, OperandDef, PURE, TERMINATOR, COMMUTATIVE
from ..ir.types import IndexType, MemRefType, IntegerType, FloatType

_mem = lambda t: isinstance(t, MemRefType)  # noqa: E731
_idx = lambda t: isinstance(t, IndexType)  # noqa: E731
_int = lambda t: isinstance(t, (IntegerType, IndexType))  # noqa: E731
_flt = lambda t: isinstance(t, FloatType)  # noqa: E731
_scalar = lambda t: isinstance(t, (IntegerType, IndexType, FloatType))  # noqa: E731


def _verify_access(op, ctx, value_first):
    mem = op.operands[1 if value_first else 0]
    idx = op.operands[2 if value_first else 1:]
    if mem.type.rank != len(idx):
        raise VerifyError(f"indexes a rank-{mem.type.rank} buffer with {len(idx)} indices", op)
    el = op.operands[0].type if value_first else op.results[0].type
    if el != mem.type.element:
        raise VerifyError(f"element type {el} does not match buffer {mem.type}", op)


def _verify_alloc(op, ctx):
    t = op.results[0].type
    if sum(1 for d in t.shape if d is None) != len(op.operands):
        raise VerifyError(f"{t} needs one index operand per dynamic dim", op)


def _verify_for(op, ctx):
    body = op.regions[0].blocks
    if len(body) != 1 or len(body[0].args) != 1 or not _idx(body[0].args[0].type):
        raise VerifyError("body must be one block with one index argument", op)
    if body[0].last is None or body[0].last.name != "loop.yield":
        raise VerifyError("body must end with loop.yield", op)
    if op.get_attr("step", 1) <= 0:
        raise VerifyError("step must be positive", op)


def _verify_store_block(op, ctx):
    src, dst = op.operands[0].type, op.operands[1].type
    if src.element != dst.element:
        raise VerifyError(f"element types differ: {src} vs {dst}", op)


LOOP_OPS = [
    OpDef("loop.alloc", [OperandDef("dims", "variadic", _idx)], [OperandDef("buffer", constraint=_mem)],
          {"alignment": AttrDef("alignment", "int", default=64)}, verifier=_verify_alloc,
          summary="allocates a buffer"),
    OpDef("loop.dealloc", [OperandDef("buffer", constraint=_mem)], summary="frees a buffer"),
    OpDef("loop.global", [], [OperandDef("buffer", constraint=_mem)],
          {"value": AttrDef("value", "tensor", True)}, traits=frozenset({PURE}),
          summary="a constant buffer (weights)"),
    OpDef("loop.for", [OperandDef("lb", constraint=_idx), OperandDef("ub", constraint=_idx)], [],
          {"step": AttrDef("step", "int", default=1), "parallel": AttrDef("parallel", "unit"),
           "vectorize": AttrDef("vectorize", "unit"), "nounroll": AttrDef("nounroll", "unit")},
          num_regions=1, verifier=_verify_for,
          summary="for %i = lb to ub step s; `parallel` marks iterations independent, "
                  "`nounroll` keeps LLVM from unrolling the loop"),
    OpDef("loop.if", [OperandDef("cond")], [], num_regions=2, summary="structured conditional"),
    OpDef("loop.yield", traits=frozenset({TERMINATOR, PURE}), summary="ends a loop or if body"),
    OpDef("loop.load", [OperandDef("buffer", constraint=_mem), OperandDef("indices", "variadic", _idx)],
          [OperandDef("value", constraint=_scalar)], verifier=lambda op, c: _verify_access(op, c, False),
          summary="reads one element"),
    OpDef("loop.store", [OperandDef("value", constraint=_scalar), OperandDef("buffer", constraint=_mem),
                         OperandDef("indices", "variadic", _idx)],
          verifier=lambda op, c: _verify_access(op, c, True), summary="writes one element"),
    OpDef("loop.dim", [OperandDef("buffer", constraint=_mem)], [OperandDef("size", constraint=_idx)],
          {"axis": AttrDef("axis", "int", True)}, traits=frozenset({PURE}), summary="a dim's size"),
    OpDef("loop.view", [OperandDef("buffer", constraint=_mem), OperandDef("dims", "variadic", _idx)],
          [OperandDef("view", constraint=_mem)], traits=frozenset({PURE}),
          summary="the same bytes seen with another shape"),
    OpDef("loop.copy", [OperandDef("src", constraint=_mem), OperandDef("dst", constraint=_mem)],
          summary="copies a whole buffer"),
    OpDef("loop.prefetch", [OperandDef("buffer", constraint=_mem), OperandDef("offset", constraint=_idx),
                            OperandDef("count", constraint=_idx)],
          summary="a hint: elements [offset, offset+count) (flat) are read soon; no effect on results"),
    OpDef("loop.store_block", [OperandDef("src", constraint=_mem), OperandDef("dst", constraint=_mem),
                               OperandDef("offset", constraint=_idx), OperandDef("count", constraint=_idx)], [],
          {"nontemporal": AttrDef("nontemporal", "unit")}, verifier=_verify_store_block,
          summary="copies src's first `count` elements (row-major) to dst's elements [offset, offset+count); "
                  "`nontemporal`: dst is not read again soon (streaming stores)"),
    OpDef("loop.call", [OperandDef("args", "variadic")], [OperandDef("results", "variadic")],
          {"callee": AttrDef("callee", "string", True)}, summary="calls an external (C) kernel by name"),
]

_BIN_F = ["addf", "subf", "mulf", "divf", "remf", "maximumf", "minimumf", "maxnumf", "minnumf", "powf", "copysign"]
_BIN_I = ["addi", "subi", "muli", "divsi", "divui", "remsi", "remui", "maxsi", "minsi", "maxui", "minui",
          "andi", "ori", "xori", "shli", "shrsi", "shrui"]
_CASTS = ["sitofp", "uitofp", "fptosi", "fptoui", "extf", "truncf", "extsi", "extui", "trunci",
          "index_cast", "index_castui", "bitcast"]
_COMMUTATIVE = {"addf", "mulf", "maximumf", "minimumf", "maxnumf", "minnumf", "addi", "muli", "maxsi", "minsi", "maxui", "minui",
                "andi", "ori", "xori"}
_MATH_UNARY = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "tanh", "erf",
               "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
               "floor", "ceil", "round", "roundeven", "trunc", "absf", "absi", "isnan", "isinf"]


def _same(op, ctx):
    ts = {str(v.type) for v in op.operands} | {str(r.type) for r in op.results}
    if len(ts) != 1:
        raise VerifyError(f"operands and result must share one type, got {sorted(ts)}", op)


def _arith_ops():
    ops = [OpDef("arith.constant", [], [OperandDef("result", constraint=_scalar)],
                 {"value": AttrDef("value", "any", True)}, traits=frozenset({PURE}), summary="a scalar constant")]
    for n in _BIN_F + _BIN_I:
        tr = {PURE} | ({COMMUTATIVE} if n in _COMMUTATIVE else set())
        c = _flt if n in _BIN_F else _int
        ops.append(OpDef(f"arith.{n}", [OperandDef("lhs", constraint=c), OperandDef("rhs", constraint=c)],
                         [OperandDef("result")], traits=frozenset(tr), verifier=_same))
    ops.append(OpDef("arith.negf", [OperandDef("operand", constraint=_flt)], [OperandDef("result")],
                     traits=frozenset({PURE}), verifier=_same))
    ops.append(OpDef("arith.cmpf", [OperandDef("lhs", constraint=_flt), OperandDef("rhs", constraint=_flt)],
                     [OperandDef("result")], {"predicate": AttrDef("predicate", "string", True)},
                     traits=frozenset({PURE})))
    ops.append(OpDef("arith.cmpi", [OperandDef("lhs", constraint=_int), OperandDef("rhs", constraint=_int)],
                     [OperandDef("result")], {"predicate": AttrDef("predicate", "string", True)},
                     traits=frozenset({PURE})))
    ops.append(OpDef("arith.select", [OperandDef("cond"), OperandDef("a"), OperandDef("b")],
                     [OperandDef("result")], traits=frozenset({PURE})))
    for n in _CASTS:
        ops.append(OpDef(f"arith.{n}", [OperandDef("in", constraint=_scalar)],
                         [OperandDef("out", constraint=_scalar)], traits=frozenset({PURE})))
    return ops


def _math_ops():
    ops = []
    for n in _MATH_UNARY:
        ops.append(OpDef(f"math.{n}", [OperandDef("operand", constraint=_scalar)], [OperandDef("result")],
                         traits=frozenset({PURE})))
    ops.append(OpDef("math.fma", [OperandDef("a"), OperandDef("b"), OperandDef("c")], [OperandDef("result")],
                     traits=frozenset({PURE}), verifier=_same))
    ops.append(OpDef("math.atan2", [OperandDef("a"), OperandDef("b")], [OperandDef("result")],
                     traits=frozenset({PURE}), verifier=_same))
    return ops


def loop_dialect():
    return Dialect("loop", LOOP_OPS, "loop nests over buffers")


def arith_dialect():
    return Dialect("arith", _arith_ops(), "scalar arithmetic")


def math_dialect():
    return Dialect("math", _math_ops(), "scalar math functions")
