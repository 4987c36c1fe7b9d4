"""bench/hide_avx512.c, the shim behind `bench_cpu_accel.py --hide-avx512`:
in a process that loads it, CPUID reports no AVX-512 (LLVM's host features,
which the host path compiles for, and so its code has no zmm registers
whatever the cpu name implies), onnxruntime still gives its results, and a
child the process execs sees the real CPU again; tcc's cpu library and int8
tile follow what CPUID says; TCC_HIDE_CPUID=avx512-keep-avxvnni leaves
AVX-VNNI in it, =vnni hides only VNNI and AMX (an Intel Skylake-SP). Runs where the CPU has AVX-512 and the kernel offers CPUID faulting;
skipped elsewhere."""
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLAGS = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else []

pytestmark = pytest.mark.skipif("avx512f" not in FLAGS or "cpuid_fault" not in FLAGS,
                                reason="needs AVX-512 and CPUID faulting (cpuid_fault in /proc/cpuinfo)")

PROBE = textwrap.dedent("""
    import ctypes, subprocess, sys
    if sys.argv[1] == "hide":
        ctypes.CDLL(sys.argv[2])
    import llvmlite.binding as llvm
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto as T, helper as h
    f = llvm.get_host_cpu_features()
    g = h.make_graph([h.make_node("MatMul", ["a", "b"], ["y"])], "g",
                     [h.make_tensor_value_info(n, T.FLOAT, [67, 67]) for n in "ab"],
                     [h.make_tensor_value_info("y", T.FLOAT, [67, 67])])
    s = ort.InferenceSession(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString(),
                             providers=["CPUExecutionProvider"])
    a, b = (np.random.default_rng(int(sys.argv[3]) + i).standard_normal((67, 67)).astype(np.float32) for i in (0, 1))
    err = np.abs(s.run(None, {"a": a, "b": b})[0] - a.astype(np.float64) @ b).max()
    child = subprocess.run([sys.executable, "-c", "import llvmlite.binding as l; print(l.get_host_cpu_features()['avx512f'])"],
                           capture_output=True, text=True).stdout.strip()
    # the host path's code for a vectorizable loop: zmm registers only where CPUID grants AVX-512,
    # whatever the cpu name (znver5, sapphirerapids) implies
    from tcc.dialects.conversions.loop_to_native.target import optimize, target_machine
    asm = target_machine().emit_assembly(optimize(open(sys.argv[4]).read()))
    # tcc's kernel choices follow CPUID too: the cpu accelerator's library, and the int8 tile
    # for B packed as VNNI bytes (AVX-VNNI's where --keep-avx-vnni leaves it)
    from tcc.accelerators.cpu import build
    from tcc.runtime import native
    lib = ctypes.CDLL(native.load())
    lib.tcc_matmul_i8_tile.restype = ctypes.c_char_p
    print(f["avx512f"], f["avx2"], err < 1e-3, child, "zmm" in asm, "ymm" in asm or "zmm" in asm,
          f.get("avxvnni", False), build.best_isa(), lib.tcc_matmul_i8_tile(2).decode(),
          lib.tcc_matmul_i8_tile(3).decode())
""")
LOOP = """
define void @f(float* noalias %a, float* noalias %b) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%n, %loop]
  %pa = getelementptr float, float* %a, i64 %i
  %x = load float, float* %pa
  %y = fmul float %x, 3.0
  %pb = getelementptr float, float* %b, i64 %i
  store float %y, float* %pb
  %n = add i64 %i, 1
  %c = icmp ult i64 %n, 4096
  br i1 %c, label %loop, label %exit
exit:
  ret void
}"""


def test_cpuid_hides_avx512_in_the_process_only(tmp_path, rng):
    so = tmp_path / "hide.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so), os.path.join(REPO, "bench", "hide_avx512.c")],
                   check=True)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    seed = str(int(rng.integers(1 << 30)))
    loop = tmp_path / "loop.ll"
    loop.write_text(LOOP)
    env = {k: v for k, v in os.environ.items() if k not in ("TCC_CPU_ISA", "TCC_HIDE_CPUID")}
    modes = {"hide": "", "keep": "avx512-keep-avxvnni", "vnni": "vnni", "plain": ""}
    out = {mode: subprocess.run([sys.executable, str(probe), "plain" if mode == "plain" else "hide", str(so), seed,
                                 str(loop)], capture_output=True, text=True, timeout=120,
                                env=dict(env, TCC_HIDE_CPUID=m) if m else env)
           for mode, m in modes.items()}
    for mode, r in out.items():
        assert r.returncode == 0, (mode, r.stderr[-2000:])
    vnni = "avx_vnni" in FLAGS
    no_vnni_tile = "avxvnni" if vnni else "avx2-nibbles"
    assert out["hide"].stdout.split() == ["False", "True", "True", "True", "False", "True", "False", "avx2",
                                          "avx2-nibbles", "avx2"]
    assert out["keep"].stdout.split() == ["False", "True", "True", "True", "False", "True", str(vnni), "avx2",
                                          no_vnni_tile, "avxvnni" if vnni else "avx2"]
    # VNNI hidden: AVX-512's code stays (the pair-safe bytes' zmm tile; VNNI bytes on A's nibbles)
    assert out["vnni"].stdout.split() == ["True", "True", "True", "True", "True", "True", "False", "avx512",
                                          "avx2-nibbles", "avx512bw"]
    *plain, tile2, tile3 = out["plain"].stdout.split()
    assert plain == ["True", "True", "True", "True", "True", "True", str(vnni), "avx512"]
    best = {"amx", "avx512vnni"} if "avx512_vnni" in FLAGS else {no_vnni_tile}
    assert tile2 in best and tile3 in (best if "avx512_vnni" in FLAGS or vnni else {"avx512bw"}), (tile2, tile3)
