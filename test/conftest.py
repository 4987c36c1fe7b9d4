"""Shared test helpers and the suite's reproducibility and isolation rules.

- One session seed, printed first, set with `--seed=N` or
  `TCC_TEST_SEED=N` (a fresh one otherwise; under xdist every worker gets the
  controller's). pytest-randomly shuffles the test order with the same seed
  (`-p no:randomly` keeps the file order). Each test's seed is derived from it and the test's id, so a
  test draws the same data alone, in any order and on any worker; a failing
  test prints the command that reruns it alone with the same data.
- The `rng` fixture is that test's generator; module-level generators of test
  modules (`RNG = np.random.default_rng()` and the like) are reseeded from the
  test's seed before each test, so they need no fixture.
- `TCC_CACHE_DIR` (run-time specializations, GPU cubins) points to a fresh
  directory per run and per worker, removed at the end: no test reuses native
  code an earlier run or another worker compiled.

CLIs are run from this interpreter's environment, never a `tcc` found on PATH
(Debian's Tiny C Compiler is also `tcc`)."""
import hashlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

SEED_ENV = "TCC_TEST_SEED"
TEST_DIR = os.path.dirname(os.path.abspath(__file__))
_state = {"seed": None, "cache": None, "owns_cache": False}


def pytest_addoption(parser):
    parser.addoption("--seed", type=int, default=None,
                     help=f"the session seed every test's random data derives from (or ${SEED_ENV}; "
                          "default: a fresh one, printed in the header)")


def _session_seed(config):
    wi = getattr(config, "workerinput", None)
    if wi is not None and "tcc_seed" in wi:
        return int(wi["tcc_seed"])
    seed = config.getoption("--seed")
    if seed is None:
        env = os.environ.get(SEED_ENV, "").strip()
        if env:
            try:
                seed = int(env)
            except ValueError:
                raise pytest.UsageError(f"{SEED_ENV}={env!r}: not an integer") from None
        else:
            rs = getattr(config.option, "randomly_seed", "default")
            seed = rs if isinstance(rs, int) else secrets.randbits(32)
    return seed


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    _state["seed"] = _session_seed(config)
    if getattr(config.option, "randomly_seed", None) == "default":
        # pytest-randomly (the test order) takes the same seed: one number repeats a run
        config.option.randomly_seed = _state["seed"]
    wi = getattr(config, "workerinput", None)
    if wi is not None and "tcc_cache_root" in wi:
        # each worker its own directory: the specialization cache writes files in place
        cache = os.path.join(wi["tcc_cache_root"], wi.get("workerid", "w"))
    else:
        cache = tempfile.mkdtemp(prefix="tcc-test-cache-")
        _state["owns_cache"] = True
    _state["cache"] = cache
    os.makedirs(cache, exist_ok=True)
    # set before any test module imports tcc (accelerators.gpu.runtime reads it at import)
    os.environ["TCC_CACHE_DIR"] = cache


def pytest_unconfigure(config):
    if _state["owns_cache"] and _state["cache"]:
        shutil.rmtree(_state["cache"], ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist controller: every worker uses the controller's seed and cache root."""
    node.workerinput["tcc_seed"] = _state["seed"]
    node.workerinput["tcc_cache_root"] = _state["cache"]


def pytest_sessionstart(session):
    """The seed line, printed even under -q (the header is not)."""
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None and getattr(session.config, "workerinput", None) is None:
        order = session.config.pluginmanager.hasplugin("randomly") and \
            session.config.getoption("randomly_seed") == _state["seed"]
        tr.write_line(f"tcc test seed: {_state['seed']} (repeat with --seed={_state['seed']} or {SEED_ENV}"
                      f"{'; it also shuffles the test order' if order else ''}); "
                      f"TCC_CACHE_DIR for this run: {_state['cache']}")


def session_seed():
    return _state["seed"]


def seed_for_test(nodeid):
    """The seed of the test `nodeid` in this session: a 64-bit hash of both."""
    h = hashlib.sha256(f"{_state['seed']}:{nodeid}".encode()).digest()
    return int.from_bytes(h[:8], "little")


seed_for_test.__test__ = False  # a helper, not a test


_generators = {"n_modules": -1, "found": [], "collected": set()}


def pytest_collection_modifyitems(session, config, items):
    _generators["collected"].update(id(it.module) for it in items if getattr(it, "module", None) is not None)
    _generators["n_modules"] = -1


def _module_generators():
    """(module, attribute name) of every np.random.Generator a test module
    (or a helper beside them) holds at module level; rescanned when modules
    were imported since."""
    if len(sys.modules) != _generators["n_modules"]:
        found = []
        for name, mod in list(sys.modules.items()):
            f = getattr(mod, "__file__", None) or ""
            if not f.startswith(TEST_DIR + os.sep) and id(mod) not in _generators["collected"]:
                continue
            for attr, v in list(vars(mod).items()):
                if isinstance(v, np.random.Generator):
                    found.append((mod, attr))
        _generators["found"], _generators["n_modules"] = found, len(sys.modules)
    return _generators["found"]


@pytest.fixture(autouse=True)
def _tcc_test_seed(request):
    """Reseeds every module-level generator of the test modules from this
    test's seed (in place: helpers that imported the object see it too)."""
    seed = seed_for_test(request.node.nodeid)
    for mod, attr in _module_generators():
        g = getattr(mod, attr)
        key = int.from_bytes(hashlib.sha256(f"{mod.__name__}.{attr}".encode()).digest()[:4], "little")
        g.bit_generator.state = type(g.bit_generator)(np.random.SeedSequence([seed, key])).state
    return seed


@pytest.fixture(autouse=True)
def _tcc_background_compiles():
    """A dynamic model's first run at a new shape compiles its
    specialization in the background: each test's compiles finish within it
    (not in the next test's time or against its monkeypatches)."""
    yield
    if "tcc.runtime.specialize" in sys.modules:
        sys.modules["tcc.runtime.specialize"].wait_all()


def _loaded_kernel_libraries():
    """Paths of the cpu accelerator's kernel library builds this process has loaded."""
    if "tcc.accelerators.cpu.build" not in sys.modules:
        return []
    with open("/proc/self/maps") as f:
        return sorted({ln.split()[-1] for ln in f if "libtcc_cpu_" in ln and ln.rstrip().endswith(".so")})


@pytest.fixture(autouse=True)
def _kernel_threads_restored():
    """A test that limits a kernel library's pool (tcc_cpu_set_num_threads)
    leaves it unlimited for the next one, as it is when loaded: later "split
    over threads" tests would otherwise run on one thread."""
    yield
    import ctypes
    for path in _loaded_kernel_libraries():
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL | getattr(os, "RTLD_NOLOAD", 4))
        except OSError:
            continue
        lib.tcc_cpu_set_num_threads(0)


@pytest.fixture
def rng(_tcc_test_seed):
    """This test's generator: the same numbers for the same session seed and test id."""
    return np.random.default_rng(np.random.SeedSequence([_tcc_test_seed, 0]))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        report.sections.append(("tcc test seed", f"rerun alone with the same data: "
                                f"{sys.executable} -m pytest -p no:randomly --seed={_state['seed']} "
                                f"'{item.nodeid}'\n(the whole run in the same order: --seed={_state['seed']})"))
    return report


def tool(name):
    exe = os.path.join(os.path.dirname(sys.executable), name)
    if not os.path.exists(exe):
        pytest.fail(f"console script {name} not installed beside {sys.executable}")
    return exe


def run_tool(name, *args, input=None, cwd=None, env=None):
    return subprocess.run([tool(name), *map(str, args)], input=input, capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def assert_one_line_error(proc, *needles):
    """Non-zero exit, a single stderr line naming what went wrong, no traceback."""
    assert proc.returncode != 0, proc.stdout
    err = proc.stderr.strip()
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, err
    return err
