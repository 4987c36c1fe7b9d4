"""The plugin contract as users meet it: discovery through entry points,
--maccel, two-phase options, bad plugins, tcc-opt with accelerator passes."""
import subprocess

import onnx
import pytest

from tcc import samples

from ..conftest import assert_one_line_error, tool
from .fake_plugins import env_with, make_plugin_dir


def run(root, name, *args, input=None):
    return subprocess.run([tool(name), *map(str, args)], capture_output=True, text=True, input=input,
                          env=env_with(root), timeout=300)


@pytest.fixture
def site(tmp_path):
    return make_plugin_dir(tmp_path, {
        "alpha": {"takes": ["onnx.Conv", "onnx.Relu"]},
        "beta": {"takes": ["onnx.Relu", "onnx.Gemm", "onnx.MaxPool"]},
        "broken": {"broken": True},
        "oldapi": {"api": "0.3"},
        "crashy": {"raise_in_hook": True},
    })


@pytest.fixture
def model(tmp_path):
    p = tmp_path / "cnn.onnx"
    onnx.save(samples.cnn(seed=3), p)
    return p


def test_list_accelerators(site):
    r = run(site, "tcc", "--list-accelerators")
    assert r.returncode == 0, r.stderr
    lines = {l.split()[0]: l for l in r.stdout.splitlines()[1:]}
    assert "2.5" in lines["alpha"] and "tcc-test-accel-alpha 1.0" in lines["alpha"] and "1.0" in lines["alpha"]
    assert "broken" in lines["broken"].split("--")[1]


def test_unknown_accelerator_lists_installed(site, model):
    err = assert_one_line_error(run(site, "tcc", "--maccel=gamma", model), "unknown accelerator 'gamma'")
    assert "alpha" in err and "beta" in err


def test_broken_plugin_is_named_and_isolated(site, model):
    assert_one_line_error(run(site, "tcc", "--maccel=broken", "--emit=onnx-ir", model),
                          "accelerator 'broken'", "failed to load", "broken on purpose")
    ok = run(site, "tcc", "--maccel=alpha", "--emit=onnx-ir", model)
    assert ok.returncode == 0, ok.stderr


def test_api_version_mismatch_names_both(site, model):
    assert_one_line_error(run(site, "tcc", "--maccel=oldapi", "--emit=onnx-ir", model), "oldapi", "0.3", "1.0")


def test_exception_in_hook_is_named(site, model):
    assert_one_line_error(run(site, "tcc", "--maccel=crashy", "--emit=onnx-ir", model),
                          "accelerator 'crashy'", "tcc_supports_op", "boom")


def test_plugin_options_exist_only_when_selected(site, model):
    r = run(site, "tcc", "--maccel=alpha", "--alpha-threshold=7", "--emit=onnx-ir", model)
    assert r.returncode == 0, r.stderr
    assert_one_line_error(run(site, "tcc", "--alpha-threshold=7", "--emit=onnx-ir", model), "alpha-threshold")
    assert_one_line_error(run(site, "tcc", "--maccel=alpha", "--alpha-threshold=many", "--emit=onnx-ir", model),
                          "many")


def test_tcc_opt_has_accelerator_passes_only_with_maccel(site, model):
    text = run(site, "tcc", "--emit=onnx-ir", model).stdout
    r = run(site, "tcc-opt", "--maccel=alpha", "--pass", "alpha-mark", input=text)
    assert r.returncode == 0, r.stderr
    assert "tcc.alpha" in r.stdout
    assert_one_line_error(run(site, "tcc-opt", "--pass", "alpha-mark", input=text), "unknown pass 'alpha-mark'")


def test_placement_report_and_priority(site, model):
    r = run(site, "tcc", "--maccel=alpha", "--maccel=beta", "--emit=onnx-ir", "--placement-report", model)
    assert r.returncode == 0, r.stderr
    report = {l.split()[0]: l for l in r.stderr.splitlines()[1:-1]}
    relus = [l for l in report.values() if "onnx.Relu" in l]
    assert relus and all("-> alpha" in l for l in relus)  # alpha first: it wins the Relus
    assert any("onnx.Gemm" in l and "-> beta" in l for l in report.values())
    gap = [l for l in report.values() if "onnx.GlobalAveragePool" in l][0]
    assert "-> host" in gap and "alpha: op unsupported" in gap and "beta: op unsupported" in gap
    r2 = run(site, "tcc", "--maccel=beta", "--maccel=alpha", "--emit=onnx-ir", "--placement-report", model)
    relus2 = [l for l in r2.stderr.splitlines() if "onnx.Relu" in l]
    assert relus2 and all("-> beta" in l for l in relus2)
    assert '"func.call"' in r.stdout and 'tcc.accelerator = "alpha"' in r.stdout


def test_strict_fails_on_fallback(site, model, tmp_path):
    out = tmp_path / "x.mlir"
    assert_one_line_error(run(site, "tcc", "--maccel=alpha", "--strict", "--emit=onnx-ir", "-o", out, model),
                          "--strict", "host", "op unsupported")
    assert not out.exists()


def test_placement_dot(site, model, tmp_path):
    out = tmp_path / "p.dot"
    r = run(site, "tcc", "--maccel=alpha", "--emit=placement-dot", "-o", out, model)
    assert r.returncode == 0, r.stderr
    dot = out.read_text()
    assert dot.startswith("digraph") and "cluster_" in dot and "(alpha)" in dot
