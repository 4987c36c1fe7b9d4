"""tcc: an ONNX compiler whose accelerators are pip-installable plugins."""
__version__ = "0.1.0"

__all__ = ["compile", "load"]


def __getattr__(name):
    # Lazy, so `import tcc` stays cheap (no llvmlite, onnx or numpy import).
    if name in ("compile", "load"):
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'tcc' has no attribute {name!r}")
