"""The layering docs/ARCHITECTURE.md promises, checked in fresh interpreters:
the IR core imports no dialect, importing a dialect or lowering registers
nothing, the runtime never imports the driver, and session, executor and
specialize do not import each other."""
import ast
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _fresh(code):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_ir_core_imports_no_dialect():
    loaded = _fresh("import json, sys, tcc.dialects.ir\n"
                    "print(json.dumps(sorted(m for m in sys.modules if m.startswith('tcc.'))))")
    assert loaded and all(m.startswith("tcc.dialects.ir") or m in ("tcc.dialects",) for m in loaded), loaded
    # Not even lazily, inside a function: nothing outside dialects/ir.
    core = os.path.join(REPO, "dialects", "ir")
    for name in sorted(os.listdir(core)):
        if not name.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(open(os.path.join(core, name)).read())):
            if isinstance(node, ast.ImportFrom):
                outside = node.level > 1 or (node.level == 0 and (node.module or "").startswith("tcc.")
                                              and not node.module.startswith("tcc.dialects.ir"))
                assert not outside, f"dialects/ir/{name}:{node.lineno} imports {'.' * node.level}{node.module}"
            elif isinstance(node, ast.Import):
                bad = [a.name for a in node.names if a.name.startswith("tcc.")]
                assert not bad, f"dialects/ir/{name}:{node.lineno} imports {bad}"


def test_importing_dialects_and_lowerings_registers_nothing():
    got = _fresh("""
import json
from tcc.dialects.ir import Context
from tcc.dialects import builtin
from tcc.dialects.onnx import dialect
from tcc.dialects.loop import ops
from tcc.dialects.graph import ops as graph_ops
from tcc.dialects.conversions.graph_to_loop import populate
from tcc.dialects.loop import transforms
from tcc.dialects.conversions.graph_to_loop import registry
ctx = Context()
assert not any(isinstance(v, dict) and v for k, v in vars(registry).items() if not k.startswith("__")), "a global table"
from tcc.dialects.init_all import default_context
d = default_context()
print(json.dumps([sorted(ctx.dialects), sorted(ctx.passes), len(ctx.lowerings),
                  sorted(d.dialects), len(d.passes), len(d.lowerings)]))
""")
    fresh_dialects, fresh_passes, fresh_lowerings, dialects, npasses, nlowerings = got
    assert (fresh_dialects, fresh_passes, fresh_lowerings) == ([], [], 0)
    assert {"builtin", "func", "graph", "loop", "arith", "math", "onnx"} <= set(dialects)
    assert npasses >= 16 and nlowerings >= 160, got


def test_runtime_never_imports_the_driver():
    loaded = _fresh("import json, sys\n"
                    "import tcc.runtime.loader, tcc.runtime.specialize, tcc.runtime.executor, tcc.runtime.session\n"
                    "print(json.dumps(sorted(m for m in sys.modules if m.startswith('tcc.driver'))))")
    assert loaded == [], loaded


def _relative_imports(path):
    tree = ast.parse(open(path).read())
    return {(node.module or "").split(".")[0] for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1}


def test_no_import_circle_among_session_executor_specialize():
    three = ("session", "executor", "specialize")
    for name in three:
        others = _relative_imports(os.path.join(REPO, "runtime", name + ".py")) & set(three)
        assert not others, f"runtime/{name}.py imports {sorted(others)}"
