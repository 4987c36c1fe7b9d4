"""MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv, as
onnx.reference computes them: inputs widened to int32 less their zero
points (per tensor, per row of A / column of B, per output channel of W),
accumulated in int32 (the Conv nest and the blocked GEMM nest, in int32),
then for the QLinear ops requantized in float64: acc * (scale_a * scale_b /
scale_y, in the scales' own type) + y_zero_point, rounded half to even and
saturated to the output type."""
from __future__ import annotations

from contextlib import ExitStack

import numpy as np

from ....ir.types import NONE, f32, f64, i32, i64
from ..common import LOW_FLOATS, is_float, library_root
from ..kernels import CONV_I8_FIELDS, annotate, pack_int16_pairs, pack_u8s8, pack_u8s8_pair_safe, pair_safe_corrections
from ..cast import emit_cast
from ..nn.conv import ConvGeometry, direct_conv
from ..math.matmul import batched_gemm, matmul_views
from ..registry import lowering

QRANGE = {"i8": (-128, 127), "ui8": (0, 255), "i16": (-32768, 32767), "ui16": (0, 65535)}


def _given(op, i):
    return op.operands[i] if len(op.operands) > i and op.operands[i].type is not NONE else None


def _i32(L, v, t):
    return emit_cast(L, v, t, i32)


class _Loader:
    """loader(i): the value at index i of `buffer` (per_index), or its one
    value; `buffer` is also what a library call is handed."""

    def __init__(self, L, buffer, per_index):
        self.L, self.buffer, self.per_index = L, buffer, per_index

    def __call__(self, i):
        return self.L.load(self.buffer, [i if self.per_index else 0])


def per_index(cx, op, v, size, what):
    """A loader for scale / zero point `v`: one value, or one per index of a
    dim of `size` (1-D). None when v is absent."""
    if v is None:
        return None
    L, buf, n = cx.L, cx.buf(v), v.type.num_elements
    if n == 1:
        return _Loader(L, L.view(buf, (1,)), False)
    if v.type.rank == 1 and n == size:
        return _Loader(L, buf, True)
    cx.fail(op, f"{op.name[5:]}'s {what} has shape {list(v.type.shape)}: expected one value or {size}")


def _centered(L, load, t, zp, i):
    """load() widened to int32 less the zero point at index i."""
    v = _i32(L, load(), t)
    return v if zp is None else L.op("arith.subi", [v, _i32(L, zp[0](i), zp[1])], i32)


def _zp(loader, v):
    return None if loader is None else (loader, v.type.element)


INT8 = {"ui8": 0, "i8": 1}  # tcc_matmul_i8's operand types: whether signed
MIN_ROWS = 8  # from here on a B that is no constant is packed per call (below: the nest)


def vnni_target():
    """Whether the code is compiled for a CPU with VNNI's vpdpbusd (the
    native target is this CPU): AVX-512 VNNI, or AVX-VNNI (its ymm form, on
    CPUs without AVX-512 too: Intel Alder Lake on, Xeon 6 E-cores), and
    TCC_CPU_ISA does not ask for less (avx2 stands for an AMD Zen 3, which
    has neither): then B is packed as bytes for vpdpbusd (gemm_int.c), and
    the int8 products beat f32 FMAs (driver: qdq-to-integer only then)."""
    import os
    from ...loop_to_native.target import host_features
    isa = os.environ.get("TCC_CPU_ISA", "")
    return isa not in ("avx2", "generic") and (avx512_vnni_target() or "avxvnni" in host_features())


def avx512_vnni_target():
    """Whether the native target has AVX-512 VNNI (zmm vpdpbusd) and
    TCC_CPU_ISA lets the avx512 build run."""
    import os
    from ...loop_to_native.target import host_features
    return {"avx512vnni", "avx512bw"} <= host_features() and os.environ.get("TCC_CPU_ISA", "") in ("", "avx512")


# B packed 3 (pack_u8s8_pair_safe) where at most this share of B's values
# needs a correction, else int16 pairs: about half the share where the two
# take the same time. 64x784x1024 on AVX2 (Xeon family 6 model 167 as an
# AVX2 CPU, one thread): int16 pairs 0.78-0.91 ms; bytes 0.56-0.59 with
# none corrected, 0.74 with 0.9 %, 1.34 with 4.2 %.
FIX_SHARE = 1 / 256
# The same for a 1x1 convolution of stride 1 without pads, whose NCHW path
# (gemm_int.c's conv_pw_vnni) adds the corrections a vector of positions
# at a time: tcc_conv_q8 on 144 -> 32 channels, 28 x 28, 1 thread, AMD EPYC
# family 25 model 17 as an AVX2 CPU: 0.064 ms with none corrected, 0.083
# with 7 %, 0.110 with 18 %, and on int16 pairs 0.227.
FIX_SHARE_POINTWISE = 1 / 4


def avx2_bytes_target():
    """Whether the native target is an AVX2 CPU, and TCC_CPU_ISA lets it be
    one: then B is packed for gemm_int.c's vpmaddubsw tile (layout 3)."""
    import os
    from ...loop_to_native.target import host_features
    return os.environ.get("TCC_CPU_ISA", "") != "generic" and "avx2" in host_features()


def integer_qdq_kinds() -> frozenset:
    """Which QDQ products run faster as exact integers on the native target
    (driver: qdq-to-integer's options): with VNNI, matmuls and
    convolutions ({"matmul", "conv"}; with AVX-VNNI's ymm alone too:
    resnet18_qdq on AMD EPYC Zen 5 with AVX-512 hidden and AVX-VNNI left,
    1 / 2 threads, 0.98 / 0.78x onnxruntime with the small images' only,
    0.85 / 0.76 with all); with AVX2 alone, matmuls and the
    convolutions of small images ({"matmul", "small-conv"}: qdq.
    AVX2_CONV_POSITIONS has the measurements), and so with AVX-512 but no
    VNNI (Intel Skylake-SP), where the pair-safe bytes run on zmm but the
    float convolutions are AVX-512's too: resnet18_qdq as on that CPU (AMD
    EPYC Zen 5 with VNNI and AMX hidden), 1 / 2 threads, 0.82 / 0.68x
    onnxruntime with the small images' only, 0.93 / 0.81 with all; at 1
    thread 10.35 / 10.46 / 11.50 ms with 196 / 784 / 3136 outputs a
    channel at most. There int16 pairs (vpmaddwd)
    made 64-77 GMAC/s on BERT- and MLP-sized products against about 45 for
    f32 FMAs (Xeon family 6 model 167 as an AVX2 CPU, one thread), and
    mlp_qdq went from 1.85x onnxruntime to 1.45x (vpmaddubsw's pair-safe
    bytes, layout 3: 83-91 GMAC/s, 1.11x); but a 3x3 convolution on
    a large image is Winograd in float, fewer products than any exact int8
    form. Else (TCC_CPU_ISA=generic, no AVX2) none. With AVX-512 VNNI also
    "pw-dw": the cpu accelerator's AVX-512 build fuses an int8 1x1 with the
    depthwise convolution after it (cpu.conv_q8_dw), so 1x1s of any depth go
    to integers (driver: qdq-to-integer's pw-min-depth)."""
    if vnni_target():
        return frozenset({"matmul", "conv", "pw-dw"} if avx512_vnni_target() else {"matmul", "conv"})
    if avx2_bytes_target():
        return frozenset({"matmul", "small-conv"})
    return frozenset()


def _matmul_i32(cx, op, A, B, azp, bzp, acc):
    """acc (int32, the result shape) = (A - azp) @ (B - bzp), batched and
    broadcast like MatMul; azp per row of A, bzp per column of B.

    8-bit A and a 2-D B, with one A zero point and one B zero point or one
    per column, are also marked as a library call (kernels.py):
    runtime/native/gemm_int.c, exact like the nest, which stays the semantics
    the interpreter runs. A constant B (a model's weights) is packed here,
    less its zero point: as bytes for VNNI/AMX where that fits int8 and the
    CPU has VNNI, else as int16 pairs; another B is packed per call, which
    only pays from MIN_ROWS rows on. A dynamically quantized BERT
    (onnxruntime's quantize_dynamic: 24 MatMulInteger, 128x256 activations)
    spent 21 of its 23 ms in these nests."""
    L = cx.L
    M, K, N, batch, av, bv, cv = matmul_views(cx, A, B, acc)
    za_load = per_index(cx, op, azp, M, "A zero point")
    zb_load = per_index(cx, op, bzp, N, "B zero point")
    za, zb = _zp(za_load, azp), _zp(zb_load, bzp)
    ta, tb = str(A.type.element), str(B.type.element)
    rows = M * int(np.prod(batch, dtype=np.int64))
    bval = cx.const(B)
    zval = 0 if bzp is None else cx.const(bzp)
    packed = bval is not None and zval is not None  # weights: B packed here, once
    # B packed per call below 8 rows costs more than the products (K*N
    # against rows*K*N: 1x1024x1024 took 0.14 ms, about twice the nest's time)
    kernel = (ta in INT8 and tb in INT8 and B.type.rank == 2 and str(acc.type.element) == "i32"
              and (za_load is None or not za_load.per_index) and (packed or rows >= MIN_ROWS))
    with ExitStack() as st:
        root = st.enter_context(library_root(L)) if kernel else None
        batched_gemm(cx, M, N, K, batch, av, bv, cv,
                     lambda ai, i, k: _centered(L, lambda: L.load(av, ai + [i, k]), A.type.element, za, i),
                     lambda bi, k, j: _centered(L, lambda: L.load(bv, bi + [k, j]), B.type.element, zb, j))
    if kernel:
        # B is shared by every batch of A (2-D): the batches fold into rows
        bzp_mode = 0 if zb_load is None else 2 if zb_load.per_index else 1
        za_buf = za_load.buffer if za_load else None
        if packed:  # less its zero point (one value, or a row of one per column)
            arr, layout = _pack_weights(bval, zval)
            annotate(root[0], "tcc_matmul_i8", [rows, N, K, INT8[ta], INT8[tb], int(za_load is not None), 0, layout],
                     [cv, av, "packed", za_buf, None], packed=arr)
        else:
            annotate(root[0], "tcc_matmul_i8", [rows, N, K, INT8[ta], INT8[tb], int(za_load is not None), bzp_mode, 0],
                     [cv, av, bv, za_buf, zb_load.buffer if zb_load else None])
    return (lambda ivs: ivs[-1]), N  # what a per-column B scale follows


def pack_conv_weights(w, zw, pointwise=False):
    """Constant ConvInteger weights W [M, C, KH, KW] less their zero point
    (one, or one per output channel) -> (packed, layout) for gemm_int.c's
    tcc_conv_i8 and tcc_conv_q8: k in (kh, kw, c) order, as tcc_conv_i8
    gathers the image channels last. `pointwise`: a 1x1 of stride 1
    without pads (FIX_SHARE_POINTWISE)."""
    return _pack_weights(*_conv_b(w, zw), FIX_SHARE_POINTWISE if pointwise else FIX_SHARE)


def conv_weights_layout(w, zw, pointwise=False):
    """pack_conv_weights's layout alone, without packing."""
    b, z = _conv_b(w, zw)
    return _layout(np.asarray(b, np.int32) - np.asarray(z, np.int32).reshape(1, -1),
                   FIX_SHARE_POINTWISE if pointwise else FIX_SHARE)


def _conv_b(w, zw):
    """ConvInteger weights and zero point as _pack_weights's B [K, N] and its per-column zero point."""
    return w.transpose(0, 2, 3, 1).reshape(w.shape[0], -1).T, np.asarray(zw).reshape(-1)


def _layout(bz, fix_share):
    """_pack_weights's layout for B less its zero point."""
    if vnni_target() and bz.min(initial=0) >= -128 and bz.max(initial=0) <= 127:
        return 2
    if avx2_bytes_target() and pair_safe_corrections(bz) <= fix_share * bz.size:
        return 3
    return 1


def _pack_weights(bval, zval, fix_share=FIX_SHARE):
    """A constant int8/uint8 B [K, N] less its zero point (one, or one per
    column), packed for gemm_int.c: (packed array, layout 1 int16 pairs, 2
    bytes for VNNI/AMX where that fits int8 and the CPU has VNNI, or 3 the
    bytes vpmaddubsw (AVX2's, or AVX-512BW's) takes exactly plus
    corrections on a CPU without,
    where few values need correcting: FIX_SHARE)."""
    bz = np.asarray(bval, np.int32) - np.asarray(zval, np.int32).reshape(1, -1)
    layout = _layout(bz, fix_share)
    if layout == 2:
        return pack_u8s8(bz), 2
    if layout == 3:
        return pack_u8s8_pair_safe(bz)[0], 3
    return pack_int16_pairs(bz), 1


def _conv_i32(cx, op, X, W, xzp, wzp, acc, bias=None):
    """acc (int32) = bias + conv(X - xzp, W - wzp), the direct nest; with
    8-bit X and constant W, 2-D, one group and one X zero point also marked
    as gemm_int.c's tcc_conv_i8 (im2col rows times W packed here, less its
    zero point, by the int8 GEMM). ResNet-18 through quantize_dynamic (20
    ConvInteger) took 231 ms in these nests at 1 thread (onnxruntime 34)."""
    L = cx.L
    g = ConvGeometry(cx, op, X, W, op.results[0])
    zx_load = per_index(cx, op, xzp, 1, "x zero point")
    zw_load = per_index(cx, op, wzp, g.M, "w zero point")
    zx, zw = _zp(zx_load, xzp), _zp(zw_load, wzp)
    xb, wb = cx.buf(X), cx.buf(W)
    bb = cx.buf(bias) if bias is not None else None
    wval = cx.const(W)
    zval = 0 if wzp is None else cx.const(wzp)
    kernel = (str(X.type.element) in INT8 and str(W.type.element) in INT8 and len(g.kernel) == 2
              and g.group == 1 and wval is not None and zval is not None and str(acc.type.element) == "i32"
              and (bias is None or str(bias.type.element) == "i32"))
    with ExitStack() as st:
        root = st.enter_context(library_root(L)) if kernel else None
        direct_conv(cx, g, acc, i32, lambda m: L.load(bb, [m]) if bb is not None else L.c(0, i32),
                    lambda m, c, kp: _centered(L, lambda: L.load(wb, [m, c] + kp), W.type.element, zw, m),
                    lambda nn, ic, ii: _centered(L, lambda: L.load(xb, [nn, ic] + ii), X.type.element, zx, 0))
    if kernel:
        (h, w_), (oh, ow), (kh, kw) = g.in_sp, g.out_sp, g.kernel
        pointwise = (kh, kw) == (1, 1) and tuple(g.strides) == (1, 1) and (oh, ow) == (h, w_) and not any(g.begin)
        packed, layout = pack_conv_weights(np.asarray(wval), zval, pointwise)
        vals = dict(N=g.N, C=g.C, H=h, W=w_, M=g.M, KH=kh, KW=kw, OH=oh, OW=ow, SH=g.strides[0], SW=g.strides[1],
                    PH=g.begin[0], PW=g.begin[1], DH=g.dil[0], DW=g.dil[1], xsigned=INT8[str(X.type.element)],
                    wsigned=INT8[str(W.type.element)], xzp=int(zx_load is not None), bias=int(bb is not None),
                    packed=layout)
        annotate(root[0], "tcc_conv_i8", [int(vals[f]) for f in CONV_I8_FIELDS],
                 [acc, xb, "packed", zx_load.buffer if zx_load else None, bb], packed=packed)
    return (lambda ivs: ivs[1]), g.M  # output channel


def _scale_op(L, name, a, b, t):
    """a (op) b in scale type t, rounded to t as numpy does (f16 through f32)."""
    if t.name in LOW_FLOATS:
        r = L.op(name, [L.op("arith.extf", [a], f32), L.op("arith.extf", [b], f32)], f32)
        return L.op("arith.truncf", [r], t)
    return L.op(name, [a, b], t)


def _requantize(cx, op, acc, out, sa, sb, sy, yzp, per):
    """out = saturate(roundeven(f64(acc) * f64(sa * sb / sy) + yzp))."""
    L = cx.L
    r = op.results[0]
    q = QRANGE.get(str(r.type.element))
    if q is None:
        cx.fail(op, f"{op.name[5:]} output type {r.type.element} is not an 8- or 16-bit integer")
    st = sa.type.element
    if not is_float(st) or sb.type.element != st or sy.type.element != st:
        cx.fail(op, f"{op.name[5:]}'s scales must share one float type")
    channel, n = per  # the index a per-channel (per-column) second scale follows, and its size
    la = per_index(cx, op, sa, 1, "first scale")
    lb = per_index(cx, op, sb, n, "second scale")
    ly = per_index(cx, op, sy, 1, "y scale")
    lz = per_index(cx, op, yzp, 1, "y zero point")
    with L.loops(r.type.shape) as ivs:
        j = channel(ivs)
        mult = _scale_op(L, "arith.divf", _scale_op(L, "arith.mulf", la(0), lb(j), st), ly(0), st)
        v = L.op("arith.mulf", [L.op("arith.sitofp", [L.load(acc, ivs)], f64), L.op("arith.extf", [mult], f64)], f64)
        if lz is not None:
            v = L.op("arith.addf", [v, emit_cast(L, lz(0), yzp.type.element, f64)], f64)
        v = L.op("math.roundeven", [v], f64)
        v = L.op("arith.minimumf", [L.op("arith.maximumf", [v, L.c(float(q[0]), f64)], f64), L.c(float(q[1]), f64)],
                 f64)
        # v is a whole number within the output type (or NaN, from a scale
        # of 0 or inf): 1.5 * 2^52 + v holds v in the low bits of its
        # mantissa, two's complement, so an add and a bitcast convert it (a
        # default NaN's low bits are 0, as fptosi's NaN). fptosi's general
        # wrap-around conversion ran one element at a time: a 1x1
        # QLinearConv of 16 -> 96 channels on 112 x 112 took 2.49 ms at 1
        # thread, 57 % of it in this loop (onnxruntime 0.29; AMD EPYC
        # family 26 model 2).
        bits = L.op("arith.bitcast", [L.op("arith.addf", [v, L.c(6755399441055744.0, f64)], f64)], i64)
        L.store(emit_cast(L, bits, i64, r.type.element), out, ivs)
    L.op("loop.dealloc", [acc])


@lowering("MatMulInteger")
def lower_matmul_integer(cx, op):
    A, B = op.operands[:2]
    _matmul_i32(cx, op, A, B, _given(op, 2), _given(op, 3), cx.out(op.results[0]))


@lowering("ConvInteger")
def lower_conv_integer(cx, op):
    X, W = op.operands[:2]
    _conv_i32(cx, op, X, W, _given(op, 2), _given(op, 3), cx.out(op.results[0]))


@lowering("QLinearMatMul")
def lower_qlinear_matmul(cx, op):
    a, sa, azp, b, sb, bzp, sy, yzp = (_given(op, i) for i in range(8))
    acc = cx.L.alloc(op.results[0].type.shape, i32)
    per = _matmul_i32(cx, op, a, b, azp, bzp, acc)
    _requantize(cx, op, acc, cx.out(op.results[0]), sa, sb, sy, yzp, per)


@lowering("QLinearConv")
def lower_qlinear_conv(cx, op):
    x, sx, xzp, w, sw, wzp, sy, yzp, bias = (_given(op, i) for i in range(9))
    acc = cx.L.alloc(op.results[0].type.shape, i32)
    per = _conv_i32(cx, op, x, w, xzp, wzp, acc, bias)
    _requantize(cx, op, acc, cx.out(op.results[0]), sx, sw, sy, yzp, per)
