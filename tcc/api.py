"""The Python API: `tcc.compile(model) -> artifact path`, `tcc.load(path) -> Session`."""
from __future__ import annotations

import dataclasses
import os
import tempfile


def compile(model, maccel=(), opt_level=2, output=None, cache=True, verbose=False):  # noqa: A001 - the CLI's verb
    """Compiles an ONNX model (a path or a ModelProto) into a `.tcc` artifact;
    returns its path (default: beside the model as MODEL.tcc, or a fresh
    temporary directory for a ModelProto). An artifact compiled before from
    the same model, options, code and target is reused from the compile cache
    (`$TCC_CACHE_DIR`, default ~/.cache/tcc) unless `cache=False`; `verbose`
    says on stderr whether it was."""
    from tcc.dialects.ir import new_context
    from tcc.driver import accelerators as accel
    from tcc.driver.compile import emit
    from tcc.driver.options import CompileOptions
    from tcc.driver.pipeline import import_and_optimize

    if output is None:
        if isinstance(model, (str, os.PathLike)):
            output = os.path.splitext(os.fspath(model))[0] + ".tcc"
        else:
            output = os.path.join(tempfile.mkdtemp(prefix="tcc-"), "model.tcc")
    maccel = list(maccel)
    accels = accel.load_accelerators(maccel) if maccel else []
    ctx = accel.setup_context(new_context(), accels, opt_level)
    options = CompileOptions(maccel=maccel, opt_level=opt_level, emit="tcc", output=os.fspath(output),
                             verbose=verbose)
    model = os.fspath(model) if isinstance(model, os.PathLike) else model

    def build(out):
        opts = dataclasses.replace(options, output=out, verbose=False) if out != options.output else options
        module, mctx = import_and_optimize(model, opts, ctx)
        return emit(module, mctx, opts)

    from tcc.driver.cached import cacheable, compile_cached
    from tcc.driver.progress import watch
    with watch():  # a progress line when stderr is a terminal
        if cache and cacheable(model, options):
            return compile_cached(model, options, build, prog="tcc.compile")
        return build(options.output)


def load(path):
    """Loads a `.tcc` artifact; returns a Session (`.run`, `.input_signature`, ...)."""
    from tcc.runtime.session import load as _load
    return _load(path)
