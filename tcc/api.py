"""The Python API: `tcc.compile(model) -> artifact path`, `tcc.load(path) -> Session`."""
from __future__ import annotations

import os
import tempfile


def compile(model, maccel=(), opt_level=2, output=None):  # noqa: A001 - mirrors the CLI's verb
    """Compiles an ONNX model (a path or a ModelProto) into a `.tcc` artifact;
    returns its path (default: beside the model as MODEL.tcc, or a fresh
    temporary directory for a ModelProto)."""
    from tcc.dialects.ir import new_context
    from tcc.driver import accelerators as accel
    from tcc.driver.compile import emit
    from tcc.driver.io import check_output
    from tcc.driver.options import CompileOptions
    from tcc.driver.pipeline import import_and_optimize

    if output is None:
        if isinstance(model, (str, os.PathLike)):
            output = os.path.splitext(os.fspath(model))[0] + ".tcc"
        else:
            output = os.path.join(tempfile.mkdtemp(prefix="tcc-"), "model.tcc")
    check_output(output, [model])
    maccel = [maccel] if isinstance(maccel, str) else list(maccel)  # "cpu" is one name, not 'c', 'p', 'u'
    accels = accel.load_accelerators(maccel) if maccel else []
    ctx = accel.setup_context(new_context(), accels, opt_level)
    options = CompileOptions(maccel=maccel, opt_level=opt_level, emit="tcc", output=os.fspath(output))
    module, ctx = import_and_optimize(os.fspath(model) if isinstance(model, os.PathLike) else model, options, ctx)
    return emit(module, ctx, options)


def load(path):
    """Loads a `.tcc` artifact; returns a Session (`.run`, `.input_signature`, ...)."""
    from tcc.runtime.session import load as _load
    return _load(path)
