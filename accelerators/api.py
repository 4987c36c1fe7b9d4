"""What plugins and tcc exchange through the hooks: plain data classes.

An accelerator plugin imports only this module and `hookimpl` (from
`tcc.accelerators`); everything else it needs arrives as hook arguments."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

#: The plugin API version this tcc implements. A plugin states the version it
#: was built for; a different major version is refused by name.
API_VERSION = "1.0"


@dataclass(frozen=True)
class AcceleratorInfo:
    name: str
    version: str
    api_version: str
    description: str = ""


@dataclass(frozen=True)
class Support:
    """An accelerator's answer to "can you take this op?": if not, why
    (op unsupported, dtype, shape, attribute, not worth a copy...)."""
    ok: bool
    reason: str = ""

    @classmethod
    def yes(cls):
        return cls(True)

    @classmethod
    def no(cls, reason: str):
        return cls(False, reason)

    def __bool__(self):
        return self.ok


@dataclass(frozen=True)
class CompositePattern:
    """A chain of ops an accelerator runs as one kernel (TVM BYOC's
    pattern table), e.g. conv+bias+relu. `ops` are op names from producer to
    consumer; each op's single result feeds the next op's first operand.
    `check(ops)` may refuse a particular match."""
    name: str
    ops: tuple
    check: Optional[Callable] = None


@dataclass(frozen=True)
class CliOption:
    """An accelerator's own command-line option: `--<accel>-<name>`
    (e.g. `--sim-latency-ms=3`). Values reach `tcc_configure_passes`."""
    name: str
    type: type = str
    default: object = None
    help: str = ""


# Named points of the pipeline where an accelerator may add stages (it never
# replaces the pipeline). In order of execution.
PIPELINE_POINTS = ("after-import", "before-placement", "after-placement", "after-graph-to-loop",
                   "after-loop-passes")


@dataclass
class PipelineStages:
    """The pipeline for one compile: passes per named point. Accelerators add
    to it in `tcc_add_passes`."""
    emission_target: str
    stages: dict = field(default_factory=lambda: {p: [] for p in PIPELINE_POINTS})

    def add(self, point: str, pass_spec: str):
        if point not in self.stages:
            raise ValueError(f"unknown pipeline point '{point}' (points: {', '.join(PIPELINE_POINTS)})")
        self.stages[point].append(pass_spec)

    def at(self, point):
        return list(self.stages[point])


@dataclass(frozen=True)
class RuntimeModule:
    """What an accelerator's loop-to-native hook produces for the artifact:
    an opaque payload (bytes, stored in the .tcc under the accelerator's
    name) and the names of the functions it provides, each callable by name
    from the execution plan (TVM's runtime.Module: every function reachable by
    name)."""
    accelerator: str
    payload: bytes
    functions: tuple
    format: str = "raw"
    metadata: dict = field(default_factory=dict)
