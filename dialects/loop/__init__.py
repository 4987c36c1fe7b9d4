"""The loop dialect: Krnl-like loop nests over buffers, plus arith and math."""
from . import ops  # noqa: F401  (registers the dialects)
