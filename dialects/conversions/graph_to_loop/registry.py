"""op name -> host lowering. A lowering is `fn(cx, op)`: it reads its operands'
buffers with `cx.buf`, gets result buffers with `cx.out` (or aliases them with
`cx.alias`) and emits loop IR through `cx.L`."""
from __future__ import annotations

LOWERINGS = {}


def lowering(*names):
    def deco(fn):
        for n in names:
            LOWERINGS[n if "." in n else "onnx." + n] = fn
        return fn
    return deco


def host_lowers(op_type: str) -> bool:
    """Whether the host lowers default-domain op `op_type`."""
    from . import families  # noqa: F401  (registers the lowerings)
    return "onnx." + op_type in LOWERINGS
