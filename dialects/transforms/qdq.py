"""DequantizeLinear(QuantizeLinear(x)) on a float32 activation, per-tensor
constant scales and zero points, an 8- or 16-bit integer in between (the
pairs onnxruntime.quantization's QDQ format writes around every quantized
op) -> the same values in float32 elementwise ops:

    y = (Clip(x / s1 + M, M + qmin - z1, M + qmax - z1) - (M - z1 + z2)) * s2

with M = 1.5 * 2^23. Every accelerator that takes float32 elementwise ops
then runs the pair in the neighbouring op's fused loop instead of cutting
the model into partitions with host steps for the integer ops between them
(qdq_cnn on the cpu accelerator: 5 cpu partitions and 6 host steps -> 1
partition).

Bit-exact with onnx.reference's QuantizeLinear/DequantizeLinear for every
finite x: the division is x / s1 in f32 as the reference divides (not a
product by 1 / s1). For v = x / s1 with |v| < 2^22, v + M lies where f32's
integers are one apart, and M is even, so the sum is M + Round(v), Round
half to even: the
add stands for Round and (in the bounds) for + z1, which the clamp and the
subtraction then carry as exact integers below 2^24. The clamped value less
M - z1 + z2 is the reference's small integer (a Round of -0.3 gives +0, as
the integer 0 does), and its product by s2 the reference's one rounding.
Past 2^22 the sum is inexact but beyond the bounds, and saturates as
Round(v) + z1 would. Where the reference's rint(x / s1).astype(int32) is
undefined (|x / s1| >= 2^31, inf, NaN), large values and inf saturate to
qmax/qmin as the host lowering's int32 clamp does for finite ones, and NaN
becomes qmin, as QuantizeLinear's lowering and onnxruntime give it: the
Clip carries NAN_TO_MIN (an ONNX Clip keeps NaN), which the lowerings honour
with maxnum/minnum (two instructions fewer a vector than NaN-propagating max
and min). Against Round, Add z1, Clip, Sub z2: one instruction fewer a
vector, and an add for AVX-512's vrndscaleps; in mlp_qdq's requantizing
loops, with the QuantizeLinear after the pair's Add (which takes the same
add: graph_to_loop/quantization/quantize.py), 16 -> 12 instructions a
vector of 16, and mlp_qdq at 1 thread 0.265 -> 0.260 ms (AMD EPYC family 26
model 2)."""
from __future__ import annotations

import numpy as np

from ..ir import attributes as A
from ..ir.passes import Pass
from ..ir.rewriter import RewritePattern, apply_patterns_greedily
from ..ir.types import NONE, SCALARS, TensorType
from ..onnx.dialect import NAN_TO_MIN
from .constants import constant_value, make_constant

# the integer types whose whole range (and every zero point) is exact in f32
_RANGE = {"i8": (-128, 127), "si8": (-128, 127), "ui8": (0, 255),
          "i16": (-32768, 32767), "si16": (-32768, 32767), "ui16": (0, 65535)}


# M of the docstring. f32's integers are one apart from 2^23 to 2^24: x + M
# is M + Round(x) for |x| < 2^22 (M even: ties go to the even integer); the
# cpu accelerator's lowering recognizes the pair by it (TCC_ACT_QDQ8)
ROUND_SHIFT = 12582912


def _f32(v):
    return isinstance(v.type, TensorType) and str(v.type.element) == "f32"


def _scalar(op, i, want_f32):
    """The per-tensor scale (want_f32) or zero point at operand i as a Python
    number, 0 for an absent zero point, None when not a one-element constant."""
    if len(op.operands) <= i or op.operands[i].type is NONE:
        return None if want_f32 else 0
    v = op.operands[i]
    c = constant_value(v)
    if c is None or c.size != 1:
        return None
    if want_f32:
        return np.float32(c.reshape(-1)[0]) if c.dtype == np.float32 else None
    return int(c.reshape(-1)[0])


class QuantizeDequantizePair(RewritePattern):
    op_name = "onnx.DequantizeLinear"

    def match_and_rewrite(self, op, rw):
        q = getattr(op.operands[0], "op", None)
        if q is None or q.name != "onnx.QuantizeLinear" or len(op.results) != 1:
            return False
        x, y = q.operands[0], op.results[0]
        if not (_f32(x) and _f32(y)) or str(q.results[0].type.element) not in _RANGE:
            return False
        if q.get_attr("precision") or q.get_attr("block_size") or op.get_attr("block_size"):
            return False
        if len(q.operands) > 2 and q.operands[2].type is not NONE and \
                str(q.operands[2].type.element) != str(q.results[0].type.element):
            return False
        s1, s2 = _scalar(q, 1, True), _scalar(op, 1, True)
        z1, z2 = _scalar(q, 2, False), _scalar(op, 2, False)
        if s1 is None or s2 is None or z1 is None or z2 is None:
            return False
        lo, hi = _RANGE[str(q.results[0].type.element)]
        t = x.type
        module = op.parent_op
        while module is not None and module.name != "builtin.module":
            module = module.parent_op
        if module is None:
            return False

        def const(value):
            c = make_constant(module, np.asarray(value, np.float32), loc=op.loc)
            rw.insert_before(op, c)
            return c.results[0]

        def step(name, *operands, attrs=None):
            return rw.create_before(op, f"onnx.{name}", list(operands), [t], attrs or {}, loc=op.loc).results[0]

        v = step("Div", x, const(s1))
        v = step("Add", v, const(ROUND_SHIFT))
        v = step("Clip", v, const(ROUND_SHIFT + lo - z1), const(ROUND_SHIFT + hi - z1),
                 attrs={NAN_TO_MIN: A.UnitAttr()})
        v = step("Sub", v, const(ROUND_SHIFT - z1 + z2))
        v = step("Mul", v, const(s2))
        rw.replace_op(op, [v])
        return True


# the 8-bit types MatMulInteger takes, and their numpy dtypes
_INT8 = {"ui8": np.uint8, "i8": np.int8, "si8": np.int8}
# Below this many multiply-adds a QDQ matmul or conv stays float: the
# integer form adds a QuantizeLinear step, a Cast and a kernel call, and on
# the cpu accelerator splits the model into host steps and partitions. The
# corpus's qdq_cnn (two convolutions of 0.11 and 0.15 M multiply-adds) took
# 1.12x onnxruntime's time so at 2 threads, 0.62x float; the bench MLP's
# last layer (0.65 M, after two int8 ones) float made it 1.22x onnxruntime
# at 1 thread, int8 1.09x. A dim not known at compile time counts 8.
MIN_MACS = 1 << 19
# On an AVX2 CPU (no VNNI) a QDQ Conv goes int8 only with at most this many
# output positions a channel: small images of many channels, whose float
# weights stream from memory (ResNet-18's last stage: 9.4 MB a layer).
# Larger images keep the float kernels (Winograd, the stem's rows), which
# beat the exact int8 products plus im2col. ResNet-18 layers, one thread,
# Xeon family 6 model 167 as an AVX2 CPU, tcc_conv_i8 on int16 pairs
# against the float path's time in the model: 3x3 on 7x7 (512 channels)
# 2.1 ms against 3.0, 14x14 1.75 against 1.9, stride 2 into 7x7 1.0
# against 1.6; but 28x28 1.8 against 1.4, 56x56 1.9 against 1.3, and the
# 7x7 stem 2.9 (plus the QuantizeLinear of its input) against 2.8. With
# vpmaddubsw's bytes (gemm_int.c's layout 3, about 1.3x the products) the
# 28x28 layers joined: the whole model (bench resnet18_qdq), tcc/onnxruntime
# at 1 / 2 threads, with 400 here 1.005 / 0.961 and 0.988 / 0.925 in two
# runs, with 784 0.978 / 0.916 and 0.958 / 0.895, with 3136 1.044 / 0.996.
# A 1x1 of stride 1 without pads goes int8 on any image (the driver's
# pw-max-positions=0: gemm_int.c's NCHW blocks on the pair-safe bytes).
AVX2_CONV_POSITIONS = 784
# A QDQ Conv summing fewer than this many products an output (C / group x
# KH x KW) stays float on every CPU: tcc_conv_i8's passes over the image and
# the product (the image gathered channels last, the product transposed out,
# requantized by the host loop after it) cost per output what a short sum
# saves, and a float pointwise convolution fuses with the depthwise one after
# it (the cpu accelerator's conv_pw_dw). MobileNetV2 through quant_pre_process
# + quantize_static's QDQ format (its stem 27, the first blocks' pointwise
# convolutions 16-32), 1 thread, tcc/onnxruntime: with VNNI 3.85 -> 2.1-2.2
# (3.90 ms with the stem float alone: 5.9 -> 3.9), with AVX2 1.47 -> 1.37;
# with 128 no better on MobileNetV2 and resnet18_qdq 1.5-2 % slower (its
# 1x1 downsampling of 64 channels float) (AMD EPYC family 26 model 2).
# Since 1x1 convolutions run in NCHW with AVX-512 VNNI (gemm_int.c's
# conv_pw_vnni) the floor is neutral there: 1.80-1.91 with 0, 28 or 64.
MIN_CONV_DEPTH = 64


def _macs(result_type, per_output):
    """Multiply-adds of an op making `result_type` at `per_output` each."""
    shape = result_type.shape if isinstance(result_type, TensorType) and result_type.shape is not None else None
    if shape is None:
        return 0
    return int(np.prod([d if isinstance(d, int) and d >= 0 else 8 for d in shape], dtype=np.int64)) * per_output


def _quantized_activation(v):
    """(QuantizeLinear's result q, DequantizeLinear's scale, zero point) when
    v = DequantizeLinear(QuantizeLinear(x)) per tensor with an 8-bit q, else None."""
    dq = getattr(v, "op", None)
    if dq is None or dq.name != "onnx.DequantizeLinear" or not _f32(v) or dq.get_attr("block_size"):
        return None
    qa = getattr(dq.operands[0], "op", None)
    if qa is None or qa.name != "onnx.QuantizeLinear" or qa.get_attr("precision") or qa.get_attr("block_size"):
        return None
    q = qa.results[0]
    s, z = _scalar(dq, 1, True), _scalar(dq, 2, False)
    if str(q.type.element) not in _INT8 or s is None or z is None or _scalar(qa, 1, True) is None \
            or _scalar(qa, 2, False) is None:
        return None
    return q, s, z


def _quantized_weight(v, n, axis):
    """(W, its scale, its zero point) when v = DequantizeLinear(W) with W a
    constant 8-bit tensor, the scale and zero point one value or n along
    `axis`, else None."""
    dq = getattr(v, "op", None)
    if dq is None or dq.name != "onnx.DequantizeLinear" or not _f32(v) or dq.get_attr("block_size"):
        return None
    w = constant_value(dq.operands[0])
    if w is None or str(w.dtype) not in ("uint8", "int8"):
        return None
    s = constant_value(dq.operands[1])
    z = constant_value(dq.operands[2]) if len(dq.operands) > 2 and dq.operands[2].type is not NONE \
        else np.zeros((), w.dtype)
    if s is None or z is None or s.dtype != np.float32 or z.dtype != w.dtype:
        return None
    ax = dq.get_attr("axis", 1)
    ax = ax + w.ndim if ax < 0 else ax
    for c in (s, z):
        if c.size != 1 and not (c.ndim == 1 and c.size == n and ax == axis):
            return None
    return dq.operands[0], s, z


class _QdqToInteger(RewritePattern):
    """What both rewrites share: new constants, and the integer op's result
    cast to float, scaled (and the bias added)."""

    def __init__(self, module):
        self.module = module  # where large new constants keep their data

    def const(self, rw, op, value, dtype):
        c = make_constant(self.module, np.asarray(value, dtype), loc=op.loc)
        rw.insert_before(op, c)
        return c.results[0]

    def replace(self, rw, op, name, q, w, z_q, z_w, attrs, scale, bias=None, per_channel_bias=True):
        """op -> Mul(Cast(name(q, w, z_q, z_w)), scale) [+ bias: as [M, 1, 1]
        with per_channel_bias (a Conv's), else as it broadcasts (a Gemm's C)]."""
        y = op.results[0]
        zw = z_w.reshape(-1) if z_w.size != 1 else z_w.reshape(())
        ip = rw.create_before(op, name, [q, w, self.const(rw, op, z_q, _INT8[str(q.type.element)]),
                                         self.const(rw, op, zw, z_w.dtype)],
                              [TensorType(y.type.shape, SCALARS["i32"])], attrs, loc=op.loc)
        f = rw.create_before(op, "onnx.Cast", [ip.results[0]], [y.type], {"to": A.IntegerAttr(1)}, loc=op.loc)
        out = rw.create_before(op, "onnx.Mul", [f.results[0], self.const(rw, op, scale, np.float32)], [y.type], {},
                               loc=op.loc).results[0]
        if bias is not None and not per_channel_bias:
            out = rw.create_before(op, "onnx.Add", [out, bias], [y.type], {}, loc=op.loc).results[0]
        elif bias is not None:
            m = bias.type.shape[0]
            b3 = rw.create_before(op, "onnx.Reshape", [bias, self.const(rw, op, [m, 1, 1], np.int64)],
                                  [TensorType((m, 1, 1), bias.type.element)], {}, loc=op.loc)
            out = rw.create_before(op, "onnx.Add", [out, b3.results[0]], [y.type], {}, loc=op.loc).results[0]
        rw.replace_op(op, [out])
        return True


class QdqMatMulToInteger(_QdqToInteger):
    """MatMul(DequantizeLinear(QuantizeLinear(x)), DequantizeLinear(W)), the
    pair onnxruntime.quantization's QDQ format writes around a matmul with
    W a constant 8-bit matrix [K, N] (per tensor, or per column: axis 1) ->

        Mul(Cast(MatMulInteger(QuantizeLinear(x), W, z_a, z_w), float), s_a * s_w)

    The products (q - z_a)(w - z_w) and their sum are exact integers, so
    this is the float model's result rounded once where the float GEMM
    rounds at every add (closer to the exact value, not bit-equal: s_a * s_w
    is one f32 rounding, a sum past 2^24 another). It runs on the host
    runtime's int8 kernel (runtime/native/gemm_int.c). Only for host-memory
    targets whose CPU runs it faster (driver: CompilePipeline.integer_qdq)."""
    op_name = "onnx.MatMul"

    def match_and_rewrite(self, op, rw):
        a, b = op.operands[0], op.operands[1]
        act = _quantized_activation(a)
        if act is None or not _f32(op.results[0]) or not isinstance(b.type, TensorType) or b.type.rank != 2 \
                or not isinstance(a.type, TensorType) or (a.type.rank or 0) < 2:
            return False
        k, n = b.type.shape
        wq = _quantized_weight(b, n, 1)
        if wq is None or _macs(op.results[0].type, k) < MIN_MACS:
            return False
        (q, s_a, z_a), (w, s_w, z_w) = act, wq
        scale = (np.float32(s_a) * s_w).reshape(-1 if s_w.size != 1 else ())
        return self.replace(rw, op, "onnx.MatMulInteger", q, w, z_a, z_w, {}, scale)


class QdqGemmToInteger(_QdqToInteger):
    """Gemm(DequantizeLinear(QuantizeLinear(x)), DequantizeLinear(W), [C]),
    no transA, beta 1: an exporter's Linear on 2-D activations (transB = 1,
    W [N, K] per output channel: axis 0) -> MatMulInteger on W transposed
    here, times s_x * s_w * alpha, plus C as it broadcasts."""
    op_name = "onnx.Gemm"

    def match_and_rewrite(self, op, rw):
        y = op.results[0]
        if not _f32(y) or op.get_attr("transA", 0) or float(op.get_attr("beta", 1.0)) != 1.0:
            return False
        a, b = op.operands[0], op.operands[1]
        act = _quantized_activation(a)
        if act is None or not isinstance(b.type, TensorType) or b.type.rank != 2:
            return False
        tb = int(op.get_attr("transB", 0) or 0)
        n, k = b.type.shape if tb else b.type.shape[::-1]
        wq = _quantized_weight(b, n, 0 if tb else 1)
        if wq is None or _macs(y.type, k) < MIN_MACS:
            return False
        (q, s_x, z_x), (w, s_w, z_w) = act, wq
        if tb:
            w = self.const(rw, op, constant_value(w).T, constant_value(w).dtype)
        c = op.operands[2] if len(op.operands) > 2 and op.operands[2].type is not NONE else None
        scale = (np.float32(s_x) * s_w * np.float32(op.get_attr("alpha", 1.0))).reshape(-1 if s_w.size != 1 else ())
        return self.replace(rw, op, "onnx.MatMulInteger", q, w, z_x, z_w, {}, scale, c, per_channel_bias=False)


class QdqConvToInteger(_QdqToInteger):
    """Conv(DequantizeLinear(QuantizeLinear(x)), DequantizeLinear(W), [B]), 2-D
    with one group and W a constant 8-bit tensor (per tensor or per output
    channel: axis 0) -> Mul(Cast(ConvInteger(q, W, z_x, z_w)), s_x * s_w) + B,
    the products exact as QdqMatMulToInteger's, on gemm_int.c's
    tcc_conv_i8. Grouped and depthwise convolutions keep the float path
    (ConvInteger has no kernel for them)."""
    op_name = "onnx.Conv"

    def __init__(self, module, max_positions=0, min_depth=0, pw_min_depth=-1, pw_max_positions=-1):
        super().__init__(module)
        self.max_positions = max_positions
        self.min_depth = min_depth
        self.pw_min_depth = min_depth if pw_min_depth < 0 else pw_min_depth
        self.pw_max_positions = max_positions if pw_max_positions < 0 else pw_max_positions

    def match_and_rewrite(self, op, rw):
        y = op.results[0]
        if not _f32(y) or (op.get_attr("group", 1) or 1) != 1 or len(op.operands) < 2:
            return False
        act = _quantized_activation(op.operands[0])
        if act is None or not isinstance(op.operands[1].type, TensorType) or op.operands[1].type.rank != 4:
            return False
        m = op.operands[1].type.shape[0]
        pw = _pointwise(op)
        floor, most = (self.pw_min_depth, self.pw_max_positions) if pw else (self.min_depth, self.max_positions)
        if int(np.prod(op.operands[1].type.shape[1:], dtype=np.int64)) < floor:
            return False
        n = _positions(op) if most else 0
        if n is None or n > most:
            return False
        wq = _quantized_weight(op.operands[1], m, 0)
        if wq is None or _macs(y.type, int(np.prod(op.operands[1].type.shape[1:], dtype=np.int64))) < MIN_MACS:
            return False
        (q, s_x, z_x), (w, s_w, z_w) = act, wq
        bias = op.operands[2] if len(op.operands) > 2 and op.operands[2].type is not NONE else None
        attrs = {k: v for k, v in op.attributes.items() if k in ("auto_pad", "dilations", "group", "kernel_shape",
                                                                  "pads", "strides")}
        scale = (np.float32(s_x) * s_w).reshape((m, 1, 1) if s_w.size != 1 else ())
        return self.replace(rw, op, "onnx.ConvInteger", q, w, z_x, z_w, attrs, scale, bias)


def _pointwise(op):
    """Whether a Conv is 1x1 of stride 1 without pads."""
    w = op.operands[1].type
    return (tuple(w.shape[2:]) == (1, 1) and all(s == 1 for s in (op.get_attr("strides") or [1, 1]))
            and not any(op.get_attr("pads") or []))


def _positions(op):
    """Output positions a channel of a Conv; None where unknown."""
    y = op.results[0].type
    hw = y.shape[2:] if isinstance(y, TensorType) and y.shape is not None else (None,)
    return None if any(d is None for d in hw) else int(np.prod(hw, dtype=np.int64))


class QdqToIntegerPass(Pass):
    name = "qdq-to-integer"
    summary = "QDQ-format MatMuls, Gemms and Convs with constant 8-bit weights -> MatMulInteger, ConvInteger"
    options = {"convs": (bool, True, "Convs too"),
               "conv-max-positions": (int, 0, "only Convs of at most this many output positions a channel "
                                              "(0: any; driver: 784 on AVX2 CPUs, see AVX2_CONV_POSITIONS)", 0),
               "conv-min-depth": (int, 0, "only Convs of at least this many products an output, C / group x KH x KW "
                                          "(driver: MIN_CONV_DEPTH)", 0),
               "pw-min-depth": (int, -1, "the same for 1x1 Convs of stride 1 without pads (-1: conv-min-depth's; "
                                         "driver: 0 where the cpu accelerator fuses them with a depthwise one)", -1),
               "pw-max-positions": (int, -1, "conv-max-positions for 1x1 Convs of stride 1 without pads (-1: "
                                             "conv-max-positions's, 0: any)", -1)}

    def run(self, module, ctx):
        patterns = [QdqMatMulToInteger(module), QdqGemmToInteger(module)]
        if self.convs:
            patterns.append(QdqConvToInteger(module, self.conv_max_positions, self.conv_min_depth, self.pw_min_depth,
                                             self.pw_max_positions))
        apply_patterns_greedily(ctx, module, patterns)
