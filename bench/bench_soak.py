"""Load and soak (`make bench-soak`): a benchmark script, not a timed test.

1. 10,000 run() calls on one session: RSS after them within 5 % of RSS after
   a 500-call warm-up (no leak per call).
2. 4 threads running one session, and 4 sessions of one artifact, at once:
   every output identical (bitwise) to the single-thread output of the same
   input.
3. Two processes compiling different models to one output path at once, 5
   times: the path holds one complete artifact that loads and gives one of
   the two models' outputs; no temporary file is left.
4. A session whose artifact file is deleted, or replaced by another
   artifact, after load keeps giving its own model's outputs.

Prints each measurement and PASS/FAIL; exits 1 when any check fails."""
import os
import subprocess
import sys
import tempfile
import threading

import numpy as np
import onnx

import tcc
from tcc import samples

RUNS, WARMUP, RSS_TOLERANCE = 10_000, 500, 0.05
THREADS, PER_THREAD = 4, 200


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def inputs_for(sess, rng):
    return {s["name"]: rng.standard_normal(s["shape"]).astype(s["dtype"]) for s in sess.input_signature}


results = []


def report(name, ok, detail):
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)


def soak(path, rng):
    sess = tcc.load(path)
    x = inputs_for(sess, rng)
    for _ in range(WARMUP):
        sess.run(x)
    before = rss_bytes()
    for i in range(RUNS):
        sess.run(x)
    after = rss_bytes()
    growth = (after - before) / before
    report(f"{RUNS} run() calls", growth <= RSS_TOLERANCE,
           f"RSS {before / 2**20:.1f} MiB after {WARMUP} warm-up calls -> {after / 2**20:.1f} MiB "
           f"({growth * 100:+.2f} %, limit {RSS_TOLERANCE * 100:.0f} %)")


def concurrent(path, rng):
    ref = tcc.load(path)
    feeds = [inputs_for(ref, rng) for _ in range(THREADS * 8)]
    want = [ref.run(f) for f in feeds]
    for label, sessions in (("4 threads on one session", [ref] * THREADS),
                            ("4 sessions of one artifact", [tcc.load(path) for _ in range(THREADS)])):
        bad = []

        def work(k, sess):
            for j in range(PER_THREAD):
                i = (k * 7 + j) % len(feeds)
                got = sess.run(feeds[i])
                if not all(np.array_equal(g, w) for g, w in zip(got, want[i])):
                    bad.append((k, j))
        ts = [threading.Thread(target=work, args=(k, s)) for k, s in enumerate(sessions)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        report(label, not bad, f"{THREADS * PER_THREAD} runs, {len(bad)} differ from the single-thread outputs")


def racing_compiles(models, d, rng):
    exe = os.path.join(os.path.dirname(sys.executable), "tcc")
    out = os.path.join(d, "race.tcc")
    refs = [tcc.load(tcc.compile(m, output=os.path.join(d, f"ref{i}.tcc"))) for i, m in enumerate(models)]
    x = inputs_for(refs[0], rng)
    ok, rounds = True, 5
    for r in range(rounds):
        procs = [subprocess.Popen([exe, m, "-o", out], stderr=subprocess.PIPE) for m in models]
        errs = [p.communicate()[1] for p in procs]
        codes = [p.returncode for p in procs]
        got = tcc.load(out).run(x)
        matches = [all(np.array_equal(g, w) for g, w in zip(got, ref.run(x))) for ref in refs]
        leftovers = [n for n in os.listdir(d) if n.endswith(".tmp")]
        if codes != [0, 0] or sum(matches) != 1 or leftovers:
            ok = False
            print(f"  round {r}: exits {codes} {errs}, matches {matches}, leftovers {leftovers}")
    report("2 processes compiling to one path", ok, f"{rounds} rounds: one complete, loadable artifact each time")


def deleted_or_replaced(path, other, d, rng):
    for how in ("deleted", "replaced"):
        p = os.path.join(d, f"{how}.tcc")
        with open(path, "rb") as f, open(p, "wb") as g:
            g.write(f.read())
        sess = tcc.load(p)
        x = inputs_for(sess, rng)
        want = sess.run(x)
        if how == "deleted":
            os.unlink(p)
        else:
            tmp = p + ".new"
            with open(other, "rb") as f, open(tmp, "wb") as g:
                g.write(f.read())
            os.replace(tmp, p)
        got = [sess.run(x) for _ in range(100)]
        same = all(all(np.array_equal(a, b) for a, b in zip(g, want)) for g in got)
        report(f"session whose artifact was {how} after load", same, "100 runs after, outputs unchanged")


def main():
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="tcc-soak-") as d:
        m1, m2 = os.path.join(d, "mlp.onnx"), os.path.join(d, "mlp2.onnx")
        onnx.save(samples.mlp(seed=1), m1)
        onnx.save(samples.mlp(seed=2), m2)   # same signature, other weights
        cnn = os.path.join(d, "cnn.onnx")
        onnx.save(samples.cnn(seed=1), cnn)
        a_mlp = tcc.compile(m1, output=os.path.join(d, "mlp.tcc"))
        a_cnn = tcc.compile(cnn, output=os.path.join(d, "cnn.tcc"))
        a_mlp2 = tcc.compile(m2, output=os.path.join(d, "mlp2.tcc"))
        soak(a_cnn, rng)
        concurrent(a_cnn, rng)
        racing_compiles([m1, m2], d, rng)
        deleted_or_replaced(a_mlp, a_mlp2, d, rng)
    print(f"{sum(results)} of {len(results)} checks passed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
