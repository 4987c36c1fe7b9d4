"""`make bench` (exporter-written models): every model of test/models/corpus
at its first input shape, warm (the first run, which starts a dynamic
model's specialization compile, is not timed, and the timing waits for that
compile: until it lands the calls run the shape-generic path beside it, which
the scoreboard times on its own), with the default compile (the cpu accelerator) and with
the host path alone (--maccel=host), against onnxruntime's CPU provider, all
three timed in turn in one process (alternating bursts, each after 0.1 s of
untimed runs, as bench_models.py does). Each thread count runs in a fresh process with
TCC_NUM_THREADS, OPENBLAS_NUM_THREADS and ORT's intra-op threads set to it.

Columns: medians (ms); ratios tcc / onnxruntime (target: default <= 1.0 at 2
threads) and cpu / host (issue 22 item 4: <= 1.0 everywhere), each with the
25th-75th percentile of the per-burst ratios as its spread.

    python bench/bench_corpus.py [--threads 2 1] [--models llama deit] [--min-time 1.0] [--hide-avx512]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import hide_avx512_child  # noqa: F401, I001  (first: a --hide-avx512 child's shim, before numpy reads CPUID)
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_models import (_interleaved_samples, add_cpu_emulation_args, cpu_emulation_env, header,  # noqa: E402  (one timing method and header for every table)
                          run_per_thread_count)

BURST = 5


def _ratio(a, b):
    """(median a / median b, 25th and 75th percentile of the ratios of the
    per-burst medians)."""
    n = min(len(a), len(b)) // BURST * BURST
    if n == 0:
        return float(np.median(a) / np.median(b)), float("nan"), float("nan")
    ra = np.median(np.reshape(a[:n], (-1, BURST)), axis=1) / np.median(np.reshape(b[:n], (-1, BURST)), axis=1)
    return float(np.median(a) / np.median(b)), float(np.percentile(ra, 25)), float(np.percentile(ra, 75))


def bench(names, threads, min_time, workdir):
    import tcc
    from tcc.model_report import CORPUS, compare, feeds, manifest, reference, settle
    from tcc.dialects.ir.errors import TccError
    entries = manifest()
    rows = []
    for name in names:
        entry = entries[name]
        path = os.path.join(CORPUS, name + ".onnx")
        x = feeds(entry, 0, np.random.default_rng(0))
        so_ref = reference(path, entry)
        want = so_ref.run(None, x)
        try:
            sessions = [tcc.load(tcc.compile(path, maccel=[sel], output=os.path.join(workdir, f"{name}.{sel}.tcc")))
                        for sel in ("cpu", "host")]
        except TccError as e:
            rows.append((name, None, str(e).splitlines()[0][:120]))
            continue
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        osess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        ok = True
        for s in sessions:
            ok = ok and compare(s.run(x), want)[0]  # also the untimed first run at this shape
            settle(lambda s=s: s.run(x))  # every stage's specialization compiled (model_report.settle)
        fns = [lambda s=s: s.run(x) for s in sessions] + [lambda: osess.run(None, x)]
        t0 = time.perf_counter()
        for f in fns:
            f()
        reps = int(min(200, max(30, 3 * min_time / max(time.perf_counter() - t0, 1e-6)))) // BURST * BURST
        cpu, host, ref = _interleaved_samples(fns, reps, burst=BURST)
        rows.append((name, (np.median(cpu) * 1e3, np.median(host) * 1e3, np.median(ref) * 1e3,
                            _ratio(cpu, ref), _ratio(host, ref), _ratio(cpu, host), reps), "" if ok else "WRONG"))
    return rows


def child(args):
    print(header(args.thread))
    print(f"## {args.thread} thread(s); corpus models at their first shape, warm")
    print(f"{'model':<24} {'cpu ms':>8} {'host ms':>8} {'ORT ms':>8}  {'cpu/ORT [p25-p75]':>19}  "
          f"{'host/ORT':>8}  {'cpu/host [p25-p75]':>19} {'runs':>5}")
    with tempfile.TemporaryDirectory(prefix="tcc-bench-corpus-") as tmp:
        for name, r, note in bench(args.models, args.thread, args.min_time, tmp):
            if r is None:
                print(f"{name:<24} error: {note}", flush=True)
                continue
            c, h, o, co, ho, ch, reps = r
            print(f"{name:<24} {c:8.2f} {h:8.2f} {o:8.2f}  {co[0]:5.2f}x [{co[1]:4.2f}-{co[2]:4.2f}]  "
                  f"{ho[0]:7.2f}x  {ch[0]:5.2f}x [{ch[1]:4.2f}-{ch[2]:4.2f}] {reps:5d} {note}", flush=True)


def main():
    from tcc.model_report import manifest
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, nargs="*", default=[2, 1])
    p.add_argument("--thread", type=int, default=2, help=argparse.SUPPRESS)
    p.add_argument("--models", nargs="*", default=sorted(manifest()))
    p.add_argument("--min-time", type=float, default=1.0, help="seconds of timed runs per model and side (about)")
    add_cpu_emulation_args(p)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    unknown = sorted(set(args.models) - set(manifest()))
    if unknown:
        sys.exit(f"bench_corpus: unknown model(s) {', '.join(unknown)} (known: {', '.join(sorted(manifest()))})")
    if args.child:
        child(args)
        return
    env = cpu_emulation_env(p, args)  # bench_models.py
    run_per_thread_count(__file__, args.threads, ["--models", *args.models, "--min-time", str(args.min_time)], env=env)

if __name__ == "__main__":
    main()
