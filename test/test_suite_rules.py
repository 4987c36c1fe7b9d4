"""The suite's own rules (test/conftest.py), checked: every test's data comes
from the session seed, the same alone, in any order and on any worker; a
failure names the seed that reproduces it; no test draws from an unseeded
generator."""
import ast
import os
import re
import subprocess
import sys
import textwrap

import pytest

TEST_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TEST_DIR)

PROBE = textwrap.dedent("""
    import numpy as np
    G = np.random.default_rng()  # module level: reseeded per test
    def test_a(rng): print("A", rng.random(), G.random())
    def test_b(rng): print("B", rng.random(), G.random())
    def test_fail(): assert False
""")


def _pytest(path, *args, env=None):
    # the probe's own folder is its rootdir, so node ids read test_probe.py::...
    # wherever the checkout is (a clone under /tmp made /tmp the rootdir)
    cmd = [sys.executable, "-m", "pytest", "-p", "test.conftest", "-p", "no:cacheprovider", "-s",
           f"--rootdir={os.path.dirname(str(path[0]))}", *args]
    return subprocess.run(cmd + [str(a) for a in path], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, **(env or {})})


def _draws(out):
    return dict(m.groups() for m in re.finditer(r"^(?:.*?)([AB]) (.+)$", out, re.M))


def test_seeded_alone_in_any_order_and_reported(tmp_path):
    f = tmp_path / "test_probe.py"
    f.write_text(PROBE)
    both = _pytest([f], "--seed=7")
    assert both.returncode == 1, both.stdout + both.stderr
    assert "tcc test seed: 7 " in both.stdout
    # the failure says how to rerun it alone with the same data
    assert re.search(r"--seed=7 'test_probe.py::test_fail'", both.stdout), both.stdout
    want = _draws(both.stdout)
    assert set(want) == {"A", "B"}, both.stdout
    # alone, reversed, and from the environment: the same numbers per test
    alone = _draws(_pytest([f"{f}::test_b"], "--seed=7").stdout)
    reverse = _draws(_pytest([f"{f}::test_b", f"{f}::test_a"], env={"TCC_TEST_SEED": "7"}).stdout)
    assert alone == {"B": want["B"]}
    assert reverse == want
    # another seed, other numbers; no seed, a fresh one printed
    other = _draws(_pytest([f], "--seed=8").stdout)
    assert other.keys() == want.keys() and other != want
    fresh = _pytest([f])
    seed = re.search(r"tcc test seed: (\d+) ", fresh.stdout)
    assert seed, fresh.stdout
    assert _draws(_pytest([f], f"--seed={seed.group(1)}").stdout) == _draws(fresh.stdout)


def test_workers_share_the_seed_and_report_it(tmp_path):
    f = tmp_path / "test_probe.py"
    f.write_text(PROBE)
    r = _pytest([f], "--seed=11", "-n", "2")
    assert r.returncode == 1 and "tcc test seed: 11 " in r.stdout, r.stdout + r.stderr
    assert "--seed=11 'test_probe.py::test_fail'" in r.stdout, r.stdout


def test_bad_seed_is_a_usage_error(tmp_path):
    f = tmp_path / "test_probe.py"
    f.write_text(PROBE)
    r = _pytest([f], env={"TCC_TEST_SEED": "x1"})
    assert r.returncode == 4 and "TCC_TEST_SEED='x1': not an integer" in r.stderr, r.stdout + r.stderr


def test_cache_dir_is_this_runs_own():
    cache = os.environ["TCC_CACHE_DIR"]
    assert os.path.basename(cache.rstrip(os.sep)).startswith(("tcc-test-cache-", "gw")), cache
    assert os.path.realpath(cache) != os.path.realpath(os.path.expanduser("~/.cache/tcc"))
    from tcc.runtime import cache as compile_cache
    assert compile_cache.artifacts_dir().startswith(cache)


def _unseeded_calls(path):
    """(line, text) of each `default_rng()` with no seed inside a function,
    and each call of numpy's legacy global generator (np.random.rand, seed...)."""
    tree = ast.parse(open(path).read(), path)
    bad = []

    class V(ast.NodeVisitor):
        depth = 0

        def visit_FunctionDef(self, node):
            self.depth += 1
            self.generic_visit(node)
            self.depth -= 1
        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Call(self, node):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            owner = ast.unparse(fn.value) if isinstance(fn, ast.Attribute) else ""
            if name == "default_rng" and not node.args and not node.keywords and self.depth:
                bad.append((node.lineno, ast.unparse(node)))
            elif owner in ("np.random", "numpy.random") and name in (
                    "seed", "rand", "randn", "randint", "random", "uniform", "normal", "choice", "permutation",
                    "shuffle", "standard_normal", "integers"):
                bad.append((node.lineno, ast.unparse(node)))
            self.generic_visit(node)
    V().visit(tree)
    return bad


def test_no_unseeded_generators():
    """Inside a test use the `rng` fixture; a module-level generator is
    reseeded per test by conftest.py, one made in a function would not be."""
    found = []
    for root, _, files in os.walk(TEST_DIR):
        for fn in files:
            if fn.endswith(".py"):
                p = os.path.join(root, fn)
                found += [f"{os.path.relpath(p, REPO)}:{ln}: {txt}" for ln, txt in _unseeded_calls(p)]
    assert not found, "unseeded random data (use the rng fixture):\n" + "\n".join(found)


def test_the_rule_sees_an_unseeded_call(tmp_path):
    p = tmp_path / "t.py"
    p.write_text("import numpy as np\nR = np.random.default_rng()\ndef f():\n    g = np.random.default_rng()\n"
                 "    np.random.seed(1)\n    return np.random.default_rng(3)\n")
    assert [ln for ln, _ in _unseeded_calls(str(p))] == [4, 5]


def test_a_thread_limit_does_not_outlive_its_test_1():
    from tcc.accelerators.cpu import build
    lib = build.load_kernels()
    assert lib.tcc_cpu_num_threads() == (int(os.environ.get("TCC_NUM_THREADS", 0)) or os.cpu_count())
    lib.tcc_cpu_set_num_threads(1)  # left behind on purpose


def test_a_thread_limit_does_not_outlive_its_test_2():
    test_a_thread_limit_does_not_outlive_its_test_1()  # in either order, the other's limit is gone
