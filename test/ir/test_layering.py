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


def _module_imports(folder):
    """{module: modules of `folder` it imports (relatively, also inside functions)}, __init__ left out."""
    graph = {}
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py") or name == "__init__.py":
            continue
        deps = set()
        for node in ast.walk(ast.parse(open(os.path.join(folder, name)).read())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        graph[name[:-3]] = deps
    return graph


def test_no_import_circle_inside_the_in_tree_accelerators():
    for accel in ("cpu", "gpu"):
        graph = _module_imports(os.path.join(REPO, "accelerators", accel))

        def visit(mod, path):
            for dep in graph.get(mod, ()):
                assert dep not in path, f"accelerators/{accel}: import circle {' -> '.join(path + [dep])}"
                visit(dep, path + [dep])
        for mod in graph:
            visit(mod, [mod])


def test_one_c_renderer_for_the_cpu_and_gpu_codegens():
    """Both C-generating accelerators render scalar ops through the shared
    renderer (dialects/conversions/loop_to_native/cstyle.py): each has a
    CStyleLanguage subclass, and none of their modules has a table of its own
    from arith/math op kinds to C (a dict literal keyed by those kinds; a
    language's `intrinsics` override is the one exception)."""
    from tcc.dialects.conversions.loop_to_native import cstyle
    kinds = (set(cstyle.LIBM) | set(cstyle.BINARY_FLOAT) | set(cstyle.BINARY_INT) | set(cstyle.CMPI)
             | set(cstyle.CMPF_ORDERED) | set(cstyle.SIGNED_OPS) | set(cstyle.SHIFTS) | {"negf", "select", "cmpf"})
    for accel, module in (("cpu", "elementwise"), ("gpu", "codegen")):
        tree = ast.parse(open(os.path.join(REPO, "accelerators", accel, module + ".py")).read())
        subclasses = [c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                      and any(getattr(b, "id", None) == "CStyleLanguage" for b in c.bases)]
        assert subclasses, f"accelerators/{accel}/{module}.py has no CStyleLanguage subclass"
    for accel in ("cpu", "gpu"):
        folder = os.path.join(REPO, "accelerators", accel)
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".py"):
                continue
            tree = ast.parse(open(os.path.join(folder, name)).read())
            allowed = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                       and any(getattr(t, "id", None) == "intrinsics" for t in n.targets)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Dict) and id(node) not in allowed:
                    keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                    assert len(keys & kinds) < 2, \
                        f"accelerators/{accel}/{name}:{node.lineno} maps scalar op kinds {sorted(keys & kinds)} itself"
