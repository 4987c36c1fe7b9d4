"""tcc: an ONNX compiler whose accelerators are pip-installable plugins."""
__version__ = "0.1.0"
