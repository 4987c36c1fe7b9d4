"""onnxruntime's quantized contrib ops (domain com.microsoft), as its
quantizer writes them in the QOperator format, become the standard ops they
stand for at import: each input through DequantizeLinear, the float op,
QuantizeLinear to the output's scale and zero point. QLinearConv and
QLinearMatMul are ONNX's own and stay; where one of these QuantizeLinears
meets a DequantizeLinear, transforms/qdq.py turns the pair into float ops
as it does the QDQ format's.

That is the ops' definition in onnxruntime's schemas ("dequantize, compute
in float, quantize"). onnxruntime's own kernels compute some of them
otherwise: QLinearAdd and QLinearMul with the scales' ratios (a / c, b / c)
in one float expression, QLinearGlobalAveragePool and QLinearAveragePool
from the integer sums, Sigmoid and LeakyRelu through a table of the 256
inputs built by this same chain. Where the orders differ, a value at a
rounding tie can land one quantization step apart.

Only these ops are taken; any other com.microsoft op stays an import error
that names it."""
from __future__ import annotations

import onnx
from onnx import helper

from ..ir.errors import TccError

DOMAIN = "com.microsoft"


class ContribError(TccError):
    pass


def _elementwise(op_type, n_in, attrs=()):
    """(X, X_scale, X_zp) for each of n_in inputs, then (Y_scale, Y_zp): the
    QLinearAdd / QLinearSigmoid signature"""
    def split(node):
        ins = list(node.input) + [""] * (3 * n_in + 2 - len(node.input))
        triples = [ins[3 * i:3 * i + 3] for i in range(n_in)]
        return triples, ins[3 * n_in:3 * n_in + 2], op_type, {a: None for a in attrs}
    return split


def _pool(op_type):
    def split(node):
        ins = list(node.input) + [""] * (5 - len(node.input))
        return [ins[0:3]], ins[3:5], op_type, None
    return split


def _concat(node):
    ins = list(node.input)
    if len(ins) < 5 or (len(ins) - 2) % 3:
        raise ContribError(f"node '{node.name or node.output[0]}': QLinearConcat takes Y_scale, Y_zero_point "
                           f"and then (X, X_scale, X_zero_point) triples, got {len(ins)} inputs")
    return [ins[i:i + 3] for i in range(2, len(ins), 3)], ins[0:2], "Concat", None


def _where(node):
    ins = list(node.input) + [""] * (9 - len(node.input))
    return [ins[1:4], ins[4:7]], ins[7:9], "Where", None


# op -> node -> ([(x, scale, zero point)], (y scale, y zero point), float op, attribute names kept (None: all))
OPS = {
    "QLinearAdd": _elementwise("Add", 2),
    "QLinearMul": _elementwise("Mul", 2),
    "QLinearSigmoid": _elementwise("Sigmoid", 1),
    "QLinearLeakyRelu": _elementwise("LeakyRelu", 1, ("alpha",)),
    "QLinearGlobalAveragePool": _pool("GlobalAveragePool"),
    "QLinearAveragePool": _pool("AveragePool"),
    "QLinearConcat": _concat,
    "QLinearWhere": _where,
}


def _qgemm(rw, node, where):
    """QGemm: Gemm of the dequantized A and B (B per tensor or per output
    column), plus C, an int32 bias of scale alpha * a_scale * b_scale; the
    result quantized to (y_scale, y_zero_point), or float without y_scale."""
    ins = list(node.input) + [""] * (9 - len(node.input))
    a, sa, za, b, sb, zb, c, ys, yz = ins[:9]
    attrs = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    unknown = set(attrs) - {"alpha", "transA", "transB"}
    if unknown:
        raise ContribError(f"{where}: unknown attribute(s) {', '.join(sorted(unknown))}")
    if not (a and sa and b and sb):
        raise ContribError(f"{where}: A, B or a scale is missing")
    alpha, trans_b = float(attrs.get("alpha", 1.0)), int(attrs.get("transB", 0))
    out, fa, fb = [], rw.name(node, "dqa"), rw.name(node, "dqb")
    out.append(helper.make_node("DequantizeLinear", [a, sa] + ([za] if za else []), [fa]))
    # a b_scale of more than one value is per column of the product: B's
    # axis 1, or 0 when transposed (an axis needs DequantizeLinear-13)
    per_column = {} if rw.scalar(sb) else {"axis": 0 if trans_b else 1}
    if per_column and rw.opset < 13:
        raise ContribError(f"{where}: a per-column b_scale needs ai.onnx opset 13 or later (DequantizeLinear's axis)")
    out.append(helper.make_node("DequantizeLinear", [b, sb] + ([zb] if zb else []), [fb], **per_column))
    gemm_in = [fa, fb]
    if c:
        sab, sc, cf, fc = (rw.name(node, w) for w in ("sab", "sc", "cf", "dqc"))
        alpha_c = rw.name(node, "alpha")
        out.append(helper.make_node("Mul", [sa, sb], [sab]))
        out.append(helper.make_node("Constant", [], [alpha_c],
                                    value=helper.make_tensor("alpha", onnx.TensorProto.FLOAT, [], [alpha])))
        out.append(helper.make_node("Mul", [sab, alpha_c], [sc]))
        out.append(helper.make_node("Cast", [c], [cf], to=onnx.TensorProto.FLOAT))
        out.append(helper.make_node("Mul", [cf, sc], [fc]))
        gemm_in.append(fc)
    y = rw.name(node, "f") if ys else node.output[0]
    out.append(helper.make_node("Gemm", gemm_in, [y], alpha=alpha, transA=int(attrs.get("transA", 0)),
                                transB=trans_b))
    if ys:
        if not yz:
            raise ContribError(f"{where}: y_scale without y_zero_point (the output type)")
        out.append(helper.make_node("QuantizeLinear", [y, ys, yz], [node.output[0]]))
    return out


# every contrib op taken: OPS, and QGemm (its own rewrite)
TAKEN = (*OPS, "QGemm")


class _Rewriter:
    def __init__(self, opset, graph):
        self.opset, self.count = opset, 0
        self.dims = {t.name: list(t.dims) for t in graph.initializer}
        self.types = {t.name: t.data_type for t in graph.initializer}  # element types known before inference
        for vi in list(graph.input) + list(graph.value_info):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                self.types.setdefault(vi.name, vi.type.tensor_type.elem_type)

    def scalar(self, name):
        """whether `name` is known to hold one value (an initializer of one element)"""
        dims = self.dims.get(name)
        return dims is not None and all(d == 1 for d in dims)

    def name(self, node, what):
        self.count += 1
        return f"{node.output[0]}__{what}_{self.count}"

    def node(self, node):
        """the standard nodes for one contrib node"""
        if len(node.output) != 1 or not node.output[0]:
            raise ContribError(f"node '{node.name}' ({node.op_type}): takes one output, has {len(node.output)}")
        where = f"node '{node.name or node.output[0]}' ({node.op_type})"
        if node.op_type == "QGemm":
            return _qgemm(self, node, where)
        triples, (ys, yz), op_type, kept = OPS[node.op_type](node)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        channels_last = attrs.pop("channels_last", 0)
        if channels_last not in (0, 1) or isinstance(channels_last, (bytes, str, float)):
            raise ContribError(f"{where}: channels_last must be 0 or 1, is {channels_last!r}")
        if kept is not None:
            unknown = set(attrs) - set(kept)
            if unknown:
                raise ContribError(f"{where}: unknown attribute(s) {', '.join(sorted(unknown))}")
        if not ys:
            raise ContribError(f"{where}: the output scale is missing")
        out, zero, floats = [], None, []
        for i, (x, s, z) in enumerate(triples):
            if not x or not s:
                raise ContribError(f"{where}: input {i} or its scale is missing")
            f = self.name(node, f"dq{i}")
            out.append(helper.make_node("DequantizeLinear", [x, s] + ([z] if z else []), [f]))
            floats.append(f)
            zero = zero or z
        if op_type == "Where":
            floats = [node.input[0]] + floats
        if channels_last:  # NHWC in and out: the pool on NCHW between two transposes
            rank = self._rank(node, attrs)
            t = self.name(node, "nchw")
            out.append(helper.make_node("Transpose", [floats[0]], [t], perm=[0, rank - 1] + list(range(1, rank - 1))))
            floats = [t]
        y = self.name(node, "f")
        out.append(helper.make_node(op_type, floats, [y], **attrs))
        if channels_last:
            t = self.name(node, "nhwc")
            out.append(helper.make_node("Transpose", [y], [t], perm=[0] + list(range(2, rank)) + [1]))
            y = t
        if not yz:  # zero, of the type the ops take throughout (QuantizeLinear's default is uint8)
            yz = self.name(node, "zp")
            known = next((t for t in (self.types.get(n) for n in (zero, triples[0][0])) if t), None)
            if known:
                out.append(helper.make_node("Constant", [], [yz], value=helper.make_tensor("z", known, [], [0])))
            elif self.opset >= 15:
                z0 = self.name(node, "zero")
                out.append(helper.make_node("Constant", [], [z0],
                                            value=helper.make_tensor("z", onnx.TensorProto.INT32, [], [0])))
                out.append(helper.make_node("CastLike", [z0, triples[0][0]], [yz]))
            else:
                raise ContribError(f"{where}: the output has no zero point and its type is not known here "
                                   f"(CastLike needs ai.onnx opset 15)")
        out.append(helper.make_node("QuantizeLinear", [y, ys, yz], [node.output[0]]))
        return out

    @staticmethod
    def _rank(node, attrs):
        if node.op_type == "QLinearAveragePool" and "kernel_shape" in attrs:
            return len(attrs["kernel_shape"]) + 2
        return 4  # QLinearGlobalAveragePool: onnxruntime's quantizer writes it for 2-D images

    def graph(self, g):
        changed = False
        new = []
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    changed |= self.graph(a.g)
                for sub in a.graphs:
                    changed |= self.graph(sub)
            if n.domain == DOMAIN and n.op_type in TAKEN:
                new.extend(self.node(n))
                changed = True
            else:
                new.append(n)
        if changed:
            del g.node[:]
            g.node.extend(new)
        return changed


def _uses_contrib(g):
    for n in g.node:
        if n.domain == DOMAIN and n.op_type in TAKEN:
            return True
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH and _uses_contrib(a.g):
                return True
            if any(_uses_contrib(sub) for sub in a.graphs):
                return True
    return False


def decompose_contrib(model: onnx.ModelProto, where="model"):
    """A copy of `model` with the contrib ops of TAKEN replaced, or None when
    it has none."""
    if not _uses_contrib(model.graph):
        return None
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 10:
        raise ContribError(f"{where}: onnxruntime's quantized ops need ai.onnx opset 10 or later "
                           f"(DequantizeLinear, QuantizeLinear); the model imports {opset or 'none'}")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    try:
        _Rewriter(opset, m.graph).graph(m.graph)
    except ContribError as e:
        raise ContribError(f"{where}: {e}") from None
    except (TypeError, ValueError, IndexError) as e:  # attributes of the wrong kind, found by fuzzing
        raise ContribError(f"{where}: invalid onnxruntime quantized op: {' '.join(str(e).split())[:200]}") from None
    return m
