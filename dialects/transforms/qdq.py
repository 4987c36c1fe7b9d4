"""DequantizeLinear(QuantizeLinear(x)) on a float32 activation, per-tensor
constant scales and zero points, an 8- or 16-bit integer in between (the
pairs onnxruntime.quantization's QDQ format writes around every quantized
op) -> the same values in float32 elementwise ops:

    y = (Clip(Round(x / s1) + z1, qmin, qmax) - z2) * s2

Every accelerator that takes float32 elementwise ops then runs the pair in
the neighbouring op's fused loop instead of cutting the model into
partitions with host steps for the integer ops between them (qdq_cnn on the
cpu accelerator: 5 cpu partitions and 6 host steps -> 1 partition).

Bit-exact with onnx.reference's QuantizeLinear/DequantizeLinear for every
finite x: the division is x / s1 in f32 as the reference divides (not a
product by 1 / s1); Round is round half to even; Round(v) is an integer, so
+ z1 (|z1| < 2^16) is exact below 2^24 and saturates the same above; the
clamped value minus z2 is an exact small integer, and its product by s2 is
the reference's one rounding. z1 is added even when it is 0, so that
Round(-0.3) = -0 becomes +0 as the integer 0 does. Where the reference's
rint(x / s1).astype(int32) is undefined (|x / s1| >= 2^31, inf, NaN), large
values and inf saturate to qmax/qmin as the host lowering's int32 clamp does
for finite ones, and NaN becomes qmin."""
from __future__ import annotations

import numpy as np

from ..ir.rewriter import RewritePattern
from ..ir.types import NONE, TensorType
from .constants import constant_value, make_constant

# the integer types whose whole range (and every zero point) is exact in f32
_RANGE = {"i8": (-128, 127), "si8": (-128, 127), "ui8": (0, 255),
          "i16": (-32768, 32767), "si16": (-32768, 32767), "ui16": (0, 65535)}


def _f32(v):
    return isinstance(v.type, TensorType) and str(v.type.element) == "f32"


def _scalar(op, i, want_f32):
    """The per-tensor scale (want_f32) or zero point at operand i as a Python
    number, 0 for an absent zero point, None when not a one-element constant."""
    if len(op.operands) <= i or op.operands[i].type is NONE:
        return None if want_f32 else 0
    v = op.operands[i]
    c = constant_value(v)
    if c is None or c.size != 1:
        return None
    if want_f32:
        return np.float32(c.reshape(-1)[0]) if c.dtype == np.float32 else None
    return int(c.reshape(-1)[0])


class QuantizeDequantizePair(RewritePattern):
    op_name = "onnx.DequantizeLinear"

    def match_and_rewrite(self, op, rw):
        q = getattr(op.operands[0], "op", None)
        if q is None or q.name != "onnx.QuantizeLinear" or len(op.results) != 1:
            return False
        x, y = q.operands[0], op.results[0]
        if not (_f32(x) and _f32(y)) or str(q.results[0].type.element) not in _RANGE:
            return False
        if q.get_attr("precision") or q.get_attr("block_size") or op.get_attr("block_size"):
            return False
        if len(q.operands) > 2 and q.operands[2].type is not NONE and \
                str(q.operands[2].type.element) != str(q.results[0].type.element):
            return False
        s1, s2 = _scalar(q, 1, True), _scalar(op, 1, True)
        z1, z2 = _scalar(q, 2, False), _scalar(op, 2, False)
        if s1 is None or s2 is None or z1 is None or z2 is None:
            return False
        lo, hi = _RANGE[str(q.results[0].type.element)]
        t = x.type
        module = op.parent_op
        while module is not None and module.name != "builtin.module":
            module = module.parent_op
        if module is None:
            return False

        def const(value):
            c = make_constant(module, np.asarray(value, np.float32), loc=op.loc)
            rw.insert_before(op, c)
            return c.results[0]

        def step(name, *operands):
            return rw.create_before(op, f"onnx.{name}", list(operands), [t], {}, loc=op.loc).results[0]

        v = step("Div", x, const(s1))
        v = step("Round", v)
        v = step("Add", v, const(z1))
        v = step("Clip", v, const(lo), const(hi))
        v = step("Sub", v, const(z2))
        v = step("Mul", v, const(s2))
        rw.replace_op(op, [v])
        return True
