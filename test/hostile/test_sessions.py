"""The promises `make bench-soak` measures at scale, checked small here: a
session survives its artifact being deleted or replaced after load, threads
sharing a session get the single-thread results, and two processes racing to
one output path leave one complete artifact."""
import os
import subprocess
import threading

import numpy as np
import onnx
import pytest

import tcc
from tcc import samples

from ..conftest import tool


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    d = tmp_path_factory.mktemp("s")
    paths = []
    for seed in (1, 2):
        m = str(d / f"mlp{seed}.onnx")
        onnx.save(samples.mlp(seed=seed), m)
        paths.append((m, tcc.compile(m, output=str(d / f"mlp{seed}.tcc"))))
    return d, paths


def _x(sess, rng):
    return {s["name"]: rng.standard_normal(s["shape"]).astype(s["dtype"]) for s in sess.input_signature}


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_session_outlives_its_artifact_file(two, tmp_path, how, rng):
    d, [(_, a1), (_, a2)] = two
    p = tmp_path / "m.tcc"
    p.write_bytes(open(a1, "rb").read())
    sess = tcc.load(str(p))
    x = _x(sess, rng)
    want = [o.copy() for o in sess.run(x)]
    if how == "deleted":
        p.unlink()
    else:
        (tmp_path / "new").write_bytes(open(a2, "rb").read())
        os.replace(tmp_path / "new", p)
    for _ in range(5):
        for g, w in zip(sess.run(x), want):
            np.testing.assert_array_equal(g, w)
    assert not np.array_equal(tcc.load(a2).run(x)[0], want[0])  # the replacement really differs


def test_threads_on_one_session_match_one_thread(two, rng):
    _, [(_, a1), _] = two
    sess = tcc.load(a1)
    feeds = [_x(sess, rng) for _ in range(8)]
    want = [sess.run(f)[0].copy() for f in feeds]
    bad = []

    def work(k):
        for j in range(40):
            i = (k + j) % len(feeds)
            if not np.array_equal(sess.run(feeds[i])[0], want[i]):
                bad.append(i)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad


def test_racing_compiles_leave_one_complete_artifact(two, tmp_path, rng):
    _, [(m1, a1), (m2, a2)] = two
    out = tmp_path / "race.tcc"
    procs = [subprocess.Popen([tool("tcc"), "--maccel=host", m, "-o", str(out)], stderr=subprocess.PIPE) for m in (m1, m2)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    sess = tcc.load(str(out))
    x = _x(sess, rng)
    got = sess.run(x)[0]
    assert [np.array_equal(got, tcc.load(a).run(x)[0]) for a in (a1, a2)].count(True) == 1
    assert os.listdir(tmp_path) == ["race.tcc"]
