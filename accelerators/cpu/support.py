"""Placement rules of the cpu accelerator: which onnx ops it takes (and why
not the others), and its composite patterns (TVM BYOC's pattern table)."""
from __future__ import annotations

import numpy as np

from tcc.accelerators import CompositePattern, Support
from tcc.dialects.ir.attributes import elements_value
from tcc.dialects.ir.types import NONE, TensorType

# the onnx ops the cpu takes; elementwise.py lowers the elementwise ones to scalar C
UNARY = {"Relu", "Sigmoid", "Tanh", "Exp", "Log", "Neg", "Abs", "Sqrt", "Reciprocal", "Erf", "Floor", "Ceil",
         "LeakyRelu", "HardSigmoid", "HardSwish", "Elu", "Selu", "Softplus", "Softsign", "Identity", "Sign",
         "ThresholdedRelu", "Gelu", "Clip", "Sin", "Cos", "Round"}
BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "PRelu"}
VARIADIC = {"Max", "Min", "Sum", "Mean"}
ELEMENTWISE = {f"onnx.{n}" for n in UNARY | BINARY | VARIADIC}
LAYOUT = {"onnx.Reshape", "onnx.Flatten", "onnx.Squeeze", "onnx.Unsqueeze", "onnx.Transpose"}
# strided copies (kernels/copy.c): the exporters' rotary halves and box
# decodes (Slice, Concat) and broadcast keys/values (Expand) kept a host
# partition between two cpu ones, each boundary a call of its own
COPIES = {"onnx.Slice", "onnx.Concat", "onnx.Expand"}
KERNELS = {"onnx.Conv", "onnx.Gemm", "onnx.MatMul", "onnx.BatchNormalization", "onnx.MaxPool", "onnx.AveragePool",
           "onnx.GlobalAveragePool", "onnx.ReduceMean", "onnx.Softmax", "onnx.LogSoftmax", "onnx.LayerNormalization"}
RECURRENT = {"onnx.LSTM", "onnx.GRU"}  # kernels/rnn.c
SUPPORTED = ELEMENTWISE | LAYOUT | KERNELS | RECURRENT | COPIES
# operand positions that are not data (int64 shapes/axes): any dtype, ignored
NON_DATA = {"onnx.Reshape": {1}, "onnx.Squeeze": {1}, "onnx.Unsqueeze": {1}, "onnx.ReduceMean": {1},
            "onnx.Slice": {1, 2, 3, 4}, "onnx.Expand": {1}}


def const_value(v):
    op = getattr(v, "op", None)
    if op is None or op.name != "onnx.Constant" or "value" not in op.attributes:
        return None
    return elements_value(op.attributes["value"])


def opset(module, domain=""):
    imp = module.op.get_attr("onnx.opset_import") if module is not None else None
    if isinstance(imp, dict):
        v = imp.get(domain)
        return int(getattr(v, "value", v)) if v is not None else 18
    return 18


def reduce_mean_start(op, module):
    """The first reduced axis of a ReduceMean whose axes are all the trailing
    ones from there (a squeeze-excite's mean over H and W: kernels/pool.c's
    global average, rows of the leading dims), else None."""
    rank = op.operands[0].type.rank
    if opset(module) >= 18:
        axes = None
        if len(op.operands) > 1 and op.operands[1].type is not NONE:
            axes = const_value(op.operands[1])
            if axes is None:
                return None
    else:
        axes = op.get_attr("axes")
    axes = [] if axes is None else [int(a) for a in np.asarray(getattr(axes, "value", axes)).ravel()]
    if not axes:
        return None if op.get_attr("noop_with_empty_axes", 0) else 0
    axes = sorted(a + rank if a < 0 else a for a in axes)
    return axes[0] if axes == list(range(axes[0], rank)) else None


def contiguous_strides(shape):
    """Row-major strides (elements) of `shape`."""
    return [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]


def slice_view(op, module):
    """A Slice as a strided view of its input: (element offset, [source
    stride per output dim]), or None unless starts/ends/axes/steps are
    constants. Python's slice rules are ONNX's (a negative index counts from
    the end, then clamping to the dim, -1 meaning before the first for a
    negative step), so slice.indices clamps."""
    shape = list(op.operands[0].type.shape)
    rank = len(shape)
    if opset(module) < 10:
        vals = [op.get_attr(k) for k in ("starts", "ends", "axes")] + [None]
        vals = [None if v is None else [int(getattr(x, "value", x)) for x in v] for v in vals]
    else:
        vals = []
        for i in range(1, 5):
            v = op.operands[i] if i < len(op.operands) else None
            if v is None or v.type is NONE:
                vals.append(None)
                continue
            c = const_value(v)
            if c is None:
                return None
            vals.append([int(x) for x in np.asarray(c).ravel()])
    starts, ends, axes, steps = vals
    if starts is None or ends is None or len(starts) != len(ends):
        return None
    axes = list(range(len(starts))) if axes is None else [a + rank if a < 0 else a for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if len(axes) != len(starts) or len(steps) != len(starts) or 0 in steps or \
            any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
        return None
    cstride = contiguous_strides(shape)
    offset, strides = 0, list(cstride)
    for a, b, e, st in zip(axes, starts, ends, steps):
        b, _, st = slice(b, e, st).indices(shape[a])
        offset += b * cstride[a]
        strides[a] = st * cstride[a]
    return offset, strides


def _check_types(op):
    skip = NON_DATA.get(op.name, set())
    for i, v in enumerate(op.operands):
        if i in skip or v.type is NONE:
            continue
        t = v.type
        if not isinstance(t, TensorType) or str(t.element) != "f32":
            return f"dtype {getattr(t, 'element', t)} unsupported (f32 only)"
        if t.shape is None or not t.has_static_shape:
            return f"shape {t} unsupported (static shapes only)"
    for r in op.results:
        t = r.type
        if t is NONE:
            continue
        if not isinstance(t, TensorType) or str(t.element) != "f32":
            return f"dtype {getattr(t, 'element', t)} unsupported (f32 only)"
        if t.shape is None or not t.has_static_shape:
            return f"shape {t} unsupported (static shapes only)"
    return None


# ops the host path runs as well and fuses with its neighbours (`fuse`,
# `fuse-rows`): a region of these alone beside host steps goes back to the
# host (placement's _host_exchange). Measured on the BERT that
# quantize_dynamic writes (Intel Xeon, 1 / 2 threads): its scale, bias, Gelu
# and LayerNormalization regions between the host's int8 matmuls made
# --maccel=cpu 2.93-3.09 / 2.30-2.36 ms against the host path's 2.48-2.61 /
# 2.19-2.24; without them 2.62-2.72 / 2.01-2.07 (with the LayerNormalization
# regions kept 2.70-2.79 / 2.19-2.29). Alone, with no host step beside them
# (the bench's 8-op chain, Softmax + LayerNormalization), the cpu's loops
# stay: 0.22x onnxruntime against the host's 0.39.
FUSIBLE = ELEMENTWISE | LAYOUT | COPIES | {"onnx.LayerNormalization"}


def cost_hint(op):
    """tcc_cost_hint: 1.0 (no faster than the host) for what the host fuses,
    None (keep) for the kernels."""
    return 1.0 if op.name in FUSIBLE else None


def _used_results(op):
    return [r for r in op.results if r.type is not NONE and r.uses]


def _f32_static(t):
    return isinstance(t, TensorType) and str(t.element) == "f32" and t.shape is not None and t.has_static_shape


def _text(v):
    return v.decode() if isinstance(v, bytes) else v


RNN_DEFAULT_ACTS = {"onnx.LSTM": ["sigmoid", "tanh", "tanh"], "onnx.GRU": ["sigmoid", "tanh"]}


def check_recurrent(op):
    """LSTM/GRU on kernels/rnn.c: f32, static shapes, constant weights (they
    are transposed at compile time), the default activations; Y the only
    result used (the final states go to the host path)."""
    ops = [v if v is not None and v.type is not NONE else None
           for v in list(op.operands) + [None] * (8 - len(op.operands))]
    x, w, r, b, lens, h0 = ops[:6]
    extra = ops[6:8] if op.name == "onnx.LSTM" else []
    if not _f32_static(x.type) or x.type.rank != 3:
        return Support.no("shape: X must be a static 3-D f32 tensor")
    for v, what in [(w, "W"), (r, "R"), (b, "B")] + ([(extra[1], "P")] if extra else []):
        if v is None and what in ("B", "P"):
            continue
        if v is None or not _f32_static(v.type) or const_value(v) is None:
            return Support.no(f"attribute: {what} must be a constant f32 tensor")
    for v in [h0] + extra[:1]:
        if v is not None and not _f32_static(v.type):
            return Support.no("dtype/shape: initial_h/initial_c must be static f32")
    if lens is not None and (not isinstance(lens.type, TensorType) or str(lens.type.element) != "i32"
                                  or not lens.type.has_static_shape):
        return Support.no("dtype: sequence_lens must be a static int32 tensor")
    y = op.results[0]
    if y.type is NONE or not y.uses or not _f32_static(y.type):
        return Support.no("attribute: only the Y output is supported (Y_h/Y_c run on the host)")
    if any(res.type is not NONE and res.uses for res in op.results[1:]):
        return Support.no("attribute: only the Y output is supported (Y_h/Y_c run on the host)")
    acts = op.get_attr("activations")
    if acts is not None:
        names = [_text(a).lower() for a in acts]
        per = RNN_DEFAULT_ACTS[op.name]
        if names not in (per, per * 2):
            return Support.no(f"attribute: activations {names} (only the defaults {per})")
    if op.get_attr("activation_alpha") is not None or op.get_attr("activation_beta") is not None:
        return Support.no("attribute: activation_alpha/beta")
    if _text(op.get_attr("direction") or "forward") not in ("forward", "reverse", "bidirectional"):
        return Support.no("attribute: direction")
    return Support.yes()


def check(op, module):
    if op.name not in SUPPORTED:
        return Support.no("op unsupported")
    if op.name in RECURRENT:
        return check_recurrent(op)
    why = _check_types(op)
    if why:
        return Support.no(why)
    name = op.name[5:]
    if len(op.results) > 1 and any(r.type is not NONE and r.uses for r in op.results[1:]):
        return Support.no("attribute: only the first output is supported")
    rank = op.results[0].type.rank
    if name == "Conv":
        if op.operands[1].type.rank != 4:
            return Support.no("shape: only 2-D convolutions (NCHW)")
    elif name in ("MaxPool", "AveragePool"):
        if op.operands[0].type.rank != 4:
            return Support.no("shape: only 2-D pooling (NCHW)")
        if name == "MaxPool" and op.get_attr("storage_order", 0):
            return Support.no("attribute: storage_order=1 unsupported")
    elif name == "ReduceMean":
        if reduce_mean_start(op, module) is None:
            return Support.no("attribute: only a mean over trailing axes (axes constant)")
    elif name == "GlobalAveragePool":
        if op.operands[0].type.rank < 3:
            return Support.no("shape: rank >= 3 expected")
    elif name == "BatchNormalization":
        if op.get_attr("training_mode", 0):
            return Support.no("attribute: training_mode unsupported")
        if any(const_value(v) is None for v in op.operands[1:5]):
            return Support.no("attribute: only constant scale/bias/mean/var (inference)")
        if op.operands[0].type.rank < 2:
            return Support.no("shape: rank >= 2 expected")
    elif name == "LayerNormalization":
        if op.get_attr("stash_type", 1) != 1:
            return Support.no("attribute: stash_type must be 1")
        axis = op.get_attr("axis", -1)
        shape = op.operands[0].type.shape
        axis = axis + len(shape) if axis < 0 else axis
        cols = 1
        for d in shape[axis:]:
            cols *= d
        for v in op.operands[1:]:
            if v.type is not NONE and v.type.num_elements != cols:
                return Support.no("shape: scale/bias must cover the normalized dims")
    elif name == "Gemm":
        if any(v.type.rank != 2 for v in op.operands[:2]):
            return Support.no("shape: Gemm needs 2-D A and B")
    elif name == "Gelu":
        if op.get_attr("approximate", "none") not in ("none", "tanh"):
            return Support.no("attribute: approximate")
    elif name == "Transpose":
        if rank > 8:
            return Support.no("shape: rank > 8")
    elif name == "Slice":
        if slice_view(op, module) is None:
            return Support.no("attribute: starts/ends/axes/steps must be constants")
        if rank > 8:
            return Support.no("shape: rank > 8")
    elif name in ("Concat", "Expand"):
        if rank > 8:
            return Support.no("shape: rank > 8")
    elif name in ("Sin", "Cos", "Round") and rank is None:
        return Support.no("shape")
    return Support.yes()


def _all_supported(ops):
    """A composite is only placed whole when the cpu takes every op of it
    (placement does not ask tcc_supports_op about composite members)."""
    module = None
    top = ops[0]
    while top is not None and top.name != "builtin.module":
        top = top.parent_op
    if top is not None:
        class _M:  # opset lookup needs only `.op`
            op = top
        module = _M()
    if not all(check(o, module) for o in ops):
        return False
    last = ops[-1]
    if last.name == "onnx.Clip":
        return all(v.type is NONE or const_value(v) is not None for v in last.operands[1:])
    return True


# the 8-bit types of a quantized activation: signed?
QUANT8 = {"ui8": 0, "i8": 1, "si8": 1}
CONV_Q8 = ("onnx.QuantizeLinear", "onnx.ConvInteger", "onnx.Cast", "onnx.Mul")


def _one(v, dtypes):
    """v's one value when it is a one-element constant of one of `dtypes`, else None."""
    c = const_value(v) if v is not None and v.type is not NONE else None
    return c.reshape(-1)[0] if c is not None and c.size == 1 and str(c.dtype) in dtypes else None


def conv_q8_parts(chain):
    """What cpu.conv_q8 takes from a match of CONV_Q8, the form qdq.py's
    QdqConvToInteger writes (QuantizeLinear(x) -> ConvInteger -> Cast ->
    Mul by s_x * s_w): {x, sx, zx, xsigned, w, wzp, scale [M]}, or None.
    x a static f32 NCHW tensor, one constant scale and zero point; W a
    constant 8-bit [M, C, 1, 1], packed as bytes (layout 2 for VNNI, or 3:
    the pair-safe bytes and corrections of an AVX2 CPU), where gemm_int.c's
    tcc_conv_q8 quantizes the float image as it interleaves it and
    requantizes the sums in its stores, in the cpu partition around it."""
    from tcc.dialects.conversions.graph_to_loop.quantization.quantized_linear import conv_weights_layout
    q, ci, cast, mul = chain
    x = q.operands[0]
    if not _f32_static(x.type) or x.type.rank != 4 or len(q.operands) < 3:
        return None
    elem = str(q.results[0].type.element)
    sx, zx = _one(q.operands[1], ("float32",)), _one(q.operands[2], ("uint8", "int8"))
    if elem not in QUANT8 or sx is None or zx is None or not (np.isfinite(sx) and sx > 0) or \
            q.get_attr("block_size") or q.get_attr("precision"):
        return None
    if ci.operands[0] is not q.results[0] or len(ci.operands) < 3 or _one(ci.operands[2], ("uint8", "int8")) != zx:
        return None
    w = const_value(ci.operands[1])
    wzp = const_value(ci.operands[3]) if len(ci.operands) > 3 and ci.operands[3].type is not NONE else \
        np.zeros((), w.dtype if w is not None else np.int8)
    if w is None or w.ndim != 4 or str(w.dtype) not in ("int8", "uint8") or wzp is None or \
            wzp.dtype != w.dtype or wzp.size not in (1, w.shape[0]):
        return None
    if (ci.get_attr("group", 1) or 1) != 1 or _text(ci.get_attr("auto_pad") or "NOTSET") != "NOTSET":
        return None
    # 1x1 of stride 1 without pads, weights less their zero point within
    # int8 (pack_u8s8's bytes): gemm_int.c's NCHW path. Elsewhere
    # tcc_conv_q8 passes over memory as the host step does, in scalar loops:
    # resnet18_qdq's 3x3 convolutions so took 10.0 ms at 1 thread against
    # 6.0 as host steps (AMD EPYC family 26 model 2)
    pointwise = w.shape[2:] == (1, 1) and all(int(v) == 1 for v in ci.get_attr("strides") or [1, 1]) and \
        not any(int(v) for v in ci.get_attr("pads") or [0])
    bz = w.astype(np.int32) - wzp.astype(np.int32).reshape((-1, 1, 1, 1) if wzp.size > 1 else ())
    if not pointwise or bz.min(initial=0) < -128 or bz.max(initial=0) > 127:
        return None
    if cast.get_attr("to") != 1 or not _f32_static(cast.results[0].type):
        return None
    m = w.shape[0]
    y = cast.results[0]
    if mul.operands[0] is not y or mul.results[0].type != y.type:
        return None
    sc = const_value(mul.operands[1])
    if sc is None or sc.dtype != np.float32 or (sc.size != 1 and tuple(sc.shape) not in ((m, 1, 1), (1, m, 1, 1))):
        return None
    # on int16 pairs (layout 1: weights with too many pairs vpmaddubsw could
    # saturate) tcc_conv_q8 takes its passes (scalar quantize, the tile,
    # scalar requantize): mobilenetv2_qdq as an AVX2 CPU, 1 thread, 5.81 ms
    # with these convolutions as host steps, 7.35 so as cpu.conv_q8 (AMD
    # EPYC family 26 model 2, AVX-512 hidden)
    if conv_weights_layout(w, wzp.astype(w.dtype), pointwise=True) not in (2, 3):
        return None
    return {"x": x, "sx": np.float32(sx), "zx": int(zx), "xsigned": QUANT8[elem], "w": w, "wzp": wzp,
            "scale": np.broadcast_to(sc.reshape(-1), (m,)).astype(np.float32)}


def patterns():
    conv, add, relu, bn, clip = "onnx.Conv", "onnx.Add", "onnx.Relu", "onnx.BatchNormalization", "onnx.Clip"
    return [
        CompositePattern("conv_q8", CONV_Q8, lambda ops: conv_q8_parts(ops) is not None),
        CompositePattern("conv_bn_add_relu", (conv, bn, add, relu), _all_supported),
        CompositePattern("conv_bn_relu", (conv, bn, relu), _all_supported),
        CompositePattern("conv_bn_clip", (conv, bn, clip), _all_supported),
        CompositePattern("conv_add_relu", (conv, add, relu), _all_supported),
        CompositePattern("conv_bias_relu", (conv, relu), _all_supported),
        CompositePattern("conv_bn", (conv, bn), _all_supported),
        CompositePattern("gemm_bias_relu", ("onnx.Gemm", relu), _all_supported),
        CompositePattern("matmul_add_relu", ("onnx.MatMul", add, relu), _all_supported),
        CompositePattern("matmul_add", ("onnx.MatMul", add), _all_supported),
    ]
