"""Imports every op-family module so their lowerings register."""
from . import elementwise, fused, matmul, conv, pool, norm, reduce, shape  # noqa: F401
