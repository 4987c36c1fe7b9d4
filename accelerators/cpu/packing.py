"""The cpu kernels' constant-weight layouts and the choices that depend on
them alone (no IR): what codegen.py packs at compile time and what the
shape-generic executor's tape (runtime/generic/tape.py) packs once per
session, so that both call the same kernels on the same panels. Kept apart
from codegen.py so that the executor need not import the code generator
(and llvmlite: ~0.2 s)."""
from __future__ import annotations

import numpy as np


def conv_scratch(x_shape, w_shape, y_shape, strides, pads, group):
    n, c, h, w = x_shape
    m, cg, kh, kw = w_shape
    oh, ow = y_shape[2], y_shape[3]
    pointwise = kh == kw == 1 and tuple(strides) == (1, 1) and not any(pads) and (oh, ow) == (h, w)
    depthwise = group == c == m and group > 1
    return 0 if pointwise or depthwise else cg * kh * kw * oh * ow


PANEL = 32  # kernels/gemm_packed.c's panel width
SMALL_M = 4  # kernels/gemm.c's SM_MAX


def pack_b(b):
    """A constant (K, N) operand -> gemm_packed.c's panels [ceil(N/32)][K][32]."""
    b = np.asarray(b, np.float32)
    k, n = b.shape
    panels = -(-n // PANEL)
    out = np.zeros((k, panels * PANEL), np.float32)
    out[:, :n] = b
    return out.reshape(k, panels, PANEL).transpose(1, 0, 2)


def narrow_ldb(k):
    """gemm_narrow.c's B^T row stride: K rounded up to a vector, plus one, so
    that rows a multiple of 4 KB long do not all fall in one L1 set."""
    return -(-k // 16) * 16 + 16


def pack_bt(b):
    """A constant (K, N) operand -> gemm_narrow.c's B^T: N rows of
    narrow_ldb(K) floats, zero past K."""
    b = np.asarray(b, np.float32)
    k, n = b.shape
    out = np.zeros((n, narrow_ldb(k)), np.float32)
    out[:, :k] = b.T
    return out


def narrow_gemm(isa, n, k):
    """Whether a constant-B product with n columns and depth k runs
    gemm_narrow.c's dot-product tiles rather than gemm_packed.c's panels.
    Measured crossovers (1 thread, 64 rows, weights cold): with AVX-512 the
    panels win from 14 columns at K = 256..512 (16 at 1024) and from 10 at
    K = 128; the portable panels are 3-10x slower than the dot products up
    to 16 columns."""
    if isa == "avx512":
        return (n <= 12 and k >= 256) or (n <= 8 and k >= 128)
    return n <= 16 and k >= 128


def pack_conv(w, group):
    """Constant OIHW conv weights -> conv_ocv.c's panels: per group, pack_b of
    its (C/G*KH*KW, M/G) matrix."""
    w = np.asarray(w, np.float32)
    mg = w.shape[0] // group
    return np.concatenate([pack_b(w[g * mg:(g + 1) * mg].reshape(mg, -1).T).reshape(-1) for g in range(group)])


def conv_packed(x_shape, w_shape, y_shape, strides, pads, group, isa):
    """Whether a constant-weight conv runs conv_ocv.c (output channels in the
    vector lanes): AVX-512 (tiles of 14 pixels x 32 channels) and AVX2 (6 x 16;
    the generic build runs it too, for artifacts compiled elsewhere, but
    slower), not the pointwise and depthwise kernels' cases, strides the phase
    table covers."""
    if isa not in ("avx512", "avx2") or conv_scratch(x_shape, w_shape, y_shape, strides, pads, group) == 0:
        return False
    return strides[0] * strides[1] <= 64


PW_ROWS = 8  # kernels/conv_pw.c's packed row block


def pack_pw(w):
    """A pointwise conv's (M, C, 1, 1) weights -> conv_pw.c's blocks [ceil(M/8)][C][8]."""
    w = np.asarray(w, np.float32)
    m, c = w.shape[:2]
    blocks = -(-m // PW_ROWS)
    out = np.zeros((blocks * PW_ROWS, c), np.float32)
    out[:m] = w.reshape(m, c)
    return out.reshape(blocks, PW_ROWS, c).transpose(0, 2, 1)


def dense_groups(w, g):
    """A grouped conv's (M, C/g, KH, KW) weights as an ungrouped conv's
    (M, C, KH, KW): block-diagonal, group k's outputs reading its own input
    channels only (a channel shuffle folds into dense weights)."""
    cg, mg = w.shape[1], w.shape[0] // g
    dense = np.zeros((w.shape[0], cg * g) + tuple(w.shape[2:]), np.float32)
    for k in range(g):
        dense[k * mg:(k + 1) * mg, k * cg:(k + 1) * cg] = w[k * mg:(k + 1) * mg]
    return dense
