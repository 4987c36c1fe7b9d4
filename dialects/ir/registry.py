"""The default context: the dialects every tool knows (builtin/func, onnx,
loop...). Accelerator dialects are added to a copy only when selected."""
from __future__ import annotations

from .opdef import Context

_DEFAULT = None
_EXTRA_LOADERS = []


def register_default_dialect(loader):
    """`loader()` returns a Dialect; called lazily on first use."""
    _EXTRA_LOADERS.append(loader)
    global _DEFAULT
    if _DEFAULT is not None:
        _DEFAULT.load(loader())


def default_context() -> Context:
    global _DEFAULT
    if _DEFAULT is None:
        from .. import builtin, graph, loop, onnx  # noqa: F401  (registering their dialects)
        ctx = Context()
        for loader in _EXTRA_LOADERS:
            ctx.load(loader())
        from .. import transforms
        transforms.register(ctx)
        _DEFAULT = ctx
    return _DEFAULT


def new_context() -> Context:
    return default_context().copy()
