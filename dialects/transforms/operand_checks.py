"""Operand checks onnx's per-node shape inference does not make, for the
shape-inference pass: ops whose operands' static shapes must agree with
each other (a Conv's channels, a Gemm's C, a recurrent op's W/R/B, a
Reshape's element count...), where the generated code would size its reads
by one of them and read past another's buffer. A model that breaks one
cannot run (ahead of time: a one-line error naming the node) or was given
input shapes it cannot take (run-time specialization: runtime/specialize.py
reports a ShapeMismatch as the caller's inputs not fitting the model).
Also the output dims of pooling under ceil_mode, where onnx's inference is
wrong."""
from __future__ import annotations

from ..ir.errors import PassError
from ..ir.types import NONE, TensorType
from .constants import constant_value


class ShapeMismatch(PassError):
    """An op cannot take the static shapes its operands have: at run-time
    specialization, the input shapes the caller gave do not fit the model."""

    def __init__(self, op, reason):
        self.op, self.reason = op, reason
        operands = []
        for v in op.operands:
            if v.type is NONE:
                continue
            c = constant_value(v)
            small = c is not None and c.size <= 8 and c.dtype.kind in "iu"
            operands.append(f"{v.type} = {c.ravel().tolist()}" if small else str(v.type))
        self.operands = operands
        super().__init__(f"{op.loc.describe()} ({op.name}) cannot take operands ({', '.join(operands)}): {reason}")


def _static(v):
    """v's dims when its type is a tensor of static shape, else None."""
    t = v.type
    return [int(d) for d in t.shape] if isinstance(t, TensorType) and t.has_static_shape else None


def _operand(op, i):
    return op.operands[i] if len(op.operands) > i and op.operands[i].type is not NONE else None


def _attr(op, name, default=None):
    a = op.attributes.get(name)
    return default if a is None else getattr(a, "value", default)


def _constant(op, i):
    """Operand i's constant value, or None."""
    v = _operand(op, i)
    return constant_value(v) if v is not None else None


def _window(op, nd):
    """A convolution's or pooling's (strides, dilations, pads) over nd
    spatial dims, defaults filled in; None where an attribute has another
    length."""
    st = [int(v) for v in (_attr(op, "strides") or [1] * nd)]
    dl = [int(v) for v in (_attr(op, "dilations") or [1] * nd)]
    pads = [int(v) for v in (_attr(op, "pads") or [0] * (2 * nd))]
    return (st, dl, pads) if len(st) == nd and len(dl) == nd and len(pads) == 2 * nd else None


def _check_reshape(op):
    """A Reshape of a static input to a constant shape must keep the element
    count. onnx's inference takes the shape as it is (12 elements "reshaped"
    to [5, 5] gives [5, 5]), and the code after it would read past the
    input's buffer: the host lowering refused it, the cpu accelerator's view
    read 13 floats of whatever lay there. At run-time specialization it is an
    input shape the model cannot take (a sequence length an exporter baked
    into a constant); ahead of time, a model that cannot run."""
    x, shape = _static(op.operands[0]), _constant(op, 1)
    if x is None or shape is None or shape.ndim != 1:
        return
    n = 1
    for d in x:
        n *= d
    dims = [int(d) for d in shape.tolist()]
    if not _attr(op, "allowzero", 0):  # 0 copies the input's dim
        dims = [x[i] if d == 0 and i < len(x) else d for i, d in enumerate(dims)]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise ShapeMismatch(op, f"the shape {shape.tolist()} has more than one -1 or a dim below -1")
    known = 1
    for d in dims:
        known *= d if d != -1 else 1
    fits = (n % known == 0 if known else n == 0) if -1 in dims else known == n
    if not fits:
        raise ShapeMismatch(op, f"{n} elements cannot be viewed as {shape.tolist()}")


# where X, W and the bias are among a convolution's operands
_CONV_OPERANDS = {"onnx.Conv": (0, 1, 2), "onnx.ConvInteger": (0, 1, None), "onnx.QLinearConv": (0, 3, 8)}


def _check_conv(op):
    """Conv (ConvInteger, QLinearConv): X's channels are W's input channels
    times group, the bias one value per output channel, the kernel as W's
    spatial dims, and at least one output position. onnx's inference checks
    none of them, and the kernels size their reads by W: a 3-channel X
    against a W for 5 read past X's buffer; a kernel larger than the padded
    input gave an empty output that the cpu kernels divided by."""
    xi, wi, bi = _CONV_OPERANDS[op.name]
    if len(op.operands) <= wi:
        return
    x, w = _static(op.operands[xi]), _static(op.operands[wi])
    if x is None or w is None or len(x) < 3:
        return
    g = int(_attr(op, "group", 1))
    if len(w) != len(x):
        raise ShapeMismatch(op, f"W has rank {len(w)}, X rank {len(x)}")
    if x[1] != w[1] * g or g < 1 or w[0] % g:
        raise ShapeMismatch(op, f"X has {x[1]} channels, W {w[1]} per group x group {g} (W {w} with {w[0]} outputs)")
    ks = _attr(op, "kernel_shape")
    if ks is not None and [int(k) for k in ks] != w[2:]:
        raise ShapeMismatch(op, f"kernel_shape {list(ks)} is not W's spatial dims {w[2:]}")
    b = _operand(op, bi) if bi is not None else None
    if b is not None and _static(b) is not None and _static(b) != [w[0]]:
        raise ShapeMismatch(op, f"the bias has shape {_static(b)}, not one value per output channel ({w[0]})")
    nd, auto_pad = len(x) - 2, _attr(op, "auto_pad", "NOTSET")
    win = _window(op, nd) if auto_pad in ("NOTSET", "VALID") else None
    if win is not None:
        _, dil, pads = win
        padded = [x[2 + i] + (pads[i] + pads[nd + i] if auto_pad == "NOTSET" else 0) for i in range(nd)]
        if any(padded[i] < (w[2 + i] - 1) * dil[i] + 1 for i in range(nd)):
            raise ShapeMismatch(op, f"the kernel {w[2:]} (dilations {dil}) is larger than the padded input {padded}")


def _check_gemm(op):
    """Gemm's C broadcasts to the [M, N] result in one direction."""
    a, b = _static(op.operands[0]), _static(op.operands[1])
    c = _operand(op, 2)
    c = _static(c) if c is not None else None
    if a is None or b is None or c is None or len(a) != 2 or len(b) != 2:
        return
    m = a[1] if _attr(op, "transA", 0) else a[0]
    n = b[0] if _attr(op, "transB", 0) else b[1]
    if len(c) > 2 or not all(d in (1, t) for d, t in zip(reversed(c), (n, m))):
        raise ShapeMismatch(op, f"C has shape {c}, which does not broadcast to the result's [{m}, {n}]")


def _check_norm_params(op):
    """BatchNormalization's scale, B, mean and var, InstanceNormalization's
    scale and B: one value per channel of X."""
    x = _static(op.operands[0])
    if x is None or len(x) < 2:
        return
    names = ("scale", "B", "mean", "var")
    for i in range(1, min(len(op.operands), 5)):
        v = _operand(op, i)
        got = _static(v) if v is not None else None
        if got is not None and got != [x[1]]:
            raise ShapeMismatch(op, f"{names[i - 1]} has shape {got}, not one value per channel ({x[1]})")


def _check_depth_space(op):
    """DepthToSpace: the channels split into blocksize^2; SpaceToDepth: the
    height and width into blocksize."""
    x = _static(op.operands[0])
    bs = int(_attr(op, "blocksize", 0) or 0)
    if x is None or len(x) != 4 or bs < 1:
        return
    if op.name == "onnx.DepthToSpace" and x[1] % (bs * bs):
        raise ShapeMismatch(op, f"{x[1]} channels do not split into blocks of {bs} x {bs}")
    if op.name == "onnx.SpaceToDepth" and (x[2] % bs or x[3] % bs):
        raise ShapeMismatch(op, f"{x[2]} x {x[3]} does not split into blocks of {bs} x {bs}")


def _check_pad(op):
    """Pad's pads (negative ones crop) leave every dim at least 0."""
    x, pads, axes = _static(op.operands[0]), _constant(op, 1), _constant(op, 3)
    if x is None or pads is None or pads.ndim != 1:
        return
    axes = [int(a) % len(x) for a in axes.tolist()] if axes is not None else list(range(len(x)))
    p = [int(v) for v in pads.tolist()]
    if len(p) != 2 * len(axes):
        return
    for k, a in enumerate(axes):
        if x[a] + p[k] + p[len(axes) + k] < 0:
            raise ShapeMismatch(op, f"pads {p} crop axis {a} ({x[a]} long) below nothing")


def _check_lrn(op):
    """LRN's size counts channels: at least 1 (the host lowering divided by it)."""
    size = _attr(op, "size")
    if size is not None and int(size) < 1:
        raise ShapeMismatch(op, f"size is {int(size)}; it counts channels, at least 1")


def _check_gather_elements(op):
    """GatherElements: the indices have X's rank and, off the axis, no dim
    larger than X's (each output element reads X at its own position there)."""
    x, i = _static(op.operands[0]), _static(op.operands[1])
    if x is None or i is None:
        return
    axis = int(_attr(op, "axis", 0))
    axis = axis + len(x) if axis < 0 else axis
    if len(i) != len(x) or any(a > b for k, (a, b) in enumerate(zip(i, x)) if k != axis):
        raise ShapeMismatch(op, f"indices of shape {i} do not fit data of shape {x} off axis {axis}")


def _check_conv_transpose(op):
    """ConvTranspose: X's channels are W's first dim, the bias one value per
    output channel (W's second dim times group)."""
    x, w = _static(op.operands[0]), _static(op.operands[1])
    if x is None or w is None or len(x) < 3:
        return
    g = int(_attr(op, "group", 1))
    if len(w) != len(x) or x[1] != w[0] or g < 1 or w[0] % g:
        raise ShapeMismatch(op, f"X has {x[1]} channels, W {w} (its first dim must be X's channels), group {g}")
    b = _operand(op, 2)
    if b is not None and _static(b) is not None and _static(b) != [w[1] * g]:
        raise ShapeMismatch(op, f"the bias has shape {_static(b)}, not one value per output channel ({w[1] * g})")


def _check_prelu(op):
    """PRelu's slope broadcasts to X in one direction (X's shape is the result's)."""
    x, s = _static(op.operands[0]), _static(op.operands[1])
    if x is None or s is None:
        return
    ok = len(s) <= len(x) and all(a == b or a == 1 for a, b in zip(reversed(s), reversed(x)))
    if not ok:
        raise ShapeMismatch(op, f"the slope's shape {s} does not broadcast to X's {x}")


def _check_rnn(op):
    """RNN / GRU / LSTM: W [directions, gates x H, input], R [directions,
    gates x H, H], B [directions, 2 x gates x H], the initial states
    [directions, batch, H] ([batch, directions, H] in layout 1), the
    peepholes [directions, 3 H]. The kernels take
    H and the input size from W and R: an R for another H read past it."""
    gates = {"onnx.RNN": 1, "onnx.GRU": 3, "onnx.LSTM": 4}[op.name]
    x, w, r = _static(op.operands[0]), _static(op.operands[1]), _static(op.operands[2])
    if x is None or w is None or r is None or len(x) != 3:
        return
    dirs = 2 if _attr(op, "direction", "forward") == "bidirectional" else 1
    hidden = _attr(op, "hidden_size")
    h = int(hidden) if hidden is not None else (r[2] if len(r) == 3 else -1)
    # layout 1: X [batch, seq, input] and the states [batch, directions, H]
    state = [x[0], dirs, h] if int(_attr(op, "layout", 0)) == 1 else [dirs, x[1], h]
    want = {1: [dirs, gates * h, x[2]], 2: [dirs, gates * h, h], 3: [dirs, 2 * gates * h],
            5: state, 6: state, 7: [dirs, 3 * h]}
    names = {1: "W", 2: "R", 3: "B", 5: "initial_h", 6: "initial_c", 7: "P"}
    for i, shape in want.items():
        if op.name != "onnx.LSTM" and i > 5:
            break
        v = _operand(op, i)
        got = _static(v) if v is not None else None
        if got is not None and got != shape:
            raise ShapeMismatch(op, f"{names[i]} has shape {got}, expected {shape} (hidden size {h}, "
                                    f"input size {x[2]}, {dirs} direction{'s' if dirs > 1 else ''})")


_POOLS = ("onnx.MaxPool", "onnx.AveragePool", "onnx.LpPool")


def _check_pool_pads(op):
    """A pooling's pads smaller than its kernel, as onnxruntime requires: a
    window wholly in the padding has no element to take, and the lowerings
    disagreed on it (AveragePool: 0 on the cpu accelerator, NaN on the host;
    MaxPool: -FLT_MAX against -inf)."""
    k = [int(v) for v in (_attr(op, "kernel_shape") or [])]
    pads = [int(v) for v in (_attr(op, "pads") or [])]
    if _attr(op, "auto_pad", "NOTSET") != "NOTSET" or not k or len(pads) != 2 * len(k):
        return
    for i, ki in enumerate(k):
        if pads[i] >= ki or pads[len(k) + i] >= ki:
            raise ShapeMismatch(op, f"pads {pads} are not all smaller than the kernel {k}: a window would "
                                    f"hold only padding")


def ceil_pool_types(op):
    """A pooling's output dims under ceil_mode, by the rule onnxruntime and
    the ONNX reference follow: ceil((in + pads - span) / stride) + 1 windows,
    less the last where it would start in the end padding. onnx's inference
    (1.23) keeps that last window (23 rows, kernel 5, stride 2, pads 2 / 0:
    11 against 10), so neither its answer nor a declared type is taken:
    True when the results' types were set here."""
    if op.name not in _POOLS or not _attr(op, "ceil_mode", 0) or _attr(op, "auto_pad", "NOTSET") != "NOTSET":
        return False
    x = _static(op.operands[0])
    if x is None or len(x) < 3:
        return False
    nd = len(x) - 2
    k = [int(v) for v in (_attr(op, "kernel_shape") or [])]
    win = _window(op, nd)
    if len(k) != nd or win is None or min(win[0]) < 1:
        return False
    st, dl, pads = win
    dims = []
    for i in range(nd):
        span = x[2 + i] + pads[i] + pads[nd + i] - ((k[i] - 1) * dl[i] + 1)
        if span < 0:
            return False  # no window fits: left to onnx's inference and the lowering
        o = -(-span // st[i]) + 1
        if (o - 1) * st[i] >= x[2 + i] + pads[i]:
            o -= 1
        dims.append(o)
    for r in op.results:
        if isinstance(r.type, TensorType) and r.type.element is not None and r.type.shape is not None \
                and len(r.type.shape) == len(x):
            r.type = TensorType(tuple(x[:2] + dims), r.type.element)
    return True


# Ops whose operand shapes onnx's per-node inference does not check against
# each other, where the generated code would read past a buffer: a model
# that breaks them cannot run (ahead of time), or an input shape it cannot
# take (run-time specialization).
_CHECKS = {"onnx.Reshape": _check_reshape, "onnx.Conv": _check_conv, "onnx.ConvInteger": _check_conv,
           "onnx.QLinearConv": _check_conv, "onnx.ConvTranspose": _check_conv_transpose, "onnx.PRelu": _check_prelu,
           "onnx.RNN": _check_rnn, "onnx.GRU": _check_rnn, "onnx.LSTM": _check_rnn, "onnx.Gemm": _check_gemm,
           "onnx.BatchNormalization": _check_norm_params, "onnx.InstanceNormalization": _check_norm_params,
           "onnx.DepthToSpace": _check_depth_space, "onnx.SpaceToDepth": _check_depth_space,
           "onnx.GatherElements": _check_gather_elements, "onnx.Pad": _check_pad, "onnx.LRN": _check_lrn,
           **{p: _check_pool_pads for p in _POOLS}}


def static_operands(op):
    """Whether every operand present has a static shape."""
    return all(v.type is NONE or getattr(v.type, "has_static_shape", False) for v in op.operands)


def check_operands(op):
    """Raises ShapeMismatch where op's operands cannot go together."""
    check = _CHECKS.get(op.name)
    if check is not None:
        check(op)
