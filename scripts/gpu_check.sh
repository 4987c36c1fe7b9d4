#!/usr/bin/env bash
# One prepared run of everything GPU-side (make test-gpu bench-gpu):
# the gpu test suite (CPU-side nvcc/emulation checks + GPU numerics), the
# device conformance kit on gpu:0, the ONNX node tests with --maccel=gpu
# (when the backend runner is present), then the benchmarks; a short table last.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
status=0
echo "== gpu suite"; $PY -m pytest -q test/accelerators/gpu -rs || status=1
echo "== device conformance kit on gpu:0"
$PY - <<'PYEOF' || status=1
import sys, pytest
from tcc.accelerators.manager import load_accelerators
try:
    load_accelerators(["gpu"])
except Exception as e:
    print(f"conformance on gpu skipped: {e}"); sys.exit(0)
sys.exit(pytest.main(["-q", "-p", "tcc.runtime.conformance", "--tcc-device=gpu:0", "--pyargs",
                      "tcc.runtime.device.conformance_suite"]))
PYEOF
if [ -f tcc/node_report.py ]; then
  echo "== ONNX node tests with --maccel=gpu"; $PY -m tcc.node_report --maccel gpu -j 2 || status=1
fi
echo "== benchmarks"; $PY bench/bench_gpu.py || status=1
exit $status
