"""ONNX ModelProto -> IR in the onnx dialect, inside `func.func @main_graph`.

onnx's own checker and shape inference run first; local functions are
inlined. Initializers go to the resource table as numpy views of the tensor
bytes (no Python lists). Node names become locations; subgraphs (If, Loop,
Scan bodies) become regions ending in `onnx.Yield`."""
from __future__ import annotations

import functools
import os
import sys

import numpy as np
import onnx
import onnx.defs
import onnx.inliner
import onnx.shape_inference
from onnx import numpy_helper

from ..builtin import make_function, entry_block
from ..ir import attributes as A
from ..ir.core import Block, Location, Operation, Region
from ..ir.errors import TccError
from ..ir.module import Module
from ..ir.types import DialectType, NONE, TensorType, f32, i64
from .contrib import DOMAIN as CONTRIB_DOMAIN
from .contrib import TAKEN as CONTRIB_OPS
from .contrib import decompose_contrib
from .dialect import DOMAIN_PREFIX, OPSET_ATTR, graph_attribute_names, op_name, schema_for
from .types import element_from_dtype, ir_type

INLINE_LIMIT = 16   # constants with more elements go to the resource table
UNKNOWN = DialectType("onnx.Unknown")


class ImportError_(TccError):
    pass


STDIN = "<stdin>"  # how messages name a model read from standard input (path "-")


def load_model(path: str) -> onnx.ModelProto:
    """The model at `path` ("-": standard input, its external data beside
    the working folder) with its external data loaded."""
    if path == "-":
        data, base, path = sys.stdin.buffer.read(), os.getcwd(), STDIN
    else:
        if not os.path.exists(path):
            raise ImportError_(f"{path}: no such file")
        if os.path.isdir(path):
            raise ImportError_(f"{path}: is a directory, not an ONNX model")
        data, base = None, os.path.dirname(os.path.abspath(path))
    if data is not None and not data:
        raise ImportError_(f"{path}: not a valid ONNX model (empty input)")
    try:
        model = onnx.load(path, load_external_data=False) if data is None else onnx.load_from_string(data)
    except Exception as e:  # protobuf raises DecodeError and friends
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ImportError_(f"{path}: not a valid ONNX model (cannot decode protobuf: {first})") from None
    if not model.HasField("graph"):
        raise ImportError_(f"{path}: not a valid ONNX model (no graph)")
    # Every tensor that lives outside the file, not only the graph's
    # initializers (a Constant node's value, a subgraph's); the helper walks
    # them all. onnx refuses a location outside the model's folder, an
    # absolute one or a link (ValidationError): the model's fault, said so.
    from onnx.external_data_helper import load_external_data_for_model
    try:
        load_external_data_for_model(model, base)
    except (OSError, ValueError, onnx.checker.ValidationError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ImportError_(f"{path}: cannot load external data ({first})") from None
    return model


def _one_line(msg: str) -> str:
    lines = [l.strip() for l in str(msg).splitlines() if l.strip()]
    ctx = [l for l in lines if "Context" in l or "node" in l.lower()]
    head = lines[0] if lines else "invalid model"
    if ctx and ctx[0] != head:
        head += " (" + ctx[0].lstrip("=> ") + ")"
    return head


@functools.lru_cache(maxsize=None)
def defined_opsets() -> dict:
    """domain -> the newest opset version the installed onnx defines."""
    top = {}
    for s in onnx.defs.get_all_schemas_with_history():
        top[s.domain] = max(top.get(s.domain, 0), s.since_version)
    top[""] = max(top.get("", 0), onnx.defs.onnx_opset_version())
    return top


def _check_opsets_and_outputs(model, where):
    """Refuses what onnx's checker lets through: an opset import newer than
    the installed onnx defines (its ops would be checked against older
    schemas) or not positive, and a graph that declares no outputs (nothing
    to compute)."""
    known = defined_opsets()
    for o in model.opset_import:
        dom = "" if o.domain == "ai.onnx" else o.domain
        if o.version < 1:
            raise ImportError_(f"{where}: invalid model: opset import '{o.domain or 'ai.onnx'}' has version "
                               f"{o.version} (versions start at 1)")
        if dom in known and o.version > known[dom]:
            raise ImportError_(f"{where}: invalid model: opset {o.version} of domain '{o.domain or 'ai.onnx'}' "
                               f"is newer than the installed onnx {onnx.__version__} defines (up to "
                               f"{known[dom]})")
    if not model.graph.output:
        raise ImportError_(f"{where}: invalid model: graph '{model.graph.name}' declares no outputs")


def check_and_infer(model: onnx.ModelProto, where="model") -> onnx.ModelProto:
    _check_opsets_and_outputs(model, where)
    _check_domains(model, where)
    model = _shape_unranked_outputs(model) or model
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise ImportError_(f"{where}: invalid model: {_one_line(e)}") from None
    if model.functions:
        model = onnx.inliner.inline_local_functions(model)
    restore = _forget_declared_dims(model)
    try:
        # data_prop (values of Shape/Size chains) costs time linear in tensor
        # sizes (seconds for 4M-element inputs): only pay it where it can help.
        prop = any(n.op_type in ("Shape", "Size") for n in _all_nodes(model.graph))
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=prop)
    except Exception as e:  # shape inference is best effort: keep what we have
        msg = _one_line(e)
        raise ImportError_(f"{where}: shape inference failed: {msg}") from None
    finally:
        restore()
    return inferred


def _shape_unranked_outputs(model):
    """The model with its graph outputs' shapes inferred, where some declare
    an element type and no shape (unknown rank); None when none does or
    inference cannot shape them (the checker then says so). onnx's checker
    requires a shape on a graph output; onnxruntime runs such models, and
    inference gives the shape the graph computes."""
    outs = [o for o in model.graph.output
            if o.type.WhichOneof("value") == "tensor_type" and not o.type.tensor_type.HasField("shape")]
    if not outs:
        return None
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception:  # the checker's message is the better one
        return None
    got = {o.name: o for o in inferred.graph.output}
    if any(not got[o.name].type.tensor_type.HasField("shape") for o in outs if o.name in got):
        return None
    return inferred


def _forget_declared_dims(model):
    """A graph with dynamic input dims: the dims its outputs and value_info
    declare are dropped (ranks kept) so that inference computes them from
    the inputs. Exporters write dims there that were true only at the
    traced shape (a tagger's output declared [batch, 12, 7] over a dynamic
    sequence), and a declared dim would otherwise win over an inferred one.
    Returns a function that puts the caller's model back as it was."""
    g = model.graph
    if all(d.HasField("dim_value") for i in g.input for d in i.type.tensor_type.shape.dim):
        return lambda: None
    saved = []
    for vi in list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            shape = vi.type.tensor_type.shape
            saved.append((shape, shape.SerializeToString()))
            for d in shape.dim:
                d.Clear()

    def restore():
        for shape, data in saved:
            shape.ParseFromString(data)
    return restore


def _all_nodes(graph):
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(a.g)
            for g in a.graphs:
                yield from _all_nodes(g)


def _check_domains(model, where):
    known = set(DOMAIN_PREFIX)
    local = {(f.domain, f.name) for f in model.functions}

    def walk(graph):
        for n in graph.node:
            dom = n.domain or ""
            if (dom, n.op_type) in local:
                continue
            if dom not in known:
                taken = f" (tcc takes its {', '.join(CONTRIB_OPS)})" if dom == CONTRIB_DOMAIN else ""
                raise ImportError_(f"{where}: node '{n.name or n.output[0]}': unknown domain '{dom}' "
                                   f"for op '{n.op_type}'{taken}")
            if schema_for("" if dom == "ai.onnx" else dom, n.op_type) is None:
                raise ImportError_(f"{where}: node '{n.name or (n.output[0] if n.output else '?')}': "
                                   f"unknown op '{n.op_type}'" + (f" in domain '{dom}'" if dom else ""))
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for g in a.graphs:
                    walk(g)
    walk(model.graph)


def import_model(model, where=None, check=True, lowered=None) -> Module:
    """A path or ModelProto -> Module. With `lowered` (op type -> bool), ops
    it refuses that ONNX defines as functions are expanded (expand_functions)."""
    if isinstance(model, (str, os.PathLike)):
        where = where or (STDIN if str(model) == "-" else str(model))
        model = load_model(str(model))
    where = where or "model"
    model = decompose_contrib(model, where) or model
    if check:
        model = check_and_infer(model, where)
        if lowered is not None:
            from .expand_functions import expand_functions
            expanded = expand_functions(model, lowered)
            if expanded is not None:
                model = check_and_infer(expanded, where)
    try:
        return _Importer(model, where).run()
    except ValueError as e:
        # what onnx's checker lets through but cannot be imported: an unknown
        # element type in a value_info, initializer bytes that do not fit
        # their dims, ... (found by fuzzing, test/hostile/fuzz_corpus/onnx)
        raise ImportError_(f"{where}: invalid model: {' '.join(str(e).split())[:300]}") from None


class _Importer:
    def __init__(self, model: onnx.ModelProto, where: str):
        self.model, self.where = model, where
        self.module = Module()
        self.opsets = {}
        for o in model.opset_import:
            self.opsets["" if o.domain == "ai.onnx" else o.domain] = o.version
        self.opsets.setdefault("", 21)

    def run(self) -> Module:
        g, m = self.model.graph, self.module
        m.attributes[OPSET_ATTR] = A.DictAttr({k: A.IntegerAttr(v) for k, v in self.opsets.items()})
        if self.model.ir_version:
            m.attributes["onnx.ir_version"] = A.IntegerAttr(self.model.ir_version)
        if self.model.producer_name:
            m.attributes["onnx.producer_name"] = A.StringAttr(self.model.producer_name)
        if g.name:
            m.attributes["onnx.graph_name"] = A.StringAttr(g.name)
        inits = {t.name for t in g.initializer}
        inputs = [vi for vi in g.input if vi.name not in inits]
        self.types = self._collect_types(g)
        arg_types = [self.type_of(vi.name, vi.type) for vi in inputs]
        func = make_function("main_graph", arg_types, [],
                             arg_attrs=[{"onnx.name": A.StringAttr(vi.name)} for vi in inputs])
        m.body.append(func)
        block = entry_block(func)
        scope = {vi.name: a for vi, a in zip(inputs, block.args)}
        outs = self.graph_body(g, block, scope)
        block.append(Operation("func.return", outs, loc=Location(name="return")))
        from ..builtin import set_function_type
        set_function_type(func)
        func.attributes["res_attrs"] = A.ArrayAttr(
            [A.DictAttr({"onnx.name": A.StringAttr(o.name)}) for o in g.output])
        return m

    def _collect_types(self, g):
        types = {}
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            if vi.type.WhichOneof("value"):
                types[vi.name] = vi.type
        return types

    def type_of(self, name, tp=None):
        tp = tp if tp is not None and tp.WhichOneof("value") else self.types.get(name)
        if tp is None:
            return UNKNOWN
        t = ir_type(tp)
        return UNKNOWN if t is NONE else t

    # -- graphs --------------------------------------------------------------------
    def graph_body(self, g, block, scope):
        for t in g.initializer:
            scope[t.name] = self.constant(block, t)
        for st in g.sparse_initializer:
            scope[st.values.name] = self.constant(block, _sparse_to_dense(st))
        for i, n in enumerate(g.node):
            self.node(n, block, scope, i)
        outs = []
        for o in g.output:
            if o.name not in scope:
                raise ImportError_(f"{self.where}: graph output '{o.name}' is not produced by any node")
            outs.append(scope[o.name])
        return outs

    def constant(self, block, tensor: onnx.TensorProto):
        attr = self.tensor_attr(tensor, tensor.name)
        op = Operation("onnx.Constant", [], [attr.type], {"value": attr}, loc=Location(name=tensor.name))
        block.append(op)
        return op.results[0]

    def tensor_attr(self, tensor, hint):
        try:
            arr = numpy_helper.to_array(tensor)
        except Exception as e:
            raise ImportError_(f"{self.where}: tensor '{tensor.name or hint}': cannot read data ({e})") from None
        el = element_from_dtype(tensor.data_type)
        t = TensorType(arr.shape, el)
        if arr.size <= INLINE_LIMIT or arr.dtype == object:
            if arr.dtype == object:
                arr = np.array([x.decode("utf-8", "replace") if isinstance(x, bytes) else x
                                for x in arr.ravel()], dtype=object).reshape(arr.shape)
            return A.DenseElementsAttr(arr, t)
        name = self.module.resources.add(_resource_name(hint), arr)
        return A.DenseResourceAttr(name, t, self.module.resources)

    def node(self, n: onnx.NodeProto, block: Block, scope: dict, index: int):
        domain = "" if n.domain in ("", "ai.onnx") else n.domain
        label = n.name or (n.output[0] if n.output else f"{n.op_type}_{index}")
        schema = schema_for(domain, n.op_type, self.opsets.get(domain))
        if schema is None:
            raise ImportError_(f"{self.where}: node '{label}': op '{n.op_type}' is not defined at opset "
                               f"{self.opsets.get(domain)} of domain '{domain or 'ai.onnx'}'")
        loc = Location(name=label)
        operands = []
        names = list(n.input)
        pos = 0
        for f in schema.inputs:
            if f.option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
                rest = names[pos:]
                operands.extend(self.use(x, block, scope, label) for x in rest)
                pos = len(names)
                break
            operands.append(self.use(names[pos] if pos < len(names) else "", block, scope, label))
            pos += 1
        if pos < len(names):
            raise ImportError_(f"{self.where}: node '{label}': {n.op_type} takes at most {pos} inputs, "
                               f"got {len(names)}")
        # Trailing absent optional inputs carry no information: drop them.
        while operands and operands[-1].type is NONE and len(operands) > _required_inputs(schema):
            operands.pop()
        result_names = []
        outs = list(n.output)
        k = 0
        for f in schema.outputs:
            if f.option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
                result_names.extend(outs[k:])
                k = len(outs)
                break
            result_names.append(outs[k] if k < len(outs) else "")
            k += 1
        while result_names and not result_names[-1] and len(result_names) > _required_outputs(schema):
            result_names.pop()
        rtypes = [self.type_of(r) if r else NONE for r in result_names]
        attrs = {}
        graphs = {}
        for a in n.attribute:
            if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                graphs[a.name] = a
                continue
            attrs[a.name] = self.attribute(a, label)
        regions = []
        # One region per schema subgraph attribute, in name order; an absent
        # optional subgraph is an empty region so positions stay meaningful.
        for gname in graph_attribute_names(schema):
            regions.append(self.subgraph(graphs[gname].g, scope, label) if gname in graphs else Region())
        op = Operation(op_name(domain, n.op_type), operands, rtypes, attrs, regions, loc)
        block.append(op)
        for r, name in zip(op.results, result_names):
            if name:
                scope[name] = r

    def use(self, name, block, scope, label):
        if not name:
            # absent optional input
            cached = scope.get("")
            if cached is None or cached.op.parent is not block:
                op = Operation("onnx.NoValue", [], [NONE], {"value": A.UnitAttr()})
                _insert_at_start(block, op)
                cached = op.results[0]
                scope[""] = cached
            return cached
        v = scope.get(name)
        if v is None:
            raise ImportError_(f"{self.where}: node '{label}': input '{name}' is not defined before use")
        return v

    def subgraph(self, g: onnx.GraphProto, outer: dict, label: str) -> Region:
        types = self.types
        self.types = dict(types)
        self.types.update(self._collect_types(g))
        arg_types = [self.type_of(vi.name, vi.type) for vi in g.input]
        block = Block(arg_types)
        scope = ChainScope(outer)
        scope.pop("", None)
        for vi, a in zip(g.input, block.args):
            scope[vi.name] = a
        outs = self.graph_body(g, block, scope)
        block.append(Operation("onnx.Yield", outs, loc=Location(name=f"{label}/{g.name or 'body'}")))
        self.types = types
        return Region([block])

    def attribute(self, a: onnx.AttributeProto, label):
        T = onnx.AttributeProto
        if a.type == T.INT:
            return A.IntegerAttr(a.i, i64)
        if a.type == T.FLOAT:
            return A.FloatAttr(a.f, f32)
        if a.type == T.STRING:
            return A.StringAttr(a.s.decode("utf-8", "surrogateescape"))
        if a.type == T.INTS:
            return A.DenseArrayAttr(list(a.ints), i64)
        if a.type == T.FLOATS:
            return A.DenseArrayAttr(list(a.floats), f32)
        if a.type == T.STRINGS:
            return A.ArrayAttr([A.StringAttr(s.decode("utf-8", "surrogateescape")) for s in a.strings])
        if a.type == T.TENSOR:
            return self.tensor_attr(a.t, a.t.name or f"{label}_{a.name}")
        if a.type == T.TENSORS:
            return A.ArrayAttr([self.tensor_attr(t, t.name or f"{label}_{a.name}") for t in a.tensors])
        if a.type == T.SPARSE_TENSOR:
            return self.tensor_attr(_sparse_to_dense(a.sparse_tensor), f"{label}_{a.name}")
        if a.type == T.TYPE_PROTO:
            return A.TypeAttr(ir_type(a.tp))
        if a.type == T.TYPE_PROTOS:
            return A.ArrayAttr([A.TypeAttr(ir_type(t)) for t in a.type_protos])
        raise ImportError_(f"{self.where}: node '{label}': unsupported attribute '{a.name}' of type {a.type}")


class ChainScope(dict):
    """A subgraph's names, falling back to the enclosing graph's."""

    def __init__(self, outer):
        super().__init__()
        self.outer = outer

    def get(self, key, default=None):
        if key in self:
            return self[key]
        return self.outer.get(key, default)


def _insert_at_start(block, op):
    if block.first is None:
        block.append(op)
    else:
        block.insert_before(block.first, op)


def _required_inputs(schema):
    n = 0
    for i, f in enumerate(schema.inputs):
        if f.option == onnx.defs.OpSchema.FormalParameterOption.Single:
            n = i + 1
    return n


def _required_outputs(schema):
    n = 0
    for i, f in enumerate(schema.outputs):
        if f.option == onnx.defs.OpSchema.FormalParameterOption.Single:
            n = i + 1
    return n


def _resource_name(hint):
    out = "".join(c if (c.isalnum() or c in "_.") else "_" for c in hint) or "const"
    return out if out[0].isalpha() or out[0] == "_" else "_" + out


def _sparse_to_dense(st: onnx.SparseTensorProto) -> onnx.TensorProto:
    values = numpy_helper.to_array(st.values)
    idx = numpy_helper.to_array(st.indices)
    dims = list(st.dims)
    dense = np.zeros(int(np.prod(dims)) if dims else 1, dtype=values.dtype)
    if idx.ndim == 2:
        idx = np.ravel_multi_index(idx.T, dims)
    dense[idx.reshape(-1)] = values.reshape(-1)
    t = numpy_helper.from_array(dense.reshape(dims), st.values.name)
    return t


