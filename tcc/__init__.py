"""tcc: an ONNX compiler whose accelerators are pip-installable plugins."""
__version__ = "0.1.0"

__all__ = ["compile", "load", "InferenceSession"]

# onnxruntime's API (tcc/ort.py), so `import tcc as ort` runs onnxruntime code.
_ORT_NAMES = ("InferenceSession", "SessionOptions", "GraphOptimizationLevel", "NodeArg", "get_available_providers",
              "Fail", "InvalidArgument", "NoSuchFile", "InvalidGraph")


def __getattr__(name):
    # Lazy, so `import tcc` stays cheap (no llvmlite, onnx or numpy import).
    if name in ("compile", "load"):
        from . import api
        return getattr(api, name)
    if name in _ORT_NAMES:
        from . import ort
        return getattr(ort, name)
    raise AttributeError(f"module 'tcc' has no attribute {name!r}")
