"""The Python API: `tcc.compile(model) -> artifact path`, `tcc.load(path) -> Session`."""
from __future__ import annotations

import atexit
import dataclasses
import os
import shutil
import tempfile


def compile(model, maccel=(), opt_level=2, output=None, accel_options=None, cache=True,  # noqa: A001
            verbose=False, targets=()):
    """Compiles an ONNX model (a path or a ModelProto) into a `.tcc` artifact;
    returns its path (default: beside the model as MODEL.tcc, or, for a
    ModelProto, a fresh temporary directory removed when the process exits:
    pass `output` to keep the artifact). `accel_options` gives accelerator
    options as the CLI's `--<accel>-<name>` do: {"sim": {"max-rank": 2}};
    `targets` the accelerators' targets as `--target` does: ["cpu -isa=avx2"]. An
    artifact compiled before from the same model, options, code and target is
    reused from the compile cache (`$TCC_CACHE_DIR`, default ~/.cache/tcc)
    unless `cache=False`; `verbose` says on stderr whether it was."""
    from tcc.driver import accelerators as accel
    from tcc.driver.io import check_output
    from tcc.driver.options import CompileOptions
    from tcc.driver.pipeline import CompilePipeline

    if output is None:
        if isinstance(model, (str, os.PathLike)):
            output = os.path.splitext(os.fspath(model))[0] + ".tcc"
        else:
            output = os.path.join(_scratch_dir(), "model.tcc")
    check_output(output, [model])
    maccel = [maccel] if isinstance(maccel, str) else list(maccel)  # "cpu" is one name, not 'c', 'p', 'u'
    maccel = accel.resolve_maccel(maccel)  # maccel=["host"]: the same as (), the host path alone
    options = CompileOptions(maccel=list(maccel), opt_level=opt_level, emit="tcc", output=os.fspath(output),
                             accel_options=dict(accel_options or {}), verbose=verbose)
    if targets:
        from tcc.accelerators.manager import load_accelerators
        options.targets = accel.parse_targets([targets] if isinstance(targets, str) else targets,
                                              load_accelerators(options.maccel))
    model = os.fspath(model) if isinstance(model, os.PathLike) else model

    def build(out):
        opts = dataclasses.replace(options, output=out, verbose=False) if out != options.output else options
        return CompilePipeline(opts).compile(model)

    from tcc.driver.cached import cacheable, compile_cached
    from tcc.driver.progress import watch
    with watch():  # a progress line when stderr is a terminal
        if cache and cacheable(model, options):
            return compile_cached(model, options, build, prog="tcc.compile")
        return build(options.output)


def _scratch_dir():
    # One directory a call, all removed at exit: a loop of compile(proto)
    # calls once left a directory each in /tmp for good (32,000 after a day
    # of test runs).
    d = tempfile.mkdtemp(prefix="tcc-")
    atexit.register(_remove_if_owner, d, os.getpid())
    return d


def _remove_if_owner(d, pid):
    if os.getpid() == pid:  # a forked child leaving runs atexit too: the directory is its parent's
        shutil.rmtree(d, True)


def _compile_at_run_time(module, options, path):
    # The driver is imported only when a dynamic model meets a new input shape.
    from tcc.driver.pipeline import compile_specialized
    return compile_specialized(module, options, path)


def load(path):
    """Loads a `.tcc` artifact; returns a Session (`.run`, `.input_signature`, ...).
    A model that compiles per input shape is handed the compiler."""
    from tcc.runtime.loader import load as _load
    return _load(path, compiler=_compile_at_run_time)
