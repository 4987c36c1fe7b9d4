"""`python -m tcc.runtime.native OUT.so` builds the runtime library (make native)."""
import os
import sys

from . import HERE, LIB_NAME, build

build(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, LIB_NAME))
