"""Shared helpers: one-node (or small) ONNX models compiled with
--maccel=cpu and checked against onnxruntime on fresh random data."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import tcc

RNG = np.random.default_rng()


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                          [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def cpu_steps(sess):
    return [s for s in sess.manifest["plan"] if s.get("accelerator") == "cpu"]


def host_steps(sess):
    return [s for s in sess.manifest["plan"] if s.get("kind") == "host"]


def run_both(m, feeds, tmp_path=None, all_cpu=True):
    import onnxruntime as ort
    out = None if tmp_path is None else str(tmp_path / "m.tcc")
    sess = tcc.load(tcc.compile(m, maccel=["cpu"], output=out))
    if all_cpu:
        assert cpu_steps(sess) and not host_steps(sess), sess.manifest["plan"]
    ours = sess.run(feeds)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return ours, ref, sess


def check(m, feeds, rtol=1e-4, atol=1e-5, **kw):
    ours, ref, sess = run_both(m, feeds, **kw)
    for a, b in zip(ours, ref):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    return sess
