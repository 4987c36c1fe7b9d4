"""The compile cache for `tcc` and `tcc.compile` (runtime/cache.py holds the
keys and the store): an artifact compiled before from the same model bytes,
options, tcc and plugin code and target is copied to the output instead of
compiling again."""
from __future__ import annotations

import os
import sys

from tcc.runtime import cache

from .io import write_bytes


def key_options(options) -> dict:
    """The options that change the artifact (not where it goes or what is printed)."""
    return {"emit": options.emit, "maccel": list(options.maccel), "opt_level": options.opt_level,
            "strict": options.strict, "accel_options": options.accel_options, "targets": options.targets}


def cacheable(model, options) -> bool:
    """Only whole artifacts are cached, and only when nothing asks to watch
    the compile itself (IR after each pass, pass timings)."""
    if options.emit != "tcc" or options.print_ir_after_all or options.timing:
        return False
    if not cache.plugins_cacheable(options.maccel):
        return False
    if isinstance(model, (str, os.PathLike)):
        return os.path.isfile(model)  # a missing model gets the importer's error
    return hasattr(model, "SerializeToString") or isinstance(model, (bytes, bytearray))


def compile_cached(model, options, build, prog="tcc"):
    """Writes the artifact for `model` to `options.output`, through the cache;
    `build(path)` compiles it to `path` on a miss. Returns the output path."""
    key = cache.make_key("onnx-model", cache.model_bytes(model), key_options(options), options.maccel)
    path, hit = cache.get_or_build(key, build)
    with open(path, "rb") as f:
        write_bytes(f.read(), options.output)
    if options.verbose:
        what = "cache hit: reused" if hit else "cache miss: compiled and stored"
        sys.stderr.write(f"{prog}: {what} {path} -> {options.output}\n")
    return options.output
