"""Shared by the IR tests: import, print, parse, and ONNX Runtime references."""
import numpy as np
import onnxruntime as ort

from tcc.dialects.ir import parse_module, print_module, verify
from tcc.dialects.init_all import default_context
from tcc.dialects.onnx.importer import import_model


def round_trip(module, ctx=None):
    ctx = ctx or default_context()
    text = print_module(module)
    back = parse_module(text, "<round-trip>", ctx)
    # The printed text refers to constants by name; give the parsed module the same table.
    back.resources = module.resources
    for op in back.walk():
        for a in op.attributes.values():
            if hasattr(a, "table"):
                a.table = module.resources
    verify(back, ctx)
    return text, back


def ort_run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def random_feeds(model, rng):
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


__all__ = ["round_trip", "ort_run", "random_feeds", "import_model"]
