"""Ops tcc has no lowering for, but which ONNX defines as a function of other
ops (MeanVarianceNormalization, SwiGLU, CausalConvWithState...), are
expanded into that function body at import, as onnx-mlir decomposes them:
each such node becomes a call of a model-local copy of its function (the
schema's, or the context-dependent one built for the node's input types),
and onnx.inliner inlines the calls with the names and attributes resolved."""
from __future__ import annotations

import onnx
from onnx import defs

DOMAIN = "tcc.expanded"


def _function(schema, version, node, input_types):
    """The schema's function for the newest version <= the model's opset."""
    static = [v for v in schema.function_opset_versions if v <= version]
    if static:
        return onnx.FunctionProto.FromString(schema.get_function_with_opset_version(max(static)))
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= version]
    if dependent and all(t is not None for t in input_types):
        raw = schema.get_context_dependent_function_with_opset_version(
            max(dependent), node.SerializeToString(), [t.SerializeToString() for t in input_types])
        return onnx.FunctionProto.FromString(raw) if raw else None
    return None


def expand_functions(model: onnx.ModelProto, lowered):
    """`model` (with inferred value types) with its top-level nodes whose op
    `lowered(op_type)` refuses and whose schema has a function body turned
    into calls of model-local functions; None when there are none (the
    model is only copied when something changes)."""
    opset = {o.domain or "": o.version for o in model.opset_import}
    version = opset.get("", opset.get("ai.onnx"))
    if version is None:
        return None
    g = model.graph
    types = {v.name: v.type for v in list(g.input) + list(g.value_info) + list(g.output)}
    types.update({t.name: onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims)) for t in g.initializer})
    found = {}
    for k, node in enumerate(g.node):
        if node.domain not in ("", "ai.onnx") or lowered(node.op_type):
            continue
        try:
            schema = defs.get_schema(node.op_type, version, "")
        except defs.SchemaError:
            continue
        fn = _function(schema, version, node, [types.get(i) if i else onnx.TypeProto() for i in node.input])
        if fn is not None:
            found[k] = (schema, fn)
    if not found:
        return None
    model = onnx.ModelProto.FromString(model.SerializeToString())  # the caller's stays as it is
    for k, (schema, fn) in found.items():
        node = model.graph.node[k]
        given = {a.name for a in node.attribute}
        node.attribute.extend(a.default_value for name, a in schema.attributes.items()
                              if name not in given and a.default_value.name)
        fn.name, fn.domain = f"{node.op_type}_{k}", DOMAIN
        node.op_type, node.domain = fn.name, DOMAIN
        model.functions.append(fn)
        for imp in fn.opset_import:
            if (imp.domain or "") not in opset:
                model.opset_import.append(imp)
                opset[imp.domain or ""] = imp.version
    model.opset_import.append(onnx.helper.make_opsetid(DOMAIN, 1))
    return model
