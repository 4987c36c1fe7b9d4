"""Loop-dialect transforms (run between graph-to-loop and loop-to-native;
registered by `tcc.dialects.init_all`)."""
from .fuse_rows import FuseRowsPass  # noqa: F401
from .prefetch_rows import PrefetchRowsPass  # noqa: F401
from .stream_outputs import StreamOutputsPass  # noqa: F401
from .plan_memory import PlanMemory  # noqa: F401
