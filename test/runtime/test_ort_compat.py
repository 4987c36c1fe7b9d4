"""tcc.InferenceSession is onnxruntime's API: a small script written for
onnxruntime runs unchanged but for its import, and prints the same
signature, the same results (to float tolerance) and the same errors."""
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc
from tcc import samples

# Written against onnxruntime's documented API only; the test swaps its import.
SCRIPT = r'''
import json, sys
import numpy as np
import onnxruntime as ort

model, seed = sys.argv[1], int(sys.argv[2])
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
out = {"inputs": [[i.name, i.shape, i.type] for i in sess.get_inputs()],
       "outputs": [[o.name, o.shape, o.type] for o in sess.get_outputs()],
       "providers": sess.get_providers(), "errors": []}
rng = np.random.default_rng(seed)
inp = sess.get_inputs()[0]
shape = [d if isinstance(d, int) else 3 for d in inp.shape]
x = rng.standard_normal(shape).astype(np.float32)
res = sess.run(None, {inp.name: x})
out["results"] = [r.tolist() for r in res]
last = sess.get_outputs()[-1].name
out["named"] = [r.tolist() for r in sess.run([last], {inp.name: x})]
bad_shape = list(shape); bad_shape[-1] += 1
for feeds, names in [({"nope": x}, None), ({inp.name: x, "nope": x}, None), ({inp.name: x.astype(np.float64)}, None),
                     ({inp.name: np.zeros(bad_shape, np.float32)}, None), ({inp.name: x[None]}, None),
                     ({inp.name: x}, ["nope"])]:
    try:
        sess.run(names, feeds)
        out["errors"].append(None)
    except Exception as e:
        msg = str(e).split(" : ")[-1]  # the text after the engine's "[...] : code : KIND :" prefix
        out["errors"].append([type(e).__name__, msg])
print(json.dumps(out))
'''


def run_script(tmp_path, model_path, seed, engine):
    src = SCRIPT if engine == "onnxruntime" else SCRIPT.replace("import onnxruntime as ort", "import tcc as ort")
    assert src != SCRIPT or engine == "onnxruntime"
    script = tmp_path / f"script_{engine}.py"
    script.write_text(src)
    r = subprocess.run([sys.executable, str(script), str(model_path), str(seed)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def dynamic_mlp(rng):
    w = numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Sigmoid", ["a"], ["z"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 5])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("which", ["mlp", "dynamic_mlp", "cnn"])
def test_ort_script_runs_unchanged(tmp_path, rng, monkeypatch, which):
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))
    model = {"mlp": lambda: samples.mlp(seed=int(rng.integers(1 << 30))), "dynamic_mlp": lambda: dynamic_mlp(rng),
             "cnn": lambda: samples.cnn(seed=int(rng.integers(1 << 30)))}[which]()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    seed = int(rng.integers(1 << 30))
    want = run_script(tmp_path, path, seed, "onnxruntime")
    got = run_script(tmp_path, path, seed, "tcc")
    for key in ("inputs", "outputs", "providers", "errors"):
        assert got[key] == want[key], key
    assert want["errors"][0][0] == "ValueError" and want["errors"][2][0] == "InvalidArgument"
    for key in ("results", "named"):
        assert len(got[key]) == len(want[key])
        for g, w in zip(got[key], want[key]):
            np.testing.assert_allclose(np.array(g), np.array(w), rtol=1e-4, atol=1e-5)


def test_bytes_modelproto_and_maccel(tmp_path, rng, monkeypatch):
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))
    import onnxruntime as ort
    m = samples.mlp(seed=7)
    x = rng.standard_normal((1, 784)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    for sess in (tcc.InferenceSession(m.SerializeToString()), tcc.InferenceSession(m, maccel=[]),
                 tcc.InferenceSession(m, providers=["cpu"])):
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)
    assert tcc.InferenceSession(m, maccel=[]).get_providers() == []


def test_session_errors(tmp_path):
    with pytest.raises(tcc.NoSuchFile, match="doesn't exist"):
        tcc.InferenceSession(str(tmp_path / "missing.onnx"))
    with pytest.raises(tcc.InvalidGraph):
        tcc.InferenceSession(b"not a model")
    with pytest.raises(ValueError, match="Unknown Provider Type: FooExecutionProvider"):
        tcc.InferenceSession(samples.mlp(seed=1), providers=["FooExecutionProvider"])
