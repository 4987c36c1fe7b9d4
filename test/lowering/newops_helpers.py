"""Harness for the op families added with attention/quantize/loss/scatter/
einsum/gridsample/normalization lowerings: build a one-node model, get the
expected outputs from onnxruntime (or onnx.reference, numpy, where ORT lacks
the op or dtype), and run the lowered module both through the loop
interpreter and natively."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tcc.dialects.conversions.graph_to_loop import ConvertOnnxToLoopPass
from tcc.dialects.conversions.loop_to_native.jit import run_native
from tcc.dialects.ir import PassManager, verify
from tcc.dialects.init_all import new_context
from tcc.dialects.loop.interpreter import run_loop_module
from tcc.dialects.onnx.importer import import_model

from helpers import same_outputs

RNG = np.random.default_rng()


def tp(dt):
    return helper.np_dtype_to_tensor_dtype(np.dtype(dt))


def model(nodes, inputs, outputs, opset=23, initializers=()):
    """inputs: {name: array}; outputs: {name: onnx elem type or np dtype, or (that, shape)}."""
    outputs = {k: t if isinstance(t, tuple) else (t, None) for k, t in outputs.items()}
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, tp(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, t if isinstance(t, int) else tp(t), shp) for k, (t, shp) in outputs.items()],
        [onnx.numpy_helper.from_array(v, k) for k, v in dict(initializers).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def expected(m, inputs, ref="ort"):
    """ref: "ort", "onnx" (onnx.reference) or a callable taking the inputs'
    arrays and returning the outputs (numpy, where both engines' answers
    depend on the CPU or are wrong)."""
    if callable(ref):
        return list(ref(*inputs.values()))
    if ref == "ort":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return s.run(None, inputs)
    from onnx.reference import ReferenceEvaluator
    return ReferenceEvaluator(m).run(None, inputs)


def lowered(m):
    ctx = new_context()
    mod = import_model(m)
    PassManager(ctx, [ConvertOnnxToLoopPass()], verify_each=True).run(mod)
    verify(mod, ctx)
    return mod


def check(nodes, inputs, outputs, opset=23, ref="ort", rtol=1e-5, atol=1e-6, initializers=()):
    """The interpreter and the compiled code, each against the reference."""
    m = model(nodes, inputs, outputs, opset, initializers)
    want = expected(m, inputs, ref)
    mod = lowered(m)
    args = list(inputs.values())
    same_outputs(run_loop_module(mod, args), want, rtol, atol, "interpreter")
    same_outputs(run_native(mod, args), want, rtol, atol, "native")
    return mod
