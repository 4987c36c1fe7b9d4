"""MatMul (batched, broadcasting, 1-D operands) and Gemm as one blocked
i/k/j nest: C[i, j] += A[i, k] * B[k, j] with the j loop innermost,
unit-stride and marked `vectorize`, blocked over j and k so a panel of B
stays in cache while rows of A stream past. Transposed constant B (Gemm
transB, the usual Linear layer) is transposed at compile time.

fp32 GEMMs are also marked as a library call (kernels.py): the nest, wrapped
in a one-trip root loop, stays the semantics the interpreter runs, and the
native backend calls runtime/native/gemm.c's register-blocked kernel
instead (~100 GFLOP/s per core against ~35 for the vectorized nest, and no
LLVM time spent on the nest)."""
from __future__ import annotations

from contextlib import contextmanager, ExitStack

import numpy as np

from ....ir.attributes import DenseElementsAttr
from ....ir.types import NONE, MemRefType, TensorType, f32
from ..common import LOW_FLOATS, all_f32, extend_low_float, is_float, library_root
from .elementwise import elementwise_nest
from ..kernels import MAXB, annotate, gemm_params, pack_b_panels, strides
from ..registry import lowering

JB, KB, IB = 256, 128, 64


@contextmanager
def blocked(L, n, bs, parallel=False):
    """Yields (begin, end) of the current block of [0, n): no loop at all
    when one block covers it."""
    if n <= bs:
        yield 0, n
        return
    with L.loop(0, n, step=bs, parallel=parallel) as b:
        yield b, L.minmax_idx("min", L.add(b, bs), n)


def _acc(L, t, a, b, c):
    if is_float(t):
        return L.op("arith.addf", [c, L.op("arith.mulf", [a, b], t)], t)
    return L.op("arith.addi", [c, L.op("arith.muli", [a, b], t)], t)


def gemm_core(cx, M, N, K, load_a, load_b, C, c_idx, epilogue=None, parallel=True):
    """C[c_idx(i, j)] = sum_k load_a(i, k) * load_b(k, j), then
    C = epilogue(C, i, j) per block while it is still in cache."""
    L = cx.L
    t = C.type.element
    zero = L.c(0.0 if is_float(t) else 0, t)
    i_outer = -(-M // IB) >= -(-N // JB)  # parallelise whichever has more blocks
    with ExitStack() as st:
        if i_outer:
            i0, i1 = st.enter_context(blocked(L, M, IB, parallel))
            j0, j1 = st.enter_context(blocked(L, N, JB))
        else:
            j0, j1 = st.enter_context(blocked(L, N, JB, parallel))
            i0, i1 = st.enter_context(blocked(L, M, IB))
        with L.loop(i0, i1) as i:
            with L.loop(j0, j1, vectorize=True) as j:
                L.store(zero, C, c_idx(i, j))
        with blocked(L, K, KB) as (k0, k1):
            with L.loop(i0, i1) as i:
                with L.loop(k0, k1) as k:
                    a = load_a(i, k)
                    with L.loop(j0, j1, vectorize=True) as j:
                        idx = c_idx(i, j)
                        L.store(_acc(L, t, a, load_b(k, j), L.load(C, idx)), C, idx)
        if epilogue is not None:
            with L.loop(i0, i1) as i:
                with L.loop(j0, j1, vectorize=True) as j:
                    idx = c_idx(i, j)
                    L.store(epilogue(L.load(C, idx), i, j), C, idx)


def _acc_buffer(cx, out):
    """f16/bf16 results accumulate in an f32 scratch buffer."""
    t = out.type.element
    if is_float(t) and t.name in LOW_FLOATS:
        return cx.L.alloc(out.type.shape, f32), True
    return out, False


def truncate_into(cx, acc, out):
    L = cx.L
    elementwise_nest(cx, out.type.shape, [acc], [out],
                     lambda v: [L.op("arith.truncf", [v[0]], out.type.element)])
    L.op("loop.dealloc", [acc])


def matmul_views(cx, A, B, acc):
    """MatMul's operands and result as (batch..., rows, cols) views, 1-D
    operands promoted and batch dims broadcast: (M, K, N, batch, A, B, C)."""
    L = cx.L
    sa, sb = A.type.shape, B.type.shape
    a2 = sa if len(sa) >= 2 else (1,) + sa
    b2 = sb if len(sb) >= 2 else sb + (1,)
    M, K, N = a2[-2], a2[-1], b2[-1]
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    nb = len(batch)
    av = L.view(cx.buf(A), (1,) * (nb + 2 - len(a2)) + a2)
    bv = L.view(cx.buf(B), (1,) * (nb + 2 - len(b2)) + b2)
    return M, K, N, batch, av, bv, L.view(acc, batch + (M, N))


def batched_gemm(cx, M, N, K, batch, av, bv, cv, load_a, load_b):
    """gemm_core into cv[batch..., M, N] for every index of `batch` (a loop
    nest): load_a(ai, i, k) and load_b(bi, k, j) get A's and B's batch
    indices, 0 on their broadcast dims."""
    with cx.L.loops(batch, vectorize_inner=False) as bivs:
        ai = [i if av.type.shape[d] != 1 else 0 for d, i in enumerate(bivs)]
        bi = [i if bv.type.shape[d] != 1 else 0 for d, i in enumerate(bivs)]
        gemm_core(cx, M, N, K, lambda i, k: load_a(ai, i, k), lambda k, j: load_b(bi, k, j),
                  cv, lambda i, j: list(bivs) + [i, j], parallel=not batch)


@lowering("MatMul")
def lower_matmul(cx, op):
    A, B = op.operands
    r = op.results[0]
    L = cx.L
    sb = B.type.shape
    out = cx.out(r)
    acc, low = _acc_buffer(cx, out)
    M, K, N, batch, av, bv, cv = matmul_views(cx, A, B, acc)
    nb = len(batch)
    ta, tb = A.type.element, B.type.element
    kernel = all_f32(A, B, r) and nb <= MAXB
    with ExitStack() as st:
        root = st.enter_context(library_root(L)) if kernel else None
        batched_gemm(cx, M, N, K, batch, av, bv, cv,
                     lambda ai, i, k: extend_low_float(L, L.load(av, ai + [i, k]), ta),
                     lambda bi, k, j: extend_low_float(L, L.load(bv, bi + [k, j]), tb))
    if kernel:
        sa_, sb_, sc_ = strides(av.type.shape), strides(bv.type.shape), strides(cv.type.shape)
        params = gemm_params(M, N, K, K, 1, N, 1, N, batch=batch,
                             sa=[0 if av.type.shape[d] == 1 else sa_[d] for d in range(nb)],
                             sb=[0 if bv.type.shape[d] == 1 else sb_[d] for d in range(nb)],
                             sc=sc_[:nb])
        bval = cx.const(B) if len(sb) == 2 else None
        if bval is not None:  # weights: packed once, here
            annotate(root[0], "tcc_gemm_bpacked_f32", params, [cv, av, "packed", None],
                     packed=pack_b_panels(np.asarray(bval)))
        else:
            annotate(root[0], "tcc_gemm_f32", params, [cv, av, bv, None])
    if low:
        truncate_into(cx, acc, out)


@lowering("Gemm")
def lower_gemm(cx, op):
    A, B = op.operands[:2]
    Cin = op.operands[2] if len(op.operands) > 2 and op.operands[2].type is not NONE else None
    r = op.results[0]
    L = cx.L
    alpha, beta = float(cx.attr(op, "alpha")), float(cx.attr(op, "beta"))
    ta, tb = cx.attr(op, "transA"), cx.attr(op, "transB")
    M, N = r.type.shape
    K = A.type.shape[0] if ta else A.type.shape[1]
    bbuf = cx.buf(B)
    if tb:
        bval = cx.const(B)
        if bval is not None:
            bt = np.ascontiguousarray(np.asarray(bval).T)
            bbuf = L.at_top("loop.global", MemRefType(bt.shape, B.type.element),
                            value=DenseElementsAttr(bt, TensorType(bt.shape, B.type.element)))
            tb = 0
    abuf = cx.buf(A)
    out = cx.out(r)
    acc, low = _acc_buffer(cx, out)
    t = acc.type.element
    el_a, el_b = A.type.element, B.type.element

    def load_b(k, j):
        return extend_low_float(L, L.load(bbuf, [j, k] if tb else [k, j]), el_b)

    cbuf = None
    if Cin is not None and beta != 0:
        cs = (1,) * (2 - Cin.type.rank) + Cin.type.shape
        cbuf = L.view(cx.buf(Cin), cs)

    def epilogue(v, i, j):
        if alpha != 1:
            v = L.op("arith.mulf" if is_float(t) else "arith.muli", [v, L.c(alpha if is_float(t) else int(alpha), t)], t)
        if cbuf is not None:
            c = extend_low_float(L, L.load(cbuf, [i if cbuf.type.shape[0] != 1 else 0, j if cbuf.type.shape[1] != 1 else 0]),
                     Cin.type.element)
            if beta != 1:
                c = L.op("arith.mulf" if is_float(t) else "arith.muli", [c, L.c(beta if is_float(t) else int(beta), t)], t)
            v = L.op("arith.addf" if is_float(t) else "arith.addi", [v, c], t)
        return v

    need_epi = alpha != 1 or cbuf is not None
    kernel = all_f32(A, B, r) and (Cin is None or all_f32(Cin))
    with ExitStack() as st:
        root = st.enter_context(library_root(L)) if kernel else None
        gemm_core(cx, M, N, K, lambda i, k: extend_low_float(L, L.load(abuf, [k, i] if ta else [i, k]), el_a), load_b,
                  acc, lambda i, j: [i, j], epilogue if need_epi else None)
    if kernel:
        rsa, csa = (1, M) if ta else (K, 1)
        rsb, csb = (1, K) if tb else (N, 1)
        brs = bcs = 0
        if cbuf is not None:
            brs = cbuf.type.shape[1] if cbuf.type.shape[0] != 1 else 0
            bcs = 1 if cbuf.type.shape[1] != 1 else 0
        params = gemm_params(M, N, K, rsa, csa, rsb, csb, N, brs, bcs, alpha=alpha, beta=beta)
        bval = cx.const(B)
        if bval is not None:  # weights: packed once, here
            bkn = np.asarray(bval).T if cx.attr(op, "transB") else np.asarray(bval)
            annotate(root[0], "tcc_gemm_bpacked_f32", params, [acc, abuf, "packed", cbuf], packed=pack_b_panels(bkn))
        else:
            annotate(root[0], "tcc_gemm_f32", params, [acc, abuf, bbuf, cbuf])
    if low:
        truncate_into(cx, acc, out)
