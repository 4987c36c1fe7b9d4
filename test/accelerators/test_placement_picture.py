"""The placement picture and the report's summary: partitions per
accelerator, copies and bytes moved per run, host ops grouped by reason;
`--emit=placement-svg` through Graphviz, with a one-line message naming what
to install when `dot` is missing."""
import os
import shutil
import xml.etree.ElementTree as ET

import onnx
import pytest
from onnx import TensorProto, helper

from tcc import samples
from tcc.driver.placement_report import copies, dot, summary, svg

from ..conftest import assert_one_line_error, run_tool
from .test_placement import Plugin, place  # noqa: F401 - the in-process placement fixture


def sandwich(n=4):
    """Relu (alpha) -> Softmax (host) -> Relu (alpha): two partitions, four copies."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"), helper.make_node("Softmax", ["a"], ["b"], name="sm"),
             helper.make_node("Relu", ["b"], ["y"], name="r2")]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 18)])


def test_summary_counts_partitions_copies_and_reasons(place):  # noqa: F811
    n = 6
    m = place(sandwich(n), Plugin("alpha", {"onnx.Relu"}))
    devices = {"alpha": "alpha"}  # alpha has memory of its own
    cps = copies(m, devices)
    assert sorted((a, b) for a, b, _ in cps) == [("alpha", "host"), ("alpha", "host"), ("host", "alpha"),
                                                  ("host", "alpha")]
    assert all(nb == n * n * 4 for _, _, nb in cps)
    text = "\n".join(summary(m, devices))
    assert "partitions: alpha 2" in text
    assert f"copies per run: 4 (alpha->host 2, host->alpha 2), {4 * n * n * 4:,} bytes" in text
    assert "left on the host: 1 op" in text and "1 x alpha: op unsupported: Softmax 1" in text
    # On the host's own memory (as cpu is) nothing is copied.
    assert copies(m, {"alpha": "cpu"}) == []


def test_dot_boxes_partitions_and_labels_copies(place):  # noqa: F811
    n = 5
    m = place(sandwich(n), Plugin("alpha", {"onnx.Relu"}))
    text = dot(m, {"alpha": "alpha"})
    assert text.count("subgraph cluster_") == 2 and text.count("(alpha)") >= 2
    assert text.count(f'label="copy {n * n * 4:,} B"') == 4


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz's dot program (apt-get install graphviz)")
def test_svg_draws_the_copies(place):  # noqa: F811
    m = place(sandwich(5), Plugin("alpha", {"onnx.Relu"}))
    picture = svg(m, {"alpha": "alpha"})
    root = ET.fromstring(picture)
    assert root.tag.endswith("svg")
    assert sum(1 for e in root.iter() if e.tag.endswith("text") and (e.text or "").startswith("copy ")) == 4


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz's dot program (apt-get install graphviz)")
def test_cli_placement_svg(tmp_path):
    onnx.save(samples.cnn(seed=3), tmp_path / "cnn.onnx")
    out = tmp_path / "p.svg"
    r = run_tool("tcc", "--maccel=cpu", "--emit=placement-svg", tmp_path / "cnn.onnx", "-o", out)
    assert r.returncode == 0, r.stderr
    root = ET.fromstring(out.read_bytes())
    assert any("(cpu)" in (e.text or "") for e in root.iter())


def test_cli_placement_svg_missing_dot(tmp_path):
    onnx.save(samples.cnn(seed=3), tmp_path / "cnn.onnx")
    env = dict(os.environ, PATH=str(tmp_path / "empty"))  # no dot on PATH
    import subprocess
    import sys
    r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "tcc"), "--maccel=cpu",
                        "--emit=placement-svg", str(tmp_path / "cnn.onnx"), "-o", str(tmp_path / "q.svg")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert_one_line_error(r, "dot", "apt-get install graphviz")
    assert not (tmp_path / "q.svg").exists()


def test_cli_report_ends_with_summary(tmp_path):
    onnx.save(samples.cnn(seed=3), tmp_path / "cnn.onnx")
    r = run_tool("tcc", "--maccel=cpu", "--emit=onnx-ir", "--placement-report", tmp_path / "cnn.onnx")
    assert r.returncode == 0, r.stderr
    tail = r.stderr.splitlines()[-4:]
    assert tail[0] == "summary" and tail[1].startswith("  partitions: cpu ")
    assert tail[2] == "  copies per run: 0, 0 bytes"  # cpu computes in host memory
