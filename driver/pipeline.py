"""Pipeline assembly: which passes run for an emission target and -O level,
with the stages selected accelerators add at named points."""
from __future__ import annotations

import sys

from tcc.accelerators import PipelineStages
from tcc.dialects.ir import PassManager, new_context, parse_pipeline
from tcc.dialects.conversions.graph_to_loop.registry import host_lowers
from tcc.dialects.onnx.importer import import_model
from tcc.dialects.transforms.placement import PIPELINE as PLACEMENT_PIPELINE

from .io import CLIError
from .options import CompileOptions
from .progress import phase


def graph_pipeline(opt_level: int) -> str:
    """Target-independent graph passes (stage 2 of DESIGN.md)."""
    if opt_level <= 0:
        return "shape-inference"
    # Twice round shape inference and folding: folding a Pad's pads (say)
    # makes its shape static only after inference, and only then can a
    # Shape of it fold (expanded functions chain several such steps).
    return ("shape-inference,canonicalize,fold-constants,shape-inference,canonicalize,fold-constants,"
            "canonicalize,fold-batchnorm,cse,dce,shape-inference")


def stages_for(options: CompileOptions, accels) -> PipelineStages:
    stages = PipelineStages(options.emit)
    for a in accels:
        if a.has("tcc_add_passes"):
            a.call("tcc_add_passes", pipeline=stages, emission_target=options.emit)
    return stages


def _run(ctx, module, options, pipeline):
    if not pipeline:
        return
    pm = PassManager(ctx, parse_pipeline(pipeline, ctx), verify_each=True,
                     print_after_all=sys.stderr if options.print_ir_after_all else None)
    pm.run(module)


def import_and_optimize(model, options: CompileOptions, ctx=None):
    """ONNX model (path or ModelProto) -> module after graph passes and, when
    accelerators are selected, placement (BYOC partitioning). Placement needs
    static shapes: a model with dynamic dims or shape-deciding inputs is left
    unplaced, and its specializing artifact places each input shape at run
    time (runtime/specialize.py)."""
    ctx = ctx or new_context()
    accels = list(getattr(ctx, "accelerators", []))
    stages = stages_for(options, accels)
    with phase("import"):
        module = import_model(model, lowered=host_lowers)
    with phase("graph passes", module):
        _run(ctx, module, options, ",".join(stages.at("after-import")))
        _run(ctx, module, options, graph_pipeline(options.opt_level))
    if accels:
        from tcc.runtime.specialize import needs_specialization
        if not needs_specialization(module):
            place(module, ctx, options)
    return module, ctx


def place(module, ctx, options: CompileOptions):
    """Stage 3: the accelerators' before-placement passes, placement, theirs after."""
    stages = stages_for(options, ctx.accelerators)
    with phase("placement", module):
        _run(ctx, module, options, ",".join(stages.at("before-placement")))
        _run(ctx, module, options, PLACEMENT_PIPELINE + ",dce")
        _run(ctx, module, options, ",".join(stages.at("after-placement")))
    if options.strict:
        from .placement_report import host_fallbacks
        left = host_fallbacks(module)
        if left:
            node, op, _, why = left[0]
            more = f" (and {len(left) - 1} more)" if len(left) > 1 else ""
            raise CLIError(f"--strict: node '{node}' ({op}) would fall back to the host: {why}{more}")
