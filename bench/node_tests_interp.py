"""Runs the ONNX backend node tests (onnx's own cases, generated in memory)
through import -> [fuse] -> convert-onnx-to-loop -> the loop interpreter and
prints pass counts per op. A bug finder for the host lowering, not a test.

    python bench/node_tests_interp.py [--fuse] [--filter SUBSTR] [--timeout S] [-v]
"""
from __future__ import annotations

import argparse
import collections
import multiprocessing as mp
import signal
import sys
import warnings

import numpy as np


def _array(x):
    import onnx
    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    return np.asarray(x)


def _run_case(args):
    case, fuse, timeout = args
    from tcc.dialects.ir import PassManager, TccError
    from tcc.dialects.init_all import new_context
    from tcc.dialects.conversions.graph_to_loop import ConvertOnnxToLoopPass, LoweringError
    from tcc.dialects.loop.interpreter import run_loop_module
    from tcc.dialects.onnx.importer import import_model

    def alarm(*_):
        raise TimeoutError("interpreter too slow for this case")
    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout)
    try:
        mod = import_model(case.model)
        passes = []
        if fuse:
            from tcc.dialects.transforms.fuse import FusePass
            passes.append(FusePass())
        passes.append(ConvertOnnxToLoopPass())
        try:
            PassManager(new_context(), passes).run(mod)
        except LoweringError as e:
            return "unsupported", str(e)
        for inputs, outputs in case.data_sets:
            got = run_loop_module(mod, [_array(x) for x in inputs])
            for g, w in zip(got, outputs):
                w = _array(w)
                if g.shape != w.shape or g.dtype != w.dtype:
                    return "fail", f"shape/dtype {g.shape} {g.dtype} vs {w.shape} {w.dtype}"
                if w.dtype.kind in "fc":
                    np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-3, atol=1e-7)
                else:
                    np.testing.assert_array_equal(g, w)
        return "pass", ""
    except TimeoutError as e:
        return "timeout", str(e)
    except AssertionError as e:
        return "fail", str(e).strip().splitlines()[0] if str(e).strip() else "mismatch"
    except TccError as e:
        return "error", str(e).splitlines()[0]
    except Exception as e:  # noqa: BLE001 - a bug finder reports everything
        return "error", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        signal.alarm(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fuse", action="store_true")
    ap.add_argument("--filter", default="")
    ap.add_argument("--timeout", type=int, default=20)
    ap.add_argument("-v", action="store_true", help="print every non-passing case")
    ap.add_argument("-j", type=int, default=2)
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    from onnx.backend.test.loader import load_model_tests
    cases = [c for c in load_model_tests(kind="node") if a.filter in c.name and c.model is not None]
    with mp.Pool(a.j) as pool:
        results = pool.map(_run_case, [(c, a.fuse, a.timeout) for c in cases], chunksize=4)
    per_op = collections.defaultdict(collections.Counter)
    totals = collections.Counter()
    for c, (status, msg) in zip(cases, results):
        op = c.model.graph.node[0].op_type if len(c.model.graph.node) == 1 else "(multi-node)"
        if c.name.endswith("_expanded") or "_expanded_" in c.name:
            op = "(expanded)"
        per_op[op][status] += 1
        totals[status] += 1
        if a.v and status != "pass":
            print(f"{status:11s} {c.name}: {msg[:160]}")
    print(f"{'op':28s} pass fail error unsup timeout")
    for op in sorted(per_op, key=lambda o: (-per_op[o]["pass"], o)):
        k = per_op[op]
        if sum(k[s] for s in ("pass", "fail", "error", "timeout")) == 0:
            continue
        print(f"{op:28s} {k['pass']:4d} {k['fail']:4d} {k['error']:5d} {k['unsupported']:5d} {k['timeout']:7d}")
    print(f"TOTAL {len(cases)} cases: " + ", ".join(f"{s} {n}" for s, n in totals.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
