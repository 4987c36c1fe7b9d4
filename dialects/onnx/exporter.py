"""IR (onnx dialect) -> ONNX protobuf: single nodes for folding and shape
inference through onnx's own machinery, or a whole module back to a model."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..ir import attributes as A
from ..ir.types import NONE, ShapedType
from .dialect import OPSET_ATTR, graph_attribute_names, schema_for, split_op_name
from .types import dtype_from_element, onnx_type


def tensor_proto(array: np.ndarray, element, name="") -> onnx.TensorProto:
    if array.dtype == object:
        t = helper.make_tensor(name, onnx.TensorProto.STRING, array.shape,
                               [s.encode() if isinstance(s, str) else s for s in array.ravel()])
        return t
    try:
        t = numpy_helper.from_array(np.asarray(array), name)
    except (TypeError, ValueError, KeyError):
        t = helper.make_tensor(name, dtype_from_element(element), array.shape, array.tobytes(), raw=True)
    want = dtype_from_element(element)
    if t.data_type != want:  # ml_dtypes arrays whose numpy dtype is ambiguous
        t = helper.make_tensor(name, want, array.shape, np.ascontiguousarray(array).tobytes(), raw=True)
    return t


def attribute_proto(name, attr, exporter=None):
    if isinstance(attr, A.IntegerAttr):
        return helper.make_attribute(name, attr.value, attr_type=onnx.AttributeProto.INT)
    if isinstance(attr, A.BoolAttr):
        return helper.make_attribute(name, int(attr.value), attr_type=onnx.AttributeProto.INT)
    if isinstance(attr, A.FloatAttr):
        return helper.make_attribute(name, attr.value, attr_type=onnx.AttributeProto.FLOAT)
    if isinstance(attr, A.StringAttr):
        return helper.make_attribute(name, attr.value.encode("utf-8", "surrogateescape"),
                                     attr_type=onnx.AttributeProto.STRING)
    if isinstance(attr, A.DenseArrayAttr):
        kind = onnx.AttributeProto.FLOATS if str(attr.type).startswith(("f", "bf")) else onnx.AttributeProto.INTS
        return helper.make_attribute(name, attr.value, attr_type=kind)
    if isinstance(attr, (A.DenseElementsAttr, A.DenseResourceAttr)):
        v = attr.value
        if v is None:
            raise ValueError(f"attribute '{name}': constant data '{attr.name}' is not available")
        return helper.make_attribute(name, tensor_proto(v, attr.type.element), attr_type=onnx.AttributeProto.TENSOR)
    if isinstance(attr, A.TypeAttr):
        return helper.make_attribute(name, onnx_type(attr.value), attr_type=onnx.AttributeProto.TYPE_PROTO)
    if isinstance(attr, A.ArrayAttr):
        els = attr.elements
        if all(isinstance(e, A.StringAttr) for e in els):
            return helper.make_attribute(name, [e.value.encode() for e in els], attr_type=onnx.AttributeProto.STRINGS)
        if all(isinstance(e, (A.DenseElementsAttr, A.DenseResourceAttr)) for e in els):
            return helper.make_attribute(name, [tensor_proto(e.value, e.type.element) for e in els],
                                         attr_type=onnx.AttributeProto.TENSORS)
        if all(isinstance(e, A.TypeAttr) for e in els):
            return helper.make_attribute(name, [onnx_type(e.value) for e in els],
                                         attr_type=onnx.AttributeProto.TYPE_PROTOS)
        if all(isinstance(e, A.IntegerAttr) for e in els):
            return helper.make_attribute(name, [e.value for e in els], attr_type=onnx.AttributeProto.INTS)
        if all(isinstance(e, A.FloatAttr) for e in els):
            return helper.make_attribute(name, [e.value for e in els], attr_type=onnx.AttributeProto.FLOATS)
    raise ValueError(f"attribute '{name}' ({attr}) has no ONNX form")


class Exporter:
    """Names values as it goes; subgraph regions become GraphProtos."""

    def __init__(self, module=None):
        self.module = module
        self.names = {}
        self.counter = 0
        self.node_names = set()

    def name(self, v):
        if v.type is NONE:
            return ""
        n = self.names.get(v)
        if n is None:
            n = f"v{self.counter}"
            self.counter += 1
            self.names[v] = n
        return n

    def node(self, op) -> onnx.NodeProto:
        domain, op_type = split_op_name(op.name)
        if domain is None:
            raise ValueError(f"'{op.name}' is not an ONNX op")
        attrs = [attribute_proto(k, a) for k, a in sorted(op.attributes.items()) if "." not in k]
        if op.regions:
            schema = schema_for(domain, op_type)
            for gname, region in zip(graph_attribute_names(schema), op.regions):
                if region.blocks:
                    attrs.append(helper.make_attribute(gname, self.graph(region.blocks[0], gname)))
        name = op.loc.name or ""
        if name:  # one node may become several (a rewrite keeps its location): unique for onnx's checker
            base, i = name, 1
            while name in self.node_names:
                name, i = f"{base}_{i}", i + 1
            self.node_names.add(name)
        n = helper.make_node(op_type, [self.name(v) for v in op.operands],
                             [self.name(r) for r in op.results], domain=domain or None, name=name)
        n.attribute.extend(attrs)
        return n

    def graph(self, block, name) -> onnx.GraphProto:
        inputs = [helper.make_value_info(self.name(a), onnx_type(a.type)) for a in block.args]
        nodes, inits = [], []
        for op in block.ops:
            if op.name == "onnx.NoValue":
                continue
            if op.name in ("onnx.Yield", "func.return"):
                outputs = [helper.make_value_info(self.name(v), _type_or_empty(v.type)) for v in op.operands]
                continue
            nodes.append(self.node(op))
        return helper.make_graph(nodes, name, inputs, outputs, inits)


def _type_or_empty(t):
    try:
        return onnx_type(t)
    except ValueError:
        return onnx.TypeProto()


def opset_imports(module):
    imports = module.op.attributes.get(OPSET_ATTR) if module is not None else None
    if imports is None:
        return [helper.make_opsetid("", 21)]
    return [helper.make_opsetid(k, v.value) for k, v in imports.value.items()]


def export_model(module) -> onnx.ModelProto:
    func = module.lookup_function("main_graph")
    ex = Exporter(module)
    block = func.regions[0].blocks[0]
    # Keep the model's own input/output names where the importer recorded them.
    for a, d in zip(block.args, func.get_attr("arg_attrs") or []):
        if "onnx.name" in d:
            ex.names[a] = d["onnx.name"].value
    ret = block.last
    for v, d in zip(ret.operands, func.get_attr("res_attrs") or []):
        if "onnx.name" in d and v not in ex.names:
            ex.names[v] = d["onnx.name"].value
    g = ex.graph(block, module.op.get_attr("onnx.graph_name", "main_graph"))
    return helper.make_model(g, opset_imports=opset_imports(module))


def single_node_model(op, input_values, module=None, captures=()):
    """A one-node model computing `op`, inputs named i0.. (its operands, then
    `captures`: outer values its body regions read), outputs o0.."""
    ex = Exporter(module)
    values = list(op.operands) + list(captures)
    for i, v in enumerate(values):
        if v.type is not NONE:
            ex.names[v] = f"i{i}"
    for i, r in enumerate(op.results):
        if r.type is not NONE:
            ex.names[r] = f"o{i}"
    node = ex.node(op)
    inputs = [helper.make_tensor_value_info(f"i{i}", dtype_from_element(v.type.element), None)
              if isinstance(v.type, ShapedType) else helper.make_value_info(f"i{i}", onnx_type(v.type))
              for i, v in enumerate(values) if v.type is not NONE]  # sequences, optionals: their type
    outputs = [helper.make_value_info(f"o{i}", onnx.TypeProto())
               for i, r in enumerate(op.results) if r.type is not NONE]
    g = helper.make_graph([node], "fold", inputs, outputs)
    return helper.make_model(g, opset_imports=opset_imports(module))

