"""graph-to-loop on the host: onnx ops and graph.fused groups -> loop nests.

`convert.py` is the pass; `common.py`, `cast.py`, `kernels.py` and
`window.py` are the toolkit lowerings share; the lowerings live by op family
in `math/`, `nn/`, `tensor/`, `rnn/`, `quantization/` and `control_flow/`,
listed once in `populate.py`."""
from .convert import ConvertOnnxToLoopPass, LoweringError  # noqa: F401
