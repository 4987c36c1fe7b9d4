"""Shared test helpers. CLIs are run from this interpreter's environment,
never a `tcc` found on PATH (Debian's Tiny C Compiler is also `tcc`)."""
import os
import subprocess
import sys

import numpy as np
import pytest


def tool(name):
    exe = os.path.join(os.path.dirname(sys.executable), name)
    if not os.path.exists(exe):
        pytest.fail(f"console script {name} not installed beside {sys.executable}")
    return exe


def run_tool(name, *args, input=None, cwd=None):
    return subprocess.run([tool(name), *map(str, args)], input=input, capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.fixture
def rng():
    return np.random.default_rng()


def assert_one_line_error(proc, *needles):
    """Non-zero exit, a single stderr line naming what went wrong, no traceback."""
    assert proc.returncode != 0, proc.stdout
    err = proc.stderr.strip()
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, err
    return err
