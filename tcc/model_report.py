"""Runs the corpus of exporter-written models (test/models/corpus/, built by
test/models/build_corpus.py) through tcc and onnxruntime and prints a
scoreboard: per model and accelerator selection, pass / wrong / error, the
largest absolute difference from onnxruntime, tcc's first run at each new input
shape (which specializes and compiles a dynamic model) and its warm run, and
onnxruntime's warm run. The test suite (test/models/test_corpus.py) checks
the same models with the same helpers.

    python -m tcc.model_report                     # no flag and --maccel=cpu
    python -m tcc.model_report --maccel cpu llama  # one selection, some models
    make test-models
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test", "models", "corpus")
RTOL, ATOL = 1e-3, 1e-4


def manifest(corpus=CORPUS):
    with open(os.path.join(corpus, "manifest.json")) as f:
        return json.load(f)


def feeds(entry, k, rng, shapes=None):
    """Fresh random inputs for the k-th input shapes of a corpus entry (or
    for `shapes`, one per input): token ids and masks within the range the
    manifest gives, floats from a standard normal."""
    out = {}
    for i, inp in enumerate(entry["inputs"]):
        shape = shapes[i] if shapes is not None else inp["shapes"][k]
        if inp["dtype"].startswith(("int", "uint")):
            lo, hi = inp.get("range", [0, 2])
            out[inp["name"]] = rng.integers(lo, hi, size=shape).astype(inp["dtype"])
        else:
            out[inp["name"]] = rng.standard_normal(shape).astype(inp["dtype"])
    return out


def compare(got, want):
    """(all close at RTOL/ATOL with the same shapes, largest absolute difference)."""
    ok, err = len(got) == len(want), 0.0
    for g, w in zip(got, want):
        g = np.asarray(g)
        if g.shape != w.shape:
            return False, float("inf")
        if w.size:
            err = max(err, float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))))
        ok = ok and bool(np.allclose(g, w, rtol=RTOL, atol=ATOL))
    return ok, err


def reference(path, entry=None):
    """onnxruntime's CPU session. For a QDQ model (the manifest says
    "reference": "unfused") its graph optimizations are off: fused, it runs
    QLinearConv-style int8 kernels whose rounding differs from the
    Dequantize -> float op -> Quantize the ONNX spec defines by one
    quantization step (3.7e-3 on qdq_cnn; unfused, tcc matches it exactly),
    and u8 x s8 products saturate on AVX2 CPUs without VNNI."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if entry is not None and entry.get("reference") == "unfused":
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _warm_ms(fn, repeat):
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def run_model(name, maccel=(), corpus=CORPUS, workdir=None, repeat=5, seed=0):
    """One row of the scoreboard: a dict with status ('pass', 'wrong' or
    'error'), max_err, first_ms (the slowest first run at a new shape),
    warm_ms and ort_ms (at the last shape), and detail (the error's first
    line)."""
    import tcc
    from tcc.dialects.ir.errors import TccError
    entry = manifest(corpus)[name]
    path = os.path.join(corpus, name + ".onnx")
    row = {"model": name, "maccel": ",".join(maccel) or "-", "status": "pass", "max_err": 0.0,
           "first_ms": None, "warm_ms": None, "ort_ms": None, "detail": ""}
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory(prefix="tcc-corpus-") as tmp:
        try:
            sess = tcc.load(tcc.compile(path, maccel=list(maccel), output=os.path.join(workdir or tmp, name + ".tcc")))
            ref, fast = reference(path, entry), reference(path)
            first = []
            for k in range(len(entry["inputs"][0]["shapes"])):
                x = feeds(entry, k, rng)
                want = ref.run(None, x)
                t = time.perf_counter()
                got = sess.run(x)
                first.append((time.perf_counter() - t) * 1e3)
                ok, err = compare(got, want)
                row["max_err"] = max(row["max_err"], err)
                if not ok:
                    row["status"] = "wrong"
            row["first_ms"] = max(first)
            row["warm_ms"] = _warm_ms(lambda: sess.run(x), repeat)
            row["ort_ms"] = _warm_ms(lambda: fast.run(None, x), repeat)
        except TccError as e:
            row["status"], row["detail"] = "error", str(e).splitlines()[0][:200]
    return row


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def table(rows):
    lines = ["| model | maccel | result | max error | tcc first run at a new shape (ms) | tcc warm (ms) | "
             "onnxruntime (ms) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        res = r["status"] + (f" ({r['detail']})" if r["detail"] else "")
        lines.append(f"| {r['model']} | {r['maccel']} | {res} | {_fmt(r['max_err'], '.1e')} | "
                     f"{_fmt(r['first_ms'], '.0f')} | {_fmt(r['warm_ms'], '.2f')} | {_fmt(r['ort_ms'], '.2f')} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tcc.model_report", description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="corpus model names (default: all)")
    ap.add_argument("--maccel", action="append", help="one selection to run (default: none, then cpu)")
    ap.add_argument("--corpus", default=CORPUS, help="folder with manifest.json and the .onnx files")
    ap.add_argument("--repeat", type=int, default=20, help="timed warm runs per side (the best counts)")
    args = ap.parse_args(argv)
    try:
        known = manifest(args.corpus)
    except OSError as e:
        sys.exit(f"model_report: cannot read the corpus manifest: {e}")
    names = args.models or sorted(known)
    for n in names:
        if n not in known:
            sys.exit(f"model_report: unknown model '{n}' (known: {', '.join(sorted(known))})")
    selections = [tuple(args.maccel)] if args.maccel else [(), ("cpu",)]
    rows = []
    for sel in selections:
        for n in names:
            rows.append(run_model(n, sel, args.corpus, repeat=args.repeat))
            print(f"{n} [{','.join(sel) or '-'}]: {rows[-1]['status']}", file=sys.stderr, flush=True)
    print(table(rows))
    bad = sum(r["status"] != "pass" for r in rows)
    print(f"\n{len(rows) - bad} of {len(rows)} pass")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
