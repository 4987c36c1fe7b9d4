"""DFT (opset 17 and 20: forward, inverse, one-sided, irfft, dft_length
cropping/padding, any axis) and STFT (opset 17) as matrix products with a
twiddle table built at compile time:

    Y[b, (k, out part)] = sum_(t, in part) X[b, (t, in part)] * T[(t, in part), (k, out part)]

where the parts are (real) or (real, imag). That is O(n^2) per signal, not
an FFT, but one GEMM over every signal at once: for the frame sizes models
use (audio front ends: 256-1024) the library GEMM keeps it ahead of a
scalar FFT loop, and it needs no complex arithmetic in the loop dialect.
fp32 runs the library GEMM against the table packed once; other types (and
signals with trailing batch dims, whose parts do not sit side by side) run
the same product as loops."""
from __future__ import annotations

from contextlib import ExitStack

import numpy as np

from ....ir.attributes import DenseElementsAttr
from ....ir.types import NONE, MemRefType, TensorType, f32
from ..common import LOW_FLOATS, is_float
from ..kernels import annotate, gemm_params, pack_b_panels
from ..common import extend_low_float, library_root
from .matmul import gemm_core, truncate_into
from ..registry import lowering


def twiddles(n, rows, cols, cin, cout, inverse, onesided):
    """T[(t, in part), (k, out part)] for `rows` input samples and `cols`
    outputs of a length-n transform. irfft (inverse and onesided) reads the
    Hermitian half: bins other than 0 and n/2 count twice, and their
    imaginary parts at 0 and n/2 drop out (sin is 0 there), as numpy's."""
    t = np.arange(rows, dtype=np.float64)[:, None]
    k = np.arange(cols, dtype=np.float64)[None, :]
    if inverse and onesided:  # rows are bins, cols are time steps
        theta = 2 * np.pi * t * k / n
        w = np.where((t == 0) | (2 * t == n), 1.0, 2.0) / n
        parts = [[w * np.cos(theta)], [-w * np.sin(theta)]]
    else:
        theta = 2 * np.pi * t * k / n
        c, s = np.cos(theta), np.sin(theta)
        if inverse:
            parts = [[c / n, s / n], [-s / n, c / n]]   # (xr, xi) -> (re, im) of e^{+i theta} / n
        else:
            parts = [[c, -s], [s, c]]                   # of e^{-i theta}
    table = np.zeros((rows, cin, cols, cout))
    for ci in range(cin):
        for co in range(cout):
            table[:, ci, :, co] = parts[ci][co]
    return table.reshape(rows * cin, cols * cout)


def _const_int(cx, op, v, what):
    c = cx.const(v)
    if c is None:
        cx.fail(op, f"{op.name[5:]}'s {what} must be a constant (or a graph input tcc specializes on)")
    return int(np.asarray(c).ravel()[0])


def _operand(op, i):
    return op.operands[i] if len(op.operands) > i and op.operands[i].type is not NONE else None


def transform(cx, a, out, batch, rows, K, table):
    """out[b, i, j] = sum_k a[b, i, k] * table[k, j] with a (batch, rows,
    >= K) and out (batch, rows, N) views; fp32 through the library GEMM."""
    L = cx.L
    t = out.type.element
    N = table.shape[1]
    g = L.at_top("loop.global", MemRefType(table.shape, t),
                 value=DenseElementsAttr(table.astype(np.float64 if str(t) == "f64" else np.float32),
                                         TensorType(table.shape, t)))
    library = str(t) == "f32" and str(a.type.element) == "f32"
    el = a.type.element
    with ExitStack() as st:
        root = st.enter_context(library_root(L)) if library else None
        with L.loop(0, batch) as b:
            gemm_core(cx, rows, N, K, lambda i, k: extend_low_float(L, L.load(a, [b, i, k]), el), lambda k, j: L.load(g, [k, j]),
                      out, lambda i, j: [b, i, j], parallel=False)
    if library:
        lda = a.type.shape[2]
        annotate(root[0], "tcc_gemm_bpacked_f32",
                 gemm_params(rows, N, K, lda, 1, N, 1, N, batch=(batch,), sa=[rows * lda], sb=[0], sc=[rows * N]),
                 [out, a, "packed", None], packed=pack_b_panels(table.astype(np.float32)))


def _acc(cx, r):
    out = cx.out(r)
    t = r.type.element
    if is_float(t) and t.name in LOW_FLOATS:
        return out, cx.L.alloc(r.type.shape, f32), True
    return out, out, False


@lowering("DFT")
def lower_dft(cx, op):
    L = cx.L
    x, r = op.operands[0], op.results[0]
    shape = list(x.type.shape)
    rank = len(shape)
    if cx.opset() >= 20:
        av = _operand(op, 2)
        axis = _const_int(cx, op, av, "axis") if av is not None else -2
    else:
        axis = cx.attr(op, "axis")
        axis = 1 if axis is None else axis
    if not -rank <= axis < rank or axis % rank == rank - 1:
        cx.fail(op, f"DFT axis {axis} is not a signal axis of input shape {shape}")
    axis %= rank
    inverse, onesided = bool(cx.attr(op, "inverse")), bool(cx.attr(op, "onesided"))
    Lx, cin = shape[axis], shape[-1]
    if cin not in (1, 2):
        cx.fail(op, f"DFT input's last dim must be 1 (real) or 2 (complex), got {cin}")
    lv = _operand(op, 1)
    n = _const_int(cx, op, lv, "dft_length") if lv is not None else (2 * (Lx - 1) if inverse and onesided else Lx)
    if n < 1:
        cx.fail(op, f"DFT length {n} must be positive")
    if inverse and onesided:
        rows, cols, cout = min(Lx, n // 2 + 1), n, 1
    else:
        rows, cols, cout = min(Lx, n), (n // 2 + 1 if onesided else n), 2
    want = shape[:axis] + [cols] + shape[axis + 1:-1] + [cout]
    if list(r.type.shape) != want:
        cx.fail(op, f"DFT output shape {list(r.type.shape)} disagrees with {want}")
    table = twiddles(n, rows, cols, cin, cout, inverse, onesided)
    out, acc, low = _acc(cx, r)
    pre = int(np.prod(shape[:axis], dtype=np.int64))
    post = int(np.prod(shape[axis + 1:-1], dtype=np.int64))
    xb = cx.buf(x)
    if post == 1:  # each signal's samples and parts are one contiguous row
        transform(cx, L.view(xb, (1, pre, Lx * cin)), L.view(acc, (1, pre, cols * cout)), 1, pre, rows * cin, table)
    else:  # signals interleaved with trailing batch dims: gather them into rows first
        rowsbuf = L.alloc((pre, post, rows * cin), acc.type.element)
        xv, rv = L.view(xb, (pre, Lx, post, cin)), L.view(rowsbuf, (pre, post, rows, cin))
        with L.loops((pre, rows, post, cin)) as (b, t, p, c):
            L.store(extend_low_float(L, L.load(xv, [b, t, p, c]), x.type.element), rv, [b, p, t, c])
        cols_buf = L.alloc((pre, post, cols * cout), acc.type.element)
        transform(cx, rowsbuf, cols_buf, pre, post, rows * cin, table)
        cv, ov = L.view(cols_buf, (pre, post, cols, cout)), L.view(acc, (pre, cols, post, cout))
        with L.loops((pre, cols, post, cout)) as (b, k, p, c):
            L.store(L.load(cv, [b, p, k, c]), ov, [b, k, p, c])
        L.op("loop.dealloc", [rowsbuf])
        L.op("loop.dealloc", [cols_buf])
    if low:
        truncate_into(cx, acc, out)


@lowering("STFT")
def lower_stft(cx, op):
    L = cx.L
    x, r = op.operands[0], op.results[0]
    B, Lx, cin = x.type.shape
    if cin not in (1, 2):
        cx.fail(op, f"STFT signal's last dim must be 1 (real) or 2 (complex), got {cin}")
    step = _const_int(cx, op, op.operands[1], "frame_step")
    win = _operand(op, 2)
    fl = _operand(op, 3)
    if fl is not None:
        n = _const_int(cx, op, fl, "frame_length")
    elif win is not None:
        n = win.type.shape[0]
    else:
        cx.fail(op, "STFT needs a window or a frame_length")
    if win is not None and list(win.type.shape) != [n]:
        cx.fail(op, f"STFT window shape {list(win.type.shape)} is not [frame_length = {n}]")
    onesided = cx.attr(op, "onesided")
    onesided = 1 if onesided is None else onesided
    if step < 1 or n < 1 or n > Lx:
        cx.fail(op, f"STFT frame_step {step} / frame_length {n} do not fit a signal of length {Lx}")
    frames = (Lx - n) // step + 1
    cols = n // 2 + 1 if onesided else n
    if list(r.type.shape) != [B, frames, cols, 2]:
        cx.fail(op, f"STFT output shape {list(r.type.shape)} disagrees with {[B, frames, cols, 2]}")
    out, acc, low = _acc(cx, r)
    t = acc.type.element
    # frames (overlapping, windowed) copied into rows of their own
    fb = L.alloc((B, frames, n * cin), t)
    xv, fv = L.view(cx.buf(x), (B, Lx, cin)), L.view(fb, (B, frames, n, cin))
    wb = cx.buf(win) if win is not None else None
    with L.loops((B, frames, n, cin)) as (b, f, s, c):
        v = extend_low_float(L, L.load(xv, [b, L.add(L.mul(f, step), s), c]), x.type.element)
        if wb is not None:
            v = L.op("arith.mulf", [v, extend_low_float(L, L.load(wb, [s]), win.type.element)], t)
        L.store(v, fv, [b, f, s, c])
    transform(cx, L.view(fb, (1, B * frames, n * cin)), L.view(acc, (1, B * frames, cols * 2)), 1, B * frames, n * cin,
              twiddles(n, n, cols, cin, 2, False, bool(onesided)))
    L.op("loop.dealloc", [fb])
    if low:
        truncate_into(cx, acc, out)

