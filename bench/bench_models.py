"""Model benchmarks: tcc against onnxruntime (CPU EP) on the sample models.

For each model: compile with tcc (seconds reported), then in one subprocess
per thread count (TCC_NUM_THREADS is read once when the native thread pool
starts, so each count needs a fresh process) run tcc and onnxruntime
(intra_op_num_threads = the same count) on the same random input, check the
outputs agree (max relative error against ORT) and time the median of
several runs after warm-up. Prints one table row per (model, threads) with
the target and whether it is met, then fp32 GEMM GFLOP/s of a MatMul model
next to numpy's matmul.

    python bench/bench_models.py [--models a,b] [--threads 1,2] [--quick]
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> (builder expression, target kind, target value, rtol, repeats)
# target kind "ratio2": tcc/ORT at 2 threads must be <= value (1-thread rows
# are shown for reference, in parentheses); "ratio": at every thread count.
MODELS = {
    "elementwise_chain": ("elementwise_chain()", "ratio2", 0.5, 1e-4, 20),
    "softmax_layernorm": ("softmax_layernorm()", "ratio2", 0.5, 1e-3, 20),
    "mlp_matmul": ("mlp_matmul(seed=0)", "ratio", 3.0, 1e-3, 20),
    "resnet18": ("resnet18(seed=0)", "ratio", 3.0, 1e-3, 10),
    "mobilenetv2": ("mobilenetv2(seed=0)", "ratio", 3.0, 1e-3, 10),
    "bert": ("transformer(batch=1, seq=128, d=256, heads=4, layers=4, seed=0)", "ratio", 3.0, 1e-3, 20),
}
COMPILE_TARGETS = {"resnet18": 10.0}
GEMM_SIZES = [1024, 2048]


def _model(expr):
    from tcc import samples
    return eval("samples." + expr, {"samples": samples})  # noqa: S307 - our own table


def gemm_model(n):
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "gemm",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    return m


def cpu_model():
    """The CPU's model name, family/model numbers and vector extensions, from
    /proc/cpuinfo (a cloud VM's name can be as short as "AMD EPYC")."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                info.setdefault(k.strip(), v.strip())
                if not line.strip():
                    break
    except OSError:
        pass
    if "model name" not in info:
        import platform
        return platform.processor() or platform.machine()
    flags = set(info.get("flags", "").split())
    ext = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "amx_tile") if f in flags]
    return (f"{info['model name']} (family {info.get('cpu family', '?')} model {info.get('model', '?')}; "
            f"{' '.join(ext) or 'no avx2'}{'' if 'avx512f' in flags else ', no avx512'})")


def header(threads):
    """The machine a table came from: every table of speed names it (the
    same models run 0.7-1.0x onnxruntime on one x86 CPU and 1.7-2.5x on
    another)."""
    import onnxruntime as ort

    from tcc.accelerators.cpu import build
    isa = build.best_isa()
    forced = " (TCC_CPU_ISA)" if os.environ.get("TCC_CPU_ISA") else ""
    hidden = {"avx512": "AVX-512 and AVX-VNNI hidden from CPUID (bench/hide_avx512.c): onnxruntime, OpenBLAS and "
                        "the host path pick their AVX2 code",
              "avx512-keep-avxvnni": "AVX-512 hidden from CPUID (bench/hide_avx512.c): onnxruntime, OpenBLAS and "
                                     "the host path pick their AVX2 + AVX-VNNI code",
              "vnni": "VNNI and AMX hidden from CPUID (bench/hide_avx512.c): onnxruntime picks its AVX-512 "
                      "code without VNNI"}.get(os.environ.get("TCC_HIDE_CPUID") or "avx512")
    hidden = f"; {hidden}" if os.environ.get("TCC_BENCH_HIDE_AVX512") else ""
    return (f"# CPU: {cpu_model()}, {os.cpu_count()} cores; cpu kernel library: {isa}{forced}; "
            f"threads: {threads}; onnxruntime {ort.__version__}, numpy {np.__version__}{hidden}")


# Each engine's burst starts with WARM_S seconds of untimed runs (and at
# least `warmup` runs), for two reasons:
# - onnxruntime's idle pool threads spin for tens of ms after a run (tcc's
#   for under 1 ms) and take the next engine's second core meanwhile: tcc's
#   MLP on 2 threads right after onnxruntime's runs took 2.4-2.6 ms with
#   0-20 ms between them, 1.5-1.65 with 50 ms and 1.49-1.79 with 200 ms
#   (AMD EPYC Zen 4, 2026-12-06);
# - after idle, the clock ramps up: on the Intel Xeon (family 6 model 167) a
#   compute-bound call after 0.1 s idle ran up to 2x its steady time for
#   40-80 ms (the `avx2` library's elementwise chain at 1 thread: 7.3 ms a
#   run for the first 40 ms, then 6.0, 5.4, 4.9, 4.4 down to 3.8-4.0;
#   onnxruntime's 22.4 then 13.8 down to 11.8), so with two warm-up runs
#   and a pause before each burst a fast engine was timed on the ramp and a
#   slow one was not (that chain read 0.58-0.70x onnxruntime's time).
# Timed runs therefore follow 0.1 s of the engine's own runs, not a pause.
PAUSE = 0.0
WARM_S = 0.1


def _interleaved_ms(fa, fb, repeats, warmup=2, burst=5, pause=PAUSE):
    """Medians (ms) of fa and fb timed in alternating bursts, so both see
    the same machine load (the CI machine is shared: absolute times drift).
    Bursts, not single calls, each after WARM_S of untimed runs: one
    engine's idle spinning threads would steal the other's second core, and
    the clock ramps up after idle."""
    ta, tb = _interleaved_samples([fa, fb], repeats, warmup, burst, pause)
    return float(np.median(ta)) * 1e3, float(np.median(tb)) * 1e3


def _interleaved_samples(fns, repeats, warmup=2, burst=5, pause=PAUSE):
    """Per function, `repeats` single-run times (s), the functions timed in
    turn in bursts (see _interleaved_ms)."""
    out = [[] for _ in fns]
    while len(out[0]) < repeats:
        n = min(burst, repeats - len(out[0]))
        for f, ts in zip(fns, out):
            if pause:
                time.sleep(pause)
            t0, k = time.perf_counter(), 0
            while k < warmup or time.perf_counter() - t0 < WARM_S:
                f()
                k += 1
            for _ in range(n):
                t = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t)
    return out


def add_cpu_emulation_args(p):
    """--hide-avx512 [--keep-avx-vnni] and --hide-vnni on an argparse parser:
    the other kinds of x86 CPU an AVX-512 one stands in for (hide_avx512.c)."""
    p.add_argument("--hide-avx512", action="store_true",
                   help="run as on an AVX2-only CPU: onnxruntime, OpenBLAS and LLVM see no AVX-512 in CPUID "
                        "(needs CPUID faulting: cpuid_fault in /proc/cpuinfo), tcc runs its avx2 library")
    p.add_argument("--keep-avx-vnni", action="store_true",
                   help="with --hide-avx512: leave AVX-VNNI in CPUID (an AVX2 CPU with it, such as Intel Alder Lake), "
                        "and let tcc pick its kernels from CPUID")
    p.add_argument("--hide-vnni", action="store_true",
                   help="run as on an AVX-512 CPU without VNNI (Intel Skylake-SP): VNNI, AVX-VNNI and AMX hidden "
                        "from CPUID, tcc picks its kernels from CPUID")


def cpu_emulation_env(p, args):
    """The children's environment for add_cpu_emulation_args' flags (None:
    this CPU as it is); a combination that names no one CPU is p.error."""
    if args.keep_avx_vnni and not args.hide_avx512:
        p.error("--keep-avx-vnni goes with --hide-avx512")
    if args.hide_vnni and args.hide_avx512:
        p.error("--hide-vnni and --hide-avx512 are two machines: one at a time")
    if args.hide_avx512:
        return hide_avx512_env("avx512-keep-avxvnni" if args.keep_avx_vnni else "avx512")
    return hide_avx512_env("vnni") if args.hide_vnni else None


def hide_avx512_env(mode="avx512"):
    """The children's environment for --hide-avx512: hide_avx512.c built
    into a shim each child loads first (it traps CPUID and clears the AVX-512
    bits; not LD_PRELOAD: the compilers tcc runs install their own SIGSEGV
    handlers, and exec turns CPUID faulting off again). mode "avx512":
    TCC_CPU_ISA=avx2 keeps tcc's int8 products off AVX-VNNI too, as on an
    AMD Zen 3; "avx512-keep-avxvnni" (--keep-avx-vnni: the shim leaves
    AVX-VNNI in CPUID) and "vnni" (--hide-vnni: only VNNI and AMX hidden)
    let tcc pick its kernels from CPUID as the other libraries do."""
    if "cpuid_fault" not in open("/proc/cpuinfo").read().split():
        sys.exit("--hide-avx512 / --hide-vnni: this CPU or VM offers no CPUID faulting (no cpuid_fault in /proc/cpuinfo)")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hide_avx512.c")
    tmp = tempfile.mkdtemp(prefix="tcc-hide-avx512-")
    atexit.register(shutil.rmtree, tmp, True)  # the children run (and exit) before this process
    so = os.path.join(tmp, "hide_avx512.so")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", so, src], check=True)
    if mode != "avx512":
        return {"TCC_BENCH_HIDE_AVX512": so, "TCC_HIDE_CPUID": mode}
    return {"TCC_BENCH_HIDE_AVX512": so, "TCC_CPU_ISA": "avx2", "TCC_HIDE_CPUID": "avx512"}


def run_per_thread_count(script, threads, args, env=None, prefix=lambda t: []):
    """Runs `script --child --thread T *args` once per thread count T, each in
    a fresh process (the pools read their sizes once) with TCC_NUM_THREADS,
    OPENBLAS_NUM_THREADS and OMP_NUM_THREADS set to T; exits with a child's
    failure. `prefix(T)`: words before the interpreter (e.g. taskset)."""
    for t in threads:
        e = dict(os.environ, **(env or {}), TCC_NUM_THREADS=str(t), OPENBLAS_NUM_THREADS=str(t),
                 OMP_NUM_THREADS=str(t))
        r = subprocess.run([*prefix(t), sys.executable, script, "--child", "--thread", str(t), *args], env=e)
        if r.returncode:
            sys.exit(r.returncode)


def _median_ms(fn, repeats, warmup=2):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)) * 1e3


def _inputs(sess_inputs, seed=1):
    """Plain numpy inputs, as a user passes them (read in place by both)."""
    rng = np.random.default_rng(seed)
    return {i["name"]: rng.standard_normal(i["shape"]).astype(i["dtype"]) for i in sess_inputs}


# -- worker: runs in a subprocess with TCC_NUM_THREADS set ------------------------
def worker(job):
    import onnx
    import onnxruntime as ort

    import tcc
    threads = job["threads"]
    rows = []
    for m in job["models"]:
        sess = tcc.load(m["artifact"])
        feeds = _inputs(sess.input_signature)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        osess = ort.InferenceSession(onnx.load(m["onnx"]).SerializeToString(), so,
                                     providers=["CPUExecutionProvider"])
        ref = osess.run(None, feeds)
        got = sess.run(feeds)
        err = 0.0
        ok = True
        for r, g in zip(ref, got):
            den = np.maximum(np.abs(r), 1e-3 * max(float(np.abs(r).max()), 1e-30))
            err = max(err, float(np.max(np.abs(g.astype(np.float64) - r) / den)))
            ok = ok and bool(np.allclose(g, r, rtol=m["rtol"], atol=m["rtol"] * float(np.abs(r).max())))
        reps = m["repeats"]
        t_tcc, t_ort = _interleaved_ms(lambda: sess.run(feeds), lambda: osess.run(None, feeds), reps)
        rows.append({"name": m["name"], "threads": threads, "tcc_ms": t_tcc, "ort_ms": t_ort,
                     "err": err, "match": ok, "repeats": reps})
    for g in job["gemm"]:
        sess = tcc.load(g["artifact"])
        n = g["n"]
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        c = sess.run({"a": a, "b": b})[0]
        ref = a @ b
        err = float(np.max(np.abs(c - ref)) / np.max(np.abs(ref)))
        reps = 10 if n <= 1024 else 5
        t_tcc, t_np = _interleaved_ms(lambda: sess.run({"a": a, "b": b}), lambda: a @ b, reps, warmup=1)
        fl = 2.0 * n ** 3
        rows.append({"gemm": n, "threads": threads, "tcc_gflops": fl / t_tcc / 1e6,
                     "np_gflops": fl / t_np / 1e6, "err": err, "repeats": reps})
    print("RESULT " + json.dumps(rows))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--gemm", default=",".join(map(str, GEMM_SIZES)))
    ap.add_argument("--quick", action="store_true", help="3 repeats per case")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        with open(args.worker) as f:
            worker(json.load(f))
        return 0

    import onnx

    import tcc
    tmp = tempfile.mkdtemp(prefix="tcc-bench-")
    atexit.register(shutil.rmtree, tmp, True)
    names = [n for n in args.models.split(",") if n]
    compiled, compile_s = [], {}
    for name in names:
        expr, _, _, rtol, reps = MODELS[name]
        path = os.path.join(tmp, name + ".onnx")
        onnx.save(_model(expr), path)
        t = time.perf_counter()
        art = tcc.compile(path, output=os.path.join(tmp, name + ".tcc"))
        compile_s[name] = time.perf_counter() - t
        print(f"compiled {name:<18} in {compile_s[name]:6.2f} s", flush=True)
        compiled.append({"name": name, "onnx": path, "artifact": art, "rtol": rtol,
                         "repeats": 3 if args.quick else reps})
    gemms = []
    for n in [int(x) for x in args.gemm.split(",") if x]:
        path = os.path.join(tmp, f"gemm{n}.onnx")
        onnx.save(gemm_model(n), path)
        gemms.append({"n": n, "artifact": tcc.compile(path, output=os.path.join(tmp, f"gemm{n}.tcc"))})

    rows = []
    print(header(args.threads))
    for th in [int(x) for x in args.threads.split(",")]:
        job = os.path.join(tmp, f"job{th}.json")
        with open(job, "w") as f:
            json.dump({"threads": th, "models": compiled, "gemm": gemms}, f)
        env = dict(os.environ, TCC_NUM_THREADS=str(th), OMP_NUM_THREADS=str(th),
                   OPENBLAS_NUM_THREADS=str(th), MKL_NUM_THREADS=str(th))
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", job], env=env,
                           capture_output=True, text=True)
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
        if r.returncode != 0 or not line:
            print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
            print(f"worker for {th} thread(s) failed (exit {r.returncode})")
            return 1
        rows += json.loads(line[0][7:])

    print()
    print(f"{'model':<18} {'thr':>3} {'tcc ms':>9} {'ORT ms':>9} {'tcc/ORT':>8} {'target':>8} "
          f"{'':>6} {'max rel err':>11} {'runs':>4}")
    missed = 0
    for r in rows:
        if "gemm" in r:
            continue
        _, kind, tv, _, _ = MODELS[r["name"]]
        ratio = r["tcc_ms"] / r["ort_ms"]
        judged = kind == "ratio" or r["threads"] == 2
        status = ("OK" if ratio <= tv else "MISSED") if judged else ("(ok)" if ratio <= tv else "(miss)")
        if not r["match"]:
            status = "WRONG"
        missed += status in ("MISSED", "WRONG")
        print(f"{r['name']:<18} {r['threads']:>3} {r['tcc_ms']:9.2f} {r['ort_ms']:9.2f} {ratio:8.2f} "
              f"{'<=' + format(tv, 'g') + 'x':>8} {status:>6} {r['err']:11.2e} {r['repeats']:>4}")
    print()
    for name, s in compile_s.items():
        tgt = COMPILE_TARGETS.get(name)
        st = "" if tgt is None else ("OK" if s <= tgt else "MISSED") + f" (target < {tgt:g} s)"
        missed += st.startswith("MISSED")
        print(f"compile {name:<18} {s:6.2f} s {st}")
    print()
    print(f"{'GEMM fp32':<12} {'thr':>3} {'tcc GFLOP/s':>12} {'numpy GFLOP/s':>14} {'tcc/numpy':>10} {'rel err':>9}")
    for r in rows:
        if "gemm" in r:
            print(f"{str(r['gemm']) + '^3':<12} {r['threads']:>3} {r['tcc_gflops']:12.1f} {r['np_gflops']:14.1f} "
                  f"{r['tcc_gflops'] / r['np_gflops']:10.2f} {r['err']:9.1e}")
    print()
    print("timings: median of 'runs' runs after 2 warm-up runs, tcc and the reference timed in alternating bursts "
          "(GEMM: 10 runs at 1024, 5 at 2048); targets are "
          "judged at every thread count, except the 0.5x ones (at 2 threads; 1-thread rows in parentheses)")
    print(f"{missed} target(s) missed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
