"""Shared harness: build an ONNX model, run it through onnxruntime and through
import -> (fuse) -> convert-onnx-to-loop, then both the loop interpreter and
the natively compiled code, and compare each with onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tcc.dialects.ir import PassManager, verify
from tcc.dialects.init_all import new_context
from tcc.dialects.loop.interpreter import run_loop_module
from tcc.dialects.onnx.importer import import_model
from tcc.dialects.conversions.graph_to_loop import ConvertOnnxToLoopPass
from tcc.dialects.conversions.loop_to_native.jit import run_native

RNG = np.random.default_rng()
NP2ONNX = {np.dtype(k): v for k, v in {
    "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "float16": TensorProto.FLOAT16,
    "int64": TensorProto.INT64, "int32": TensorProto.INT32, "int8": TensorProto.INT8,
    "uint8": TensorProto.UINT8, "bool": TensorProto.BOOL, "int16": TensorProto.INT16,
    "uint32": TensorProto.UINT32, "uint16": TensorProto.UINT16, "uint64": TensorProto.UINT64}.items()}


def rand(*shape, dtype=np.float32, lo=-2.0, hi=2.0):
    if np.dtype(dtype).kind == "f":
        return RNG.uniform(lo, hi, size=shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return RNG.integers(0, 2, size=shape).astype(bool)
    return RNG.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)


def make_model(nodes, inputs, outputs, initializers=(), opset=None):
    """inputs: {name: array}; outputs: {name: (np dtype, shape or None)}."""
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(k, NP2ONNX[v.dtype], v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, NP2ONNX[np.dtype(dt)], shp) for k, (dt, shp) in outputs.items()],
        [onnx.numpy_helper.from_array(v, k) for k, v in dict(initializers).items()])
    kw = {} if opset is None else {"opset_imports": [helper.make_opsetid("", opset)]}
    m = helper.make_model(g, **kw)
    m.ir_version = min(m.ir_version, 10)
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def lower(model, fuse=False, ctx=None):
    ctx = ctx or new_context()
    mod = import_model(model)
    passes = []
    if fuse:
        from tcc.dialects.transforms.fuse import FusePass
        passes.append(FusePass())
    passes.append(ConvertOnnxToLoopPass())
    PassManager(ctx, passes, verify_each=True).run(mod)
    verify(mod, ctx)
    return mod


def ort_run(model, inputs):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, inputs)


def same_outputs(got, want, rtol, atol, what):
    """Output lists equal in length, each output in shape and dtype; floats
    within rtol/atol (NaN where the reference has NaN), integers and booleans
    exactly."""
    got, want = list(got), list(want)
    assert len(got) == len(want), (what, f"{len(got)} outputs, expected {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        msg = f"{what}: output {i}"
        assert g.shape == w.shape, (msg, g.shape, w.shape)
        assert g.dtype == w.dtype, (msg, g.dtype, w.dtype)
        if w.dtype.kind == "f" or "float" in w.dtype.name:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=msg, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w, err_msg=msg)


def check(nodes, inputs, outputs, initializers=(), opset=None, fuse=False, rtol=1e-5, atol=1e-6):
    model = make_model(nodes, inputs, outputs, initializers, opset)
    want = ort_run(model, inputs)
    mod = lower(model, fuse=fuse)
    args = list(inputs.values())
    same_outputs(run_loop_module(mod, args), want, rtol, atol, "interpreter")
    same_outputs(run_native(mod, args), want, rtol, atol, "native")
    return mod
