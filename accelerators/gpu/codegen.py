"""loop-to-native for gpu: `gpu.launch` loop nests -> CUDA C kernels, and a
per-function launch plan (buffers, kernel launches with grid/block, cuBLAS
GEMMs, device copies) with the weights beside it.

Mapping a nest to the grid: starting at the outermost loop, every loop whose
iterations provably touch disjoint memory (each written buffer is indexed by
that loop's variable at the same position, under the same outer indices, in
every access) and whose bounds are constants is collapsed into one flat
thread index; pure code between those loops is sunk into the innermost body.
Each thread runs the rest of the nest sequentially (reductions, windows).
A fully parallel body over f32 whose innermost dim is a multiple of 4 and is
the unit-stride dim of every access is emitted with 16-byte (float4) loads
and stores, 4 elements per thread. Kernels use grid-stride loops.
"""
from __future__ import annotations

import json
import math

import numpy as np

from tcc.dialects.ir.attributes import elements_value
from tcc.dialects.ir.types import FloatType, IndexType, IntegerType, MemRefType, to_numpy_dtype

from . import templates
from tcc.dialects.loop.analysis import collapse, parallel_safe  # noqa: F401  (the loop analyses)
from tcc.dialects.loop.analysis import root_buffer as _root, walk_ops as _walk_ops

BLOCK = 256
MAX_GRID = 1 << 20


class CodegenError(Exception):
    pass


def ctype(t):
    if isinstance(t, IndexType):
        return "long long"
    if isinstance(t, FloatType):
        if t.name == "f32":
            return "float"
        if t.name == "f64":
            return "double"
        raise CodegenError(f"element type {t} is not supported by the gpu code generator")
    if isinstance(t, IntegerType):
        if t.width == 1:
            return "bool"
        base = {8: "char", 16: "short", 32: "int", 64: "long long"}.get(t.width)
        if base is None:
            raise CodegenError(f"element type {t} is not supported by the gpu code generator")
        if base == "char":
            return "unsigned char" if t.is_unsigned else "signed char"
        return ("unsigned " if t.is_unsigned else "") + base
    raise CodegenError(f"type {t} is not supported by the gpu code generator")


def _uctype(t):
    """The unsigned C type of an integer type (for MLIR's unsigned ops)."""
    if isinstance(t, IndexType):
        return "unsigned long long"
    if t.width == 1:
        return "bool"
    return {8: "unsigned char", 16: "unsigned short", 32: "unsigned int", 64: "unsigned long long"}[t.width]


def _sctype(t):
    if isinstance(t, IndexType):
        return "long long"
    if t.width == 1:
        return "bool"
    return {8: "signed char", 16: "short", 32: "int", 64: "long long"}[t.width]


def flit(v, t):
    """A C literal of float `v` in type `t`."""
    v = float(v)
    suffix = "f" if t.name == "f32" else ""
    if math.isnan(v):
        return "NAN" if suffix else "(double)NAN"
    if math.isinf(v):
        s = "INFINITY" if suffix else "(double)INFINITY"
        return s if v > 0 else "(-" + s + ")"
    if suffix:
        return _f32lit(v)
    return repr(v)


def _f32lit(v):
    s = repr(float(np.float32(v)))
    if "e" not in s and "." not in s:
        s += ".0"
    return s + "f"


def ilit(v, t):
    ct = ctype(t)
    v = int(v)
    if isinstance(t, IndexType) and abs(v) < (1 << 31):
        return str(v)
    if ct == "bool":
        return "true" if v & 1 else "false"
    if isinstance(t, IntegerType) and t.is_unsigned:
        return f"({ct}){v & ((1 << t.width) - 1)}ull"
    if v == -(1 << 63):
        return "(-9223372036854775807ll - 1)"
    return f"({ct}){v}ll" if ct in ("long long",) or abs(v) >= 1 << 31 else (f"({ct}){v}" if ct != "int" else str(v))


# -- the C emitter ------------------------------------------------------------------------
class _Emitter:
    def __init__(self, kernel, params, itype):
        self.kernel = kernel
        self.params = params  # memref value (outside) -> param name
        self.itype = itype
        self.names = {}
        self.n = 0
        self.lines = []
        self.depth = 1
        self.lane = None      # (iv value, lane u, vector loads {op: name}, stores list)

    def fresh(self, p="v"):
        self.n += 1
        return f"{p}{self.n}"

    def w(self, s):
        self.lines.append("  " * self.depth + s)

    # values
    def val(self, v):
        if v in self.names:
            return self.names[v]
        op = getattr(v, "op", None)
        if op is not None and op.name == "arith.constant":
            return self._const(op)
        if op is not None and not op.regions and (op.name == "loop.load" or op.name.startswith(("arith.", "math."))):
            # defined outside the kernel: rematerialise (pure scalar code)
            self.op(op)
            return self.names[v]
        raise CodegenError(f"kernel {self.kernel}: value defined outside the kernel: {v}")

    def _const(self, op):
        t = op.results[0].type
        v = op.get_attr("value")
        if isinstance(t, FloatType):
            return flit(v, t)
        return ilit(v, t)

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
        raise CodegenError(f"kernel {self.kernel}: buffer {m.type} is not available")

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
        if name in ("loop.yield", "gpu.terminator", "loop.dealloc"):
            return
        if name == "arith.constant":
            return
        if name == "loop.for":
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
            return
        if name == "loop.if":
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
            return
        if name == "loop.alloc":
            t = op.results[0].type
            if op.operands:
                raise CodegenError(f"kernel {self.kernel}: dynamic allocation inside a kernel")
            a = self.fresh("a")
            n = max(1, int(np.prod(t.shape, dtype=np.int64)))
            self.w(f"{ctype(t.element)} {a}[{n}];")
            self.names[op.results[0]] = a
            return
        if name == "loop.view":
            base, _ = self.buf(op.operands[0])
            self.names[op.results[0]] = base
            return
        if name == "loop.copy":
            s, _ = self.buf(op.operands[0])
            d, shape = self.buf(op.operands[1])
            n = int(np.prod(shape, dtype=np.int64))
            k = self.fresh("i")
            self.w(f"for (long long {k} = 0; {k} < {n}; ++{k}) {d}[{k}] = {s}[{k}];")
            return
        if name == "loop.load":
            m = op.operands[0]
            r = self.fresh()
            t = op.results[0].type
            lane = self.lane
            if lane is not None and op in lane[2]:
                self.w(f"const {ctype(t)} {r} = {lane[2][op]}[{lane[1]}];")
            else:
                p, shape = self.buf(m)
                self.w(f"const {ctype(t)} {r} = {p}[{self.index(shape, op.operands[1:])}];")
            self.names[op.results[0]] = r
            return
        if name == "loop.store":
            lane = self.lane
            if lane is not None and op in lane[3]:
                self.w(f"{lane[3][op]}[{lane[1]}] = {self.val(op.operands[0])};")
                return
            p, shape = self.buf(op.operands[1])
            self.w(f"{p}[{self.index(shape, op.operands[2:])}] = {self.val(op.operands[0])};")
            return
        if name.startswith(("arith.", "math.")):
            t = op.results[0].type
            r = self.fresh()
            self.w(f"const {self.itype if isinstance(t, IndexType) else ctype(t)} {r} = {self.scalar(op)};")
            self.names[op.results[0]] = r
            return
        raise CodegenError(f"kernel {self.kernel}: cannot generate CUDA C for {name}")

    def scalar(self, op):
        kind = op.name.split(".", 1)[1]
        a = [self.val(v) for v in op.operands]
        t = op.results[0].type
        it = op.operands[0].type if op.operands else t
        f32 = isinstance(t, FloatType) and t.name == "f32"
        if op.name.startswith("math."):
            return _math(kind, a, t, it)
        binf = {"addf": "+", "subf": "-", "mulf": "*", "divf": "/"}
        if kind in binf:
            return f"{a[0]} {binf[kind]} {a[1]}"
        if kind == "remf":
            return f"fmod{'f' if f32 else ''}({a[0]}, {a[1]})"
        if kind == "powf":
            return f"pow{'f' if f32 else ''}({a[0]}, {a[1]})"
        if kind == "copysign":
            return f"copysign{'f' if f32 else ''}({a[0]}, {a[1]})"
        if kind in ("maximumf", "minimumf"):
            return f"tcc_{kind[:-1]}{'f' if f32 else 'd'}({a[0]}, {a[1]})"
        if kind in ("maxnumf", "minnumf"):
            return f"f{kind[:3]}{'f' if f32 else ''}({a[0]}, {a[1]})"
        if kind == "negf":
            return f"-{a[0]}"
        ct, st, ut = ctype(t), None, None
        if isinstance(t, IndexType):
            ct = st = self.itype
            ut = "unsigned " + self.itype
        elif isinstance(t, IntegerType):
            st, ut = _sctype(t), _uctype(t)
        bini = {"addi": "+", "subi": "-", "muli": "*", "andi": "&", "ori": "|", "xori": "^"}
        if kind in bini:
            if ct == "bool":
                return f"(bool)({a[0]} {bini[kind] if kind not in ('addi', 'subi') else '^'} {a[1]})" \
                    if kind != "muli" else f"(bool)({a[0]} & {a[1]})"
            return f"({ct})(({ut}){a[0]} {bini[kind]} ({ut}){a[1]})"
        if kind == "divsi":
            return f"({ct})tcc_sdiv(({st}){a[0]}, ({st}){a[1]})"
        if kind == "remsi":
            return f"({ct})tcc_srem(({st}){a[0]}, ({st}){a[1]})"
        if kind == "divui":
            return f"({ct})tcc_sdiv(({ut}){a[0]}, ({ut}){a[1]})"
        if kind == "remui":
            return f"({ct})tcc_srem(({ut}){a[0]}, ({ut}){a[1]})"
        if kind in ("maxsi", "minsi"):
            return f"({ct})tcc_{kind[:3]}(({st}){a[0]}, ({st}){a[1]})"
        if kind in ("maxui", "minui"):
            return f"({ct})tcc_{kind[:3]}(({ut}){a[0]}, ({ut}){a[1]})"
        if kind == "shli":
            return f"({ct})(({ut}){a[0]} << ({ut}){a[1]})"
        if kind == "shrsi":
            return f"({ct})(({st}){a[0]} >> ({st}){a[1]})"
        if kind == "shrui":
            return f"({ct})(({ut}){a[0]} >> ({ut}){a[1]})"
        if kind == "select":
            return f"({a[0]} ? {a[1]} : {a[2]})"
        if kind == "cmpf":
            return _cmpf(op.get_attr("predicate"), a[0], a[1])
        if kind == "cmpi":
            p = op.get_attr("predicate")
            c = {"eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">=",
                 "ult": "<", "ule": "<=", "ugt": ">", "uge": ">="}[p]
            cast = _uctype(it) if p.startswith("u") else _sctype(it)
            return f"(({cast}){a[0]} {c} ({cast}){a[1]})"
        if kind in ("sitofp", "extf", "truncf", "fptosi", "trunci", "index_cast"):
            if kind in ("index_cast",) and isinstance(it, IntegerType):
                return f"({ct})({_sctype(it)}){a[0]}"
            if kind == "sitofp":
                return f"({ct})({_sctype(it)}){a[0]}"
            return f"({ct}){a[0]}"
        if kind in ("uitofp", "extui", "index_castui"):
            return f"({ct})({_uctype(it)}){a[0]}"
        if kind == "fptoui":
            return f"({ct})({_uctype(t)}){a[0]}"
        if kind == "extsi":
            return f"({ct})({_sctype(it)}){a[0]}"
        if kind == "bitcast":
            if isinstance(t, FloatType) and t.name == "f32":
                return f"__int_as_float((int){a[0]})"
            if isinstance(it, FloatType) and it.name == "f32":
                return f"({ct})__float_as_int({a[0]})"
            if isinstance(t, FloatType):
                return f"__longlong_as_double((long long){a[0]})"
            return f"({ct})__double_as_longlong({a[0]})"
        raise CodegenError(f"kernel {self.kernel}: no CUDA C for {op.name}")


_MATHF = {"exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2", "log10": "log10",
          "log1p": "log1p", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf", "sin": "sin", "cos": "cos",
          "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh",
          "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "floor": "floor", "ceil": "ceil",
          "round": "round", "roundeven": "rint", "trunc": "trunc", "absf": "fabs"}


def _math(kind, a, t, it):
    f = "f" if isinstance(t, FloatType) and t.name == "f32" else ""
    if kind in _MATHF:
        return f"{_MATHF[kind]}{f}({a[0]})"
    if kind == "rsqrt":
        return f"(1.0{f} / sqrt{f}({a[0]}))"
    if kind == "fma":
        return f"fma{f}({a[0]}, {a[1]}, {a[2]})"
    if kind == "atan2":
        return f"atan2{f}({a[0]}, {a[1]})"
    if kind == "absi":
        return f"({ctype(t)})(({a[0]}) < 0 ? -({a[0]}) : ({a[0]}))"
    if kind == "isnan":
        return f"({a[0]} != {a[0]})"
    if kind == "isinf":
        return f"(fabs{'f' if it.name == 'f32' else ''}({a[0]}) == {'INFINITY' if it.name == 'f32' else '(double)INFINITY'})"
    raise CodegenError(f"no CUDA C for math.{kind}")


def _cmpf(p, a, b):
    nan = f"({a} != {a} || {b} != {b})"
    ordered = {"oeq": "==", "ogt": ">", "oge": ">=", "olt": "<", "ole": "<=", "one": "!="}
    if p in ordered:
        return f"(!{nan} && {a} {ordered[p]} {b})"
    unordered = {"ueq": "==", "ugt": ">", "uge": ">=", "ult": "<", "ule": "<=", "une": "!="}
    if p in unordered:
        return f"({nan} || {a} {unordered[p]} {b})"
    return {"ord": f"(!{nan})", "uno": nan, "true": "true", "false": "false"}[p]


# -- kernels ------------------------------------------------------------------------------
def _outer_buffers(ops):
    """Memref values a kernel body uses that are defined outside it, in order
    (including those read by outside scalar code the kernel recomputes)."""
    inner = set()
    seen, out = set(), []
    for top in ops:
        for op in [top] + list(_walk_ops_all(top)):
            for r in op.results:
                inner.add(r)
            for reg in op.regions:
                for b in reg.blocks:
                    inner.update(b.args)

    def visit(v, depth=0):
        if v in inner or v in seen:
            return
        if isinstance(v.type, MemRefType):
            seen.add(v)
            out.append(v)
            return
        d = getattr(v, "op", None)
        if d is not None and d.name != "arith.constant" and depth < 64:
            seen.add(v)
            for x in d.operands:
                visit(x, depth + 1)
    for top in ops:
        for op in [top] + list(_walk_ops_all(top)):
            for v in op.operands:
                visit(v)
    return out


def _walk_ops_all(op):
    for r in op.regions:
        for b in r.blocks:
            yield from _walk_ops(b)


def _inside_ops(op, ops):
    b = op.parent
    while b is not None:
        po = b.parent_op
        if po is None:
            return False
        if any(po is o for o in ops):
            return True
        b = po.parent
    return False


def _stored_roots(ops):
    roots = set()
    for top in ops:
        for op in [top] + list(_walk_ops_all(top)):
            if op.name == "loop.store":
                roots.add(_root(op.operands[1]))
            if op.name == "loop.copy":
                roots.add(_root(op.operands[1]))
    return roots


def _vector_plan(loops, body, sunk):
    """For a float4 body: ({load op: name}, {store op: name}) or None."""
    if not loops:
        return None
    loop, (lb, ub, step, ext) = loops[-1]
    if lb != 0 or step != 1 or ext % 4 or ext == 0:
        return None
    iv = loop.regions[0].blocks[0].args[0]
    loads, stores = {}, {}
    stored = set()
    for op in body:
        if op.regions or op.name in ("loop.alloc", "loop.copy", "loop.view", "loop.call"):
            return None
    for op in list(sunk) + list(body):
        if op.name not in ("loop.load", "loop.store"):
            if any(v is iv for v in op.operands):
                return None  # the index is used as data
            continue
        buf = op.operands[0] if op.name == "loop.load" else op.operands[1]
        idx = list(op.operands[1:] if op.name == "loop.load" else op.operands[2:])
        uses_iv = [k for k, x in enumerate(idx) if x is iv]
        if not uses_iv:
            if op.name == "loop.store":
                return None
            continue
        t = buf.type
        if uses_iv != [len(idx) - 1] or t.shape[-1] != ext or str(t.element) != "f32":
            return None
        (stores if op.name == "loop.store" else loads)[op] = None
        if op.name == "loop.store":
            stored.add(_root(buf))
    for op in loads:
        if _root(op.operands[0]) in stored:
            return None
    if not stores:
        return None
    return loads, stores


def kernel_source(launch, name):
    """CUDA C for one gpu.launch: (source, params, grid, block, params' C types)."""
    ops = [o for o in launch.regions[0].blocks[0].ops if o.name != "gpu.terminator"]
    bufs = _outer_buffers(ops)
    stored = _stored_roots(ops)
    roots = [_root(b) for b in bufs]
    params, decl, ctypes_ = {}, [], []
    biggest = 1
    for k, b in enumerate(bufs):
        p = f"p{k}"
        params[b] = p
        ct = ctype(b.type.element)
        restrict = " __restrict__" if roots.count(_root(b)) == 1 else ""
        const = "" if _root(b) in stored else "const "
        decl.append(f"{const}{ct}*{restrict} {p}")
        ctypes_.append(f"{const}{ct}*")
        biggest = max(biggest, int(np.prod(b.type.shape, dtype=np.int64)))
    if len(ops) == 1 and ops[0].name == "loop.for":
        loops, sunk, body = collapse(ops[0])
    else:
        loops, sunk, body = [], [], ops
    total = int(np.prod([b[3] for _, b in loops], dtype=np.int64)) if loops else 1
    vec = _vector_plan(loops, body, sunk) if total > 0 else None
    lanes = 4 if vec else 1
    threads = total // lanes
    itype = "int" if biggest < (1 << 31) - 8 and threads < (1 << 31) - (1 << 22) else "long long"
    e = _Emitter(name, params, itype)
    e.depth = 2
    if loops:
        e.w(f"{itype} t = (({itype})tid){' * 4' if vec else ''};")
        for loop, (lb, ub, step, ext) in reversed(loops):
            iv = loop.regions[0].blocks[0].args[0]
            i = e.fresh("i")
            e.names[iv] = i
            if loop is loops[0][0]:
                e.w(f"const {itype} {i} = {lb} + t * {step};" if (lb, step) != (0, 1) else f"const {itype} {i} = t;")
            else:
                e.w(f"const {itype} {i} = {lb} + (t % {ext}) * {step}; t /= {ext};" if (lb, step) != (0, 1)
                    else f"const {itype} {i} = t % {ext}; t /= {ext};")
    for top in ops:  # scalars computed outside the kernel: recomputed at its start
        for op in [top] + list(_walk_ops_all(top)):
            for v in op.operands:
                d = getattr(v, "op", None)
                if d is not None and not isinstance(v.type, MemRefType) and d.name != "arith.constant" \
                        and not any(d is o for o in ops) and not _inside_ops(d, ops):
                    e.val(v)
    if vec:
        loads, stores = vec
        iv = loops[-1][0].regions[0].blocks[0].args[0]
        e.block(sunk)
        lnames, snames = {}, {}
        for op in loads:
            # the vector load needs the other (lane-independent) indices first
            p, shape = e.buf(op.operands[0])
            n = e.fresh("ld")
            e.w(f"float {n}[4]; *reinterpret_cast<float4*>({n}) = *reinterpret_cast<const float4*>(&{p}[{e.index(shape, op.operands[1:])}]);")
            lnames[op] = n
        for op in stores:
            n = e.fresh("st")
            e.w(f"float {n}[4];")
            snames[op] = n
        base_iv = e.names[iv]
        for u in range(4):
            saved = dict(e.names)
            lane_iv = e.fresh("l")
            e.w(f"{{ const {itype} {lane_iv} = {base_iv} + {u}; (void){lane_iv};")
            e.names[iv] = lane_iv
            e.lane = (iv, u, lnames, snames)
            e.depth += 1
            e.block(body)
            e.depth -= 1
            e.w("}")
            e.lane = None
            e.names = saved
        for op in stores:
            p, shape = e.buf(op.operands[1])
            n = snames[op]
            e.w(f"*reinterpret_cast<float4*>(&{p}[{e.index(shape, op.operands[2:])}]) = *reinterpret_cast<const float4*>({n});")
    else:
        e.block(sunk)
        e.block(body)
    limit = max(threads, 1) if loops else 1
    block = min(BLOCK, max(32, 1 << (max(limit, 1) - 1).bit_length())) if loops else 1
    grid = min(max(1, -(-limit // block)), MAX_GRID)
    src = [f'extern "C" __global__ void __launch_bounds__({BLOCK}) {name}({", ".join(decl)}) {{']
    src.append(f"  for (long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x; tid < {limit}ll; "
               f"tid += (long long)gridDim.x * blockDim.x) {{")
    src.extend(e.lines)
    src.append("  }")
    src.append("}")
    return "\n".join(src) + "\n", bufs, (grid, 1, 1), (block, 1, 1), ctypes_


# -- plans -----------------------------------------------------------------------------------
class FunctionPlan:
    """One partition function: buffers, steps, kernel sources, weights."""

    def __init__(self, func):
        self.func = func
        self.name = func.get_attr("sym_name")
        self.buffers = []     # dicts
        self.bid = {}         # memref value -> buffer id
        self.steps = []
        self.kernels = []     # (name, source, cooperative, param ctypes)
        self.weights = {}     # name -> numpy array

    def _add(self, v, entry):
        t = v.type
        entry.update({"shape": list(t.shape), "dtype": np.dtype(to_numpy_dtype(t.element)).str})
        self.bid[v] = len(self.buffers)
        self.buffers.append(entry)
        return self.bid[v]

    def _b(self, v):
        if v not in self.bid:
            op = getattr(v, "op", None)
            if op is not None and op.name == "loop.view":
                return self._add(v, {"kind": "view", "of": self._b(op.operands[0])})
            raise CodegenError(f"{self.name}: buffer {v.type} has no producer in the plan")
        return self.bid[v]

    def build(self):
        block = self.func.regions[0].blocks[0]
        ft = self.func.get_attr("function_type")
        nout = self.func.get_attr("tcc.num_outputs")
        self.num_inputs = len(ft.inputs) - nout
        for k, a in enumerate(block.args):
            self._add(a, {"kind": "arg", "index": k})
        nk = 0
        for op in block.ops:
            n = op.name
            if n == "loop.global":
                wname = f"{self.name}_w{len(self.weights)}"
                t = op.results[0].type
                arr = np.ascontiguousarray(np.asarray(elements_value(op.attributes["value"]),
                                                      dtype=to_numpy_dtype(t.element)).reshape(t.shape))
                self.weights[wname] = arr
                self._add(op.results[0], {"kind": "weight", "name": wname})
            elif n == "loop.alloc":
                t = op.results[0].type
                nbytes = int(np.prod(t.shape, dtype=np.int64)) * np.dtype(to_numpy_dtype(t.element)).itemsize
                self._add(op.results[0], {"kind": "scratch", "nbytes": nbytes})
            elif n == "loop.view":
                self._b(op.results[0])
            elif n == "loop.copy":
                src, dst = self._b(op.operands[0]), self._b(op.operands[1])
                t = op.operands[1].type
                nbytes = int(np.prod(t.shape, dtype=np.int64)) * np.dtype(to_numpy_dtype(t.element)).itemsize
                self.steps.append({"op": "copy", "src": src, "dst": dst, "nbytes": nbytes})
            elif n == "gpu.launch":
                kname = f"{self.name}_k{nk}"
                nk += 1
                src, bufs, grid, blk, cts = kernel_source(op, kname)
                self.kernels.append((kname, src, False, cts))
                self.steps.append({"op": "kernel", "kernel": kname, "grid": list(grid), "block": list(blk),
                                   "args": [self._b(b) for b in bufs]})
            elif n == "gpu.library":
                nk = self._library(op, nk)
            elif n in ("arith.constant", "loop.dealloc", "func.return") or n.startswith(("arith.", "math.")) \
                    or n == "loop.load":
                continue
            else:
                raise CodegenError(f"{self.name}: unexpected top-level op {n} after gpu lowering")
        return self

    def _library(self, op, nk):
        kind = op.get_attr("kind")
        p = json.loads(op.get_attr("params"))
        bufs = list(op.operands)
        ids = [self._b(b) for b in bufs]
        kname = f"{self.name}_k{nk}"
        if kind in ("matmul", "gemm", "conv_gemm"):
            self.steps.extend(gemm_steps(kind, bufs, ids, p))
            return nk
        x = bufs[0].type.shape
        if kind == "softmax":
            rows = int(np.prod(x, dtype=np.int64)) // p["cols"]
            src, grid, blk = templates.softmax(kname, rows, p["cols"], p["log"])
        elif kind == "layernorm":
            rows = int(np.prod(x, dtype=np.int64)) // p["cols"]
            src, grid, blk = templates.layernorm(kname, rows, p["cols"], p["eps"], p["has_bias"])
        elif kind == "reduce":
            rows = int(np.prod(x, dtype=np.int64)) // p["cols"]
            src, grid, blk = templates.reduce(kname, rows, p["cols"], p["op"])
        elif kind == "transpose2d":
            batch = int(np.prod(x[:-2], dtype=np.int64))
            src, grid, blk = templates.transpose2d(kname, batch, p["rows"], p["cols"])
        else:
            raise CodegenError(f"{self.name}: unknown gpu library kind {kind}")
        cts = ["const float*"] * (len(bufs) - 1) + ["float*"]
        self.kernels.append((kname, src, True, cts))
        self.steps.append({"op": "kernel", "kernel": kname, "grid": list(grid), "block": list(blk), "args": ids})
        return nk + 1

    def to_json(self):
        return {"name": self.name, "num_inputs": self.num_inputs, "buffers": self.buffers, "steps": self.steps,
                "kernels": [k[0] for k in self.kernels],
                "cooperative": [k[0] for k in self.kernels if k[2]],
                "param_types": {k[0]: k[3] for k in self.kernels}}


def gemm_steps(kind, bufs, ids, p):
    """Row-major GEMMs: C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C."""
    base = {"op": "gemm", "alpha": float(p.get("alpha", 1.0)), "beta": float(p.get("beta", 0.0)),
            "a": ids[0], "b": ids[1], "c": ids[2], "ta": 0, "tb": 0}
    if kind == "gemm":
        (a0, a1), (b0, b1) = bufs[0].type.shape, bufs[1].type.shape
        ta, tb = p["transA"], p["transB"]
        m, k = (a1, a0) if ta else (a0, a1)
        n = b0 if tb else b1
        return [dict(base, ta=ta, tb=tb, m=m, n=n, k=k, lda=a1, ldb=b1, ldc=n, batch=1, sa=0, sb=0, sc=0,
                     a_off=0, b_off=0, c_off=0)]
    if kind == "conv_gemm":
        M, K = bufs[0].type.shape
        N, _, P = bufs[1].type.shape
        return [dict(base, m=M, n=P, k=K, lda=K, ldb=P, ldc=P, batch=N, sa=0, sb=K * P, sc=M * P,
                     a_off=0, b_off=0, c_off=0)]
    a, b, c = (x.type.shape for x in bufs)
    M, K = a[-2], a[-1]
    N = b[-1]
    if len(b) == 2:  # fold A's batch into M
        m = int(np.prod(a[:-1], dtype=np.int64))
        return [dict(base, m=m, n=N, k=K, lda=K, ldb=N, ldc=N, batch=1, sa=0, sb=0, sc=0, a_off=0, b_off=0,
                     c_off=0)]
    batch = tuple(c[:-2])
    nb = int(np.prod(batch, dtype=np.int64))

    def strides(shape, mat):
        s = (1,) * (len(batch) - len(shape[:-2])) + tuple(shape[:-2])
        if s == batch:
            return "full", None
        if all(d == 1 for d in s):
            return "bcast", None
        return "mixed", s
    ka, sa_ = strides(a, M * K)
    kb, sb_ = strides(b, K * N)
    if ka != "mixed" and kb != "mixed":
        return [dict(base, m=M, n=N, k=K, lda=K, ldb=N, ldc=N, batch=nb, sa=M * K if ka == "full" else 0,
                     sb=K * N if kb == "full" else 0, sc=M * N, a_off=0, b_off=0, c_off=0)]
    steps = []
    for idx in np.ndindex(*batch):
        def off(s, mat):
            if s is None:
                return int(np.ravel_multi_index(idx, batch)) * mat if True else 0
            j = tuple(i if d != 1 else 0 for i, d in zip(idx, s))
            return int(np.ravel_multi_index(j, s)) * mat
        oa = off(sa_, M * K) if ka != "bcast" else 0
        ob = off(sb_, K * N) if kb != "bcast" else 0
        oc = int(np.ravel_multi_index(idx, batch)) * M * N
        steps.append(dict(base, m=M, n=N, k=K, lda=K, ldb=N, ldc=N, batch=1, sa=0, sb=0, sc=0,
                          a_off=oa, b_off=ob, c_off=oc))
    return steps


def module_source(plans):
    """One CUDA C translation unit with every kernel of the runtime module."""
    parts = ["// generated by tcc's gpu accelerator\n", templates.PRELUDE]
    for plan in plans:
        for name, src, _, _ in plan.kernels:
            parts.append(src)
    return "\n".join(parts)
