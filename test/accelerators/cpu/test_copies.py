"""Slice, Expand and Concat on the cpu accelerator (kernels/copy.c's strided
gather and row copies): compiled models against onnxruntime on fresh random
data (steps of 2, -1, -2, clamped and negative bounds, opset-9 attributes,
broadcasts on leading and middle dims, Concat on every axis with a
zero-size part, the rotate-half pattern in one partition), a Slice whose
bounds are computed at run time, and the two kernels called directly in
every ISA build against numpy views (negative and zero strides, rows split
across threads)."""
import ctypes

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc

from .helpers import check, cpu_steps, host_steps, model, rand
from .test_gemm_paths import P, lib_at

H = helper.make_node
RNG = np.random.default_rng()  # reseeded per test by test/conftest.py
I64 = lambda *v: np.array(v, np.int64)  # noqa: E731


def slice_model(shape, starts, ends, axes=None, steps=None, opset=18):
    x = rand(*shape)
    if opset < 10:
        attrs = {"starts": starts, "ends": ends, **({"axes": axes} if axes is not None else {})}
        node = H("Slice", ["x"], ["s"], **attrs)
        inits = []
    else:
        names = ["x", "st", "en"] + (["ax"] if axes is not None or steps is not None else [])
        inits = [("st", I64(*starts)), ("en", I64(*ends))]
        if len(names) == 4:
            inits.append(("ax", I64(*(axes if axes is not None else range(len(starts))))))
        if steps is not None:
            names.append("sp")
            inits.append(("sp", I64(*steps)))
        node = H("Slice", names, ["s"])
    want = x[_numpy_index(shape, starts, ends, axes, steps)]
    # an elementwise op after it, so the slice is a copy inside the partition, not only an output
    m = model([node, H("Relu", ["s"], ["y"])], [("x", shape)], [("y", want.shape)], inits, opset=opset)
    return m, {"x": x}


def _numpy_index(shape, starts, ends, axes, steps):
    idx = [slice(None)] * len(shape)
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    for a, b, e, s in zip(axes, starts, ends, steps):
        idx[a] = slice(b, e, s)
    return tuple(idx)


@pytest.mark.parametrize("shape,starts,ends,axes,steps", [
    ((2, 12, 16, 64), [0], [32], [3], None),                   # rotary: first half of the head dim
    ((2, 12, 16, 64), [32], [2**62], [-1], None),              # second half, end clamped (INT64_MAX-like)
    ((3, 17, 9), [1, 2], [3, 15], [0, 1], [1, 2]),             # step 2 on a middle dim
    ((5, 23), [-1], [-2**62], [1], [-1]),                      # reversed rows: negative step, clamped end
    ((6, 7, 8), [5, -2], [0, 1], [0, 2], [-2, -2]),            # step -2 on two dims
    ((40,), [1], [39], [0], [2]),                              # 1-D, step 2
    ((4, 9, 10), [-100], [100], [1], None),                    # bounds past both ends: the whole dim
    ((1, 10, 4), [0, 2], [1, 3], [0, 1], None),                # to size-1 dims (coalesced away)
    ((8, 30), [3], [3], [1], None),                            # empty
])
def test_slice(shape, starts, ends, axes, steps, tmp_path):
    m, feeds = slice_model(shape, starts, ends, axes, steps)
    empty = 0 in [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim]
    check(m, feeds, rtol=0, atol=0, tmp_path=tmp_path, kernel=None if empty else "tcc_cpu_strided")


def test_slice_opset9(tmp_path):
    """Opset < 10 Slice: starts/ends/axes are attributes, steps always 1."""
    m, feeds = slice_model((4, 10, 6), [1, -4], [3, 100], [0, 1], opset=9)
    check(m, feeds, rtol=0, atol=0, tmp_path=tmp_path, kernel="tcc_cpu_strided")


def test_slice_runtime_bounds():
    """Bounds computed from the data (an output shape that only the run
    knows): each run at its own bound, on fresh data."""
    nodes = [H("ReduceMax", ["x"], ["mx"], keepdims=0),
             H("Cast", ["mx"], ["mi"], to=TensorProto.INT64),
             H("Clip", ["mi", "lo", "hi"], ["e1"]),
             H("Unsqueeze", ["e1", "z"], ["e"]),
             H("Slice", ["x", "st", "e", "ax"], ["s"]), H("Relu", ["s"], ["y"])]
    inits = [("lo", np.array(1, np.int64)), ("hi", np.array(9, np.int64)), ("z", I64(0)),
             ("st", I64(0)), ("ax", I64(1))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, None])],
                          [numpy_helper.from_array(v, n) for n, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    sess = tcc.load(tcc.compile(m, maccel=["cpu"]))
    for scale in (1.5, 4.0):
        x = rand(4, 10, scale=scale)
        (y,) = sess.run({"x": x})
        e = int(np.clip(np.floor(x.max()), 1, 9))
        np.testing.assert_array_equal(y, np.maximum(x[:, :e], 0))


@pytest.mark.parametrize("shape,out", [
    ((1, 4, 1, 16), (3, 4, 5, 16)),   # grouped-query keys: a middle dim repeated, batch too
    ((7,), (2, 3, 7)),                # leading dims added
    ((5, 1), (5, 33)),                # the last dim repeated (stride 0 in the row)
    ((2, 1, 3), (2, 4, 3)),
])
def test_expand(shape, out, tmp_path):
    x = rand(*shape)
    m = model([H("Expand", ["x", "sh"], ["e"]), H("Relu", ["e"], ["y"])], [("x", shape)], [("y", out)],
              [("sh", I64(*out))])
    check(m, {"x": x}, rtol=0, atol=0, tmp_path=tmp_path, kernel="tcc_cpu_strided")


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_concat(axis, tmp_path):
    base = (3, 4, 5)
    sizes = [2, 0, 7, 1]  # a zero-size part among them
    shapes = [tuple(n if d == axis % 3 else b for d, b in enumerate(base)) for n in sizes]
    xs = [rand(*s) for s in shapes]
    names = [f"x{i}" for i in range(len(xs))]
    out = np.concatenate(xs, axis=axis)
    m = model([H("Concat", names, ["c"], axis=axis), H("Relu", ["c"], ["y"])], list(zip(names, shapes)),
              [("y", out.shape)])
    feeds = dict(zip(names, xs))
    check(m, feeds, rtol=0, atol=0, tmp_path=tmp_path, kernel="tcc_cpu_copy_rows")


def test_rotary_pattern_one_partition(tmp_path):
    """The exporters' rotate-half (two Slices, a Neg, a Concat) with the
    products around it: one cpu partition, no host step."""
    b, h, s, d = 2, 4, 8, 32
    x, cos, sin = rand(b, h, s, d), rand(1, 1, s, d), rand(1, 1, s, d)
    nodes = [H("Slice", ["x", "z", "half", "ax"], ["x1"]), H("Slice", ["x", "half", "big", "ax"], ["x2"]),
             H("Neg", ["x2"], ["nx2"]), H("Concat", ["nx2", "x1"], ["rot"], axis=-1),
             H("Mul", ["x", "cos"], ["a"]), H("Mul", ["rot", "sin"], ["bb"]), H("Add", ["a", "bb"], ["y"])]
    inits = [("z", I64(0)), ("half", I64(d // 2)), ("big", I64(2**62)), ("ax", I64(-1)), ("cos", cos), ("sin", sin)]
    m = model(nodes, [("x", x.shape)], [("y", x.shape)], inits)
    sess = check(m, {"x": x}, tmp_path=tmp_path)
    assert len(cpu_steps(sess)) == 1 and not host_steps(sess), sess.manifest["plan"]


# ---- the kernels, called directly ------------------------------------------------------
def _view(base, offset, shape, strides):
    return np.lib.stride_tricks.as_strided(base[offset:], shape=shape, strides=[4 * s for s in strides])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
def test_strided_kernel(isa, threads):
    lib = lib_at(isa, threads)
    f = lib.tcc_cpu_strided
    f.argtypes = [ctypes.c_int, P, P, P, P]
    f.restype = None
    base = rng_data(200_000)
    # (offset, out shape, source strides): negative steps, zero strides, the 16 x 16 blocks
    # (last dim strided, the one before it adjacent), rows split across threads
    cases = [(0, (64, 512), (512, 1)), (511, (64, 512), (512, -1)), (100, (3, 40, 17), (0, 17, 1)),
             (5, (33, 35), (1, 40)), (1399, (33, 35), (-1, -40)), (7, (5, 6, 7, 8), (400, 0, 50, 2)),
             (0, (37,), (3,)), (50, (37,), (-1,)), (9, (2, 1000), (0, 1)), (0, (40, 1), (2, 0))]
    for off, shape, strides in cases:
        want = _view(base, off, shape, strides).copy()
        y = np.empty(want.size, np.float32)
        sh, st = (ctypes.c_long * len(shape))(*shape), (ctypes.c_long * len(strides))(*strides)
        f(len(shape), sh, st, base[off:].ctypes.data, y.ctypes.data)
        np.testing.assert_array_equal(y, want.ravel(), err_msg=f"{off} {shape} {strides}")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
def test_copy_rows_kernel(isa, threads):
    lib = lib_at(isa, threads)
    f = lib.tcc_cpu_copy_rows
    f.argtypes = [ctypes.c_long, ctypes.c_long, P, ctypes.c_long, P, ctypes.c_long]
    f.restype = None
    for rows, cols, sld, dld in ((1, 5, 5, 9), (300, 17, 20, 40), (3, 70000, 70000, 70003), (1000, 1, 1, 3)):
        src = rng_data(rows * sld).reshape(rows, sld)
        dst = rng_data(rows * dld).reshape(rows, dld)
        want = dst.copy()
        want[:, :cols] = src[:, :cols]
        f(rows, cols, src.ctypes.data, sld, dst.ctypes.data, dld)
        np.testing.assert_array_equal(dst, want, err_msg=f"{rows}x{cols}")


def rng_data(n):
    return RNG.standard_normal(n).astype(np.float32)
