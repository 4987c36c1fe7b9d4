"""The phases of scripts/gpu_device_run.sh, one per process:

    python scripts/gpu_device_run.py layout DIR     the tree as an installed `tcc` under DIR
    python scripts/gpu_device_run.py probe|suite|bench|nodes [--dry-run]

Each phase writes its full log to stdout (the shell script sends it to
$OUT/<phase>.log) and its summary lines, prefixed "SUMMARY ", for the table.
`--dry-run` runs the same phases on smaller sets, for the fake cupy that the
shell script's --dry-run puts in every process (TCC_FAKE_CUPY=1, read by the
layout's sitecustomize)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.environ.get("OUT") or os.path.join(ROOT, "out", "gpu-run")


def summary(line):
    print(f"SUMMARY {line}", flush=True)


def layout(site):
    """DIR/tcc: a folder of links onto the tree's packages (tcc/, driver/,
    dialects/, runtime/, accelerators/, as setup.py maps them), and a
    dist-info with the entry points, so `import tcc` and the accelerator
    plugins work from PYTHONPATH=DIR without pip or setuptools (see SITECUSTOMIZE)."""
    import re
    pkg = os.path.join(site, "tcc")
    os.makedirs(pkg, exist_ok=True)
    for name in os.listdir(os.path.join(ROOT, "tcc")):
        if name != "__pycache__":
            _link(os.path.join(ROOT, "tcc", name), os.path.join(pkg, name))
    for sub, folder in (("driver", "driver"), ("dialects", "dialects"), ("runtime", "runtime"),
                        ("accelerators", "accelerators")):
        _link(os.path.join(ROOT, folder), os.path.join(pkg, sub))
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        toml = f.read()
    version = re.search(r'^version = "([^"]+)"', toml, re.M).group(1)
    info = os.path.join(site, f"tcc-{version}.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: tcc\nVersion: {version}\n")
    sections, cur = {}, None
    for line in toml.splitlines():
        m = re.match(r'^\[(project\.scripts|project\.entry-points\."([^"]+)")\]', line)
        if m:
            cur = sections.setdefault("console_scripts" if m.group(1) == "project.scripts" else m.group(2), [])
        elif line.startswith("["):
            cur = None
        elif cur is not None and "=" in line:
            k, v = (x.strip().strip('"') for x in line.split("=", 1))
            cur.append(f"{k} = {v}")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        for group, lines in sections.items():
            f.write(f"[{group}]\n" + "\n".join(lines) + "\n\n")
    with open(os.path.join(site, "sitecustomize.py"), "w") as f:
        f.write(SITECUSTOMIZE.format(site=site, root=ROOT))
    print(f"tcc {version} laid out in {site} (entry points: {', '.join(sections)})")


# Python runs this at start-up in every process with DIR on PYTHONPATH. The finder
# makes `import tcc` mean DIR/tcc even where the tree's root comes first on sys.path
# (python -m pytest from the root, pytest's rootdir insertion), whose bare tcc/
# folder lacks the subpackages. TCC_FAKE_CUPY=1 (the dry run) installs the fake cupy.
SITECUSTOMIZE = """# written by scripts/gpu_device_run.py layout
import importlib.machinery
import os
import sys


class _TccFinder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "tcc":
            return importlib.machinery.PathFinder.find_spec(name, [{site!r}])
        return None


sys.meta_path.insert(0, _TccFinder)
if os.environ.get("TCC_FAKE_CUPY") == "1":
    sys.path.insert(0, {root!r})  # the tree's test package, not the standard library's
    from test.accelerators.gpu import fake_cupy

    fake_cupy.install()
"""


def _link(src, dst):
    if os.path.lexists(dst):
        os.unlink(dst)
    os.symlink(src, dst)


def _pytest(args):
    """pytest in a child process; (exit code, its last summary line)."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *args],
                       cwd=ROOT, capture_output=True, text=True)
    print(r.stdout[-20000:])
    print(r.stderr[-5000:])
    lines = [l for l in r.stdout.splitlines() if l.strip()]
    last = lines[-1].strip("= ") if lines else "(no output)"
    return r.returncode, last


def probe(dry):
    import numpy as np
    t = time.perf_counter()
    import cupy as cp
    rt = cp.cuda.runtime
    summary(f"cupy {cp.__version__}, CUDA runtime {rt.runtimeGetVersion()}, driver {rt.driverGetVersion()}, "
            f"{rt.getDeviceCount()} device(s); import {time.perf_counter() - t:.1f} s")
    p = rt.getDeviceProperties(0)
    name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
    summary(f"gpu:0 {name}, sm_{p['major']}{p['minor']}, {p['multiProcessorCount']} SMs, "
            f"{p['totalGlobalMem'] / 2**30:.0f} GiB, max grid {tuple(p['maxGridSize'])}")
    try:
        from cupy.cuda import nvrtc
        summary(f"NVRTC {'.'.join(map(str, nvrtc.getVersion()))}")
    except Exception as e:  # noqa: BLE001
        summary(f"NVRTC version: n/a ({type(e).__name__})")
    from tcc.accelerators.gpu import runtime as gpurt
    try:
        import ctypes
        lib = gpurt._libcublas()
        v = ctypes.c_int()
        with cp.cuda.Device(0):
            lib.cublasGetVersion_v2(cp.cuda.device.get_cublas_handle(), ctypes.byref(v))
        summary(f"cuBLAS {v.value} ({getattr(lib, '_name', 'fake')})")
    except Exception as e:  # noqa: BLE001
        summary(f"cuBLAS version: n/a ({type(e).__name__}: {e})")
    # a tiny GEMM through tcc's gpu runtime: eager, captured as a CUDA graph, replayed
    from tcc import samples
    from tcc.accelerators.gpu import plugin
    from tcc.runtime.device import default_registry
    sys.path.insert(0, ROOT)
    from test.accelerators.gpu.helpers import (compile_partition, device_buffers, download,
                                               onnxruntime_outputs, random_inputs)
    default_registry.register(plugin.tcc_device_manager_factory(), replace=True)
    dev = default_registry.get_device("gpu:0")
    model = samples.mlp_matmul(batch=4, sizes=(64, 48, 10), seed=0)
    rm, ins, outs = compile_partition(model)
    t = time.perf_counter()
    mod = plugin.tcc_load_runtime_module(rm, dev)
    load = time.perf_counter() - t
    feeds = random_inputs(model)
    stream = dev.create_stream()
    bufs = device_buffers(dev, stream, feeds, ins, outs)
    fn = mod.get_function("gpu_0")
    for _ in range(3):
        fn(bufs, stream)
    got = download(dev, stream, bufs[len(ins):], outs)[0]
    ok = np.allclose(got, onnxruntime_outputs(model, feeds)[0], rtol=1e-3, atol=1e-4)
    graph = "replays as a CUDA graph" if fn.capture_error is None else f"NO GRAPH: {fn.capture_error}"
    summary(f"tiny GEMM model: load {load * 1e3:.0f} ms, {'matches' if ok else 'DIFFERS FROM'} onnxruntime, "
            f"{graph}")
    return 0 if ok and fn.capture_error is None else 1


def suite(dry):
    status = 0
    if dry:
        args = ["test/accelerators/gpu/test_gpu_device.py", "-k", "mlp"]
    else:
        # (not test_device_script.py: that is this script's own dry run)
        args = ["test/accelerators/gpu", "--ignore=test/accelerators/gpu/test_device_script.py"]
        try:
            import xdist  # noqa: F401  (the emulated numerics are CPU-bound: use the machine's cores)
            args += ["-n", str(min(8, os.cpu_count() or 2))]
        except ImportError:
            pass
    rc, last = _pytest(args)
    summary(f"gpu suite ({' '.join(args)}): {last}")
    status |= rc != 0
    code = ("import sys, pytest\n"
            "from tcc.accelerators.manager import load_accelerators\n"
            "load_accelerators(['gpu'])\n"
            "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-p', 'tcc.runtime.conformance', "
            "'--tcc-device=gpu:0', '--pyargs', 'tcc.runtime.device.conformance_suite']))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=OUT, capture_output=True, text=True)
    print(r.stdout[-20000:])
    print(r.stderr[-5000:])
    lines = [l for l in r.stdout.splitlines() if l.strip()]
    summary(f"device conformance kit on gpu:0: {lines[-1].strip('= ') if lines else '(no output)'}")
    return status | (r.returncode != 0)


def bench(dry):
    args = [sys.executable, os.path.join(ROOT, "bench", "bench_gpu.py"), "--json", os.path.join(OUT, "bench.json")]
    if dry:
        args += ["--models", "mlp", "--copy-elems", str(1 << 16)]
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    print(r.stdout)
    print(r.stderr[-5000:])
    table = r.stdout.strip().splitlines()
    start = next((i for i, l in enumerate(table) if l.startswith("model ")), None)
    for line in (table[start:] if start is not None else table[-3:]):
        summary(line[:160])
    return r.returncode


def nodes(dry):
    """The ONNX node tests with --maccel gpu and forced placement, the ops the
    gpu claims first (single-op cases before `_expanded` ones), until the
    phase's time budget (TCC_PHASE_BUDGET seconds) is nearly spent:
    the whole suite takes longer than one run allows, so the table says how
    many cases ran."""
    os.environ["TCC_GPU_CONFORMANCE"] = "1"  # every supported op on the gpu, however small
    os.chdir(OUT)
    from tcc import node_report
    from tcc.accelerators.gpu.support import COMMON
    t0 = time.time()
    budget = float(os.environ.get("TCC_PHASE_BUDGET", "120"))
    names = sorted(node_report.cases())
    if dry:
        names = [n for n in names if "test_relu" in n]
    names.sort(key=lambda n: ("onnx." + node_report.op_of(n) not in COMMON, n.endswith("_expanded"), n))
    jobs = min(8, os.cpu_count() or 2)
    results = _node_workers(names, jobs, t0 + budget - 20)
    table, total = node_report.scoreboard(results)
    print(table)
    for n in sorted(results):
        if results[n][0] != "passed":
            print(f"{results[n][0]:<12} {n}: {results[n][1]}")
    bad = [n for n in sorted(results) if results[n][0] in ("wrong", "crashed")]
    summary(f"node tests, --maccel gpu, forced placement: ran {len(results)} of {len(names)} cases: "
            f"{total['passed']} passed, {total['unsupported']} unsupported, {total['wrong']} wrong, "
            f"{total['crashed']} crashed")
    for n in bad[:5]:
        summary(f"  {results[n][0]} {n}: {results[n][1]}"[:150])
    return 1 if bad or not results else 0


def _node_workers(names, jobs, deadline):
    """{name: (status, detail)} from node_report's worker processes (each
    generates the cases once: ~60 s here), fed round-robin so the first names
    run first, until `deadline`; a worker that dies costs the case it was on."""
    import json
    import selectors
    results, sel = {}, selectors.DefaultSelector()
    queues = [names[k::jobs] for k in range(jobs)]

    def start(batch):
        p = subprocess.Popen([sys.executable, "-m", "tcc.node_report", "--worker", "gpu", *batch],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        sel.register(p.stdout, selectors.EVENT_READ, [p, list(batch)])
    for q in queues:
        if q:
            start(q)
    while sel.get_map() and time.time() < deadline:
        for key, _ in sel.select(timeout=min(5.0, max(0.1, deadline - time.time()))):
            p, left = key.data
            line = key.fileobj.readline()
            if line:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                results[r["name"]] = (r["status"], r["detail"])
                if r["name"] in left:
                    left.remove(r["name"])
                continue
            sel.unregister(key.fileobj)
            p.wait()
            if left:  # it died on left[0]
                results[left[0]] = ("crashed", f"worker died (exit {p.returncode})")
                if left[1:]:
                    start(left[1:])
    for key in list(sel.get_map().values()):
        key.data[0].kill()
        key.data[0].wait()
    return results


def main(argv):
    phase, rest = argv[0], argv[1:]
    if phase == "layout":
        layout(rest[0])
        return 0
    dry = "--dry-run" in rest
    os.makedirs(OUT, exist_ok=True)
    try:
        return {"probe": probe, "suite": suite, "bench": bench, "nodes": nodes}[phase](dry)
    except Exception as e:  # noqa: BLE001 - the table says why; the log has the traceback
        import traceback
        traceback.print_exc()
        summary(f"{phase} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:160])
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
