"""shape-inference: refines result types op by op with onnx's own per-node
inference (constant inputs such as Reshape's shape are passed as data), so a
rewritten graph regains static shapes without a round trip through a model."""
from __future__ import annotations

import onnx
import onnx.shape_inference

from ..builtin import set_function_type
from ..ir.passes import Pass
from ..ir.types import NONE, TensorType, DialectType
from ..onnx.dialect import schema_for, split_op_name, OPSET_ATTR
from ..onnx.exporter import Exporter, opset_imports, tensor_proto
from ..onnx.types import ir_type, onnx_type
from .constants import constant_value
from .operand_checks import ShapeMismatch, ceil_pool_types, check_operands, static_operands


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
            check_operands(op)
            if ceil_pool_types(op):
                continue
            if all(isinstance(r.type, TensorType) and r.type.has_static_shape or r.type is NONE
                   for r in op.results):
                # A model's value_info and outputs are declarations, not facts:
                # a Relu of 8 floats declared [100] computed 100 and read past its
                # input. With recheck (once, at import) onnx's inference decides, as
                # in onnxruntime, which takes the inferred shape and warns.
                if not self.recheck or op.name in _KEEP_DECLARED or not static_operands(op):
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
            if self.strict and isinstance(e, onnx.shape_inference.InferenceError) and static_operands(op):
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
