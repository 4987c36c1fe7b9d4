"""Plugins that raise, hang or return garbage from any hook are named in a
one-line error, a hang is bounded (TCC_HOOK_TIMEOUT), and a compile that did
not select them is untouched."""
import inspect
import subprocess
import sys
import textwrap
import time

import numpy as np
import onnx
import pytest

from tcc.accelerators import API_VERSION, AcceleratorInfo, hookimpl, hookspecs
from tcc.accelerators.manager import _RESULTS, Accelerator, AcceleratorError

from ..conftest import assert_one_line_error, tool
from .models import reference, relu_model

HOOKS = sorted(n for n, f in vars(hookspecs).items() if n.startswith("tcc_") and callable(f))


def _plugin(hook, behaviour):
    """A plugin object whose `hook` raises, hangs or returns garbage; it
    answers tcc_accelerator_info properly unless that is the hook under test."""
    def bad(*_args, **_kwargs):
        if behaviour == "raise":
            raise RuntimeError("boom from the plugin")
        if behaviour == "exit":
            sys.exit(7)
        if behaviour == "hang":
            while True:
                try:
                    time.sleep(0.05)
                except Exception:  # a plugin swallowing exceptions must not defeat the timeout
                    pass
        return object()  # garbage: no hook's contract allows a bare object

    params = list(inspect.signature(getattr(hookspecs, hook)).parameters)
    ns = {}
    exec(f"def {hook}({', '.join(params)}):\n    return bad()", {"bad": bad}, ns)
    attrs = {hook: staticmethod(hookimpl(ns[hook]))}
    if hook != "tcc_accelerator_info":
        attrs["tcc_accelerator_info"] = staticmethod(hookimpl(
            lambda: AcceleratorInfo("evil", "1.0", API_VERSION, "misbehaves on purpose")))
    return type("Evil", (), attrs)()


def _call(hook, plugin):
    acc = Accelerator("evil", plugin)  # calls tcc_accelerator_info
    args = {p: None for p in inspect.signature(getattr(hookspecs, hook)).parameters}
    return acc.call(hook, **args)


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("behaviour", ["raise", "exit", "hang"])
def test_any_hook_raising_or_hanging_is_named(hook, behaviour, monkeypatch):
    monkeypatch.setenv("TCC_HOOK_TIMEOUT", "0.3")
    t0 = time.perf_counter()
    with pytest.raises(AcceleratorError) as e:
        _call(hook, _plugin(hook, behaviour))
    msg = str(e.value)
    assert "accelerator 'evil'" in msg and hook in msg and "\n" not in msg, msg
    assert ("did not return within 0.3 s" if behaviour == "hang" else "failed") in msg, msg
    assert time.perf_counter() - t0 < 30


@pytest.mark.parametrize("hook", sorted(_RESULTS))
def test_any_hook_returning_garbage_is_named(hook):
    with pytest.raises(AcceleratorError, match=f"accelerator 'evil': hook {hook} returned object"):
        _call(hook, _plugin(hook, "garbage"))


def test_every_hook_with_a_result_has_a_contract_check():
    used = {n for n in HOOKS if n not in ("tcc_register_dialects", "tcc_register_passes",
                                         "tcc_configure_passes", "tcc_add_passes", "tcc_device_manager_factory",
                                         "tcc_register_lowerings")}
    assert used <= set(_RESULTS)


SITE_PLUGIN = '''
import time
from tcc.accelerators import API_VERSION, AcceleratorInfo, Support, hookimpl

@hookimpl
def tcc_accelerator_info():
    {info}
    return AcceleratorInfo("{name}", "1.0", API_VERSION, "test")

@hookimpl
def tcc_supports_op(op, module):
    {supports}
'''


def _site(tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    plugins = {
        "hangs": ("pass", "time.sleep(3600)"),
        "garbage": ("pass", "return 42"),
        "raises": ("pass", "raise KeyError('nope')"),
        "hangsatinfo": ("time.sleep(3600)", "return Support.yes()"),
    }
    for name, (info, supports) in plugins.items():
        mod = f"tcc_hostile_{name}"
        (root / f"{mod}.py").write_text(textwrap.dedent(SITE_PLUGIN).format(name=name, info=info, supports=supports))
        d = root / f"{mod}-1.0.dist-info"
        d.mkdir()
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {mod}\nVersion: 1.0\n")
        (d / "entry_points.txt").write_text(f"[tcc.accelerators]\n{name} = {mod}\n")
    # a plugin whose import hangs
    (root / "tcc_hostile_importhang.py").write_text("import time\ntime.sleep(3600)\n")
    d = root / "tcc_hostile_importhang-1.0.dist-info"
    d.mkdir()
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: tcc_hostile_importhang\nVersion: 1.0\n")
    (d / "entry_points.txt").write_text("[tcc.accelerators]\nimporthang = tcc_hostile_importhang\n")
    return root


def _run(root, *args, timeout_s="2"):
    import os
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TCC_HOOK_TIMEOUT=timeout_s)
    return subprocess.run([tool("tcc"), *map(str, args)], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def site_and_model(tmp_path):
    m = tmp_path / "m.onnx"
    onnx.save(relu_model(), m)
    return _site(tmp_path), m


@pytest.mark.parametrize("name,needles", [
    ("hangs", ["accelerator 'hangs'", "tcc_supports_op", "did not return within 2 s"]),
    ("hangsatinfo", ["accelerator 'hangsatinfo'", "tcc_accelerator_info", "did not return within 2 s"]),
    ("importhang", ["accelerator 'importhang'", "did not finish loading within 2 s"]),
    ("garbage", ["accelerator 'garbage'", "tcc_supports_op returned int 42"]),
    ("raises", ["accelerator 'raises'", "tcc_supports_op failed", "KeyError"]),
])
def test_cli_names_the_bad_plugin_and_is_bounded(site_and_model, name, needles):
    root, model = site_and_model
    t0 = time.perf_counter()
    r = _run(root, f"--maccel={name}", model, "-o", model.with_suffix(".tcc"))
    assert time.perf_counter() - t0 < 60
    assert_one_line_error(r, *needles)
    assert not model.with_suffix(".tcc").exists()


def test_unselected_bad_plugins_change_nothing(site_and_model, rng):
    import tcc
    root, model = site_and_model
    for extra in ([], ["--maccel=cpu"]):
        out = model.with_name(f"m{len(extra)}.tcc")
        r = _run(root, *extra, model, "-o", out)
        assert r.returncode == 0, r.stderr
        x = rng.standard_normal(8).astype(np.float32)
        np.testing.assert_array_equal(tcc.load(str(out)).run({"x": x})[0], reference(relu_model(), {"x": x})[0])
    r = _run(root, "--list-accelerators")  # loads every plugin: each bad one is listed as broken, bounded
    assert r.returncode == 0, r.stderr
    rows = {l.split()[0]: l for l in r.stdout.splitlines()[1:]}
    for bad in ("hangsatinfo", "importhang"):
        assert "broken" in rows[bad] and "within 2 s" in rows[bad], rows[bad]
