"""Every kernel of the cpu accelerator against onnxruntime, on fresh random
data with awkward sizes (odd, prime, not multiples of the vector width)."""
import os

import numpy as np
import pytest
from onnx import helper

import tcc

from .helpers import RNG, c_source_of, check, model, rand

H = helper.make_node


# ---- GEMM ------------------------------------------------------------------------
@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("m,k,n", [(1, 7, 13), (37, 53, 61), (129, 67, 250)])
def test_gemm_trans(ta, tb, m, k, n):
    a = rand(k, m) if ta else rand(m, k)
    b = rand(n, k) if tb else rand(k, n)
    mdl = model([H("Gemm", ["a", "b"], ["y"], transA=ta, transB=tb, alpha=0.75)],
                [("a", a.shape)], [("y", (m, n))], [("b", b)])
    check(mdl, {"a": a})


@pytest.mark.parametrize("cshape", [(), (1,), (61,), (1, 61), (37, 1), (37, 61)])
def test_gemm_bias_beta_relu(cshape):
    a, b, c = rand(37, 53), rand(53, 61), rand(*cshape)
    mdl = model([H("Gemm", ["a", "b", "c"], ["g"], beta=0.5, alpha=1.5), H("Relu", ["g"], ["y"])],
                [("a", a.shape)], [("y", (37, 61))], [("b", b), ("c", c)])
    check(mdl, {"a": a})


def test_gemm_non_constant_operands():
    a, b, c = rand(19, 33), rand(33, 45), rand(45)
    mdl = model([H("Gemm", ["a", "b", "c"], ["y"])], [("a", a.shape), ("b", b.shape), ("c", c.shape)],
                [("y", (19, 45))])
    check(mdl, {"a": a, "b": b, "c": c})


# ---- MatMul ----------------------------------------------------------------------------
@pytest.mark.parametrize("ashape,bshape", [
    ((3, 5), (5, 7)), ((2, 3, 17, 9), (9, 11)), ((2, 1, 5, 9), (3, 9, 4)), ((4, 6, 8), (4, 8, 5)),
    ((7,), (7, 3)), ((2, 5, 7), (7,)), ((130, 70), (70, 90)), ((1, 4, 33, 8), (1, 4, 8, 33))])
def test_matmul_broadcast(ashape, bshape):
    a, b = rand(*ashape), rand(*bshape)
    out = np.matmul(a, b).shape
    mdl = model([H("MatMul", ["a", "b"], ["y"])], [("a", ashape), ("b", bshape)], [("y", out)])
    check(mdl, {"a": a, "b": b})


def test_matmul_add_relu_fused():
    a, w, bias = rand(3, 29, 40), rand(40, 23), rand(23)
    mdl = model([H("MatMul", ["a", "w"], ["m"]), H("Add", ["m", "b"], ["s"]), H("Relu", ["s"], ["y"])],
                [("a", a.shape)], [("y", (3, 29, 23))], [("w", w), ("b", bias)])
    sess = check(mdl, {"a": a})
    from tcc.accelerators.cpu.runtime import c_source
    assert sess is not None


def test_matmul_residual():
    a, w, r = rand(31, 40), rand(40, 23), rand(31, 23)
    mdl = model([H("MatMul", ["a", "w"], ["m"]), H("Add", ["r", "m"], ["y"])],
                [("a", a.shape), ("r", r.shape)], [("y", (31, 23))], [("w", w)])
    check(mdl, {"a": a, "r": r})


@pytest.mark.parametrize("scale_on", ["scores", "operands", "div"])
@pytest.mark.parametrize("b,s,h,d", [(1, 13, 3, 8), (2, 7, 2, 5)])
def test_attention_transposes_and_scale_fold_into_the_gemm(scale_on, b, s, h, d):
    """q, k, v (B, S, H*D) -> heads by Reshape + Transpose, scores scaled by
    a constant, softmax, back by Transpose + Reshape: the transposes become
    the batched GEMM's strides and the scale its alpha (lower.py
    fold_transposes, _scalar_factor), no copy kernel or scaling loop left."""
    q, k, v = rand(b, s, h * d), rand(b, s, h * d), rand(b, s, h * d)
    c = np.array(1 / np.sqrt(d), np.float32)
    heads = np.array([b, s, h, d], np.int64)
    nodes = [H("Reshape", [n, "heads"], [n + "4"]) for n in "qkv"]
    nodes += [H("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]), H("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
              H("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3])]
    if scale_on == "operands":
        nodes += [H("Mul", ["qt", "c"], ["qs"]), H("Mul", ["c", "kt"], ["ks"]), H("MatMul", ["qs", "ks"], ["sc"])]
        c = np.array(d ** -0.25, np.float32)
    else:
        nodes += [H("MatMul", ["qt", "kt"], ["raw"]),
                  H("Div", ["raw", "c"], ["sc"]) if scale_on == "div" else H("Mul", ["raw", "c"], ["sc"])]
        if scale_on == "div":
            c = np.array(np.sqrt(d), np.float32)
    nodes += [H("Softmax", ["sc"], ["p"]), H("MatMul", ["p", "vt"], ["o"]),
              H("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), H("Reshape", ["ot", "flat"], ["y"])]
    mdl = model(nodes, [(n, q.shape) for n in "qkv"], [("y", q.shape)],
                [("heads", heads), ("c", c), ("flat", np.array([b, s, h * d], np.int64))])
    sess = check(mdl, {"q": q, "k": k, "v": v})
    src = c_source_of(sess.path)
    assert "tcc_cpu_transpose" not in src and "tcc_cpu_gemm_batch" in src
    assert "ew_" not in src, "the scale should be the GEMM's alpha"


# ---- Conv --------------------------------------------------------------------------------
CONV_CASES = [
    # n, c, h, w, m, k, stride, dilation, pads, group
    (1, 3, 17, 19, 8, 3, 1, 1, [1, 1, 1, 1], 1),
    (2, 5, 13, 11, 7, 3, 2, 1, [1, 0, 2, 1], 1),
    (1, 4, 15, 15, 6, 3, 1, 2, [2, 2, 2, 2], 1),
    (1, 6, 9, 10, 9, 1, 1, 1, [0, 0, 0, 0], 3),     # grouped 1x1
    (1, 8, 12, 12, 8, 3, 1, 1, [1, 1, 1, 1], 8),    # depthwise
    (2, 12, 15, 13, 12, 3, 2, 1, [1, 1, 1, 1], 12), # depthwise stride 2
    (1, 5, 11, 14, 5, 5, 1, 1, [2, 2, 2, 2], 5),    # depthwise 5x5
    (1, 6, 10, 9, 12, 3, 1, 1, [1, 1, 1, 1], 6),    # channel multiplier 2
    (1, 16, 7, 7, 24, 1, 1, 1, [0, 0, 0, 0], 1),    # pointwise
    (1, 3, 29, 31, 10, 7, 2, 1, [3, 3, 3, 3], 1),   # stem
    (1, 8, 8, 8, 4, 2, 3, 1, [0, 0, 1, 1], 2),
]


@pytest.mark.parametrize("n,c,h,w,m,k,s,d,pads,g", CONV_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv(n, c, h, w, m, k, s, d, pads, g, bias):
    x, wt, b = rand(n, c, h, w), rand(m, c // g, k, k), rand(m)
    ins = ["x", "w"] + (["b"] if bias else [])
    node = H("Conv", ins, ["y"], kernel_shape=[k, k], strides=[s, s], dilations=[d, d], pads=pads, group=g)
    oh = (h + pads[0] + pads[2] - d * (k - 1) - 1) // s + 1
    ow = (w + pads[1] + pads[3] - d * (k - 1) - 1) // s + 1
    inits = [("w", wt)] + ([("b", b)] if bias else [])
    check(model([node], [("x", x.shape)], [("y", (n, m, oh, ow))], inits), {"x": x})


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad(auto_pad):
    x, wt = rand(1, 3, 10, 11), rand(4, 3, 3, 3)
    node = H("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], strides=[2, 2], auto_pad=auto_pad)
    out = (1, 4, 5, 6) if auto_pad != "VALID" else (1, 4, 4, 5)
    check(model([node], [("x", x.shape)], [("y", out)], [("w", wt)]), {"x": x})


def test_conv_weights_as_input():
    x, wt = rand(1, 4, 9, 9), rand(5, 4, 3, 3)
    node = H("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    check(model([node], [("x", x.shape), ("w", wt.shape)], [("y", (1, 5, 9, 9))]), {"x": x, "w": wt})


@pytest.mark.parametrize("g", [1, 6])
@pytest.mark.parametrize("act", ["Relu", "Clip", "Sigmoid"])
def test_conv_bias_act_and_residual(act, g):
    x, wt, b, r = rand(1, 6, 11, 9), rand(6, 6 // g, 3, 3), rand(6), rand(1, 6, 11, 9)
    nodes = [H("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=g),
             H("Add", ["c", "r"], ["s"])]
    inits = [("w", wt), ("b", b)]
    if act == "Clip":
        nodes.append(H("Clip", ["s", "lo", "hi"], ["y"]))
        inits += [("lo", np.array(0, np.float32)), ("hi", np.array(0.5, np.float32))]
    else:
        nodes.append(H(act, ["s"], ["y"]))
    check(model(nodes, [("x", x.shape), ("r", r.shape)], [("y", x.shape)], inits), {"x": x, "r": r})


def test_conv_batchnorm_folded():
    x, wt = rand(2, 3, 12, 12), rand(7, 3, 3, 3)
    bn = [("sc", rand(7) + 1), ("bb", rand(7)), ("mu", rand(7)), ("var", np.abs(rand(7)) + 0.5)]
    nodes = [H("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             H("BatchNormalization", ["c", "sc", "bb", "mu", "var"], ["n"], epsilon=1e-3),
             H("Relu", ["n"], ["y"])]
    check(model(nodes, [("x", x.shape)], [("y", (2, 7, 12, 12))], [("w", wt)] + bn), {"x": x})


def test_batchnorm_alone():
    x = rand(2, 5, 7, 3)
    bn = [("sc", rand(5)), ("bb", rand(5)), ("mu", rand(5)), ("var", np.abs(rand(5)) + 0.5)]
    nodes = [H("BatchNormalization", ["x", "sc", "bb", "mu", "var"], ["y"])]
    check(model(nodes, [("x", x.shape)], [("y", x.shape)], bn), {"x": x})


# ---- pooling -------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("k,s,pads,ceil,cip", [
    (3, 2, [1, 1, 1, 1], 0, 0), (2, 2, [0, 0, 0, 0], 0, 0), (3, 2, [0, 0, 0, 0], 1, 0),
    (3, 1, [1, 0, 1, 2], 0, 1), (5, 3, [2, 2, 2, 2], 1, 1)])
def test_pool(op, k, s, pads, ceil, cip):
    x = rand(2, 3, 13, 11)
    kw = dict(kernel_shape=[k, k], strides=[s, s], pads=pads, ceil_mode=ceil)
    if op == "AveragePool":
        kw["count_include_pad"] = cip
    node = H(op, ["x"], ["y"], **kw)
    shape = [2, 3]
    for n, pb, pe in ((13, pads[0], pads[2]), (11, pads[1], pads[3])):
        span = n + pb + pe - k
        o = (-(-span // s) if ceil else span // s) + 1
        if ceil and (o - 1) * s >= n + pb:
            o -= 1
        shape.append(o)
    check(model([node], [("x", x.shape)], [("y", shape)]), {"x": x})


def test_global_average_pool():
    x = rand(3, 7, 5, 9)
    check(model([H("GlobalAveragePool", ["x"], ["y"])], [("x", x.shape)], [("y", (3, 7, 1, 1))]), {"x": x})


# ---- normalization ---------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [-1, 1, 0])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax(op, axis):
    x = rand(3, 17, 33, scale=4.0)
    check(model([H(op, ["x"], ["y"], axis=axis)], [("x", x.shape)], [("y", x.shape)]), {"x": x})


def test_softmax_opset11_coerces_to_2d():
    x = rand(3, 4, 5)
    check(model([H("Softmax", ["x"], ["y"], axis=1)], [("x", x.shape)], [("y", x.shape)], opset=11), {"x": x})


@pytest.mark.parametrize("axis,bias", [(-1, True), (-1, False), (1, True)])
def test_layernorm(axis, bias):
    x = rand(4, 6, 37, scale=3.0) + 1.0
    cols = x.shape[axis:] if axis >= 0 else x.shape[axis:]
    ins = ["x", "s"] + (["b"] if bias else [])
    inits = [("s", rand(*cols)), ("b", rand(*cols))][:len(ins) - 1]
    check(model([H("LayerNormalization", ins, ["y"], axis=axis, epsilon=1e-5)], [("x", x.shape)],
                [("y", x.shape)], inits), {"x": x})


# Softmax then LayerNormalization over the same rows: one pass (tcc_cpu_softmax_layernorm), with
# and without bias, rows shorter than a vector and long ones past 8 MB in all (streamed stores);
# not fused when the softmax is also an output, is a LogSoftmax, or runs over another axis.
@pytest.mark.parametrize("rows,cols,bias", [(5, 7, True), (33, 64, False), (2100, 1024, True)])
def test_softmax_layernorm_fused(rows, cols, bias, tmp_path):
    import zipfile

    from tcc.accelerators.cpu.runtime import c_source
    x = rand(rows, cols, scale=3.0)
    ins = ["p", "s"] + (["b"] if bias else [])
    inits = [("s", rand(cols)), ("b", rand(cols))][:len(ins) - 1]
    nodes = [H("Softmax", ["x"], ["p"], axis=-1), H("LayerNormalization", ins, ["y"], axis=-1, epsilon=1e-5)]
    # layernorm divides by the probabilities' spread (~1/cols): errors scale by it
    sess = check(model(nodes, [("x", x.shape)], [("y", x.shape)], inits), {"x": x}, rtol=1e-4, atol=1e-5,
                 tmp_path=tmp_path)
    with zipfile.ZipFile(tmp_path / "m.tcc") as z:
        src = c_source(z.read(sess.manifest["accelerators"]["cpu"]["member"]))
    assert "tcc_cpu_softmax_layernorm(" in src and "tcc_cpu_softmax(" not in src


@pytest.mark.parametrize("case", ["softmax_is_output", "log", "other_axis"])
def test_softmax_layernorm_not_fused(case, tmp_path):
    import zipfile

    from tcc.accelerators.cpu.runtime import c_source
    x = rand(6, 10, 12, scale=3.0)
    sm = H("LogSoftmax" if case == "log" else "Softmax", ["x"], ["p"], axis=1 if case == "other_axis" else -1)
    outs = [("y", x.shape)] + ([("p", x.shape)] if case == "softmax_is_output" else [])
    nodes = [sm, H("LayerNormalization", ["p", "s"], ["y"], axis=-1, epsilon=1e-5)]
    sess = check(model(nodes, [("x", x.shape)], outs, [("s", rand(12))]), {"x": x}, rtol=1e-4, atol=1e-5,
                 tmp_path=tmp_path)
    with zipfile.ZipFile(tmp_path / "m.tcc") as z:
        src = c_source(z.read(sess.manifest["accelerators"]["cpu"]["member"]))
    assert "tcc_cpu_softmax_layernorm(" not in src and "tcc_cpu_softmax(" in src


# ---- elementwise ----------------------------------------------------------------------------------
def test_elementwise_chain_broadcast():
    x, c, r = rand(2, 3, 5, 7), rand(3, 1, 1), rand(7)
    nodes = [H("Mul", ["x", "c"], ["a"]), H("Add", ["a", "r"], ["b"]), H("Tanh", ["b"], ["t"]),
             H("Sigmoid", ["t"], ["s"]), H("Sub", ["s", "half"], ["u"]), H("Abs", ["u"], ["v"]),
             H("Sqrt", ["v"], ["w"]), H("Erf", ["w"], ["e"]), H("Mul", ["e", "x"], ["y"])]
    check(model(nodes, [("x", x.shape), ("r", r.shape)], [("y", x.shape)],
                [("c", c), ("half", np.array(0.5, np.float32))]), {"x": x, "r": r}, rtol=1e-4, atol=1e-5)


def test_long_elementwise_chain_is_cut_into_kernels(tmp_path):
    """A chain of 600 single-use elementwise ops becomes 3 kernels of at most
    256 ops (EW_MAX_OPS), not one loop body GCC takes minutes over (20000
    ops: 71 s and 540 MB to compile as one), with the same result."""
    from tcc.accelerators.cpu.lower import EW_MAX_OPS
    x = rand(3, 37)
    ops = ["Sin", "Neg", "Abs", "Sigmoid", "Tanh"]
    nodes = [H(ops[i % len(ops)], [f"v{i}"], [f"v{i + 1}"]) for i in range(600)]
    sess = check(model(nodes, [("v0", x.shape)], [("v600", x.shape)]), {"v0": x}, tmp_path=tmp_path)
    src = c_source_of(sess.path)
    assert EW_MAX_OPS == 256 and src.count("tcc_cpu_parallel_for(") == 3, src.count("tcc_cpu_parallel_for(")


@pytest.mark.parametrize("op,attrs", [
    ("Relu", {}), ("Exp", {}), ("Neg", {}), ("Reciprocal", {}), ("LeakyRelu", {"alpha": 0.3}),
    ("HardSigmoid", {}), ("HardSwish", {}), ("Elu", {}), ("Selu", {}), ("Softplus", {}), ("Softsign", {}),
    ("Floor", {}), ("Ceil", {}), ("Sign", {}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"}),
    ("ThresholdedRelu", {"alpha": 0.5}), ("Sigmoid", {}), ("Tanh", {}), ("Round", {}), ("Sin", {}), ("Cos", {})])
def test_unary(op, attrs):
    x = rand(5, 1031, scale=3.0)
    opset = 20 if op == "Gelu" else 18
    check(model([H(op, ["x"], ["y"], **attrs)], [("x", x.shape)], [("y", x.shape)], opset=opset), {"x": x},
          rtol=2e-4, atol=1e-5)


def test_tanh_relative_accuracy():
    """mathfun.h's tanh within 3 ulp of float64 numpy over every magnitude
    (relative error near 0, where (1 - e) / (1 + e) would cancel), both
    signs and zeros' signs, saturation, infinities and NaN."""
    mags = np.exp(RNG.uniform(np.log(1e-30), np.log(30.0), 4000)).astype(np.float32)
    x = np.concatenate([mags, -mags, rand(2000, scale=0.2),
                        np.array([0.0, -0.0, 0.0625, -0.0625, 10.0, 9.99, np.inf, -np.inf, np.nan], np.float32)])
    sess = tcc.load(tcc.compile(model([H("Tanh", ["x"], ["y"])], [("x", x.shape)], [("y", x.shape)]),
                                maccel=["cpu"]))
    y = sess.run({"x": x})[0]
    ref = np.tanh(x.astype(np.float64))
    fin = np.isfinite(ref)
    ulps = np.abs(y[fin] - ref[fin]) / np.spacing(np.abs(ref[fin]).astype(np.float32))
    assert ulps.max() <= 3.0, (ulps.max(), x[fin][np.argmax(ulps)])
    assert np.isnan(y[-1]) and np.array_equal(np.signbit(y[:-1]), np.signbit(x[:-1]))


def test_log_and_pow():
    x, p = np.abs(rand(33, 65)) + 0.1, rand(65)
    nodes = [H("Log", ["x"], ["l"]), H("Pow", ["x", "p"], ["q"]), H("Add", ["l", "q"], ["y"])]
    check(model(nodes, [("x", x.shape), ("p", p.shape)], [("y", x.shape)]), {"x": x, "p": p})


# a constant integer exponent is emitted as products (no powf call): negative bases, zero, infinities
@pytest.mark.parametrize("e", [1.0, 2.0, 3.0, 4.0, 2.5])
def test_pow_constant_exponent(e):
    x = rand(7, 300, scale=3.0)
    x[0, :4] = [0.0, -0.0, np.inf, -np.inf]
    if e == 2.5:
        x = np.abs(x)
    sess = check(model([H("Pow", ["x", "p"], ["y"])], [("x", x.shape)], [("y", x.shape)],
                       [("p", np.array(e, np.float32))]), {"x": x}, rtol=1e-6, atol=0)
    assert ("powf(" in c_source_of(sess.path)) == (e == 2.5)


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic(op):
    a, b, c = rand(4, 1, 9), rand(3, 1), rand(4, 3, 9)
    check(model([H(op, ["a", "b", "c"], ["y"])], [("a", a.shape), ("b", b.shape), ("c", c.shape)],
                [("y", (4, 3, 9))]), {"a": a, "b": b, "c": c})


def _with_nans(x, rng, frac=0.1):
    x = x.copy()
    x[rng.random(x.shape) < frac] = np.nan
    return x


@pytest.mark.parametrize("case", ["Max", "Min", "Max3", "MaxConst", "MinConst", "Clip", "ClipInputs", "Relu",
                                  "HardSigmoid", "HardSwish", "Sign"])
def test_nan_propagates_as_in_onnxruntime(case, rng):
    """Max, Min, Clip and the clamps are compare-selects (no fmaxf/fminf:
    libm calls that keep the loop scalar), and a NaN in any operand gives
    NaN, as onnxruntime's (fmaxf returned the other operand). Fresh random
    data with NaNs in every operand, the loop fused into one kernel."""
    a, b, c = (_with_nans(rand(4, 3, 97, scale=2.0), rng), _with_nans(rand(3, 97, scale=2.0), rng),
               _with_nans(rand(4, 1, 1, scale=2.0), rng, 0.3))
    ins, inits, feeds = [("a", a.shape)], [], {"a": a}
    op = case.rstrip("3").replace("Const", "").replace("Inputs", "")
    if case in ("Max", "Min", "Max3"):
        ins.append(("b", b.shape))
        feeds["b"] = b
        if case == "Max3":
            ins.append(("c", c.shape))
            feeds["c"] = c
        names = [n for n, _ in ins]
    elif case.endswith("Const"):
        inits, names = [("k", np.array(0.25, np.float32))], ["a", "k"]
    elif case == "Clip":
        inits, names = [("lo", np.array(-0.5, np.float32)), ("hi", np.array(1.0, np.float32))], ["a", "lo", "hi"]
    elif case == "ClipInputs":
        ins += [("lo", ()), ("hi", ())]
        feeds.update(lo=np.array(-0.5, np.float32), hi=np.array(rng.uniform(0, 2), np.float32))
        names = ["a", "lo", "hi"]
    else:
        names = ["a"]
    nodes = [H("Mul", ["a", "two"], ["a2"]), H(op, ["a2"] + names[1:], ["m"]), H("Add", ["m", "one"], ["y"])]
    inits = inits + [("two", np.array(2.0, np.float32)), ("one", np.array(1.0, np.float32))]
    sess = check(model(nodes, ins, [("y", (4, 3, 97))], inits), feeds, rtol=1e-6, atol=1e-6)
    src = c_source_of(sess.path)
    assert "fmaxf(" not in src and "fminf(" not in src and "fmax(" not in src and "fmin(" not in src


def test_select_chain_loop_vectorizes(monkeypatch, tmp_path):
    """The fused loop of a Max -> Clip -> HardSigmoid -> Min chain compiles
    to ymm instructions for the avx2 build (gcc's PRE turned these chained
    compare-selects back into branches and the loop stayed scalar: ~18x
    slower than vectorized). Compiled here with the build's own flags, -S."""
    import re
    import subprocess

    from tcc.accelerators.cpu.build import KERNELS, codegen_flags
    from tcc.runtime.native import find_cc

    from .helpers import c_source_for_isa
    cc = find_cc()
    if cc is None or "clang" in os.path.basename(cc):
        pytest.skip("the check reads gcc's output")
    nodes = [H("Mul", ["a", "two"], ["a2"]), H("Max", ["a2", "b"], ["m"]), H("Clip", ["m", "lo", "hi"], ["c"]),
             H("HardSigmoid", ["c"], ["h"]), H("Min", ["h", "a"], ["y"])]
    inits = [("two", np.array(2.0, np.float32)), ("lo", np.array(-0.5, np.float32)),
             ("hi", np.array(1.0, np.float32))]
    m = model(nodes, [("a", (64, 1024)), ("b", (64, 1024))], [("y", (64, 1024))], inits)
    src = tmp_path / "partitions.c"
    src.write_text(c_source_for_isa(m, "avx2", monkeypatch))
    flags = [f for f in codegen_flags("avx2") if f not in ("-shared", "-fPIC")]
    subprocess.run([cc, *flags, f"-I{KERNELS}", "-S", "-o", str(tmp_path / "p.s"), str(src)], check=True)
    asm = (tmp_path / "p.s").read_text()
    body = re.search(r"^ew_\w+:\n(.*?)\.cfi_endproc", asm, re.S | re.M)
    assert body is not None, "no elementwise kernel in the assembly"
    assert "ymm" in body.group(1) and "call" not in body.group(1)


def test_prelu_and_clip_inputs():
    x, s = rand(2, 4, 6), rand(4, 1)
    nodes = [H("PRelu", ["x", "s"], ["p"]), H("Clip", ["p", "lo"], ["y"])]
    check(model(nodes, [("x", x.shape), ("s", s.shape), ("lo", ())], [("y", x.shape)]),
          {"x": x, "s": s, "lo": np.array(-0.2, np.float32)})


def test_large_elementwise_splits_rows():
    x = rand(1 << 18)
    check(model([H("Mul", ["x", "x"], ["a"]), H("Add", ["a", "x"], ["y"])], [("x", x.shape)], [("y", x.shape)]),
          {"x": x})


# ---- layout --------------------------------------------------------------------------------------
def test_transpose_reshape_flatten():
    x = rand(2, 3, 5, 7)
    nodes = [H("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]), H("Reshape", ["t", "shape"], ["r"]),
             H("Relu", ["r"], ["q"]), H("Flatten", ["q"], ["f"], axis=1), H("Transpose", ["f"], ["y"])]
    check(model(nodes, [("x", x.shape)], [("y", (105, 2))], [("shape", np.array([2, 35, 3], np.int64))]), {"x": x})


def test_reshape_of_input_is_an_output():
    x = rand(4, 6)
    nodes = [H("Reshape", ["x", "shape"], ["y"]), H("Relu", ["x"], ["z"])]
    m = model(nodes, [("x", x.shape)], [("y", (24,)), ("z", (4, 6))], [("shape", np.array([24], np.int64))])
    check(m, {"x": x})


# ---- constant weights packed at compile time (gemm_packed.c) ----------------------
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (11, 7, 31), (13, 300, 33), (64, 65, 70), (25, 40, 64)])
@pytest.mark.parametrize("tb", [0, 1])
def test_gemm_packed_constant_weights(m, k, n, tb):
    a = rand(m, k)
    b = rand(n, k) if tb else rand(k, n)
    c = rand(n)
    mdl = model([H("Gemm", ["a", "b", "c"], ["g"], transB=tb, alpha=0.75, beta=1.25), H("Relu", ["g"], ["y"])],
                [("a", a.shape)], [("y", (m, n))], [("b", b), ("c", c)])
    check(mdl, {"a": a})


def test_gemm_packed_transposed_a():
    a = rand(23, 9)  # A is K x M
    b = rand(23, 40)
    mdl = model([H("Gemm", ["a", "b"], ["y"], transA=1)], [("a", a.shape)], [("y", (9, 40))], [("b", b)])
    check(mdl, {"a": a})


def test_matmul_packed_batched_rows():
    a = rand(2, 3, 17, 40)
    b = rand(40, 45)
    mdl = model([H("MatMul", ["a", "b"], ["y"])], [("a", a.shape)], [("y", (2, 3, 17, 45))], [("b", b)])
    check(mdl, {"a": a})
