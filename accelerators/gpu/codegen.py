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

import numpy as np

from tcc.dialects.ir.attributes import elements_value
from tcc.dialects.conversions.loop_to_native.cstyle import CStyleLanguage, LoopRenderer, RenderError
from tcc.dialects.ir.types import FloatType, MemRefType, to_numpy_dtype
from tcc.dialects.loop.analysis import (collapse, free_buffers, nested_in, root_buffer, vector_accesses, walk_nested,
                                        written_buffers)

from . import templates

BLOCK = 256
MAX_GRID = 1 << 20
LANES = 4  # float4: 16-byte loads and stores


class CodegenError(RenderError):
    pass


class CudaLanguage(CStyleLanguage):
    """CUDA C: what differs from the shared C renderer (cstyle.py)."""

    name = "CUDA C"
    error = CodegenError
    restrict = "__restrict__"

    def bitcast(self, x, t, it):
        if isinstance(t, FloatType) and t.name == "f32":
            return f"__int_as_float((int){x})"
        if isinstance(it, FloatType) and it.name == "f32":
            return f"({self.ctype(t)})__float_as_int({x})"
        if isinstance(t, FloatType):
            return f"__longlong_as_double((long long){x})"
        return f"({self.ctype(t)})__double_as_longlong({x})"

    def param(self, name, ctype, const, restrict):
        return f"{'const ' if const else ''}{ctype}*{' ' + self.restrict if restrict else ''} {name}"

    def vector_load(self, dst, src, lanes):
        return f"*reinterpret_cast<float{lanes}*>({dst}) = *reinterpret_cast<const float{lanes}*>({src});"

    def vector_store(self, dst, src, lanes):
        return f"*reinterpret_cast<float{lanes}*>({dst}) = *reinterpret_cast<const float{lanes}*>({src});"

    def render_kernel(self, name, params, body, limit):
        """A grid-stride loop of `limit` threads, `BLOCK` per block at most."""
        decl = ", ".join(self.param(*p) for p in params)
        src = [f'extern "C" __global__ void __launch_bounds__({BLOCK}) {name}({decl}) {{',
               f"  for (long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x; tid < {limit}ll; "
               f"tid += (long long)gridDim.x * blockDim.x) {{"]
        return "\n".join(src + list(body) + ["  }", "}"]) + "\n"


CUDA = CudaLanguage()


# -- kernels ------------------------------------------------------------------------------
def kernel_source(launch, name):
    """CUDA C for one gpu.launch: (source, params, grid, block, params' C types)."""
    ops = [o for o in launch.regions[0].blocks[0].ops if o.name != "gpu.terminator"]
    bufs = free_buffers(ops)
    stored = written_buffers(ops)
    roots = [root_buffer(b) for b in bufs]
    params, decl, ctypes_ = {}, [], []
    biggest = 1
    for k, b in enumerate(bufs):
        p = f"p{k}"
        params[b] = p
        ct = CUDA.ctype(b.type.element)
        const = root_buffer(b) not in stored
        decl.append((p, ct, const, roots.count(root_buffer(b)) == 1))
        ctypes_.append(f"{'const ' if const else ''}{ct}*")
        biggest = max(biggest, int(np.prod(b.type.shape, dtype=np.int64)))
    if len(ops) == 1 and ops[0].name == "loop.for":
        loops, sunk, body = collapse(ops[0])
    else:
        loops, sunk, body = [], [], ops
    total = int(np.prod([b[3] for _, b in loops], dtype=np.int64)) if loops else 1
    vec = vector_accesses(loops, body, sunk, LANES) if total > 0 else None
    lanes = LANES if vec else 1
    threads = total // lanes
    itype = "int" if biggest < (1 << 31) - 8 and threads < (1 << 31) - (1 << 22) else "long long"
    e = LoopRenderer(CUDA, name, params, itype)
    e.depth = 2
    if loops:
        e.w(f"{itype} t = (({itype})tid){f' * {LANES}' if vec else ''};")
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
        for op in [top] + list(walk_nested(top)):
            for v in op.operands:
                d = getattr(v, "op", None)
                if d is not None and not isinstance(v.type, MemRefType) and d.name != "arith.constant" \
                        and not any(d is o for o in ops) and not nested_in(d, ops):
                    e.val(v)
    if vec:
        e.vector_body(loops[-1][0].regions[0].blocks[0].args[0], body, sunk, *vec, LANES)
    else:
        e.block(sunk)
        e.block(body)
    limit = max(threads, 1) if loops else 1
    block = min(BLOCK, max(32, 1 << (max(limit, 1) - 1).bit_length())) if loops else 1
    grid = min(max(1, -(-limit // block)), MAX_GRID)
    return CUDA.render_kernel(name, decl, e.lines, limit), bufs, (grid, 1, 1), (block, 1, 1), ctypes_


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
            if s is None:  # "full": indexed like the output's batch
                return int(np.ravel_multi_index(idx, batch)) * mat
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
