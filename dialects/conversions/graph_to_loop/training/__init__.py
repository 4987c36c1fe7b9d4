"""Lowerings of the ai.onnx.preview.training ops."""
