"""fold-batchnorm: Conv (or Gemm with transB) followed by an inference
BatchNormalization whose parameters are constants becomes one Conv with
scaled weights and a new bias, saving a full pass over the activations.
An inference BatchNormalization with constant parameters after anything
else becomes x * k + (B - mean * k), k = scale / sqrt(var + epsilon), per
channel: elementwise ops that `fuse` joins to their neighbours (a QDQ
model's BatchNormalization sits between a convolution's output pair and
the Relu's: as its own loop and, on the cpu accelerator, its own partition
between host steps, ResNet-18 so quantized ran 1.2x slower with
--maccel=cpu than on the host path)."""
from __future__ import annotations

import numpy as np

from ..ir.core import Operation
from ..ir.passes import Pass
from ..ir.types import NONE, TensorType
from .constants import constant_value, make_constant


def _fold(module, bn):
    conv = getattr(bn.operands[0], "op", None)
    if conv is None or conv.name != "onnx.Conv" or len(conv.results[0].uses) != 1:
        return False
    if len(bn.results) > 1 and any(r.type is not NONE and r.uses for r in bn.results[1:]):
        return False  # training-mode outputs are used
    if bn.get_attr("training_mode", 0):
        return False
    params = [constant_value(v) for v in bn.operands[1:5]]
    w = constant_value(conv.operands[1])
    b = constant_value(conv.operands[2]) if len(conv.operands) > 2 and conv.operands[2].type is not NONE else None
    if w is None or any(p is None for p in params) or w.dtype.kind != "f":
        return False
    scale, beta, mean, var = (p.astype(np.float64) for p in params)
    eps = bn.get_attr("epsilon", 1e-5)
    k = scale / np.sqrt(var + eps)
    if k.shape != (w.shape[0],):
        return False
    new_w = (w.astype(np.float64) * k.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
    old_b = b.astype(np.float64) if b is not None else 0.0
    new_b = ((old_b - mean) * k + beta).astype(w.dtype)
    block = conv.parent
    wc = make_constant(module, new_w, conv.operands[1].type.element, name_hint=f"{conv.loc.name or 'conv'}_w",
                       loc=conv.loc)
    bc = make_constant(module, new_b, conv.operands[1].type.element, name_hint=f"{conv.loc.name or 'conv'}_b",
                       loc=conv.loc)
    block.insert_before(conv, wc)
    block.insert_before(conv, bc)
    attrs = {k2: v for k2, v in conv.attributes.items()}
    new = Operation("onnx.Conv", [conv.operands[0], wc.results[0], bc.results[0]], [bn.results[0].type],
                    attrs, loc=bn.loc)
    block.insert_before(bn, new)
    bn.results[0].replace_all_uses_with(new.results[0])
    bn.erase()
    conv.erase()
    return True


def _affine(module, bn):
    """bn -> Mul(x, k) then Add(shift), k and shift [C, 1, ...] constants."""
    if bn.get_attr("training_mode", 0) or (len(bn.results) > 1 and
                                           any(r.type is not NONE and r.uses for r in bn.results[1:])):
        return False
    x = bn.operands[0]
    params = [constant_value(v) for v in bn.operands[1:5]]
    t = x.type
    if any(p is None for p in params) or not isinstance(t, TensorType) or t.rank is None or t.rank < 2 \
            or str(t.element) not in ("f32", "f64"):
        return False
    scale, beta, mean, var = (p.astype(np.float64) for p in params)
    k = scale / np.sqrt(var + bn.get_attr("epsilon", 1e-5))
    shape = (-1,) + (1,) * (t.rank - 2)
    dt = np.float32 if str(t.element) == "f32" else np.float64
    block = bn.parent
    kc = make_constant(module, k.astype(dt).reshape(shape), loc=bn.loc)
    sc = make_constant(module, (beta - mean * k).astype(dt).reshape(shape), loc=bn.loc)
    block.insert_before(bn, kc)
    block.insert_before(bn, sc)
    mul = Operation("onnx.Mul", [x, kc.results[0]], [bn.results[0].type], {}, loc=bn.loc)
    block.insert_before(bn, mul)
    add = Operation("onnx.Add", [mul.results[0], sc.results[0]], [bn.results[0].type], {}, loc=bn.loc)
    block.insert_before(bn, add)
    bn.results[0].replace_all_uses_with(add.results[0])
    bn.erase()
    return True


class FoldBatchNormPass(Pass):
    name = "fold-batchnorm"
    summary = "fold inference BatchNormalization into the preceding Conv's weights and bias"

    def run(self, module, ctx):
        for func in module.functions():
            for op in list(func.regions[0].blocks[0].ops):
                if op.name == "onnx.BatchNormalization" and op.parent is not None:
                    if not _fold(module, op):
                        _affine(module, op)
