"""graph-to-loop on the host: onnx ops and graph.fused groups -> loop nests."""
from .convert import ConvertOnnxToLoopPass, LoweringError  # noqa: F401
from .registry import LOWERINGS  # noqa: F401
