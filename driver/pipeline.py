"""Pipeline assembly: which passes run for an emission target and -O level."""
from __future__ import annotations

import sys

from tcc.dialects.ir import PassManager, new_context, parse_pipeline
from tcc.dialects.onnx.importer import import_model

from .options import CompileOptions


def graph_pipeline(opt_level: int) -> str:
    """Target-independent graph passes (stage 2 of DESIGN.md)."""
    if opt_level <= 0:
        return "shape-inference"
    return "shape-inference,canonicalize,fold-constants,canonicalize,cse,dce,shape-inference"


def make_pass_manager(ctx, options: CompileOptions, pipeline: str) -> PassManager:
    return PassManager(ctx, parse_pipeline(pipeline, ctx), verify_each=True,
                       print_after_all=sys.stderr if options.print_ir_after_all else None)


def import_and_optimize(model, options: CompileOptions, ctx=None):
    """ONNX model (path or ModelProto) -> onnx-dialect module after graph passes."""
    ctx = ctx or new_context()
    module = import_model(model)
    pm = make_pass_manager(ctx, options, graph_pipeline(options.opt_level))
    pm.run(module)
    if options.timing:
        pm.timing_report(sys.stderr)
    return module, ctx
