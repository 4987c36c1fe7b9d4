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
        try:
            outs = _evaluate(op, module, values)
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
