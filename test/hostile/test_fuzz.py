"""Bounded fuzzing of the IR parser, the ONNX importer and the artifact
loader (derandomized: the same inputs every run, about a minute in all), and
the replay of every input kept in fuzz_corpus/. `make fuzz` runs the long,
randomized search (run_fuzz.py). A crash is anything but success or the
documented one-line error: see fuzzing.py."""
import os

import pytest
from hypothesis import HealthCheck, given, settings

from . import fuzzing

EXAMPLES = {"ir": 1000, "onnx": 1000, "artifact": 800}  # ~50 inputs/s: about a minute in all


@pytest.fixture(scope="module")
def worker():
    w = fuzzing.Worker()
    yield w
    w.close()


@pytest.mark.parametrize("target", sorted(EXAMPLES))
def test_fuzz_bounded(worker, target):
    @settings(max_examples=EXAMPLES[target], derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(fuzzing.STRATEGIES[target]())
    def run(data):
        fuzzing.check(worker, target, data)
    run()


@pytest.mark.parametrize("path", [p for t in sorted(EXAMPLES) for p in fuzzing.corpus(t)],
                         ids=lambda p: "/".join(p.split(os.sep)[-2:]))
def test_corpus_replay(worker, path):
    target = os.path.basename(os.path.dirname(path))
    with open(path, "rb") as f:
        fuzzing.check(worker, target, f.read())


def test_a_crash_is_detected(worker):
    # the harness itself: a target input that kills the worker is a crash,
    # and the worker comes back for the next input
    status, detail = worker.run("ir", b"")
    assert status in ("ok", "error"), detail
    status, detail = worker.run("nosuchtarget", b"x")
    assert status == "crash" and "KeyError" in detail
    assert worker.run("ir", b"\xff")[0] == "error"
