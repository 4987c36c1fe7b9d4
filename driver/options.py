"""Compile options shared by the CLI and the Python API."""
from __future__ import annotations

from dataclasses import dataclass, field

EMIT_TARGETS = ("onnx-ir", "loop-ir", "native-ir", "obj", "lib", "tcc")


@dataclass
class CompileOptions:
    maccel: list = field(default_factory=list)
    opt_level: int = 2
    emit: str = "tcc"
    output: str | None = None
    strict: bool = False
    verbose: bool = False
    print_ir_after_all: bool = False
    timing: bool = False
    accel_options: dict = field(default_factory=dict)  # accelerator name -> {option: value}
    targets: dict = field(default_factory=dict)  # accelerator name -> its target ("cpu -isa=avx2"), see --target
