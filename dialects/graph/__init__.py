"""The `graph` dialect: groupings of onnx ops made by graph passes (`ops.py`;
loaded into a context by `tcc.dialects.init_all`)."""
