"""shape-inference: refines result types op by op with onnx's own per-node
inference (constant inputs such as Reshape's shape are passed as data), so a
rewritten graph regains static shapes without a round trip through a model."""
from __future__ import annotations

import onnx
import onnx.shape_inference

from ..builtin import set_function_type
from ..ir.errors import PassError
from ..ir.passes import Pass
from ..ir.types import NONE, TensorType, DialectType
from ..onnx.dialect import schema_for, split_op_name, OPSET_ATTR
from ..onnx.exporter import Exporter, opset_imports, tensor_proto
from ..onnx.types import ir_type, onnx_type
from .constants import constant_value


def _more_precise(new, old):
    if old == new:
        return False
    if isinstance(old, DialectType) and old.name == "onnx.Unknown":
        return True
    if not isinstance(new, TensorType) or not isinstance(old, TensorType):
        return False
    if new.element != old.element or new.shape is None:
        return False
    if old.shape is None:
        return True
    if len(old.shape) != len(new.shape):
        return False
    return all(o is None or o == n for o, n in zip(old.shape, new.shape)) and new.shape != old.shape


def _contradicts(new, old):
    """Both static tensor types of one element type, of other shapes: a
    declaration onnx's inference contradicts."""
    return isinstance(new, TensorType) and isinstance(old, TensorType) and new.element == old.element and \
        new.has_static_shape and old.has_static_shape and new.shape != old.shape


def _refine_scan_body_args(op):
    """A Scan body's arguments are its state operands' types and its scan
    inputs' with the scan axis dropped: the body graph may declare them
    with unknown dims, and every type inside follows from them."""
    body = op.regions[0].blocks[0]
    m = op.attributes.get("num_scan_inputs")
    if m is None or len(body.args) != len(op.operands):
        return
    n = len(op.operands) - m.value
    axes = op.attributes.get("scan_input_axes")
    axes = [a.value if hasattr(a, "value") else a for a in axes.value] if axes is not None else [0] * m.value
    for i, (arg, v) in enumerate(zip(body.args, op.operands)):
        t = v.type
        if not isinstance(t, TensorType) or t.shape is None:
            continue
        if i >= n:
            shape = list(t.shape)
            del shape[axes[i - n] % len(shape)]
            t = TensorType(tuple(shape), t.element)
        if _more_precise(t, arg.type):
            arg.type = t


def loop_trip_count(op):
    """A Loop's iteration count when it is known before running: a constant
    trip count M (or none, with a constant false condition), a constant
    condition, and a body that never clears it (it yields its condition
    argument, or a constant true). None otherwise."""
    body = op.regions[0].blocks[0]
    m = constant_value(op.operands[0]) if op.operands[0].type is not NONE else None
    c = constant_value(op.operands[1]) if op.operands[1].type is not NONE else None
    if op.operands[1].type is not NONE and c is None:
        return None
    if c is not None and not bool(c.ravel()[0]):
        return 0
    if m is None:
        return None
    out = body.last.operands[0]
    while getattr(out, "op", None) is not None and out.op.name == "onnx.Identity":
        out = out.op.operands[0]
    stays = out is body.args[1] or (constant_value(out) is not None and bool(constant_value(out).ravel()[0]))
    return max(int(m.ravel()[0]), 0) if stays else None


def _refine_loop(op, before):
    """Loop body arguments: (iteration, condition, the carried values'
    types); once the body is typed, the results: carried as yielded, scan
    outputs stacked over a trip count known at compile time."""
    body = op.regions[0].blocks[0]
    n = len(op.operands) - 2
    if len(body.args) != n + 2:
        return
    if before:
        for arg, v in zip(body.args[2:], op.operands[2:]):
            if _more_precise(v.type, arg.type):
                arg.type = v.type
        return
    yld = body.last
    if yld is None or len(yld.operands) != len(op.results) + 1:
        return
    T = loop_trip_count(op)
    for k, r in enumerate(op.results):
        t = yld.operands[1 + k].type
        if not isinstance(t, TensorType) or t.shape is None:
            continue
        if k >= n:
            if T is None:
                continue
            t = TensorType((T,) + tuple(t.shape), t.element)
        if _more_precise(t, r.type):
            r.type = t


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


# Ops whose result dims onnx's per-node inference gets wrong, so a declared
# type must stay: STFT's frequency bins come out as frame_length whatever
# `onesided` says (the node suite's test_stft / test_stft_with_window fail
# with their declared [1, 15, 9, 2] forgotten).
_KEEP_DECLARED = {"onnx.STFT"}


def _forget_dims(func):
    """Every result that depends on a function argument loses its dims (rank
    and element kept), so inference recomputes them from the arguments'
    types. Run-time specialization needs it: a dim the exporter declared or
    compile time inferred for a dynamic graph (a tagger's output declared
    [batch, 12, 7] over a dynamic sequence) must never win over what the
    graph computes from the concrete input shapes. Values computed from
    constants alone keep their types."""
    tainted = set(func.regions[0].blocks[0].args)

    def walk(block):
        for op in block.ops:
            inside = any(walk(b) for r in op.regions for b in r.blocks)
            if not inside and not any(v in tainted for v in op.operands):
                continue
            if op.name in _KEEP_DECLARED:
                continue
            for r in op.results:
                tainted.add(r)
                t = r.type
                if isinstance(t, TensorType) and t.shape is not None:
                    r.type = TensorType((None,) * len(t.shape), t.element)
        # whether anything in this block uses a tainted value (a region's
        # results then depend on the arguments too)
        return any(v in tainted for op in block.ops for v in op.operands)
    walk(func.regions[0].blocks[0])


def _check_reshape(op):
    """A Reshape of a static input to a constant shape must keep the element
    count. onnx's inference takes the shape as it is (12 elements "reshaped"
    to [5, 5] gives [5, 5]), and the code after it would read past the
    input's buffer: the host lowering refused it, the cpu accelerator's view
    read 13 floats of whatever lay there. At run-time specialization it is an
    input shape the model cannot take (a sequence length an exporter baked
    into a constant); ahead of time, a model that cannot run."""
    x = op.operands[0].type
    shape = constant_value(op.operands[1]) if len(op.operands) > 1 else None
    if not (isinstance(x, TensorType) and x.has_static_shape) or shape is None or shape.ndim != 1:
        return
    n = 1
    for d in x.shape:
        n *= int(d)
    allowzero = op.attributes.get("allowzero")
    dims = [int(d) for d in shape.tolist()]
    if not (allowzero is not None and getattr(allowzero, "value", 0)):
        dims = [int(x.shape[i]) if d == 0 and i < len(x.shape) else d for i, d in enumerate(dims)]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise ShapeMismatch(op, f"the shape {shape.tolist()} has more than one -1 or a dim below -1")
    known = 1
    for d in dims:
        known *= d if d != -1 else 1
    fits = (n % known == 0 if known else n == 0) if -1 in dims else known == n
    if not fits:
        raise ShapeMismatch(op, f"{n} elements cannot be viewed as {shape.tolist()}")


def _static(v):
    """v's dims when its type is a tensor of static shape, else None."""
    t = v.type
    return [int(d) for d in t.shape] if isinstance(t, TensorType) and t.has_static_shape else None


def _operand(op, i):
    return op.operands[i] if len(op.operands) > i and op.operands[i].type is not NONE else None


def _attr(op, name, default=None):
    a = op.attributes.get(name)
    return default if a is None else getattr(a, "value", default)


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
    nd = len(x) - 2
    if _attr(op, "auto_pad", "NOTSET") in ("NOTSET", "VALID", None):
        pads = [int(v) for v in (_attr(op, "pads") or [0] * (2 * nd))] \
            if _attr(op, "auto_pad", "NOTSET") in ("NOTSET", None) else [0] * (2 * nd)
        dil = [int(v) for v in (_attr(op, "dilations") or [1] * nd)]
        if len(pads) == 2 * nd and len(dil) == nd:
            for i in range(nd):
                if x[2 + i] + pads[i] + pads[nd + i] < (w[2 + i] - 1) * dil[i] + 1:
                    raise ShapeMismatch(op, f"the kernel {w[2:]} (dilations {dil}) is larger than the padded "
                                            f"input {[x[2 + j] + pads[j] + pads[nd + j] for j in range(nd)]}")


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
    x = _static(op.operands[0])
    pads = constant_value(op.operands[1]) if len(op.operands) > 1 and op.operands[1].type is not NONE else None
    if x is None or pads is None or pads.ndim != 1:
        return
    axes = constant_value(op.operands[3]) if len(op.operands) > 3 and op.operands[3].type is not NONE else None
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


def _ceil_pool_types(op):
    """A pooling's output dims under ceil_mode, by the rule onnxruntime and
    the ONNX reference follow: ceil((in + pads - span) / stride) + 1 windows,
    less the last where it would start in the end padding. onnx's inference
    (1.23) keeps that last window (23 rows, kernel 5, stride 2, pads 2 / 0:
    11 against 10), so neither its answer nor a declared type is taken:
    True when the results' types were set here."""
    if not _attr(op, "ceil_mode", 0) or _attr(op, "auto_pad", "NOTSET") not in ("NOTSET", None):
        return False
    x = _static(op.operands[0])
    if x is None or len(x) < 3:
        return False
    nd = len(x) - 2
    k = [int(v) for v in (_attr(op, "kernel_shape") or [])]
    if len(k) != nd:
        return False
    st = [int(v) for v in (_attr(op, "strides") or [1] * nd)]
    dl = [int(v) for v in (_attr(op, "dilations") or [1] * nd)]
    pads = [int(v) for v in (_attr(op, "pads") or [0] * (2 * nd))]
    if len(st) != nd or len(dl) != nd or len(pads) != 2 * nd or min(st) < 1:
        return False
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
           "onnx.GatherElements": _check_gather_elements, "onnx.Pad": _check_pad, "onnx.LRN": _check_lrn}


class ShapeInferencePass(Pass):
    name = "shape-inference"
    summary = "refine result types with onnx's per-node shape inference"
    options = {"reset": (bool, False, "first forget the dims of every result that depends on an argument "
                                      "(run-time specialization: the arguments' shapes decide)"),
               "strict": (bool, False, "an op whose operands all have static shapes and that onnx's "
                                       "inference rejects is an error (ShapeMismatch), not left untyped"),
               "recheck": (bool, False, "also infer results whose declared types are static, and take "
                                        "the inferred shape where the two disagree (import)")}

    def run(self, module, ctx):
        self.module = module
        if self.reset:
            for func in module.functions():
                if func.regions and func.regions[0].blocks:
                    _forget_dims(func)
        imports = module.op.attributes.get(OPSET_ATTR)
        self.opsets = {k: v.value for k, v in imports.value.items()} if imports is not None else {}
        self.opset_protos = opset_imports(module)
        for func in module.functions():
            self._block(func.regions[0].blocks[0])
            if func.regions[0].blocks[0].last is not None:
                set_function_type(func)

    def _block(self, block):
        for op in block.ops:
            if op.name == "onnx.Scan":
                _refine_scan_body_args(op)
            if op.name == "onnx.Loop":
                _refine_loop(op, before=True)
            if op.regions:
                for region in op.regions:
                    for b in region.blocks:
                        self._block(b)
            if op.name == "onnx.Loop":
                _refine_loop(op, before=False)
            domain, short = split_op_name(op.name)
            if domain is None or op.name in ("onnx.NoValue", "onnx.Yield"):
                continue
            if self.strict and op.name == "onnx.Range":
                delta = constant_value(op.operands[2])
                if delta is not None and delta.size == 1 and delta.reshape(-1)[0] == 0:
                    # onnx infers an empty result; onnxruntime and the reference refuse it
                    raise ShapeMismatch(op, "Range's delta is 0")
            check = _CHECKS.get(op.name)
            if check is not None:
                check(op)
            if op.name in _POOLS:
                if _ceil_pool_types(op):
                    continue
            if all(isinstance(r.type, TensorType) and r.type.has_static_shape or r.type is NONE
                   for r in op.results):
                # A model's value_info and outputs are declarations, not facts:
                # a Relu of 8 floats declared [100] computed 100 and read past its
                # input. With recheck (once, at import) onnx's inference decides, as
                # in onnxruntime, which takes the inferred shape and warns.
                if not self.recheck or op.name in _KEEP_DECLARED or not all(
                        v.type is NONE or getattr(v.type, "has_static_shape", False) for v in op.operands):
                    continue
            self._infer(op, domain, short)

    def _infer(self, op, domain, short):
        schema = schema_for(domain, short, self.opsets.get(domain))
        if schema is None:
            return
        ex = Exporter(self.module)
        try:
            node = ex.node(op)
        except ValueError:
            return
        types, data = {}, {}
        for v in op.operands:
            if v.type is NONE:
                continue
            try:
                types[ex.name(v)] = onnx_type(v.type)
            except ValueError:
                return
            c = constant_value(v)
            if c is not None and c.size <= 1 << 16:
                data[ex.name(v)] = tensor_proto(c, v.type.element, ex.name(v))
        try:
            out = onnx.shape_inference.infer_node_outputs(schema, node, types, data,
                                                          opset_imports=self.opset_protos)
        except Exception as e:  # inference is best effort, as in onnx itself
            if self.strict and isinstance(e, onnx.shape_inference.InferenceError) and \
                    all(v.type is NONE or getattr(v.type, "has_static_shape", False) for v in op.operands):
                raise ShapeMismatch(op, str(e).strip().splitlines()[0]) from None
            return
        for r in op.results:
            if r.type is NONE:
                continue
            tp = out.get(ex.name(r))
            if tp is None or not tp.WhichOneof("value"):
                continue
            new = ir_type(tp)
            if _more_precise(new, r.type) or (self.recheck and _contradicts(new, r.type)):
                r.type = new
