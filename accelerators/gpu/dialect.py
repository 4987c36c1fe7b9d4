"""The `gpu` dialect: what a gpu partition is after graph-to-loop.

    gpu.launch() ({ loop nest(s) ... gpu.terminator })  {kernel = "gpu_0_k3"}
        one kernel; its region is the loop nest over buffers defined outside,
        and loop-to-native maps the nest's parallel loops onto the grid
    gpu.library(buffers...)  {kind = "matmul"|"gemm"|"conv_gemm"|"softmax"|
                              "layernorm"|"reduce"|"transpose2d", params = "<json>"}
        a cuBLAS call or a hand-written kernel template (warp-shuffle row
        reductions, tiled transposes)
    gpu.terminator()

Buffer plumbing (loop.alloc, loop.view, loop.copy, loop.global, loop.dealloc)
stays in the loop dialect around them.
"""
from tcc.dialects.ir import ISOLATED, TERMINATOR, Dialect, OpDef, OperandDef  # noqa: F401
from tcc.dialects.ir.opdef import AttrDef


def dialect():
    return Dialect("gpu", [
        OpDef("gpu.launch", [], [], {"kernel": AttrDef("kernel", "string", True)}, num_regions=1,
              summary="one CUDA kernel over the loop nest in its region"),
        OpDef("gpu.library", [OperandDef("buffers", "variadic")], [],
              {"kind": AttrDef("kind", "string", True), "params": AttrDef("params", "string", True)},
              summary="a cuBLAS call or a kernel template over buffers"),
        OpDef("gpu.terminator", traits=frozenset({TERMINATOR}), summary="ends a gpu.launch body"),
    ], "the gpu accelerator's kernels and library calls")
