"""The C-style renderer shared by every code generator that writes C source
(the cpu accelerator's C, the gpu accelerator's CUDA C), after tinygrad's
renderer/cstyle.py: `CStyleLanguage` renders types, literals, the loop
dialect's scalar ops (`arith.*`, `math.*`, from one table) and kernels to
C; `LoopRenderer` renders loop nests (`loop.for/if/load/store/alloc/view/
copy`) through a language. A target subclasses `CStyleLanguage` and
overrides only what differs: its own f32 math functions (`intrinsics`), the
restrict keyword, bit casts, the kernel signature and its task index.

Helpers the generated code calls and the target's prelude defines: the
NaN-propagating `tcc_maximumf/d` and `tcc_minimumf/d` (arith.maximumf,
minimumf), and `tcc_sdiv`, `tcc_srem`, `tcc_max`, `tcc_min` (integer
division by zero gives 0 instead of trapping; max/min of either signedness).
A target whose code uses none of those ops (the cpu's elementwise trees)
needs none of them."""
from __future__ import annotations

import math

import numpy as np

from tcc.dialects.ir.errors import TccError
from tcc.dialects.ir.types import FloatType, IndexType, IntegerType

F32 = FloatType("f32")


class RenderError(TccError):
    pass


# -- the scalar-op table: arith/math op kind -> C -----------------------------------------
BINARY_FLOAT = {"addf": "+", "subf": "-", "mulf": "*", "divf": "/"}
BINARY_INT = {"addi": "+", "subi": "-", "muli": "*", "andi": "&", "ori": "|", "xori": "^"}
# kind -> the libm function (f32 calls its `f` variant)
LIBM = {"exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2", "log10": "log10",
        "log1p": "log1p", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf", "sin": "sin", "cos": "cos",
        "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh",
        "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "floor": "floor", "ceil": "ceil",
        "round": "round", "roundeven": "rint", "trunc": "trunc", "absf": "fabs", "remf": "fmod",
        "powf": "pow", "copysign": "copysign", "maxnumf": "fmax", "minnumf": "fmin", "fma": "fma",
        "atan2": "atan2"}
# C's <, <=, ==, >=, > are false when an operand is NaN: IEEE's ordered predicates already
CMPF_ORDERED = {"oeq": "==", "ogt": ">", "oge": ">=", "olt": "<", "ole": "<="}
CMPF_UNORDERED = {"ueq": "==", "ugt": ">", "uge": ">=", "ult": "<", "ule": "<=", "une": "!="}
CMPI = {"eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">=",
        "ult": "<", "ule": "<=", "ugt": ">", "uge": ">="}
SIGNED_OPS = {"divsi": "tcc_sdiv", "remsi": "tcc_srem", "maxsi": "tcc_max", "minsi": "tcc_min"}
UNSIGNED_OPS = {"divui": "tcc_sdiv", "remui": "tcc_srem", "maxui": "tcc_max", "minui": "tcc_min"}
SHIFTS = {"shli": ("<<", False), "shrsi": (">>", True), "shrui": (">>", False)}


def _is_f32(t):
    return isinstance(t, FloatType) and t.name == "f32"


class CStyleLanguage:
    """Plain C (C11): the defaults every target starts from."""

    name = "C"                 # in error messages: "... by the C code generator"
    error = RenderError        # the exception a target raises
    restrict = "__restrict"
    intrinsics: dict = {}      # f32 math kinds the target implements itself: kind -> C function

    # -- types ---------------------------------------------------------------------------
    def ctype(self, t, itype="long long"):
        if isinstance(t, IndexType):
            return itype
        if isinstance(t, FloatType):
            if t.name in ("f32", "f64"):
                return "float" if t.name == "f32" else "double"
            raise self.error(f"element type {t} is not supported by the {self.name} code generator")
        if isinstance(t, IntegerType):
            if t.width == 1:
                return "bool"
            base = {8: "char", 16: "short", 32: "int", 64: "long long"}.get(t.width)
            if base is None:
                raise self.error(f"element type {t} is not supported by the {self.name} code generator")
            if base == "char":
                return "unsigned char" if t.is_unsigned else "signed char"
            return ("unsigned " if t.is_unsigned else "") + base
        raise self.error(f"type {t} is not supported by the {self.name} code generator")

    def uctype(self, t, itype="long long"):
        """The unsigned C type of an integer type (for MLIR's unsigned ops)."""
        if isinstance(t, IndexType):
            return "unsigned " + itype
        if t.width == 1:
            return "bool"
        return {8: "unsigned char", 16: "unsigned short", 32: "unsigned int", 64: "unsigned long long"}[t.width]

    def sctype(self, t, itype="long long"):
        if isinstance(t, IndexType):
            return itype
        if t.width == 1:
            return "bool"
        return {8: "signed char", 16: "short", 32: "int", 64: "long long"}[t.width]

    # -- literals --------------------------------------------------------------------------
    def float_literal(self, v, t=F32):
        """A C literal of float `v` in type `t` (f32 values are rounded to f32 first)."""
        v = float(np.float32(v)) if _is_f32(t) else float(v)
        f32 = _is_f32(t)
        if math.isnan(v):
            return "NAN" if f32 else "(double)NAN"
        if math.isinf(v):
            s = "INFINITY" if f32 else "(double)INFINITY"
            return s if v > 0 else "(-" + s + ")"
        s = repr(v)
        if not f32:
            return s
        return (s if "e" in s or "." in s else s + ".0") + "f"

    def int_literal(self, v, t):
        ct = self.ctype(t)
        v = int(v)
        if isinstance(t, IndexType) and abs(v) < (1 << 31):
            return str(v)
        if ct == "bool":
            return "true" if v & 1 else "false"
        if isinstance(t, IntegerType) and t.is_unsigned:
            return f"({ct}){v & ((1 << t.width) - 1)}ull"
        if v == -(1 << 63):
            return "(-9223372036854775807ll - 1)"
        if ct == "long long" or abs(v) >= 1 << 31:
            return f"({ct}){v}ll"
        return str(v) if ct == "int" else f"({ct}){v}"

    def literal(self, v, t):
        return self.float_literal(v, t) if isinstance(t, FloatType) else self.int_literal(v, t)

    # -- scalar ops --------------------------------------------------------------------------
    def call(self, kind, a, t):
        """The math function `kind` (a LIBM key) of the operands `a` in type `t`."""
        if _is_f32(t) and kind in self.intrinsics:
            fn = self.intrinsics[kind]
        else:
            fn = LIBM[kind] + ("f" if _is_f32(t) else "")
        return f"{fn}({', '.join(a)})"

    def bitcast(self, x, t, it):
        """Reinterpret `x` of type `it` as `t` (same width): through a union, as C allows."""
        src, dst = self.ctype(it), self.ctype(t)
        return f"((union {{ {src} s; {dst} d; }}){{ .s = ({src}){x} }}).d"

    def scalar(self, name, a, t, it=None, predicate=None, itype="long long"):
        """C for the scalar op `name` ("arith.addf", "math.exp", ...) over operand
        expressions `a`: `t` the result type, `it` the first operand's, `predicate`
        cmpf/cmpi's, `itype` the C type index values have."""
        kind = name.split(".", 1)[1]
        it = it or t
        if kind in BINARY_FLOAT:
            return f"({a[0]} {BINARY_FLOAT[kind]} {a[1]})"
        if kind == "negf":
            return f"(-{a[0]})"
        if kind in LIBM:
            return self.call(kind, a, t)
        if kind == "rsqrt":
            return f"({self.float_literal(1.0, t)} / {self.call('sqrt', a, t)})"
        if kind in ("maximumf", "minimumf"):
            return f"tcc_{kind[:-1]}{'f' if _is_f32(t) else 'd'}({a[0]}, {a[1]})"
        if kind == "isnan":
            return f"({a[0]} != {a[0]})"
        if kind == "isinf":
            return f"({self.call('absf', a, it)} == {self.float_literal(math.inf, it)})"
        if kind == "cmpf":
            return self.cmpf(predicate, a[0], a[1])
        if kind == "select":
            return f"({a[0]} ? {a[1]} : {a[2]})"
        ct = self.ctype(t, itype)
        if kind == "absi":
            return f"({ct})(({a[0]}) < 0 ? -({a[0]}) : ({a[0]}))"
        if kind == "cmpi":
            cast = self.uctype(it, itype) if predicate.startswith("u") else self.sctype(it, itype)
            return f"(({cast}){a[0]} {CMPI[predicate]} ({cast}){a[1]})"
        if kind in ("sitofp", "extsi") or (kind == "index_cast" and isinstance(it, IntegerType)):
            return f"({ct})({self.sctype(it, itype)}){a[0]}"
        if kind in ("extf", "truncf", "fptosi", "trunci", "index_cast"):
            return f"({ct}){a[0]}"
        if kind in ("uitofp", "extui", "index_castui"):
            return f"({ct})({self.uctype(it, itype)}){a[0]}"
        if kind == "fptoui":
            return f"({ct})({self.uctype(t, itype)}){a[0]}"
        if kind == "bitcast":
            return self.bitcast(a[0], t, it)
        if not isinstance(t, (IntegerType, IndexType)):
            raise self.error(f"no {self.name} for {name}")
        st, ut = self.sctype(t, itype), self.uctype(t, itype)
        if kind in BINARY_INT:
            if ct == "bool":  # i1 arithmetic is modulo 2
                if kind == "muli":
                    return f"(bool)({a[0]} & {a[1]})"
                c = "^" if kind in ("addi", "subi") else BINARY_INT[kind]
                return f"(bool)({a[0]} {c} {a[1]})"
            return f"({ct})(({ut}){a[0]} {BINARY_INT[kind]} ({ut}){a[1]})"
        if kind in SIGNED_OPS:
            return f"({ct}){SIGNED_OPS[kind]}(({st}){a[0]}, ({st}){a[1]})"
        if kind in UNSIGNED_OPS:
            return f"({ct}){UNSIGNED_OPS[kind]}(({ut}){a[0]}, ({ut}){a[1]})"
        if kind in SHIFTS:
            c, signed = SHIFTS[kind]
            x = st if signed else ut
            return f"({ct})(({x}){a[0]} {c} ({x}){a[1]})"
        raise self.error(f"no {self.name} for {name}")

    def cmpf(self, p, a, b):
        if p in CMPF_ORDERED:
            return f"({a} {CMPF_ORDERED[p]} {b})"
        nan = f"({a} != {a} || {b} != {b})"
        if p == "one":
            return f"(!{nan} && {a} != {b})"
        if p in CMPF_UNORDERED:
            return f"({nan} || {a} {CMPF_UNORDERED[p]} {b})"
        return {"ord": f"(!{nan})", "uno": nan, "true": "true", "false": "false"}[p]

    # -- vectors and kernels ---------------------------------------------------------------------
    def vector_load(self, dst, src, lanes):
        """Copy `lanes` floats from address `src` into the array `dst` as one access."""
        return f"memcpy({dst}, {src}, sizeof(float) * {lanes});"

    def vector_store(self, dst, src, lanes):
        return f"memcpy({dst}, {src}, sizeof(float) * {lanes});"

    def param(self, name, ctype, const, restrict):
        return f"{'const ' if const else ''}{ctype} *{self.restrict + ' ' if restrict else ''}{name}"

    def render_kernel(self, name, params, body, limit):
        """A kernel: `body` (C lines) run for every task index `tid` below
        `limit`, over the buffers `params` ((name, C element type, const,
        restrict) each). Plain C: a thread-pool task-range function
        `static void name(void *ctx, long tb, long te)`, its buffers in the
        context array in order; the caller splits [0, limit) into ranges."""
        lines = [f"static void {name}(void *ctx_, long tb, long te) {{", "    void **ctx = ctx_;"]
        for k, (p, ct, const, restrict) in enumerate(params):
            lines.append(f"    {self.param(p, ct, const, restrict)} = ({'const ' if const else ''}{ct} *)ctx[{k}];")
        lines.append("    for (long tid = tb; tid < te; tid++) {")
        return "\n".join(lines + list(body) + ["    }", "}", ""])


# -- loop nests ------------------------------------------------------------------------------
class LoopRenderer:
    """C statements for loop-dialect ops, through `lang`: `kernel` names the
    kernel in errors, `params` maps memref values defined outside to their C
    names, `itype` is the C type of index values. `lane`, when set, is (iv,
    lane u, {load op: C array}, {store op: C array}): loads and stores of a
    vectorized body read and write lane u of those arrays."""

    def __init__(self, lang, kernel, params, itype):
        self.lang = lang
        self.kernel = kernel
        self.params = params
        self.itype = itype
        self.names = {}
        self.n = 0
        self.lines = []
        self.depth = 1
        self.lane = None

    def fresh(self, p="v"):
        self.n += 1
        return f"{p}{self.n}"

    def w(self, s):
        self.lines.append("  " * self.depth + s)

    def error(self, msg):
        return self.lang.error(f"kernel {self.kernel}: {msg}")

    def ctype(self, t):
        return self.lang.ctype(t, self.itype)

    # values
    def val(self, v):
        if v in self.names:
            return self.names[v]
        op = getattr(v, "op", None)
        if op is not None and op.name == "arith.constant":
            return self.lang.literal(op.get_attr("value"), op.results[0].type)
        if op is not None and not op.regions and (op.name == "loop.load" or op.name.startswith(("arith.", "math."))):
            # defined outside the kernel: rematerialise (pure scalar code)
            self.op(op)
            return self.names[v]
        raise self.error(f"value defined outside the kernel: {v}")

    def buf(self, m):
        """(C pointer expression, shape) of a memref value."""
        if m in self.names:
            return self.names[m], m.type.shape
        if m in self.params:
            return self.params[m], m.type.shape
        op = getattr(m, "op", None)
        if op is not None and op.name == "loop.view":
            base, _ = self.buf(op.operands[0])
            return base, m.type.shape
        raise self.error(f"buffer {m.type} is not available")

    def index(self, shape, idx):
        if not shape:
            return "0"
        expr = None
        for d, x in zip(shape, idx):
            xs = f"(({self.itype}){self.val(x)})"
            expr = xs if expr is None else f"({expr} * {d} + {xs})"
        return expr

    # ops
    def block(self, ops):
        for op in ops:
            self.op(op)

    def op(self, op):
        name = op.name
        if name in ("loop.yield", "gpu.terminator", "loop.dealloc", "arith.constant"):
            return
        handler = getattr(self, "op_" + name.replace(".", "_"), None)
        if handler is not None:
            handler(op)
            return
        if name.startswith(("arith.", "math.")):
            t = op.results[0].type
            r = self.fresh()
            it = op.operands[0].type if op.operands else t
            expr = self.lang.scalar(name, [self.val(v) for v in op.operands], t, it, op.get_attr("predicate"),
                                    self.itype)
            self.w(f"const {self.ctype(t)} {r} = {expr};")
            self.names[op.results[0]] = r
            return
        raise self.error(f"cannot generate {self.lang.name} for {name}")

    def op_loop_for(self, op):
        lb, ub = self.val(op.operands[0]), self.val(op.operands[1])
        step = op.get_attr("step", 1)
        iv = op.regions[0].blocks[0].args[0]
        i = self.fresh("i")
        self.names[iv] = i
        self.w(f"for ({self.itype} {i} = {lb}; {i} < {ub}; {i} += {step}) {{")
        self.depth += 1
        self.block(op.regions[0].blocks[0].ops)
        self.depth -= 1
        self.w("}")

    def op_loop_if(self, op):
        self.w(f"if ({self.val(op.operands[0])}) {{")
        self.depth += 1
        if op.regions[0].blocks:
            self.block(op.regions[0].blocks[0].ops)
        self.depth -= 1
        if len(op.regions) > 1 and op.regions[1].blocks and len(list(op.regions[1].blocks[0].ops)) > 1:
            self.w("} else {")
            self.depth += 1
            self.block(op.regions[1].blocks[0].ops)
            self.depth -= 1
        self.w("}")

    def op_loop_alloc(self, op):
        t = op.results[0].type
        if op.operands:
            raise self.error("dynamic allocation inside a kernel")
        a = self.fresh("a")
        n = max(1, int(np.prod(t.shape, dtype=np.int64)))
        self.w(f"{self.ctype(t.element)} {a}[{n}];")
        self.names[op.results[0]] = a

    def op_loop_view(self, op):
        self.names[op.results[0]] = self.buf(op.operands[0])[0]

    def op_loop_copy(self, op):
        s, _ = self.buf(op.operands[0])
        d, shape = self.buf(op.operands[1])
        n = int(np.prod(shape, dtype=np.int64))
        k = self.fresh("i")
        self.w(f"for (long long {k} = 0; {k} < {n}; ++{k}) {d}[{k}] = {s}[{k}];")

    def op_loop_load(self, op):
        r = self.fresh()
        ct = self.ctype(op.results[0].type)
        if self.lane is not None and op in self.lane[2]:
            self.w(f"const {ct} {r} = {self.lane[2][op]}[{self.lane[1]}];")
        else:
            p, shape = self.buf(op.operands[0])
            self.w(f"const {ct} {r} = {p}[{self.index(shape, op.operands[1:])}];")
        self.names[op.results[0]] = r

    def op_loop_store(self, op):
        if self.lane is not None and op in self.lane[3]:
            self.w(f"{self.lane[3][op]}[{self.lane[1]}] = {self.val(op.operands[0])};")
            return
        p, shape = self.buf(op.operands[1])
        self.w(f"{p}[{self.index(shape, op.operands[2:])}] = {self.val(op.operands[0])};")

    def vector_body(self, iv, body, sunk, loads, stores, lanes):
        """`body` for `lanes` consecutive values of `iv` (already named, the
        first of them): the `loads` read once as a vector, each lane's ops in
        turn on their elements, the `stores` written once as a vector
        (`dialects.loop.analysis.vector_accesses` chose them)."""
        self.block(sunk)
        lnames, snames = {}, {}
        for op in loads:
            # the vector load needs the other (lane-independent) indices first
            p, shape = self.buf(op.operands[0])
            n = self.fresh("ld")
            self.w(f"float {n}[{lanes}]; " + self.lang.vector_load(n, f"&{p}[{self.index(shape, op.operands[1:])}]", lanes))
            lnames[op] = n
        for op in stores:
            n = self.fresh("st")
            self.w(f"float {n}[{lanes}];")
            snames[op] = n
        base_iv = self.names[iv]
        for u in range(lanes):
            saved = dict(self.names)
            lane_iv = self.fresh("l")
            self.w(f"{{ const {self.itype} {lane_iv} = {base_iv} + {u}; (void){lane_iv};")
            self.names[iv] = lane_iv
            self.lane = (iv, u, lnames, snames)
            self.depth += 1
            self.block(body)
            self.depth -= 1
            self.w("}")
            self.lane = None
            self.names = saved
        for op in stores:
            p, shape = self.buf(op.operands[1])
            self.w(self.lang.vector_store(f"&{p}[{self.index(shape, op.operands[2:])}]", snames[op], lanes))
