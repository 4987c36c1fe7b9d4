"""fold-constants: ops whose inputs are all constants are evaluated at compile
time by onnx's reference evaluator and replaced by constants."""
from __future__ import annotations

import warnings

import numpy as np

from ..builtin import sync_function_types
from ..ir.errors import PassError
from ..ir.opdef import PURE, CONSTANT_LIKE
from ..ir.passes import Pass
from ..ir.types import NONE, TensorType
from ..onnx.dialect import split_op_name
from .constants import constant_value, make_constant


def _evaluate(op, module, inputs):
    from onnx.reference import ReferenceEvaluator
    from ..onnx.exporter import single_node_model
    model = single_node_model(op, inputs, module)
    feeds = {f"i{i}": v for i, v in enumerate(inputs) if v is not None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ReferenceEvaluator(model).run(None, feeds)


def _dequantize(op, inputs):
    """DequantizeLinear of constant integers with a float32 scale, per tensor
    or per axis, as onnx.reference computes it: (x - zero point) in float32,
    times the scale. onnx's reference evaluator implements the op only from
    opset 19 on, so a QDQ model of opset 13-18 (onnxruntime's quantizer
    writes those) kept every weight's DequantizeLinear for run time: each
    run dequantized the weights and its MatMuls took them as inputs, not as
    packed constants (a QDQ MLP: 8x onnxruntime's time). None where this does
    not apply (blocked scales, other types): the evaluator then decides."""
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else None
    if not (isinstance(x, np.ndarray) and x.dtype.kind in "iu" and x.dtype.itemsize <= 4
            and isinstance(scale, np.ndarray) and scale.dtype == np.float32):
        return None
    if op.get_attr("block_size") not in (None, 0) or op.get_attr("output_dtype") not in (None, 0, 1):
        return None  # blocked, or an output type other than the scale's float32
    if zp is not None and zp.size != scale.size:
        return None
    axis = int(op.get_attr("axis") if op.get_attr("axis") is not None else 1)
    if scale.size != 1:
        if scale.ndim != 1 or x.ndim == 0:
            return None
        axis = axis + x.ndim if axis < 0 else axis
        if not 0 <= axis < x.ndim or x.shape[axis] != scale.shape[0]:
            return None
        shape = [1] * x.ndim
        shape[axis] = scale.shape[0]
        scale = scale.reshape(shape)
        zp = zp.reshape(shape) if zp is not None else None
    else:  # one value (a scalar or of shape [1])
        scale = scale.reshape(())
        zp = zp.reshape(()) if zp is not None else None
    d = x.astype(np.float32)
    if zp is not None:
        d = d - zp.astype(np.float32)
    return [(d * scale).astype(np.float32)]


class FoldConstantsPass(Pass):
    name = "fold-constants"
    summary = "evaluate ops whose inputs are all constants (onnx reference evaluator)"
    options = {"max-elements": (int, 1 << 22, "do not fold results larger than this", 0)}

    def run(self, module, ctx):
        for func in module.functions():
            self._block(module, ctx, func.regions[0].blocks[0])
        sync_function_types(module)

    def _block(self, module, ctx, block):
        for op in block.ops:
            if op.regions or split_op_name(op.name)[0] is None or op.name == "onnx.Constant":
                continue
            d = ctx.lookup(op.name, module)
            if d is None or not d.has_trait(PURE) or d.has_trait(CONSTANT_LIKE):
                continue
            if not op.operands or all(not r.uses for r in op.results):
                continue
            values = []
            for v in op.operands:
                if v.type is NONE:
                    values.append(None)
                    continue
                c = constant_value(v)
                if c is None:
                    break
                values.append(c)
            else:
                self._fold(module, op, values)

    def _fold(self, module, op, values):
        outs = _dequantize(op, values) if op.name == "onnx.DequantizeLinear" else None
        try:
            outs = outs if outs is not None else _evaluate(op, module, values)
        except Exception as e:  # the reference evaluator lacks some ops: leave them
            if isinstance(e, PassError):
                raise
            return
        results = [r for r in op.results if r.type is not NONE]
        if len(outs) != len(results):
            return
        for r, arr in zip(results, outs):
            if not isinstance(arr, np.ndarray) or arr.size > self.max_elements:
                return
            if isinstance(r.type, TensorType) and r.type.has_static_shape and tuple(arr.shape) != r.type.shape:
                return
        for r, arr in zip(results, outs):
            el = r.type.element if isinstance(r.type, TensorType) else None
            c = make_constant(module, arr, el, name_hint=(op.loc.name or "folded"), loc=op.loc)
            op.parent.insert_before(op, c)
            r.replace_all_uses_with(c.results[0])
        if all(not r.uses for r in op.results):
            op.erase()
