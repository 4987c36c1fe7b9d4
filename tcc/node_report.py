"""Runs the ONNX backend node tests (onnx's own cases, generated in memory)
through tcc and prints a scoreboard per op: passed / unsupported / wrong /
crashed. Cases run in worker processes, so a crash is counted, not fatal.

    python -m tcc.node_report                       # host
    python -m tcc.node_report --maccel sim -j 2     # an accelerator
    python -m tcc.node_report --write-allowlist test/backend/allowlist_host.txt
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import warnings
from collections import Counter, defaultdict

STATUSES = ("passed", "unsupported", "wrong", "crashed")


@functools.lru_cache(maxsize=None)
def cases():
    import onnx.backend.test.loader as loader
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: c for c in loader.load_model_tests(kind="node")}


def op_of(name):
    """The op a case tests: its single node's type; `_expanded` cases count
    under the op they expand."""
    all_cases = cases()
    base = name[:-len("_expanded")] if name.endswith("_expanded") else name
    case = all_cases.get(base, all_cases[name])
    nodes = case.model.graph.node
    return nodes[0].op_type if len(nodes) == 1 else (nodes[-1].op_type if nodes else "?")


def run_case(name, maccel=(), require_placement=True):
    """(status, detail) for one case. With `maccel` and `require_placement`
    (what `tcc-accel check` asks), a case none of whose ops the accelerator
    claimed is "unsupported" however right its result; without it, such a
    case passes as a host fallback (detail "host fallback"), which is what
    a user of `--maccel=cpu` gets."""
    from onnx.backend.test.runner import Runner

    from tcc.backend import backend_for
    from tcc.dialects.ir.errors import TccError
    case = cases()[name]
    try:
        rep = backend_for(*maccel).prepare(case.model)
    except TccError as e:
        return "unsupported", str(e).splitlines()[0][:300]
    except Exception as e:  # a compiler bug
        return "crashed", f"compile: {type(e).__name__}: {e}"[:300]
    result = "passed", ""
    try:
        for inputs, refs in case.data_sets:
            from onnx.backend.test.runner import _normalize_tensor
            outs = rep.run([_normalize_tensor(x) for x in inputs])
            assert_similar([_normalize_tensor(r) for r in refs], outs, case.rtol, case.atol)
    except AssertionError as e:
        result = "wrong", " ".join(str(e).split())[:300]
    except TccError as e:
        return "unsupported", str(e).splitlines()[0][:300]
    except Exception as e:
        return "crashed", f"run: {type(e).__name__}: {e}"[:300]
    # after the run: a specializing session is placed when it runs
    if maccel and result[0] == "passed" and not _placed_on(rep.session, maccel):
        if require_placement:
            return "unsupported", f"no op claimed by {', '.join(maccel)} (ran on the host)"
        return "passed", HOST_FALLBACK
    return result


HOST_FALLBACK = "host fallback"


def assert_similar(refs, outs, rtol, atol):
    """onnx's Runner.assert_similar_outputs, output by output, with
    sequences compared element by element and empty optionals as None: the
    Runner recurses into a sequence passing each element as a list of
    outputs, and len() of a 0-d element raises TypeError
    (test_loop16_seq_none's first element)."""
    from onnx.backend.test.runner import Runner
    assert len(outs) == len(refs), f"{len(outs)} outputs, expected {len(refs)}"
    for r, o in zip(refs, outs):
        if r is None or isinstance(r, (list, tuple)):
            assert (o is None) == (r is None) and (r is None or isinstance(o, (list, tuple))), \
                f"got {type(o).__name__}, expected {type(r).__name__}"
            if r is not None:
                assert_similar(list(r), list(o), rtol, atol)
        else:
            Runner.assert_similar_outputs([r], [o], rtol, atol)


def _placed_on(session, maccel):
    """Whether any step that ran was on one of `maccel`: a specializing
    session places each input shape when it first runs, so its compiled
    specializations say (after the run)."""
    if session is None:
        return False
    if hasattr(session, "specializations"):
        return any(_placed_on(s, maccel) for s in session.specializations())
    if hasattr(session, "suffix"):  # a run cut at a data-dependent op (runtime/staged.py)
        return _placed_on(session.prefix, maccel) or _placed_on(session.suffix, maccel)
    return any(step.get("accelerator") in maccel for step in session.manifest.get("plan", []))


def _worker(names, maccel, require_placement=True):
    for n in names:
        status, detail = run_case(n, maccel, require_placement)
        sys.stdout.write(json.dumps({"name": n, "status": status, "detail": detail}) + "\n")
        sys.stdout.flush()


def run_all(names, maccel=(), jobs=2, chunk=40, progress=None, case_timeout=180, require_placement=True):
    """Runs cases in worker subprocesses; returns {name: (status, detail)}.
    A worker that dies, or takes longer than `case_timeout` seconds on one
    case, costs that case (counted as crashed), not the run."""
    import selectors
    import time
    results = {}
    pending = [names[i:i + chunk] for i in range(0, len(names), chunk)]
    running = {}  # proc -> [batch, done names, buffered text, last progress time]
    sel = selectors.DefaultSelector()

    def start(batch):
        cmd = [sys.executable, "-m", "tcc.node_report", "--worker", ",".join(maccel),
               *([] if require_placement else ["--host-fallback-passes"]), *batch]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        os.set_blocking(p.stdout.fileno(), False)
        running[p] = [batch, set(), b"", time.monotonic()]
        sel.register(p.stdout, selectors.EVENT_READ, p)

    def finish(p, why):
        sel.unregister(p.stdout)
        batch, done, _, _ = running.pop(p)
        left = [n for n in batch if n not in done]
        if left:  # the worker died or hung on left[0]: count it, retry the rest
            results[left[0]] = ("crashed", why)
            if left[1:]:
                pending.insert(0, left[1:])

    while pending or running:
        while pending and len(running) < jobs:
            start(pending.pop(0))
        for key, _ in sel.select(timeout=5):
            p = key.data
            state = running[p]
            data = p.stdout.read() or b""
            if not data and p.poll() is not None:
                p.wait()
                finish(p, f"worker died (exit {p.returncode})")
                continue
            state[2] += data
            *lines, state[2] = state[2].split(b"\n")
            for line in lines:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                results[r["name"]] = (r["status"], r["detail"])
                state[1].add(r["name"])
                state[3] = time.monotonic()
        for p, state in list(running.items()):
            if time.monotonic() - state[3] > case_timeout:
                p.kill()
                p.wait()
                finish(p, f"timed out (> {case_timeout} s)")
        if progress:
            progress(len(results), len(names))
    return results


def scoreboard(results):
    per_op = defaultdict(Counter)
    for name, (status, _) in results.items():
        per_op[op_of(name)][status] += 1
    lines = [f"{'op':<32}" + "".join(f"{s:>12}" for s in STATUSES)]
    for op in sorted(per_op):
        lines.append(f"{op:<32}" + "".join(f"{per_op[op][s]:>12}" for s in STATUSES))
    total = Counter(s for s, _ in results.values())
    lines.append(f"{'TOTAL':<32}" + "".join(f"{total[s]:>12}" for s in STATUSES))
    return "\n".join(lines), total


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tcc.node_report", description=__doc__.split("\n")[0])
    ap.add_argument("--maccel", action="append", default=[], help="accelerator (repeatable)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("-k", "--filter", default="", help="only cases whose name contains this")
    ap.add_argument("--write-allowlist", metavar="FILE", help="write the passing case names here")
    ap.add_argument("--failures", action="store_true", help="list every non-passing case with its reason")
    ap.add_argument("--require-placement", action="store_true",
                    help="with --maccel: count a case the accelerator claimed no op of as unsupported "
                         "(tcc-accel check's rule); by default it passes as a host fallback")
    ap.add_argument("--host-fallback-passes", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("names", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker is not None:
        _worker(a.names, tuple(x for x in a.worker.split(",") if x), not a.host_fallback_passes)
        return 0
    names = sorted(n for n in cases() if a.filter in n)
    results = run_all(names, tuple(a.maccel), a.jobs, require_placement=a.require_placement,
                      progress=lambda d, t: sys.stderr.write(f"\r{d}/{t} cases") if sys.stderr.isatty() else None)
    table, total = scoreboard(results)
    print(table)
    if a.failures:
        for n in sorted(results):
            if results[n][0] != "passed":
                print(f"{results[n][0]:<12} {n}: {results[n][1]}")
    if a.write_allowlist:
        with open(a.write_allowlist, "w") as f:
            f.write("# ONNX node tests that pass" + (f" with --maccel={','.join(a.maccel)}" if a.maccel else " on the host")
                    + " (onnx 1.23.2). Only grows: regenerate with python -m tcc.node_report --write-allowlist.\n")
            for n in sorted(n for n, (s, _) in results.items() if s == "passed"):
                f.write(n + "\n")
    fallback = sum(1 for s_, d in results.values() if s_ == "passed" and d == HOST_FALLBACK)
    print(f"passed {total['passed']} of {len(results)}"
          + (f" ({fallback} of them entirely on the host: no op claimed by {', '.join(a.maccel)})" if fallback else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
