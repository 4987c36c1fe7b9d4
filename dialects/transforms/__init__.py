"""Generic, target-independent passes (registered by `tcc.dialects.init_all`)."""
