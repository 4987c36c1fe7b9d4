"""The one registration point (as MLIR's InitAllDialects.h / InitAllPasses.h):
every in-tree dialect, pass and host lowering, in explicit lists. The IR core
(`dialects/ir/`) knows no dialect, and nothing registers itself when
imported; a tool builds its context here, and selected accelerator plugins
add theirs through their hooks (`tcc_register_dialects`,
`tcc_register_passes`, `tcc_register_lowerings`)."""
from __future__ import annotations

from .ir.opdef import Context


def register_all_dialects(ctx: Context) -> Context:
    from . import builtin
    from .graph import ops as graph
    from .loop import ops as loop
    from .onnx.dialect import dialect as onnx_dialect
    for make in (builtin.dialect, builtin.builtin_dialect, graph.dialect, loop.loop_dialect,
                 loop.arith_dialect, loop.math_dialect, onnx_dialect):
        ctx.load(make())
    return ctx


def register_all_passes(ctx: Context) -> Context:
    from .conversions.graph_to_loop.convert import ConvertOnnxToLoopPass
    from .loop.transforms.fuse_rows import FuseRowsPass
    from .loop.transforms.plan_memory import PlanMemory
    from .loop.transforms.prefetch_rows import PrefetchRowsPass
    from .loop.transforms.stream_outputs import StreamOutputsPass
    from .transforms import placement
    from .transforms.canonicalize import CanonicalizePass
    from .transforms.cse import CSEPass
    from .transforms.dce import DCEPass
    from .transforms.fold_batchnorm import FoldBatchNormPass
    from .transforms.fold_constants import FoldConstantsPass
    from .transforms.fuse import FusePass
    from .transforms.index_bounds import IndexBoundsPass
    from .transforms.qdq import QdqToIntegerPass
    from .transforms.shape_inference import ShapeInferencePass
    for cls in (CanonicalizePass, CSEPass, DCEPass, FoldBatchNormPass, FoldConstantsPass, IndexBoundsPass,
                ShapeInferencePass,
                placement.MergeCompositesPass, placement.AnnotateTargetsPass, placement.MergeRegionsPass,
                placement.PartitionPass, FusePass, ConvertOnnxToLoopPass, FuseRowsPass, StreamOutputsPass,
                PrefetchRowsPass, PlanMemory, QdqToIntegerPass):
        ctx.register_pass(cls)
    return ctx


def register_all_lowerings(ctx: Context) -> Context:
    """The host's graph-to-loop lowerings (`context.lowerings`), family by
    family (graph_to_loop/populate.py)."""
    from .conversions.graph_to_loop.populate import populate_host_lowerings
    populate_host_lowerings(ctx.lowerings)
    return ctx


_DEFAULT = None


def default_context() -> Context:
    """The shared context every tool starts from (built once): all in-tree
    dialects, passes and host lowerings. Do not add to it; `new_context()`
    gives a copy."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = register_all_lowerings(register_all_passes(register_all_dialects(Context())))
    return _DEFAULT


def new_context() -> Context:
    """A fresh copy of the default context, for accelerators to extend."""
    return default_context().copy()
