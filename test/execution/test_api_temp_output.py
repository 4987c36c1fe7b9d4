"""`tcc.compile(ModelProto)` with no `output` writes to a temporary
directory that must be gone when the process exits (it once stayed in /tmp
for good, one directory a call)."""
import os
import subprocess
import sys

import numpy as np

SCRIPT = r"""
import sys, numpy as np, tcc
from onnx import TensorProto, helper
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
x = np.frombuffer(bytes.fromhex(sys.argv[1]), np.float32).reshape(2, 3)
paths = [tcc.compile(m, cache=False) for _ in range(3)]
for p in paths:
    print(p, *tcc.load(p).run({"x": x})[0].ravel())
"""


def test_proto_artifacts_removed_at_exit(tmp_path, rng):
    x = rng.standard_normal(6).astype(np.float32)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    r = subprocess.run([sys.executable, "-c", SCRIPT, x.tobytes().hex()], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "TMPDIR": str(scratch), "TCC_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stderr
    lines = [ln.split() for ln in r.stdout.splitlines()]
    assert len(lines) == 3 and len({ln[0] for ln in lines}) == 3, r.stdout
    for ln in lines:
        assert ln[0].startswith(str(scratch)), ln[0]
        np.testing.assert_array_equal(np.array(ln[1:], np.float32), np.maximum(x, 0))
    assert not any(p.name.startswith("tcc-") for p in scratch.iterdir()), sorted(scratch.iterdir())


FORK = r"""
import os, sys, numpy as np, tcc
from onnx import TensorProto, helper
g = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
p = tcc.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), cache=False)
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a forked child leaving normally runs the inherited atexit handlers
os.waitpid(pid, 0)
x = np.frombuffer(bytes.fromhex(sys.argv[1]), np.float32)
print(os.path.exists(p), *tcc.load(p).run({"x": x})[0])
"""


def test_forked_child_leaves_the_parents_artifact(tmp_path, rng):
    x = rng.standard_normal(4).astype(np.float32)
    r = subprocess.run([sys.executable, "-c", FORK, x.tobytes().hex()], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TMPDIR": str(tmp_path), "TCC_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stderr
    exists, *y = r.stdout.split()
    assert exists == "True"
    np.testing.assert_array_equal(np.array(y, np.float32), -x)
