"""Regenerates the bundled sample models (examples/*.onnx) from tcc.samples."""
import os
import sys

import onnx

from tcc.samples import EXAMPLES

here = os.path.dirname(os.path.abspath(__file__))
for name in (sys.argv[1:] or EXAMPLES):
    path = os.path.join(here, f"{name}.onnx")
    onnx.save(EXAMPLES[name](), path)
    print(path)
