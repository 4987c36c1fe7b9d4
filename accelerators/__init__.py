"""Accelerator plugins: the contract (hookspecs), the data exchanged, and the
loader that finds installed accelerators through entry points."""
import pluggy

from .api import (API_VERSION, AcceleratorInfo, CliOption, CompositePattern,  # noqa: F401
                  PIPELINE_POINTS, PipelineStages, RuntimeModule, Support)

hookimpl = pluggy.HookimplMarker("tcc")
ENTRY_POINT_GROUP = "tcc.accelerators"
