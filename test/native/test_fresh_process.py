"""Compiled code runs in a process that imported nothing but tcc: every
symbol the host object code needs (libm, compiler-rt's half-precision
conversions, the runtime library) resolves there, whatever other test
modules happened to load first. Checked in a fresh interpreter, by listing
the object's undefined symbols (`nm -u`) and asking the JIT's own symbol
lookup for each, so a missing one is named instead of crashing the run
(under pytest-xdist every worker imports onnxruntime early, which hid a
Cast f64 -> f16 that called `__truncdfhf2` and segfaulted when run alone)."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

PROBE = textwrap.dedent("""
    import json, os, subprocess, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    from native_helpers import elementwise
    from test_codegen_ops import CASTS, FLOAT_TYPES, UNARY
    import llvmlite.binding as llvm
    from tcc.dialects.conversions.loop_to_native.codegen import lower_module
    from tcc.dialects.conversions.loop_to_native.target import LINKER_DEFINED, _init, emit_object, optimize
    from tcc.runtime import native
    from tcc.runtime.jit import jit_entry as _jit
    cases = [(f"arith.{k}", [s], d) for k, s, d in CASTS]
    cases += [(f"math.{op}", [el], el) for op in UNARY for el in FLOAT_TYPES]
    cases += [(f"arith.{op}", [el, el], el) for op in ("powf", "remf", "divf", "maximumf") for el in FLOAT_TYPES]
    _init()
    native.load()
    engine = _jit(emit_object(optimize(lower_module(elementwise("arith.addf", ["f32", "f32"], "f32", 8)).llvm_ir)))
    # (a first MCJIT engine makes the process's own symbols searchable, as when a model loads)
    need = {}
    with tempfile.TemporaryDirectory() as d:
        for i, (op, ins, out) in enumerate(cases):
            path = os.path.join(d, f"{i}.o")
            with open(path, "wb") as f:
                f.write(emit_object(optimize(lower_module(elementwise(op, ins, out, 37)).llvm_ir, 3), 3))
            nm = subprocess.run(["nm", "-u", path], capture_output=True, text=True, check=True).stdout
            for sym in (ln.split()[-1] for ln in nm.splitlines() if ln.strip()):
                need.setdefault(sym, f"{op} {ins} -> {out}")
    missing = {s: where for s, where in need.items() if s not in LINKER_DEFINED and not llvm.address_of_symbol(s)}
    print(json.dumps({"need": sorted(need), "missing": missing,
                      "onnxruntime": "onnxruntime" in sys.modules}))
""")


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm to list the object's symbols")
def test_every_symbol_of_compiled_casts_and_math_resolves_in_a_fresh_process():
    r = subprocess.run([sys.executable, "-c", PROBE, HERE], capture_output=True, text=True, timeout=600,
                       cwd=HERE, env={**os.environ, "PYTHONPATH": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert not res["onnxruntime"], "the probe must not import onnxruntime"
    assert "tcc_main_graph" not in res["need"] and res["need"], res["need"]  # nm listed undefined symbols only
    missing = res["missing"]
    assert not missing, f"unresolved in a process that imported only tcc: {missing}"
