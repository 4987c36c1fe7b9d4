"""Lowers `func.func @main_graph` (loop/arith/math over static memrefs) to an
LLVM module with one exported entry, `tcc_main_graph` (see the package
docstring for the ABI).

Shape of the generated code:
- every top-level loop nest becomes an internal function whose buffer
  parameters are `noalias`: buffers used together in one nest are live at the
  same time, so the memory planner gave them disjoint bytes (views share their
  root's parameter), and that lets LLVM vectorize without runtime alias checks;
- the outermost `parallel` loop of a nest is outlined into
  `body(begin, end, ctx)` and run by `tcc_parallel_for` (runtime/native); a
  perfectly nested chain of parallel loops is collapsed until it has enough
  iterations to share across cores, keeping the innermost loop intact for the
  vectorizer;
- loops are emitted with one i64 induction variable counting up by a constant
  step (the form LLVM's loop passes expect); `vectorize` loops carry
  `llvm.loop.vectorize.enable`, `nounroll` ones `llvm.loop.unroll.disable`;
- planned allocs are GEPs into the workspace; unplanned ones inside parallel
  bodies live on the worker's stack (up to 256 KiB) or the heap;
- a nest whose root carries `tcc.library_call` (graph_to_loop/kernels.py:
  fp32 GEMM and convolution) is not emitted at all: it becomes one call
  `callee(&params, buffers...)` to the runtime library's kernel, with the
  parameter block as a private constant. The nest is that call's semantics
  (the loop interpreter runs it); the kernel is faster than anything LLVM
  makes of the nest and costs no optimisation time."""
from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field

import llvmlite.ir as ir
import numpy as np

from tcc.dialects.ir.attributes import DenseResourceAttr, elements_value
from tcc.dialects.ir.core import free_values
from tcc.dialects.ir.types import IntegerType, MemRefType, to_numpy_dtype

from .scalar import ScalarEmitter
from .scalar import constant as scalar_constant
from .target import NativeCodegenError
from .types import I1, I8, I32, I64, PTR, VOID, byte_size, elem_bytes, load_convert, mem_type, reg_type, \
    static_shape, store_convert

ENTRY = "tcc_main_graph"
WORKSPACE_SYMBOL = "tcc_workspace_bytes"
EMBED_LIMIT = 4096      # constants up to this many bytes go into the object code, larger ones are weights
STACK_LIMIT = 256 << 10  # unplanned buffers in parallel bodies up to this size live on the stack
# Serial nests (outline_nest) are functions called once, which LLVM inlines
# back into the entry; past this many the entry grows so large that LLVM's
# time on it is superlinear (a chain of 10000 small elementwise ops, 313
# nests: 24 s inlined, 7.7 s not), so they stay calls. Models have few
# (BERT's host compile 16, qdq_cnn 7, ResNet-18 and MobileNetV2 2; the
# parallel nests are called through tcc_parallel_for, never inlined).
MAX_INLINED_NESTS = 64
COLLAPSE_MIN = 64        # collapse parallel loops until at least this many iterations
# A parallel nest whose bounds are constants and whose body runs fewer scalar
# ops than this in all runs on the calling thread: a second thread's wake-up
# (a few us) is more than such a nest takes, and the woken worker then spins
# beside the caller. detection_nms's host suffix (gathers of 5 x 3 boxes)
# woke a worker on every call; on the 2-core Intel Xeon the worker spinning
# on the caller's CPU doubled the whole call (0.045 -> 0.09 ms) in runs where
# the scheduler left the caller there. The host path of the corpus (2
# threads, same machine, bench_corpus): llama 0.24 -> 0.16-0.19 ms, qwen2
# 0.24 -> 0.15, t5_encoder 0.20 -> 0.12, rnn_tagger_torchscript 0.14 ->
# 0.07; a threshold of 4096 left t5_encoder at 0.21, 16384 did as this one.
SERIAL_OPS = 32 * 1024
LIBRARY_CALL = "tcc.library_call"


@dataclass
class Weight:
    name: str
    array: np.ndarray


@dataclass
class Lowered:
    llvm_ir: str
    inputs: list            # MemRefTypes of the input buffers
    outputs: list
    weights: list           # [Weight], in the entry's `weights` order
    workspace_bytes: int
    stats: dict = field(default_factory=dict)


class _Env:
    """Where code is being emitted: the LLVM function, its builder, the
    value map, and whether we are inside a parallel body."""

    def __init__(self, fn, kind, vmap, ws):
        self.fn, self.kind, self.vmap, self.ws = fn, kind, vmap, ws
        # Allocas go in their own first block (so they are static and LLVM
        # promotes or reuses them); code starts in the next one.
        self._entry = ir.IRBuilder(fn.append_basic_block("allocas"))
        start = fn.append_basic_block("entry")
        self._jump = self._entry.branch(start)
        self.b = ir.IRBuilder(start)

    def entry_alloca(self, typ, align):
        self._entry.position_before(self._jump)
        a = self._entry.alloca(typ)
        a.align = align
        a.type = PTR  # llvmlite types it `typ*`; everything here uses opaque pointers
        return a


# Math ops that stay vector code (LLVM intrinsics with vector lowerings, or
# our inline f32 versions); anything else becomes a scalar libm call.
_VECTOR_MATH = {"math.sqrt", "math.absf", "math.floor", "math.ceil", "math.round", "math.roundeven",
                "math.trunc", "math.fma", "math.rsqrt", "math.isnan", "math.isinf", "math.absi"}
_VECTOR_F32_MATH = {"math.exp", "math.tanh", "math.erf"}


def _wants_vectorize(op):
    """Whether to force-vectorize a loop: innermost loops whose bodies call
    neither libm nor an external kernel (elsewhere LLVM would refuse and
    print a warning; its cost model still decides alone), when marked
    `vectorize` or when every access is unit-stride or invariant in the
    loop (`_unit_stride`: lowerings such as Softmax's do not mark their row
    loops). Forcing matters beyond the cost model: LLVM reorders a float
    reduction (sum, max) only in a loop whose vectorization is forced, and a
    scalar reduction chain was 8x slower on Softmax + LayerNormalization."""
    if "vectorize" not in op.attributes and not _unit_stride(op):
        return False
    for o in op.walk():
        if o is not op and o.name == "loop.for":
            return False  # LLVM vectorizes innermost loops only
        if o.name == "loop.call" or o.name in ("arith.powf", "arith.remf"):
            return False
        if o.name.startswith("math.") and o.name not in _VECTOR_MATH:
            if o.name not in _VECTOR_F32_MATH or str(o.results[0].type) not in ("f32", "f16", "bf16"):
                return False
    return True


def _unit_stride(op):
    """An innermost loop (step 1) whose loads and stores index with loop
    invariants, except for the loop's own iv in one position whose stride is
    1 element; no nested loops or ifs."""
    if op.get_attr("step", 1) != 1:
        return False
    body = op.regions[0].blocks[0]
    iv = body.args[0]
    inside = set()
    n_access = 0
    for o in op.walk():
        if o is op:
            continue
        if o.name in ("loop.for", "loop.if"):
            return False
        if o.name in ("loop.load", "loop.store"):
            n_access += 1
            first = 1 if o.name == "loop.load" else 2
            mem = o.operands[first - 1]
            idx = o.operands[first:]
            shape = mem.type.shape
            for d, v in enumerate(idx):
                if v is iv:
                    if any(s != 1 for s in shape[d + 1:]):
                        return False
                elif v in inside:
                    return False  # an index computed from the iv: a gather or a non-unit stride
        inside.update(o.results)
    return n_access > 0


def _defining(v):
    return getattr(v, "op", None)


def _static_int(v, env):
    """v's value where it is a compile-time integer, else None."""
    x = env.vmap.get(v)
    if isinstance(x, ir.Constant) and isinstance(x.constant, int):
        return x.constant
    d = _defining(v)
    if d is not None and d.name == "arith.constant" and isinstance(d.get_attr("value"), int):
        return d.get_attr("value")
    return None


def _static_ops(loop, env, limit=SERIAL_OPS):
    """How many ops the nest under `loop` runs in all (each op once per
    iteration of the loops around it), counted up to `limit`; `limit` where
    a bound is not a compile-time constant (a dynamic dim) or the nest calls
    out (loop.call, loop.copy)."""
    def count(ops, mult):
        total = 0
        for o in ops:
            if o.name == "loop.for":
                lb, ub = _static_int(o.operands[0], env), _static_int(o.operands[1], env)
                if lb is None or ub is None:
                    return limit
                trips = max(0, -(-(ub - lb) // (o.get_attr("step", 1) or 1)))
                total += count(o.regions[0].blocks[0].ops, mult * trips)
            elif o.name in ("loop.call", "loop.copy"):  # a cost this count does not see
                return limit
            else:
                total += mult + sum(count(b.ops, mult) for r in o.regions for b in r.blocks)
            if total >= limit:
                return limit
        return total
    return count([loop], 1)


def _is_x86():
    from .target import host_cpu
    return host_cpu()[0].startswith(("x86_64", "i686", "i386"))


class _Lowering:
    def __init__(self, module, func):
        self.module, self.func = module, func
        self.mod = ir.Module(name="tcc")
        self.scalar = ScalarEmitter(self.mod)
        self.weights, self._weight_index, self._embedded = [], {}, {}
        self._scalars = {}  # one-element loop.global -> its value (_scalar_global)
        self.malloced = set()
        self.streams = False  # streaming stores emitted: the entry fences before returning
        self.unused_globals = set()
        self.stats = Counter()
        self.n_funcs = 0
        self.loop_md = 0
        self.nest_fns = []

    # -- entry ---------------------------------------------------------------------
    def run(self) -> Lowered:
        func = self.func
        block = func.regions[0].blocks[0]
        nout = func.get_attr("tcc.num_outputs")
        if nout is None:
            raise NativeCodegenError("@main_graph has no tcc.num_outputs attribute: not a lowered module")
        args = list(block.args)
        nin = len(args) - nout
        for a in args:
            if not isinstance(a.type, MemRefType):
                raise NativeCodegenError(f"@main_graph argument of type {a.type}: expected a memref")
            static_shape(a.type, "@main_graph argument")
        fn = ir.Function(self.mod, ir.FunctionType(VOID, [PTR, PTR, PTR]), ENTRY)
        fn.args[0].name, fn.args[1].name, fn.args[2].name = "args", "weights", "workspace"
        env = _Env(fn, "main", {}, fn.args[2])
        self._weights_arg = fn.args[1]
        b = env.b
        for i, a in enumerate(args):
            p = b.load(b.gep(fn.args[0], [ir.Constant(I64, i)], inbounds=True, source_etype=PTR), typ=PTR)
            p.name = f"arg{i}"
            env.vmap[a] = p
        self._load_globals(env, fn.args[1])
        self.emit_block(block, env)
        if len(self.nest_fns) > MAX_INLINED_NESTS:
            for f in self.nest_fns:
                f.attributes.add("noinline")
        if self.streams:
            env.b.call(self._declare("tcc_stream_fence", VOID, []), [])
        env.b.ret_void()
        ws = func.get_attr("tcc.workspace_bytes", 0) or 0
        g = ir.GlobalVariable(self.mod, I64, WORKSPACE_SYMBOL)
        g.initializer, g.global_constant = ir.Constant(I64, ws), True
        self.stats["weights"] = len(self.weights)
        text = _finish_loop_metadata(str(self.mod))
        return Lowered(text, [a.type for a in args[:nin]], [a.type for a in args[nin:]], self.weights, ws,
                       dict(self.stats))

    def _load_globals(self, env, weights_arg):
        """Every loop.global, wherever it is: small ones become constants in
        the object code, the rest are loaded from the weights table once."""
        loaded = {}
        self.unused_globals = unused = self._replaced_globals()
        for op in self.func.walk():
            if op.name != "loop.global" or op in unused:
                continue
            t = op.results[0].type
            shape = static_shape(t, "loop.global")
            attr = op.attributes["value"]
            arr = elements_value(attr)
            if arr is None:
                raise NativeCodegenError(f"loop.global ({op.loc.describe()}): its constant's bytes are missing")
            arr = np.ascontiguousarray(np.asarray(arr).astype(to_numpy_dtype(t.element), copy=False).reshape(shape))
            el = t.element
            if arr.size == 1 and (getattr(el, "name", "") in ("f32", "f64") or
                                  (isinstance(el, IntegerType) and el.width in (8, 16, 32, 64))):
                self._scalars[op] = arr.reshape(-1)[0].item()  # read as a constant (_scalar_global)
            if arr.nbytes <= EMBED_LIMIT:
                env.vmap[op.results[0]] = self._embed(arr)
                continue
            name = attr.name if isinstance(attr, DenseResourceAttr) else None
            key = name or hashlib.sha256(arr.tobytes() + str(arr.dtype).encode()).hexdigest()
            idx = self._weight_index.get(key)
            if idx is None:
                idx = len(self.weights)
                self._weight_index[key] = idx
                self.weights.append(Weight(name or f"const_{idx}", arr))
            if idx not in loaded:
                b = env.b
                p = b.load(b.gep(weights_arg, [ir.Constant(I64, idx)], inbounds=True, source_etype=PTR), typ=PTR)
                p.name = f"w{idx}"
                loaded[idx] = p
            env.vmap[op.results[0]] = loaded[idx]

    def _scalar_global(self, v):
        """The value of a one-element loop.global of f32, f64 or integers of
        8 bits or more that `v` is (or a view of), else None (recorded by
        _load_globals). A load of it is emitted as that constant: a parallel
        body captures constants as they are, so LLVM sees a quantization's
        scales, zero points and clip bounds, where a loaded value reached the
        body through its context struct (max/min against a constant bound
        lower to one compare and select: scalar.py's _bound)."""
        d = _defining(v)
        while d is not None and d.name == "loop.view":
            d = _defining(d.operands[0])
        return self._scalars.get(d)

    def _replaced_globals(self):
        """loop.globals (and their views) read only inside library-call nests
        that are given a pre-packed copy instead (constant conv and GEMM
        weights): the artifact would otherwise carry every such weight twice."""
        from tcc.dialects.conversions.graph_to_loop.kernels import memref_free_values
        roots, passed = [], set()
        for o in self.func.walk():
            if o.name == "loop.for" and LIBRARY_CALL in o.attributes:
                roots.append(o)
                free = memref_free_values(o)
                passed.update(free[k] for k in o.attributes[LIBRARY_CALL].value["buffers"].value if k >= 0)
        out = set()
        if not roots:
            return out
        for g in self.func.walk():
            if g.name != "loop.global":
                continue
            values, users, views, ok = [g.results[0]], [], [], True
            while values and ok:
                v = values.pop()
                if v in passed:
                    ok = False
                for u, _ in v.uses:
                    if u.name == "loop.view":
                        values.extend(u.results)
                        views.append(u)
                    else:
                        users.append(u)
            if ok and users and all(any(r.is_ancestor_of(u) for r in roots) for u in users):
                out.add(g)
                out.update(views)
        return out

    def _embed(self, arr):
        key = hashlib.sha256(arr.tobytes()).hexdigest()
        g = self._embedded.get(key)
        if g is None:
            data = arr.tobytes()
            ty = ir.ArrayType(I8, max(len(data), 1))
            g = ir.GlobalVariable(self.mod, ty, f"tcc_const_{len(self._embedded)}")
            g.initializer = ir.Constant(ty, bytearray(data or b"\0"))
            g.global_constant, g.linkage, g.align = True, "private", 64
            g.type = PTR  # opaque, like every other buffer pointer
            self._embedded[key] = g
        return g

    # -- blocks and ops ---------------------------------------------------------------
    def emit_block(self, block, env):
        for op in block.ops:
            if op.name in ("loop.yield", "func.return"):
                continue
            self.emit_op(op, env)

    def emit_op(self, op, env):
        name = op.name
        self.stats["op:" + name] += 1
        m = getattr(self, "_op_" + name.replace(".", "_"), None)
        if m is not None:
            m(op, env)
            return
        if name.startswith(("arith.", "math.")):
            args = [env.vmap[v] for v in op.operands]
            env.vmap[op.results[0]] = self.scalar.emit(op, env.b, args)
            return
        raise NativeCodegenError(f"'{name}' ({op.loc.describe()}) is not supported by the native backend")

    def _op_loop_for(self, op, env):
        if LIBRARY_CALL in op.attributes:
            self.emit_library_call(op, env)
            return
        parallel = "parallel" in op.attributes
        if parallel and env.kind != "par" and _static_ops(op, env) >= SERIAL_OPS:
            self.outline_parallel(op, env)
        elif env.kind == "main":
            self.outline_nest(op, env)
        else:
            self.emit_for(op, env)

    def _op_loop_global(self, op, env):
        if op in self.unused_globals:
            return
        if op.results[0] not in env.vmap:
            raise NativeCodegenError(f"loop.global ({op.loc.describe()}) was not preloaded")

    def _op_loop_view(self, op, env):
        if op in self.unused_globals:
            return
        env.vmap[op.results[0]] = env.vmap[op.operands[0]]

    def _op_loop_dim(self, op, env):
        shape = static_shape(op.operands[0].type, "loop.dim")
        env.vmap[op.results[0]] = ir.Constant(I64, shape[op.get_attr("axis")])

    def _addr(self, env, mem, idxs):
        t = mem.type
        shape = static_shape(t)
        b = env.b
        lin = ir.Constant(I64, 0)
        for k, i in enumerate(idxs):
            iv = env.vmap[i]
            lin = iv if k == 0 else b.add(b.mul(lin, ir.Constant(I64, shape[k]), flags=["nsw"]), iv, flags=["nsw"])
        return b.gep(env.vmap[mem], [lin], inbounds=True, source_etype=mem_type(t.element))

    def _op_loop_load(self, op, env):
        el = op.operands[0].type.element
        c = self._scalar_global(op.operands[0])
        if c is not None:
            env.vmap[op.results[0]] = scalar_constant(el, c)
            return
        p = self._addr(env, op.operands[0], op.operands[1:])
        env.vmap[op.results[0]] = load_convert(env.b, env.b.load(p, typ=mem_type(el)), el)

    def _op_loop_store(self, op, env):
        el = op.operands[1].type.element
        p = self._addr(env, op.operands[1], op.operands[2:])
        env.b.store(store_convert(env.b, env.vmap[op.operands[0]], el), p)

    def _op_loop_alloc(self, op, env):
        t = op.results[0].type
        size = byte_size(t)
        off = op.get_attr("tcc.offset")
        b = env.b
        if off is not None and env.kind != "par" and env.ws is not None:
            p = b.gep(env.ws, [ir.Constant(I64, off)], inbounds=True, source_etype=I8)
            self.stats["planned_allocs"] += 1
        elif env.kind == "par" and size <= STACK_LIMIT:
            p = env.entry_alloca(ir.ArrayType(I8, max(size, 1)), 64)
            self.stats["stack_allocs"] += 1
        else:
            fn = self._declare("aligned_alloc", PTR, [I64, I64])
            p = b.call(fn, [ir.Constant(I64, 64), ir.Constant(I64, max(-(-size // 64) * 64, 64))])
            self.malloced.add(op.results[0])
            self.stats["heap_allocs"] += 1
        env.vmap[op.results[0]] = p

    def _op_loop_dealloc(self, op, env):
        if op.operands[0] in self.malloced:
            env.b.call(self._declare("free", VOID, [PTR]), [env.vmap[op.operands[0]]])

    def _op_loop_copy(self, op, env):
        src, dst = op.operands
        n = min(byte_size(src.type), byte_size(dst.type))
        fn = self._declare("llvm.memcpy.p0.p0.i64", VOID, [PTR, PTR, I64, I1])
        env.b.call(fn, [env.vmap[dst], env.vmap[src], ir.Constant(I64, n), ir.Constant(I1, 0)])

    def _op_loop_store_block(self, op, env):
        src, dst, off, cnt = op.operands
        es = elem_bytes(dst.type.element)  # every element owns whole bytes in memory
        b = env.b
        to = b.gep(env.vmap[dst], [b.mul(env.vmap[off], ir.Constant(I64, es))], inbounds=True, source_etype=I8)
        nbytes = b.mul(env.vmap[cnt], ir.Constant(I64, es))
        if "nontemporal" in op.attributes and _is_x86():
            self.streams = True
            b.call(self._declare("tcc_stream_copy", VOID, [PTR, PTR, I64]), [to, env.vmap[src], nbytes])
        else:
            fn = self._declare("llvm.memcpy.p0.p0.i64", VOID, [PTR, PTR, I64, I1])
            b.call(fn, [to, env.vmap[src], nbytes, ir.Constant(I1, 0)])

    def _op_loop_prefetch(self, op, env):
        """One prefetch per cache line of a statically sized block (at most
        256 lines); prefetches never fault, so the block may run past the
        buffer's end (the last row's next row)."""
        buf, off, cnt = op.operands
        es = elem_bytes(buf.type.element)
        count = cnt.op.get_attr("value") if getattr(cnt, "op", None) is not None and \
            cnt.op.name == "arith.constant" else None
        if count is None:
            return
        b = env.b
        fn = self._declare("llvm.prefetch.p0", VOID, [PTR, I32, I32, I32])
        base = b.gep(env.vmap[buf], [b.mul(env.vmap[off], ir.Constant(I64, es))], source_etype=I8)
        for k in range(0, min(int(count) * es, 256 * 64), 64):
            p = b.gep(base, [ir.Constant(I64, k)], source_etype=I8)
            b.call(fn, [p, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])

    def _op_loop_call(self, op, env):
        if len(op.results) > 1:
            raise NativeCodegenError(f"loop.call ({op.loc.describe()}): at most one result is supported")
        callee = op.get_attr("callee")
        ret = reg_type(op.results[0].type) if op.results else VOID
        fn = self._declare(callee, ret, [reg_type(v.type) for v in op.operands])
        r = env.b.call(fn, [env.vmap[v] for v in op.operands])
        if op.results:
            env.vmap[op.results[0]] = r

    def _constant_pointer(self, env, arr):
        """A constant array as a weight (or embedded when small), loaded
        from the entry's weights table at the current point."""
        if arr.nbytes <= EMBED_LIMIT:
            return self._embed(arr)
        key = hashlib.sha256(arr.tobytes() + str(arr.dtype).encode()).hexdigest()
        idx = self._weight_index.get(key)
        if idx is None:
            idx = len(self.weights)
            self._weight_index[key] = idx
            self.weights.append(Weight(f"packed_{idx}", arr))
        b = env.b
        return b.load(b.gep(self._weights_arg, [ir.Constant(I64, idx)], inbounds=True, source_etype=PTR), typ=PTR)

    def emit_library_call(self, op, env):
        """The nest rooted at `op` as one call to its runtime kernel."""
        from tcc.dialects.conversions.graph_to_loop.kernels import memref_free_values
        spec = op.attributes[LIBRARY_CALL].value
        callee = spec["callee"].value
        params = [int(x) for x in spec["params"].value]
        free = memref_free_values(op)
        ty = ir.ArrayType(I64, max(len(params), 1))
        g = ir.GlobalVariable(self.mod, ty, f"tcc_params_{self.n_funcs}_{len(self.mod.globals)}")
        g.initializer = ir.Constant(ty, params or [0])
        g.global_constant, g.linkage, g.align = True, "private", 8
        g.type = PTR
        args = [g]
        for k in spec["buffers"].value:
            if k == -2:
                if env.kind != "main" or "packed" not in spec:
                    raise NativeCodegenError(f"{LIBRARY_CALL} on loop.for ({op.loc.describe()}): a pre-packed "
                                             "constant outside the entry function")
                args.append(self._constant_pointer(env, np.ascontiguousarray(elements_value(spec["packed"]))))
            elif k < 0:
                args.append(ir.Constant(PTR, None))
            elif k >= len(free):
                raise NativeCodegenError(f"{LIBRARY_CALL} on loop.for ({op.loc.describe()}): buffer #{k} of "
                                         f"{len(free)}")
            else:
                args.append(env.vmap[free[k]])
        fn = self._declare(callee, VOID, [PTR] * len(args))
        fn.attributes.add("nounwind")
        env.b.call(fn, args)
        self.stats["library_calls"] += 1

    def _op_loop_if(self, op, env):
        b = env.b
        cond = env.vmap[op.operands[0]]
        then_bb = env.fn.append_basic_block("if.then")
        else_bb = env.fn.append_basic_block("if.else")
        merge = env.fn.append_basic_block("if.end")
        b.cbranch(cond, then_bb, else_bb)
        for bb, region in ((then_bb, op.regions[0]), (else_bb, op.regions[1] if len(op.regions) > 1 else None)):
            b.position_at_end(bb)
            if region is not None and region.blocks:
                self.emit_block(region.blocks[0], env)
            b.branch(merge)
        b.position_at_end(merge)

    def _declare(self, name, ret, params):
        fn = self.mod.globals.get(name)
        if fn is None:
            fn = ir.Function(self.mod, ir.FunctionType(ret, params), name)
        return fn

    # -- loops -------------------------------------------------------------------------
    def counted_loop(self, env, lb, ub, step, body, vectorize=False, unroll=True):
        """for (iv = lb; iv < ub; iv += step) body(iv)"""
        b = env.b
        pre = b.block
        header = env.fn.append_basic_block("for.header")
        loop = env.fn.append_basic_block("for.body")
        exit_ = env.fn.append_basic_block("for.end")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(I64, name="iv")
        iv.add_incoming(lb, pre)
        b.cbranch(b.icmp_signed("<", iv, ub), loop, exit_)
        b.position_at_end(loop)
        body(iv)
        nxt = b.add(iv, ir.Constant(I64, step), flags=["nsw"])
        iv.add_incoming(nxt, b.block)
        br = b.branch(header)
        if vectorize or not unroll:
            br.set_metadata("llvm.loop", self._loop_md(vectorize, unroll))
        b.position_at_end(exit_)

    def _loop_md(self, vectorize=True, unroll=True):
        self.loop_md += 1
        hints = []
        if vectorize:
            hints.append(self.mod.add_metadata([ir.MetaDataString(self.mod, "llvm.loop.vectorize.enable"),
                                                ir.Constant(I1, 1)]))
        if not unroll:
            hints.append(self.mod.add_metadata([ir.MetaDataString(self.mod, "llvm.loop.unroll.disable")]))
        return self.mod.add_metadata([ir.MetaDataString(self.mod, f"tcc.loop.{self.loop_md}")] + hints)

    def emit_for(self, op, env):
        blk = op.regions[0].blocks[0]
        lb, ub = env.vmap[op.operands[0]], env.vmap[op.operands[1]]

        def body(iv):
            env.vmap[blk.args[0]] = iv
            self.emit_block(blk, env)

        self.counted_loop(env, lb, ub, op.get_attr("step", 1), body, _wants_vectorize(op),
                          "nounroll" not in op.attributes)

    # -- outlining ------------------------------------------------------------------------
    def _capture(self, op, env):
        """Splits a nest's free values into constants (used as they are) and
        parameters: one noalias pointer per distinct buffer, scalars by value."""
        fixed, params, keys = {}, [], {}
        for v in free_values(op):
            if getattr(v, "op", None) in self.unused_globals:
                continue  # only read by library calls given a packed copy: never emitted
            lv = env.vmap[v]
            if isinstance(lv, (ir.Constant, ir.GlobalVariable)):
                fixed[v] = lv
                continue
            k = id(lv)
            if k not in keys:
                keys[k] = len(params)
                params.append(lv)
            fixed[v] = keys[k]
        needs_ws = any(o.name == "loop.alloc" and o.get_attr("tcc.offset") is not None for o in op.walk())
        return fixed, params, needs_ws

    def _new_function(self, prefix, lead, params, needs_ws, kind):
        """An internal function taking `lead` types, then the captured params
        (pointers noalias), then the workspace if needed."""
        self.n_funcs += 1
        types = list(lead) + [p.type for p in params] + ([PTR] if needs_ws else [])
        fn = ir.Function(self.mod, ir.FunctionType(VOID, types), f"tcc_{prefix}{self.n_funcs}")
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        for a, p in zip(fn.args[len(lead):], params):
            if isinstance(p.type, ir.PointerType):
                a.add_attribute("noalias")
        ws = fn.args[-1] if needs_ws else None
        return fn, _Env(fn, kind, {}, ws)

    @staticmethod
    def _bind(new_env, fixed, first_param):
        for v, x in fixed.items():
            new_env.vmap[v] = new_env.fn.args[first_param + x] if isinstance(x, int) else x

    def outline_nest(self, op, env):
        fixed, params, needs_ws = self._capture(op, env)
        fn, inner = self._new_function("nest", [], params, needs_ws, "nest")
        self.nest_fns.append(fn)
        self._bind(inner, fixed, 0)
        self.emit_for(op, inner)
        inner.b.ret_void()
        env.b.call(fn, params + ([env.ws] if needs_ws else []))
        self.stats["nests"] += 1

    def _parallel_chain(self, op):
        """The perfectly nested parallel loops under `op` whose bounds are
        defined outside `op` (so their trip counts are known before it)."""
        chain = [op]
        inside = set(op.walk())
        while True:
            ops = [o for o in chain[-1].regions[0].blocks[0].ops if o.name != "loop.yield"]
            if len(ops) != 1 or ops[0].name != "loop.for" or "parallel" not in ops[0].attributes:
                return chain
            inner = ops[0]
            if any(_defining(v) in inside for v in inner.operands):
                return chain
            chain.append(inner)

    @staticmethod
    def _trip_count(b, lb, ub, step):
        if isinstance(lb, ir.Constant) and isinstance(ub, ir.Constant):
            return ir.Constant(I64, max(0, -(-(ub.constant - lb.constant) // step)))
        span = b.sub(ub, lb)
        n = b.sdiv(b.add(span, ir.Constant(I64, step - 1)), ir.Constant(I64, step))
        return b.select(b.icmp_signed("<", n, ir.Constant(I64, 0)), ir.Constant(I64, 0), n)

    def outline_parallel(self, op, env):
        chain = self._parallel_chain(op)
        # Collapse the shortest prefix with enough iterations for every core.
        m, total = len(chain), 1
        for k, lp in enumerate(chain):
            lb, ub = env.vmap[lp.operands[0]], env.vmap[lp.operands[1]]
            if not (isinstance(lb, ir.Constant) and isinstance(ub, ir.Constant)):
                m = max(k, 1)
                break
            total *= max(0, -(-(ub.constant - lb.constant) // lp.get_attr("step", 1)))
            if total >= COLLAPSE_MIN:
                m = k + 1
                break
        chain = chain[:m]
        fixed, params, needs_ws = self._capture(op, env)
        fn, inner = self._new_function("par", [I64, I64], params, needs_ws, "par")
        self._bind(inner, fixed, 2)
        b = inner.b
        steps = [lp.get_attr("step", 1) for lp in chain]
        lbs = [inner.vmap[lp.operands[0]] for lp in chain]
        tcs = [self._trip_count(b, inner.vmap[lp.operands[0]], inner.vmap[lp.operands[1]], s)
               for lp, s in zip(chain, steps)]
        last = chain[-1].regions[0].blocks[0]

        def body(t):
            for k in range(len(chain) - 1, -1, -1):
                lp = chain[k]
                if k > 0:
                    tk = b.urem(t, tcs[k])
                    t_next = b.udiv(t, tcs[k])
                else:
                    tk = t
                iv = b.add(lbs[k], b.mul(tk, ir.Constant(I64, steps[k]), flags=["nsw"]), flags=["nsw"]) \
                    if not (steps[k] == 1 and isinstance(lbs[k], ir.Constant) and lbs[k].constant == 0) else tk
                inner.vmap[lp.regions[0].blocks[0].args[0]] = iv
                if k > 0:
                    t = t_next
            self.emit_block(last, inner)

        self.counted_loop(inner, fn.args[0], fn.args[1], 1, body,
                          len(chain) == 1 and _wants_vectorize(chain[0]))
        b.ret_void()

        # The trampoline the thread pool calls: unpacks the context struct.
        types = [p.type for p in params] + ([PTR] if needs_ws else [])
        ctx_ty = ir.LiteralStructType(types or [I8])
        self.n_funcs += 1
        tramp = ir.Function(self.mod, ir.FunctionType(VOID, [I64, I64, PTR]), f"tcc_body{self.n_funcs}")
        tramp.linkage = "internal"
        tb = ir.IRBuilder(tramp.append_basic_block("entry"))
        vals = [tb.load(tb.gep(tramp.args[2], [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True,
                               source_etype=ctx_ty), typ=t) for i, t in enumerate(types)]
        tb.call(fn, [tramp.args[0], tramp.args[1]] + vals)
        tb.ret_void()

        cb = env.b
        ctx = env.entry_alloca(ctx_ty, 8)
        for i, v in enumerate(params + ([env.ws] if needs_ws else [])):
            cb.store(v, cb.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True, source_etype=ctx_ty))
        n = ir.Constant(I64, 1)
        for lp, s in zip(chain, steps):
            tc = self._trip_count(cb, env.vmap[lp.operands[0]], env.vmap[lp.operands[1]], s)
            n = ir.Constant(I64, n.constant * tc.constant) if isinstance(n, ir.Constant) and \
                isinstance(tc, ir.Constant) else cb.mul(n, tc)
        pf = self._declare("tcc_parallel_for", VOID, [I64, PTR, PTR])
        tramp.type = PTR  # passed as an opaque pointer, not llvmlite's typed function pointer
        cb.call(pf, [n, tramp, ctx])
        self.stats["parallel_loops"] += 1


_LOOP_MD = re.compile(r'^(!\d+) = !\{ ?!"tcc\.loop\.\d+"', re.M)


def _finish_loop_metadata(text):
    """llvm.loop nodes must be distinct and refer to themselves, which
    llvmlite cannot build: we tag them and patch the text."""
    return _LOOP_MD.sub(lambda m: f"{m.group(1)} = distinct !{{ {m.group(1)}", text)


def lower_module(module, function="main_graph") -> Lowered:
    func = module.lookup_function(function)
    if func is None:
        raise NativeCodegenError(f"no function @{function} to compile")
    return _Lowering(module, func).run()
