#!/usr/bin/env bash
# Everything GPU-side in one prepared run of at most 9 minutes, for a machine
# where nothing can be installed from the network (the reference H200:
# Python 3.12, cupy, torch, onnx, onnxruntime, pytest):
#
#   bash scripts/gpu_device_run.sh             on the GPU machine, from the tree's root
#   bash scripts/gpu_device_run.sh --dry-run   here: the same phases on a fake cupy
#                                              (test/accelerators/gpu/fake_cupy.py), smaller sets
#
# The tree runs in place: $WORK/site holds links onto its packages plus a
# dist-info with the entry points (scripts/gpu_device_run.py layout), and the
# carried cp312 wheels in wheels/cp312 (make gpu-wheels) are unpacked there
# only where the machine lacks that package or has another version. Native
# libraries are built when a C compiler exists, else the ones built beforehand
# (runtime/native/libtccrt.so, carried) are used.
#
# Phases run in separate processes, each under its own timeout, most
# expendable last: probe, suite (the gpu tests + the device conformance kit on
# gpu:0), bench (tcc vs torch eager vs torch.compile, chain vs copy bandwidth),
# nodes (ONNX node tests with forced placement). Full logs go to $OUT (default
# out/gpu-run); stdout gets a summary table of at most 40 lines.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DRY=""
[ "${1:-}" = "--dry-run" ] && DRY="--dry-run"
OUT=${OUT:-$ROOT/out/gpu-run}
mkdir -p "$OUT"
export OUT
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tcc-gpu-run.XXXXXX")
SITE=$WORK/site
START=$(date +%s)
TOTAL=${GPU_RUN_SECONDS:-530}   # the whole run, under the 10-minute call limit
PY=${PY:-}
if [ -z "$PY" ]; then
  if [ -n "$DRY" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=$(command -v python3); fi
fi
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
say() { echo "$*" >> "$SUMMARY"; }

# -- set-up: where we are, compilers, the tree as a package ---------------------------------
{
  echo "== machine"; uname -a; "$PY" -V; command -v nvidia-smi >/dev/null && nvidia-smi -L
  echo "== compilers"
  for c in gcc cc g++ clang nvcc; do
    if command -v $c >/dev/null; then echo "$c: $($c --version 2>&1 | head -1)"; else echo "$c: none"; fi
  done
} > "$OUT/setup.log" 2>&1
COMPILERS=$(for c in gcc g++ nvcc; do command -v $c >/dev/null && printf '%s ' $c; done)
say "gpu device run ${DRY:-(real)}: $("$PY" -V 2>&1), compilers: ${COMPILERS:-none}, out: $OUT"

"$PY" scripts/gpu_device_run.py layout "$SITE" >> "$OUT/setup.log" 2>&1 || { say "SETUP FAILED: layout (see setup.log)"; cat "$SUMMARY"; exit 1; }
CARRIED=""
for whl in wheels/cp312/*.whl; do
  [ -f "$whl" ] || continue
  # dist name and version from the file name; unpack only when missing or another version
  base=$(basename "$whl"); dist=${base%%-*}; ver=$(echo "$base" | cut -d- -f2)
  have=$("$PY" -c "import importlib.metadata as m,sys
try: print(m.version(sys.argv[1]))
except Exception: print('')" "$dist" 2>/dev/null)
  if [ "$have" != "$ver" ]; then
    "$PY" -m zipfile -e "$whl" "$SITE" >> "$OUT/setup.log" 2>&1 && CARRIED="$CARRIED $dist-$ver(had ${have:-none})"
  fi
done
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
[ -n "$DRY" ] && export TCC_FAKE_CUPY=1  # the layout's sitecustomize installs the fake cupy
export TCC_CACHE_DIR=${TCC_CACHE_DIR:-$WORK/cache}
say "carried wheels unpacked:${CARRIED:- none needed}"
if command -v gcc >/dev/null || command -v cc >/dev/null; then
  "$PY" -m tcc.runtime.native runtime/native/libtccrt.so >> "$OUT/setup.log" 2>&1 \
    && say "native: libtccrt built here" || say "native: BUILD FAILED (see setup.log)"
elif [ -f runtime/native/libtccrt.so ]; then
  say "native: no C compiler here; using the carried runtime/native/libtccrt.so"
else
  say "native: no C compiler and no carried libtccrt.so: host steps will fail"
fi

# -- the phases -------------------------------------------------------------------------------------
STATUS=0
phase() {  # name budget-seconds
  local name=$1 budget=$2 left t0 rc
  left=$(( TOTAL - ($(date +%s) - START) ))
  [ "$budget" -gt "$left" ] && budget=$left
  if [ "$budget" -lt 10 ]; then say "[$name] SKIPPED: out of time"; STATUS=1; return; fi
  t0=$(date +%s)
  TCC_PHASE_BUDGET=$budget timeout -k 5 "$budget" "$PY" scripts/gpu_device_run.py "$name" $DRY \
    > "$OUT/$name.log" 2>&1
  rc=$?
  local verdict="ok"
  [ $rc -ne 0 ] && verdict="FAILED rc=$rc" && STATUS=1
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && verdict="TIMED OUT after ${budget}s"
  say "[$name] $verdict in $(( $(date +%s) - t0 ))s (log: $name.log)"
  grep '^SUMMARY ' "$OUT/$name.log" | sed 's/^SUMMARY /  /' | cut -c1-170 >> "$SUMMARY"
}
phase probe 45
phase suite 200
phase bench 150
phase nodes 400   # whatever time is left (capped by TOTAL)
say "total $(( $(date +%s) - START ))s, status $STATUS"
head -40 "$SUMMARY"
rm -rf "$WORK"
exit $STATUS
