"""Placement for gpu: which onnx ops it takes, and what they cost."""
from __future__ import annotations

import numpy as np

from tcc.accelerators import Support
from tcc.dialects.ir.types import NONE, TensorType

ELEMENTWISE = {
    "Add", "Sub", "Mul", "Div", "Pow", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Erf",
    "Reciprocal", "Floor", "Ceil", "Sign", "Sin", "Cos", "Softplus", "Elu", "LeakyRelu", "HardSigmoid",
    "HardSwish", "Gelu", "PRelu", "Clip", "Where", "Min", "Max", "Sum", "Mean", "Equal", "Less", "Greater",
    "Not", "And", "Or", "Cast", "Identity", "Mish", "Selu", "Celu"}
REDUCTIONS = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceSumSquare",
              "ReduceLogSumExp", "ArgMax", "ArgMin"}
NORM = {"Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization", "InstanceNormalization"}
LINALG = {"MatMul", "Gemm", "Conv"}
POOL = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
SHAPE = {"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Slice", "Gather", "Expand",
         "Split", "Pad", "Tile", "Dropout"}
COMMON = {"onnx." + n for n in ELEMENTWISE | REDUCTIONS | NORM | LINALG | POOL | SHAPE}

# element types the generated CUDA C handles (f16/bf16 and float8 are not yet)
DATA = {"f32"}
INDEX_LIKE = {"i64", "i32", "i1", "i8", "ui8"}


def _host_lowerings():
    from tcc.dialects.init_all import default_context
    return default_context().lowerings


def supports(op, module):
    if op.name not in COMMON:
        return Support.no("op unsupported")
    if op.name not in _host_lowerings():
        return Support.no("op unsupported (no loop lowering)")
    if op.regions:
        return Support.no("ops with subgraphs stay on the host")
    saw_float = False
    for v in list(op.operands) + list(op.results):
        t = v.type
        if t is NONE:
            continue
        if not isinstance(t, TensorType):
            return Support.no(f"type {t} unsupported")
        if not t.has_static_shape:
            return Support.no(f"shape {t} unsupported (static shapes only)")
        el = str(t.element)
        if el in DATA:
            saw_float = True
        elif el not in INDEX_LIKE:
            return Support.no(f"dtype {el} unsupported (f32 data, integer/bool indices and masks)")
    if op.name in ("onnx.MatMul", "onnx.Gemm", "onnx.Conv") and not saw_float:
        return Support.no("integer matmul/conv unsupported")
    if op.name == "onnx.Conv" and op.operands[1].type.rank != 4:
        return Support.no("shape: only 2-D Conv")
    return Support.yes()


def cost_hint(op, min_elements=4096):
    """Relative cost vs the host (lower is better): heavy linear algebra is
    far cheaper on the GPU; tiny ops are not worth a launch plus copies."""
    n = 0
    for r in op.results:
        if isinstance(r.type, TensorType) and r.type.has_static_shape:
            n = max(n, int(np.prod(r.type.shape, dtype=np.int64)))
    if op.name in ("onnx.MatMul", "onnx.Gemm", "onnx.Conv"):
        return 0.05
    if op.name in ("onnx.Reshape", "onnx.Flatten", "onnx.Squeeze", "onnx.Unsqueeze", "onnx.Identity"):
        return 0.5  # views: free anywhere, keep them with their neighbours
    if n < min_elements:
        return 2.0
    return 0.1
