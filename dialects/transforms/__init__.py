"""Generic, target-independent passes."""
from .canonicalize import CanonicalizePass
from .cse import CSEPass
from .dce import DCEPass
from .fold_batchnorm import FoldBatchNormPass
from .fold_constants import FoldConstantsPass
from .placement import PASSES as PLACEMENT_PASSES
from .shape_inference import ShapeInferencePass

PASSES = [CanonicalizePass, CSEPass, DCEPass, FoldBatchNormPass, FoldConstantsPass, ShapeInferencePass, *PLACEMENT_PASSES]


def register(ctx):
    for p in PASSES:
        ctx.register_pass(p)
    # Passes from sibling packages that may not be present in every build.
    import importlib
    import importlib.util
    for modname in ("tcc.dialects.transforms.fuse", "tcc.dialects.conversions.graph_to_loop",
                    "tcc.dialects.loop.transforms"):
        if importlib.util.find_spec(modname.rsplit(".", 1)[0]) is None:
            continue
        try:
            spec = importlib.util.find_spec(modname)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        for p in getattr(importlib.import_module(modname), "PASSES", ()):
            ctx.register_pass(p)
