"""Loop-dialect transforms (run between graph-to-loop and loop-to-native)."""
from .fuse_rows import FuseRowsPass
from .prefetch_rows import PrefetchRowsPass
from .stream_outputs import StreamOutputsPass

PASSES = [FuseRowsPass, StreamOutputsPass, PrefetchRowsPass]
