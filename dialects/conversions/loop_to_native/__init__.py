"""loop-to-native: lowered `func.func @main_graph` (loop/arith/math over
static memrefs) -> LLVM IR (llvmlite.ir) -> O3 for this host's CPU -> an
object file.

The native entry ABI (C):

    void tcc_main_graph(void **args, void **weights, uint8_t *workspace);
    extern const int64_t tcc_workspace_bytes;

- `args`: one pointer per @main_graph argument: the inputs, then the outputs,
  each a dense row-major buffer of its static shape (i1 is one byte per
  element, bf16 two bytes). Buffers must not overlap each other, the weights
  or the workspace (their parameters are `noalias`).
- `weights`: one pointer per weight, in the order of `Lowered.weights` (the
  artifact's manifest records it); each holds that array's raw bytes. Small
  constants (<= 4 KiB) are compiled into the object instead.
- `workspace`: `tcc_workspace_bytes` bytes, 64-byte aligned, scratch for the
  planned intermediate buffers (contents need not be initialised).
- Parallel loops call `tcc_parallel_for(int64_t n, void (*body)(int64_t begin,
  int64_t end, void *ctx), void *ctx)` from the runtime library
  (runtime/native, libtccrt.so); math calls libm (expm1f, erff, ...). The
  entry is reentrant for distinct workspaces.
"""
from __future__ import annotations

from .codegen import ENTRY, WORKSPACE_SYMBOL, Lowered, Weight, lower_module  # noqa: F401
from tcc.dialects.loop.transforms.plan_memory import PlanMemory  # noqa: F401  (its home: a loop pass)
from .target import NativeCodegenError, emit_object, host_cpu, optimize  # noqa: F401


def run_native(module, inputs, opt_level=3):
    """Compiles and runs a lowered module in-process (like run_loop_module)."""
    from .jit import run_native as _run
    return _run(module, inputs, opt_level)
