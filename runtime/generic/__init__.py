"""tcc's shape-generic executor: runs a dynamic model's stored onnx-dialect
IR at any input shape with no compile, as onnxruntime does (kernels that
take their sizes at run time, a plan built once per session). The
specializing session (runtime/specialize.py) serves a new input shape with
it while that shape's specialization compiles in the background.

- executor.py: the plan (a flat list of steps over an integer-indexed value
  table; constants folded and shape chains kept per input-shape key;
  sequences and optionals are lists / None in the table);
- fusion.py: producers absorbing the elementwise steps only they feed
  (Conv/MatMul/Gemm + bias + activation, SiLU) and the exporters' RMS
  normalization chain as one call;
- toolkit.py: the kernel registry, attribute decoding, the cpu
  accelerator's C kernels and the runtime library's (runtime/native,
  generic_ops.c: Erf, Gelu, RMS normalization) through ctypes;
- elementwise.py, shape.py, reduce.py, nn.py, rnn.py: the kernels by op
  family (numpy ufuncs, numpy matmul, the C kernels for GEMM, Conv, pooling,
  Softmax, LayerNormalization, LSTM/GRU where built). An op with no kernel
  runs that one op's onnx.reference implementation.

Why a numpy plan and not symbolic dims in the native loop nests: every
graph-to-loop lowering and both code generators assume static shapes;
kernels that read their sizes at run time exist already (numpy, OpenBLAS,
the cpu accelerator's C library), so this path costs no compile at all."""
from .executor import GenericPlan
from .toolkit import GenericShapeError

__all__ = ["GenericPlan", "GenericShapeError"]
