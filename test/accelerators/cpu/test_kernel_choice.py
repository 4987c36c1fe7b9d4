"""Kernel selection for every ISA build, on any machine: a model compiled
with TCC_CPU_ISA=<isa> (compiled, never run, so the AVX-512 build's choices
are checked on an AVX2 host too) calls exactly the kernel codegen's
selection functions answer for that build (conv_packed, wino_tile,
narrow_gemm, the small-M rule), for convolutions and GEMMs of every family.
The kernels themselves are tested where they run (test_conv_paths.py,
test_gemm_paths.py)."""
import numpy as np
import pytest
from onnx import helper

from tcc.accelerators.cpu import build, codegen

from .helpers import kernels_for_isa, model, rand
from .test_conv_paths import conv_model, out_size

CONV_KERNELS = {"tcc_cpu_conv2d", "tcc_cpu_conv2d_packed", "tcc_cpu_conv2d_wino", "tcc_cpu_conv2d_pw",
                "tcc_cpu_conv2d_pw_split_c", "tcc_cpu_conv2d_pw_strided"}
GEMM_KERNELS = {"tcc_cpu_gemm", "tcc_cpu_gemm_packed", "tcc_cpu_gemm_narrow"}

# (n, c, h, w, m, k, strides, pads, group): ResNet-like 3x3 layers (Winograd candidates on AVX-512),
# a stem, a strided 3x3, a grouped one, a pointwise one, few channels (the rows kernel's shapes),
# strided 1x1s (ResNet's shortcuts; one padded)
CONVS = [
    (1, 64, 28, 28, 64, 3, (1, 1), (1, 1, 1, 1), 1),
    (1, 32, 14, 14, 48, 3, (1, 1), (1, 1, 1, 1), 1),
    (1, 3, 56, 56, 32, 7, (2, 2), (3, 3, 3, 3), 1),
    (1, 24, 20, 17, 16, 3, (2, 2), (1, 1, 1, 1), 1),
    (1, 12, 9, 10, 40, 3, (1, 1), (1, 1, 1, 1), 2),
    (1, 40, 12, 12, 33, 1, (1, 1), (0, 0, 0, 0), 1),
    (1, 3, 60, 224, 24, 3, (2, 2), (1, 1, 1, 1), 1),
    (1, 8, 30, 70, 20, 4, (4, 4), (0, 0, 0, 0), 1),
    (1, 64, 56, 56, 128, 1, (2, 2), (0, 0, 0, 0), 1),
    (1, 20, 15, 9, 12, 1, (2, 2), (1, 0, 0, 1), 1),
]


def expected_conv(case, isa):
    """The kernel codegen.op_conv documents for a constant-weight conv, from
    the selection functions' answers for `isa`."""
    n, c, h, w, m, k, s, pads, g = case
    oh, ow = out_size(h, k, s[0], 1, pads[0], pads[2]), out_size(w, k, s[1], 1, pads[1], pads[3])
    xs, ws, ys = (n, c, h, w), (m, c // g, k, k), (n, m, oh, ow)
    if (k, k, *s, *pads, g) == (1, 1, 1, 1, 0, 0, 0, 0, 1):
        return "tcc_cpu_conv2d_pw"
    if codegen.pw_strided(ws, s, pads, g, isa):
        return "tcc_cpu_conv2d_pw_strided"
    if codegen.wino_tile(xs, ws, ys, s, (1, 1), pads, g, isa):
        return "tcc_cpu_conv2d_wino"
    if codegen.conv_packed(xs, ws, ys, s, pads, g, isa):
        return "tcc_cpu_conv2d_packed"
    return "tcc_cpu_conv2d"


@pytest.mark.parametrize("isa", build.ISA_ORDER)
@pytest.mark.parametrize("case", CONVS, ids=lambda c: "x".join(map(str, c[:6])))
def test_conv_kernel_follows_the_selection(case, isa, monkeypatch):
    n, c, h, w, m, k, s, pads, g = case
    mdl, _ = conv_model(n, c, h, w, m, k, s, (1, 1), pads, g)
    called = kernels_for_isa(mdl, isa, monkeypatch) & CONV_KERNELS
    assert called == {expected_conv(case, isa)}, (isa, case, called)


def test_the_selection_differs_by_isa_where_documented():
    # the AVX-512 build packs constant weights and runs Winograd on ResNet's 3x3 layers
    for case in CONVS[:2]:
        assert expected_conv(case, "avx512") == "tcc_cpu_conv2d_wino"
    assert expected_conv(CONVS[3], "avx512") == "tcc_cpu_conv2d_packed"
    assert all(expected_conv(c, isa) == "tcc_cpu_conv2d_pw" for c in CONVS[5:6] for isa in build.ISA_ORDER)
    # ResNet's unpadded 1x1 stride-2 shortcuts: subsampled into conv_pw.c's kernel on AVX2 and AVX-512
    assert [expected_conv(CONVS[8], isa) for isa in ("avx512", "avx2", "generic")] == \
        ["tcc_cpu_conv2d_pw_strided", "tcc_cpu_conv2d_pw_strided", "tcc_cpu_conv2d"]
    assert expected_conv(CONVS[9], "avx2") == "tcc_cpu_conv2d_packed"
    # narrow B: the AVX-512 panels win from 14 columns at K = 256, the portable ones lose below 17
    assert (codegen.narrow_gemm("avx512", 10, 300), codegen.narrow_gemm("avx512", 14, 300)) == (True, False)
    assert codegen.narrow_gemm("avx512", 8, 128) and not codegen.narrow_gemm("avx512", 8, 100)


# (m, k, n): batch-1 rows (gemm.c streams B), a classifier's few columns, wide panels, the crossovers
GEMMS = [(1, 512, 1000), (64, 300, 10), (64, 256, 14), (64, 128, 8), (32, 100, 8), (70, 64, 200)]


def expected_gemm(m, k, n, isa):
    if m <= codegen.SMALL_M:
        return "tcc_cpu_gemm"
    return "tcc_cpu_gemm_narrow" if codegen.narrow_gemm(isa, n, k) else "tcc_cpu_gemm_packed"


@pytest.mark.parametrize("isa", build.ISA_ORDER)
@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_gemm_kernel_follows_the_selection(op, isa, monkeypatch):
    got, want = [], []
    for m, k, n in GEMMS:
        wt = rand(k, n) if op == "MatMul" else rand(n, k)
        node = helper.make_node(op, ["x", "w"], ["y"], **({"transB": 1} if op == "Gemm" else {}))
        mdl = model([node], [("x", (m, k))], [("y", (m, n))], [("w", wt)])
        got.append(kernels_for_isa(mdl, isa, monkeypatch) & GEMM_KERNELS)
        want.append({expected_gemm(m, k, n, isa)})
    assert got == want, list(zip(GEMMS, got, want))


def test_unknown_isa_is_refused(monkeypatch):
    monkeypatch.setenv("TCC_CPU_ISA", "avx9000")
    with pytest.raises(build.CpuBuildError, match="TCC_CPU_ISA=avx9000: unknown"):
        build.best_isa()


def test_best_isa_is_a_pure_function_of_the_flags(monkeypatch):
    monkeypatch.delenv("TCC_CPU_ISA", raising=False)
    for isa in build.ISA_ORDER:
        assert build.best_isa(set(build.ISA_NEEDS[isa])) == isa
    assert build.best_isa((build.ISA_NEEDS["avx512"] | build.ISA_NEEDS["avx2"]) - {"avx512bw"}) == "avx2"
    assert build.best_isa(set()) == "generic"
    monkeypatch.setenv("TCC_CPU_ISA", "generic")
    assert build.best_isa(set(build.ISA_NEEDS["avx512"])) == "generic"  # forced: the env wins
    np.testing.assert_equal(sorted(build.ISA_ORDER), sorted(build.ISA_NEEDS))


# Depthwise convolutions choose their path inside the kernel library (conv_dw.c), per build:
# (c, h, w, k, stride, dilation, pad) -> {isa: path}. "Same" 3x3 stride-1 planes run row tiles on
# the plane in place (AVX-512 from 12 columns; below, its flat sweep with masked loads); other
# shapes: AVX-512 reads planes in place with masked loads, the 16-register builds pack every plane
# and run whole-vector loads, 3x3 stride 1 as row tiles; the generic build packs all.
DW_CASES = [
    ((32, 28, 28, 3, 1, 1, 1), {"avx512": "rows3x3-in-place", "avx2": "rows3x3-in-place", "generic": "rows3x3"}),
    ((32, 56, 48, 3, 1, 1, 1), {"avx512": "rows3x3-in-place", "avx2": "rows3x3-in-place", "generic": "rows3x3"}),
    ((16, 9, 12, 3, 1, 1, 1), {"avx512": "rows3x3-in-place", "avx2": "rows3x3-in-place", "generic": "rows3x3"}),
    ((24, 17, 11, 3, 1, 1, 1), {"avx512": "flat", "avx2": "rows3x3-in-place", "generic": "rows3x3"}),
    ((96, 112, 112, 3, 2, 1, 1), {"avx512": "s2", "avx2": "whole-vectors", "generic": "whole-vectors"}),
    ((8, 20, 20, 5, 1, 1, 2), {"avx512": "flat", "avx2": "whole-vectors", "generic": "whole-vectors"}),
    ((8, 20, 20, 3, 1, 2, 2), {"avx512": "flat", "avx2": "whole-vectors", "generic": "whole-vectors"}),
    ((8, 20, 20, 3, 1, 1, 0), {"avx512": "in-place", "avx2": "in-place", "generic": "in-place"}),
]

_LIB = """
import ctypes, json, sys
from tcc.accelerators.cpu import build
lib = build.load_kernels()
L = ctypes.c_long
class P(ctypes.Structure):
    _fields_ = [(n, L) for n in "n c h w m kh kw oh ow sh sw dh dw pt pl pb pr group".split()]
out = []
"""
_DW_PATHS = _LIB + """
lib.tcc_cpu_conv2d_dw_path.restype = ctypes.c_char_p
for c, h, w, k, s, d, pad in json.loads(sys.argv[1]):
    oh, ow = [(n + 2 * pad - d * (k - 1) - 1) // s + 1 for n in (h, w)]
    p = P(1, c, h, w, c, k, k, oh, ow, s, s, d, d, pad, pad, pad, pad, c)
    out.append(lib.tcc_cpu_conv2d_dw_path(ctypes.byref(p)).decode())
print(json.dumps([lib.tcc_cpu_isa().decode(), out]))
"""
_PACKED_PATHS = _LIB + """
lib.tcc_cpu_conv2d_packed_path.restype = ctypes.c_char_p
for c, h, w, m, k, s, pad in json.loads(sys.argv[1]):
    oh, ow = [(n + 2 * pad - k) // s + 1 for n in (h, w)]
    p = P(1, c, h, w, m, k, k, oh, ow, s, s, 1, 1, pad, pad, pad, pad, 1)
    out.append(lib.tcc_cpu_conv2d_packed_path(ctypes.byref(p)).decode())
print(json.dumps([lib.tcc_cpu_isa().decode(), out]))
"""


def _paths_in_build(isa, script, cases, threads=None):
    """`script`'s answers for `cases` from the library built for `isa`, loaded
    in a fresh process (TCC_CPU_ISA is read once), its pool of `threads`
    (TCC_NUM_THREADS; the default: this machine's CPUs)."""
    import json
    import os
    import subprocess
    import sys
    if not build.ISA_NEEDS[isa] <= build.cpu_flags():
        pytest.skip(f"this CPU cannot run the {isa} kernel library")
    env = dict(os.environ, TCC_CPU_ISA=isa)
    if threads is not None:
        env["TCC_NUM_THREADS"] = str(threads)
    r = subprocess.run([sys.executable, "-c", script, json.dumps(cases)], env=env, capture_output=True, text=True,
                       check=True)
    got_isa, paths = json.loads(r.stdout)
    assert got_isa == isa
    return paths


@pytest.mark.parametrize("isa", build.ISA_ORDER)
def test_depthwise_path_per_isa(isa):
    """The library built for `isa` takes the depthwise path documented for that build."""
    paths = _paths_in_build(isa, _DW_PATHS, [c for c, _ in DW_CASES])
    assert paths == [want[isa] for _, want in DW_CASES], list(zip(DW_CASES, paths))


# Constant-weight convolutions codegen sends to tcc_cpu_conv2d_packed run, inside the library, on
# conv_rows.c (positions in the lanes) or conv_ocv.c (output channels in the lanes):
# (c, h, w, m, k, stride, pad) -> {isa: path}. AVX-512: K = c*k*k <= 64 on rows of >= 49 columns;
# AVX2: K <= 64 on rows of >= 9 columns, and K <= 160 on rows of >= 96 (ResNet's 7x7 stem),
# more than one tap.
PACKED_CASES = [
    ((3, 224, 224, 32, 3, 2, 1), {"avx512": "rows", "avx2": "rows", "generic": "ocv"}),   # MobileNetV2's stem
    ((3, 224, 224, 64, 7, 2, 3), {"avx512": "ocv", "avx2": "rows", "generic": "ocv"}),    # ResNet's: K = 147
    ((3, 224, 224, 96, 4, 4, 0), {"avx512": "rows", "avx2": "rows", "generic": "ocv"}),   # patchify: K = 48
    ((16, 56, 56, 32, 3, 1, 1), {"avx512": "ocv", "avx2": "ocv", "generic": "ocv"}),      # K = 144, 56 columns
    ((3, 14, 12, 16, 3, 1, 1), {"avx512": "ocv", "avx2": "rows", "generic": "ocv"}),      # 12 columns
    ((3, 14, 8, 16, 3, 1, 1), {"avx512": "ocv", "avx2": "ocv", "generic": "ocv"}),        # one vector
    ((32, 112, 112, 32, 3, 2, 1), {"avx512": "ocv", "avx2": "ocv", "generic": "ocv"}),    # K = 288
    ((16, 224, 224, 32, 1, 2, 0), {"avx512": "rows", "avx2": "ocv", "generic": "ocv"}),   # AVX2: no 1x1
]


@pytest.mark.parametrize("isa", build.ISA_ORDER)
def test_packed_conv_path_per_isa(isa):
    """The library built for `isa` runs packed convolutions on the kernel documented for that build."""
    paths = _paths_in_build(isa, _PACKED_PATHS, [c for c, _ in PACKED_CASES])
    assert paths == [want[isa] for _, want in PACKED_CASES], list(zip(PACKED_CASES, paths))


# A pointwise conv fused with the depthwise one reading it (tcc_cpu_conv2d_pw_dw) runs, per build,
# on conv_pwdw8.c (the expanded channels in the lanes, while its padded buffers stay under 2 MB: AVX2
# in items of two 8-channel blocks, in bands of output rows on 56 rows or more with several threads;
# AVX-512 in items of four, split into bands of output rows where
# the pool's threads cannot share that few items evenly, unless the plane has under 4 rows a thread)
# or plane by plane (conv_pw.c, with conv_dw.c's paths above):
# (c, h, w, hidden, k, stride, pad) -> {isa: path at 1 thread, "avx512/2": AVX-512 at 2 threads}.
PWDW_CASES = [
    ((16, 112, 112, 96, 3, 2, 1), {"avx512": "blocked8", "avx512/2": "blocked8", "avx2": "blocked8",
                                   "generic": "planes"}),  # MobileNetV2: 3 items, 2 bands each
    ((24, 56, 56, 144, 3, 1, 1), {"avx512": "blocked8", "avx512/2": "blocked8", "avx2": "blocked8",
                                  "generic": "planes"}),   # 5 items, 2 bands each
    ((96, 14, 14, 576, 3, 1, 1), {"avx512": "blocked8", "avx512/2": "blocked8", "avx2": "blocked8",
                                  "generic": "planes"}),   # 18 items
    ((160, 7, 7, 960, 3, 1, 1), {"avx512": "blocked8", "avx512/2": "blocked8", "avx2": "blocked8",
                                 "generic": "planes"}),
    ((5, 9, 11, 20, 5, 2, 2), {"avx512": "blocked8", "avx512/2": "planes", "avx2": "blocked8",
                               "generic": "planes"}),      # 1 item of 5 output rows
    ((16, 16, 16, 64, 3, 1, 1), {"avx512": "blocked8", "avx512/2": "blocked8", "avx2": "blocked8",
                                 "generic": "planes"}),    # efficientnet: 2 items
    ((16, 16, 16, 64, 3, 2, 1), {"avx512": "blocked8", "avx512/2": "blocked8", "avx2": "blocked8",
                                 "generic": "planes"}),
    ((24, 8, 8, 96, 3, 1, 1), {"avx512": "blocked8", "avx512/2": "blocked8", "avx2": "blocked8",
                               "generic": "planes"}),      # 3 items of 8 rows: 2 bands each
    ((24, 7, 7, 96, 3, 1, 1), {"avx512": "blocked8", "avx512/2": "planes", "avx2": "blocked8",
                               "generic": "planes"}),      # 3 items of 7 rows
    ((8, 20, 9, 520, 3, 1, 1), {"avx512": "blocked8", "avx512/2": "blocked8", "avx2": "blocked8",
                                "generic": "planes"}),     # 17 items: 8 a thread or more, uneven is fine
    ((8, 200, 200, 16, 3, 1, 1), {"avx512": "planes", "avx512/2": "planes", "avx2": "planes",
                                  "generic": "planes"}),   # 2.6 MB (AVX-512: 5.2)
]
_PWDW_PATHS = _LIB + """
lib.tcc_cpu_conv2d_pw_dw_path.restype = ctypes.c_char_p
for c, h, w, m, k, s, pad in json.loads(sys.argv[1]):
    oh, ow = [(n + 2 * pad - k) // s + 1 for n in (h, w)]
    pp = P(1, c, h, w, m, 1, 1, h, w, 1, 1, 1, 1, 0, 0, 0, 0, 1)
    pd = P(1, m, h, w, m, k, k, oh, ow, s, s, 1, 1, pad, pad, pad, pad, m)
    out.append(lib.tcc_cpu_conv2d_pw_dw_path(ctypes.byref(pp), ctypes.byref(pd)).decode())
print(json.dumps([lib.tcc_cpu_isa().decode(), out]))
"""


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("isa", build.ISA_ORDER)
def test_pw_dw_path_per_isa(isa, threads):
    """The library built for `isa` runs fused pointwise -> depthwise pairs on the kernel documented for it."""
    paths = _paths_in_build(isa, _PWDW_PATHS, [c for c, _ in PWDW_CASES], threads)
    key = f"{isa}/{threads}" if threads > 1 and f"{isa}/{threads}" in PWDW_CASES[0][1] else isa
    assert paths == [want[key] for _, want in PWDW_CASES], list(zip(PWDW_CASES, paths))
