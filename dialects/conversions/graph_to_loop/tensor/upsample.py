"""Upsample (opset 7-9, deprecated): Resize-10 under its old name, the
same asymmetric nearest (floor) and linear sampling; opset 7-8 give the
scales as an attribute, opset 9 as a constant input."""
from __future__ import annotations

from ..registry import lowering
from .resize import lower_resize


@lowering("Upsample")
def lower_upsample(cx, op):
    mode = cx.attr(op, "mode") or "nearest"
    if mode not in ("nearest", "linear"):
        cx.fail(op, f"Upsample mode '{mode}' is not nearest or linear")
    if cx.opset() >= 10:
        cx.fail(op, f"Upsample is deprecated at opset {cx.opset()}: use Resize")
    scales = cx.attr(op, "scales") if cx.opset() < 9 else None
    if cx.opset() < 9 and scales is None:
        cx.fail(op, "Upsample needs a scales attribute before opset 9")
    lower_resize(cx, op, scales)
