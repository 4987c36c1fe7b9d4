"""The onnx dialect, generated from the installed onnx's operator schemas
(every op of every domain, every version): nothing is listed by hand. The
module's opset imports (`onnx.opset_import`) choose which version of an op's
schema verifies it, so old and new models both verify without conversion.

Op names: `onnx.<Op>` for the default domain, `onnx.ml.<Op>`,
`onnx.preview.<Op>` and `onnx.preview.training.<Op>` for the others. Two ops
are ours, as in onnx-mlir: `onnx.NoValue` stands for an absent optional input,
and `onnx.Yield` ends a subgraph region (If/Loop/Scan bodies)."""
from __future__ import annotations

import functools

import onnx.defs

from ..ir.errors import VerifyError
from ..ir.opdef import AttrDef, Dialect, OpDef, OperandDef, PURE, TERMINATOR, CONSTANT_LIKE
from .types import schema_type_string

DOMAIN_PREFIX = {"": "onnx.", "ai.onnx": "onnx.", "ai.onnx.ml": "onnx.ml.",
                 "ai.onnx.preview": "onnx.preview.", "ai.onnx.preview.training": "onnx.preview.training."}
OPSET_ATTR = "onnx.opset_import"
# On an onnx.Clip (tcc's own, not ONNX's): a NaN input gives the lower bound
# instead of NaN. transforms/qdq.py sets it on the Clip of a rewritten
# QuantizeLinear -> DequantizeLinear pair (QuantizeLinear sends NaN to qmin);
# a lowering that ignores it keeps ONNX's NaN.
NAN_TO_MIN = "tcc.nan_to_min"
_A = onnx.defs.OpSchema.AttrType
ATTR_KIND = {_A.FLOAT: "float", _A.INT: "int", _A.STRING: "string", _A.TENSOR: "tensor",
             _A.GRAPH: "graph", _A.FLOATS: "floats", _A.INTS: "ints", _A.STRINGS: "strings",
             _A.TENSORS: "tensors", _A.GRAPHS: "graphs", _A.SPARSE_TENSOR: "tensor",
             _A.SPARSE_TENSORS: "tensors", _A.TYPE_PROTO: "type", _A.TYPE_PROTOS: "types"}
_OPTION = {onnx.defs.OpSchema.FormalParameterOption.Single: "single",
           onnx.defs.OpSchema.FormalParameterOption.Optional: "optional",
           onnx.defs.OpSchema.FormalParameterOption.Variadic: "variadic"}
# Random ops differ on every call: they must never be merged by CSE or folded.
IMPURE = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
          "Multinomial"}


def op_name(domain: str, name: str) -> str:
    return DOMAIN_PREFIX[domain] + name


def split_op_name(full: str):
    """'onnx.ml.ZipMap' -> ('ai.onnx.ml', 'ZipMap')."""
    for dom, prefix in sorted(DOMAIN_PREFIX.items(), key=lambda kv: -len(kv[1])):
        if full.startswith(prefix) and "." not in full[len(prefix):]:
            return ("" if dom == "ai.onnx" else dom), full[len(prefix):]
    return None, None


@functools.lru_cache(maxsize=None)
def schema_versions():
    """(domain, name) -> schemas sorted by since_version."""
    table = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain not in DOMAIN_PREFIX:
            continue
        table.setdefault((s.domain, s.name), []).append(s)
    for v in table.values():
        v.sort(key=lambda s: s.since_version)
    return table


def schema_for(domain, name, opset=None):
    versions = schema_versions().get((domain, name))
    if not versions:
        return None
    if opset is None:
        return versions[-1]
    best = None
    for s in versions:
        if s.since_version <= opset:
            best = s
    return best


def _constraint(allowed):
    allowed = frozenset(allowed)

    def check(t):
        if getattr(t, "name", None) == "onnx.Unknown":
            return True  # onnx's inference could not type it; shape-inference may later
        s = schema_type_string(t)
        if s in allowed:
            return True
        # A sequence/optional whose element type is not known yet.
        return s in ("seq", "optional") and any(a.startswith(s + "(") for a in allowed)
    return check


def _graph_attrs(schema):
    return sorted(n for n, a in schema.attributes.items() if a.type in (_A.GRAPH, _A.GRAPHS))


def graph_attribute_names(schema):
    """Region order for ops with subgraphs: their GRAPH attributes sorted by name."""
    return _graph_attrs(schema)


@functools.lru_cache(maxsize=None)
def _opdef(domain, name, since_version):
    from .folds import FOLDERS
    schema = schema_for(domain, name, since_version)
    tvars = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}

    def params(formals):
        out = []
        for f in formals:
            allowed = tvars.get(f.type_str, [f.type_str])
            tv = f.type_str if (f.type_str in tvars and f.is_homogeneous) else None
            out.append(OperandDef(f.name, _OPTION[f.option], _constraint(allowed), tv, f.description))
        return out

    attrs = {}
    for an, a in schema.attributes.items():
        kind = ATTR_KIND.get(a.type, "any")
        default = None
        if a.default_value is not None and a.default_value.type != 0:
            default = onnx.helper.get_attribute_value(a.default_value)
            if isinstance(default, bytes):
                default = default.decode("utf-8", "replace")
        if kind in ("graph", "graphs"):
            continue  # subgraphs are regions, checked by `verify` below
        attrs[an] = AttrDef(an, kind, a.required, default)
    graphs = _graph_attrs(schema)
    traits = {PURE} if name not in IMPURE else set()
    if name == "Constant":
        traits.add(CONSTANT_LIKE)
    full = op_name(domain, name)

    def verify(op, ctx, _schema=schema, _graphs=graphs):
        for k in op.attributes:
            if k not in _schema.attributes and "." not in k:
                raise VerifyError(f"unknown attribute '{k}' for {full} (opset {_schema.since_version})", op)
        for i, g in enumerate(_graphs):
            region = op.regions[i]
            if not region.blocks:
                if _schema.attributes[g].required:
                    raise VerifyError(f"requires subgraph '{g}' (region #{i})", op)
                continue
            if len(region.blocks) != 1 or region.blocks[0].last is None or \
                    region.blocks[0].last.name != "onnx.Yield":
                raise VerifyError(f"region '{g}' must be one block ending in onnx.Yield", op)

    return OpDef(full, params(schema.inputs), params(schema.outputs), attrs, frozenset(traits),
                 num_regions=len(graphs), verifier=verify, folder=FOLDERS.get(name),
                 summary=(schema.doc or "").strip().split("\n")[0][:200])


class OnnxDialect(Dialect):
    def __init__(self):
        super().__init__("onnx", description="ONNX operators, generated from onnx.defs schemas")
        self.add(OpDef("onnx.NoValue", results=[OperandDef("none")], traits=frozenset({PURE}),
                       summary="an absent optional input"))
        self.add(OpDef("onnx.Yield", operands=[OperandDef("values", "variadic")],
                       traits=frozenset({TERMINATOR, PURE}), summary="ends a subgraph region"))

    def lookup(self, name, module=None):
        own = self.ops.get(name)
        if own is not None:
            return own
        domain, short = split_op_name(name)
        if domain is None:
            return None
        opset = None
        if module is not None:
            imports = module.op.attributes.get(OPSET_ATTR)
            if imports is not None:
                v = imports.value.get(domain if domain else "")
                if v is None and domain == "":
                    v = imports.value.get("ai.onnx")
                if v is not None:
                    opset = v.value
        s = schema_for(domain, short, opset)
        if s is None:
            return None
        return _opdef(domain, short, s.since_version)

    def op_names(self):
        names = set(self.ops)
        for (dom, n) in schema_versions():
            names.add(op_name(dom, n))
        return sorted(names)


@functools.lru_cache(maxsize=None)
def dialect():
    return OnnxDialect()

