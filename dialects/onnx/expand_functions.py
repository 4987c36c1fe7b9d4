"""Ops tcc has no lowering for, but which ONNX defines as a function of other
ops (MeanVarianceNormalization, SwiGLU, CausalConvWithState...), are
expanded into that function body at import, as onnx-mlir decomposes them:
each such node becomes a call of a model-local copy of its function (the
schema's, or the context-dependent one built for the node's input types),
and onnx.inliner inlines the calls with the names and attributes resolved."""
from __future__ import annotations

import onnx
from onnx import defs

from ..ir.errors import TccError
from .dialect import op_name

DOMAIN = "tcc.expanded"
# the domains whose function bodies are expanded (FlexAttention is one of
# ai.onnx.preview's); ai.onnx.ml and training define none
DOMAINS = ("", "ai.onnx.preview")


class ExpansionError(TccError):
    pass


def _rank_of(t):
    if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    return len(t.tensor_type.shape.dim)


def _check_flex_attention(node, input_types):
    """FlexAttention takes rank-4 (B, H, L|S, E) Q, K, V; its body would
    compute something for other ranks, which the spec does not define."""
    for name, t in zip(("Q", "K", "V"), input_types):
        r = _rank_of(t)
        if r is not None and r != 4:
            return f"input {name} has rank {r}, FlexAttention needs rank 4 (batch, heads, sequence, head size)"
    return None


# (domain, op) -> check(node, input types) -> an error message or None: what
# the schema says but its function body does not check
CHECKS = {("ai.onnx.preview", "FlexAttention"): _check_flex_attention}


def _type_attribute_refs(fn, opset):
    """Gives a `type` to the attribute references of `fn`'s nodes that lack
    one, from the called op's schema. onnx builds some context-dependent
    bodies without it (Bernoulli's `seed : @seed` on RandomUniformLike, in
    onnx 1.23), and its checker then refuses the whole model ("Field 'type'
    of 'attr' is required but missing"). Only bodies onnx itself generated
    come here, so the checker stays as strict on the user's own nodes."""
    for n in fn.node:
        for a in n.attribute:
            if not a.ref_attr_name or a.type != onnx.AttributeProto.UNDEFINED:
                continue
            dom = "" if n.domain == "ai.onnx" else n.domain
            try:
                s = defs.get_schema(n.op_type, opset.get(dom, defs.onnx_opset_version()), dom)
            except defs.SchemaError:
                continue
            spec = s.attributes.get(a.name)
            if spec is not None:
                a.type = int(spec.type)


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
    opset = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    g = model.graph
    types = {v.name: v.type for v in list(g.input) + list(g.value_info) + list(g.output)}
    types.update({t.name: onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims)) for t in g.initializer})
    found = {}
    for k, node in enumerate(g.node):
        domain = "" if node.domain == "ai.onnx" else node.domain
        version = opset.get(domain)
        # `lowered` takes the op's name without "onnx." (the IR's domain
        # prefixes: "preview.FlexAttention" for ai.onnx.preview)
        if domain not in DOMAINS or version is None or lowered(op_name(domain, node.op_type)[len("onnx."):]):
            continue
        try:
            schema = defs.get_schema(node.op_type, version, domain)
        except defs.SchemaError:
            continue
        in_types = [types.get(i) if i else onnx.TypeProto() for i in node.input]
        check = CHECKS.get((domain, node.op_type))
        bad = check(node, in_types) if check is not None else None
        if bad:
            raise ExpansionError(f"node '{node.name or node.output[0]}': {node.op_type}: {bad}")
        fn = _function(schema, version, node, in_types)
        if fn is not None:
            _type_attribute_refs(fn, opset)
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
        # onnx builds FlexAttention's body importing ai.onnx.preview alone
        # though its nodes are default-domain ops: they get the model's opset
        have = {imp.domain or "" for imp in fn.opset_import}
        for d in sorted({"" if n.domain == "ai.onnx" else n.domain for n in fn.node} - have):
            if d in opset:
                fn.opset_import.append(onnx.helper.make_opsetid(d, opset[d]))
        node.op_type, node.domain = fn.name, DOMAIN
        model.functions.append(fn)
        for imp in fn.opset_import:
            if (imp.domain or "") not in opset:
                model.opset_import.append(imp)
                opset[imp.domain or ""] = imp.version
    model.opset_import.append(onnx.helper.make_opsetid(DOMAIN, 1))
    return model
