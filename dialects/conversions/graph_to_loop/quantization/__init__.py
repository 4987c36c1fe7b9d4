"""Quantization: (De)QuantizeLinear, integer and QLinear MatMul/Conv."""
