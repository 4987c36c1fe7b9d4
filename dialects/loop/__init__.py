"""The loop dialect: Krnl-like loop nests over buffers, plus arith and math
(`ops.py`; loaded into a context by `tcc.dialects.init_all`)."""
