"""The `graph` dialect: groupings of onnx ops made by graph passes."""
from . import ops  # noqa: F401  (registers the dialect)
