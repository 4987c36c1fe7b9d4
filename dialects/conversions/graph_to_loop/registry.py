"""Host lowerings: op name -> `fn(cx, op)`. A lowering reads its operands'
buffers with `cx.buf`, gets result buffers with `cx.out` (or aliases them
with `cx.alias`) and emits loop IR through `cx.L`.

`@lowering("Relu", ...)` only names the ops a function lowers; nothing is
registered when a module is imported. The table belongs to the context
(`context.lowerings`), filled from the one list in `populate.py` (by
`tcc.dialects.init_all.register_all_lowerings`) and by accelerators'
`tcc_register_lowerings` hooks."""
from __future__ import annotations

_ATTR = "_tcc_lowers"


def lowering(*names):
    """Marks a function as the host lowering of ops `names` (default-domain
    op types, or full names such as "graph.fused")."""
    def deco(fn):
        setattr(fn, _ATTR, tuple(getattr(fn, _ATTR, ())) + tuple(n if "." in n else "onnx." + n for n in names))
        return fn
    return deco


def lowerings_in(module) -> dict:
    """{op name: fn} for the functions of `module` marked with @lowering."""
    out = {}
    for fn in vars(module).values():
        for name in getattr(fn, _ATTR, ()):
            out[name] = fn
    return out
