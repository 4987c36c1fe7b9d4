"""The shape-generic executor's native tape (runtime/generic/tape.py,
runtime/native/tape.c) against onnxruntime on fresh random data.

Every case runs a small model with dynamic dims at one or more input-shape
keys, three times per key with new data each time: run 1 is the numpy path
(it records the values' shapes), run 2 builds the tape and runs it, run 3
runs it again. Each run is compared with onnxruntime, and each key is checked
to have a `Tape` whose records are native where tape.py says they are (the
plan's generated numpy function `_warm` must never be called: a tape that
failed or declined at run time would fall back to it silently).

Also: broadcasting, products on every path (tiny loop, BLAS, packed constant
B, fused epilogues), masked softmax, Python steps between native records,
ownership of the returned arrays, two threads on one tape, the
TCC_GENERIC_TAPE=0 switch and llama through the public API."""
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc
from test.runtime.test_generic import _model, _plan
from tcc.runtime.generic.tape import Tape

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
TOL = dict(rtol=1e-4, atol=1e-5)
EXP_TOL = dict(rtol=1e-3, atol=1e-5)  # Erf, Gelu and exp-based ops


def _ort(m):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _close(got, want, rtol, atol, what=""):
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        assert isinstance(g, np.ndarray), (what, k, type(g))
        assert g.shape == w.shape and g.dtype == w.dtype, (what, k, g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{what} output {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{what} output {k}")


def _inputs(m):
    return [(i.name, i.type.tensor_type.elem_type) for i in m.graph.input]


def _draw(rng, m, shapes, positive=False):
    """Fresh inputs for model m, one shape per graph input."""
    x = {}
    for (n, t), s in zip(_inputs(m), shapes):
        if t == F:
            v = rng.standard_normal(s).astype(np.float32)
            x[n] = np.asarray(np.abs(v) + np.float32(0.1)) if positive else v
        elif t == B:
            x[n] = rng.random(s) < 0.5
        else:
            x[n] = rng.integers(-5, 6, size=s).astype(np.int64)
    return x


def _spy(plan):
    """Counts calls of the plan's numpy warm function (the tape's fallback)."""
    calls, warm = [], plan._warm
    plan._warm = lambda t: calls.append(1) or warm(t)
    return calls


def check_tape(m, tmp_path, rng, shapes_list, tol=TOL, pure=True, draw=None, min_native=1, plan=None,
               untaped=()):
    """Runs m at every key of shapes_list three times each against
    onnxruntime; asserts each key got a Tape with at least min_native
    native records (and no Python step where `pure`) that served runs 2
    and 3, except the keys of `untaped` (indices into shapes_list: an
    empty result, which no record writes), which must get none. Returns
    (plan, the tapes)."""
    plan = plan or _plan(m, tmp_path)
    calls = _spy(plan)
    ref = _ort(m)
    names = [n for n, _ in _inputs(m)]
    draw = draw or (lambda rng, shapes: _draw(rng, m, shapes))
    tapes = []
    for k, shapes in enumerate(shapes_list):
        key = tuple(tuple(s) for s in shapes)
        if k in untaped:
            for run in range(3):
                x = draw(rng, shapes)
                _close(plan.run([x[n] for n in names]), ref.run(None, x), what=f"key {key} run {run + 1}", **tol)
            assert not isinstance(plan._tapes.get(key), Tape), key
            calls.clear()
            continue
        for run in range(3):
            x = draw(rng, shapes)
            got = plan.run([x[n] for n in names])
            _close(got, ref.run(None, x), what=f"key {key} run {run + 1}", **tol)
            got_tape = plan._tapes.get(key)
            if run == 0:
                assert isinstance(got_tape, dict), (key, got_tape)
            else:
                assert isinstance(got_tape, Tape), f"no tape at key {key}: {got_tape!r}"
        tape = plan._tapes[key]
        assert tape.n_native >= min_native, (key, tape.n_native, tape.n_python)
        if pure:
            assert tape.n_python == 0, (key, tape.n_native, tape.n_python, plan.step_ops)
        tapes.append(tape)
    assert not calls, f"the tape fell back to numpy {len(calls)} times"
    return plan, tapes


# ---- 1. every op family tape.py makes native -------------------------------------------

UNARY = ["Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Sigmoid", "Relu", "Erf", "Abs"]


@pytest.mark.parametrize("scale", [1.0, 40.0], ids=["normal", "saturating"])
@pytest.mark.parametrize("op", UNARY + ["LeakyRelu", "Gelu", "IsNaN"])
def test_unary_ops_are_native(op, scale, rng, tmp_path):
    """Each unary op at two keys; "saturating": inputs * 40 (exp overflows
    to inf and underflows, sigmoid / tanh / erf saturate)."""
    attrs = {"alpha": 0.3} if op == "LeakyRelu" else {}
    m = _model([helper.make_node(op, ["x"], ["y0"], **attrs)], [("x", F, 3)], opset=20 if op == "Gelu" else 18)

    def draw(rng, shapes):
        x = _draw(rng, m, shapes, positive=op in ("Log", "Sqrt"))
        x["x"] *= np.float32(scale)
        if op == "IsNaN":
            x["x"][rng.random(shapes[0]) < 0.3] = np.nan
        return x
    tol = EXP_TOL if op in ("Exp", "Erf", "Gelu", "Sigmoid", "Tanh") else TOL
    plan, _ = check_tape(m, tmp_path, rng, [([2, 3, 4],), ([1, 5, 7],)], tol, draw=draw)
    assert "onnx." + op not in plan.fallbacks


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"])
def test_binary_ops_are_native(op, rng, tmp_path):
    m = _model([helper.make_node(op, ["a", "b"], ["y0"])], [("a", F, 3), ("b", F, 2)])
    check_tape(m, tmp_path, rng, [([2, 3, 4], [3, 4]), ([5, 1, 3], [2, 1])],
               draw=lambda rng, s: _draw(rng, m, s, positive=op == "Pow"))


@pytest.mark.parametrize("e", [2.0, 3.0, 0.5, -1.0, [2.0], 2, 3],
                         ids=["2.0", "3.0", "0.5", "-1.0", "[2.0]", "int2", "int3"])
def test_pow_by_a_constant_exponent(e, rng, tmp_path):
    """2 and 3 (float or int64, a scalar or [1]): tape.c's square / cube;
    others powf with a constant operand."""
    v = np.array(e, np.int64 if isinstance(e, int) else np.float32)
    e = float(v.reshape(-1)[0])
    m = _model([helper.make_node("Pow", ["x", "e"], ["y0"])], [("x", F, 2)], inits=[("e", v)])
    check_tape(m, tmp_path, rng, [([3, 4],), ([1, 9],)], draw=lambda rng, s: _draw(rng, m, s, positive=e % 1 != 0))


def test_where_with_broadcasting(rng, tmp_path):
    m = _model([helper.make_node("Where", ["c", "a", "b"], ["y0"])], [("c", B, 2), ("a", F, 3), ("b", F, 1)])
    check_tape(m, tmp_path, rng, [([3, 4], [2, 3, 4], [4]), ([1, 5], [2, 1, 5], [1])])


def test_isnan_feeding_where(rng, tmp_path):
    """A bool result of one record read by the next (IsNaN -> Where)."""
    m = _model([helper.make_node("IsNaN", ["x"], ["n"]), helper.make_node("Where", ["n", "zero", "x"], ["y0"])],
               [("x", F, 2)], inits=[("zero", np.array(0.0, np.float32))])

    def draw(rng, shapes):
        x = _draw(rng, m, shapes)
        x["x"][rng.random(shapes[0]) < 0.4] = np.nan
        return x
    _, tapes = check_tape(m, tmp_path, rng, [([4, 5],), ([2, 3],)], draw=draw)
    assert tapes[0].n_native == 2


@pytest.mark.parametrize("axis,bias", [(-1, True), (-2, False)])
def test_layer_normalization(axis, bias, rng, tmp_path):
    scale_shape = (8,) if axis == -1 else (4, 6)
    inits = [("s", rng.standard_normal(scale_shape).astype(np.float32))]
    if bias:
        inits.append(("b", rng.standard_normal(scale_shape).astype(np.float32)))
    m = _model([helper.make_node("LayerNormalization", ["x", "s"] + (["b"] if bias else []), ["y0"], axis=axis,
                                 epsilon=1e-5)], [("x", F, 3)], inits=inits, opset=17)
    shapes = [([2, 3, 8],), ([1, 5, 8],)] if axis == -1 else [([2, 4, 6],), ([3, 4, 6],)]
    check_tape(m, tmp_path, rng, shapes)


def test_layer_normalization_with_data_scale_and_bias(rng, tmp_path):
    m = _model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y0"], axis=-1, epsilon=1e-3)],
               [("x", F, 3), ("s", F, 1), ("b", F, 1)], opset=17)
    check_tape(m, tmp_path, rng, [([2, 3, 8], [8], [8]), ([4, 1, 5], [5], [5])])


@pytest.mark.parametrize("weight", [True, False])
def test_fused_rms_normalization(weight, rng, tmp_path):
    """Pow -> ReduceMean -> Add -> Sqrt -> Reciprocal -> Mul -> Mul: one record."""
    nodes = [helper.make_node("Pow", ["x", "two"], ["p"]),
             helper.make_node("ReduceMean", ["p", "axes"], ["mean"], keepdims=1),
             helper.make_node("Add", ["mean", "eps"], ["a"]),
             helper.make_node("Sqrt", ["a"], ["s"]),
             helper.make_node("Reciprocal", ["s"], ["r"]),
             helper.make_node("Mul", ["x", "r"], ["n" if weight else "y0"])]
    if weight:
        nodes.append(helper.make_node("Mul", ["n", "w"], ["y0"]))
    inits = [("two", np.array(2.0, np.float32)), ("axes", np.array([-1], np.int64)),
             ("eps", np.array(1e-6, np.float32)), ("w", rng.standard_normal(16).astype(np.float32))]
    m = _model(nodes, [("x", F, 3)], inits=inits if weight else inits[:3])
    plan, tapes = check_tape(m, tmp_path, rng, [([2, 5, 16],), ([1, 3, 16],)])
    assert any("Pow" in f for f in plan.fused), plan.fused
    assert all(t.n_native == 1 for t in tapes)


CONV = {  # attributes, x shapes per key (weights [6, 4 / group, kernel])
    "pad": (dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), [[1, 4, 8, 8], [2, 4, 5, 7]]),
    "same-upper": (dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 1]), [[1, 4, 7, 6], [2, 4, 4, 5]]),
    "grouped-strided": (dict(kernel_shape=[3, 3], strides=[2, 2], group=2), [[1, 4, 9, 7], [2, 4, 6, 6]]),
    "dilated-asymmetric-pads": (dict(kernel_shape=[3, 2], dilations=[2, 1], pads=[2, 0, 1, 1]),
                                [[1, 4, 7, 6], [1, 4, 5, 9]]),
    "pointwise": (dict(kernel_shape=[1, 1]), [[2, 4, 3, 5], [1, 4, 6, 2]]),
    "1d": (dict(kernel_shape=[3], strides=[2], pads=[1, 0]), [[1, 4, 11], [3, 4, 6]]),
}


@pytest.mark.parametrize("act", [None, "Relu", "LeakyRelu", "Clip", "Sigmoid", "SiLU"])
@pytest.mark.parametrize("case", list(CONV))
def test_conv(case, act, rng, tmp_path):
    """Conv (constant weights and bias) with its activation fused into the
    cpu library's epilogue: one record."""
    attrs, shapes = CONV[case]
    group, ks = attrs.get("group", 1), attrs["kernel_shape"]
    w = rng.standard_normal((6, 4 // group) + tuple(ks)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if act else "y0"], **attrs)]
    if act == "SiLU":
        nodes += [helper.make_node("Sigmoid", ["c"], ["sg"]), helper.make_node("Mul", ["c", "sg"], ["y0"])]
    elif act == "Clip":
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y0"]))
    elif act:
        nodes.append(helper.make_node(act, ["c"], ["y0"], **({"alpha": 0.2} if act == "LeakyRelu" else {})))
    inits = [("w", w), ("b", rng.standard_normal(6).astype(np.float32))]
    if act == "Clip":
        inits += [("lo", np.array(-0.5, np.float32)), ("hi", np.array(0.8, np.float32))]
    m = _model(nodes, [("x", F, len(shapes[0]))], inits=inits)
    plan, tapes = check_tape(m, tmp_path, rng, [(s,) for s in shapes], dict(rtol=1e-3, atol=1e-4))
    if act:
        assert plan.fused, "Conv + its activation is one step"
    assert all(t.n_native == 1 for t in tapes)


@pytest.mark.parametrize("act", [None, "Relu", "SiLU"])
@pytest.mark.parametrize("stride", [1, 2])
def test_pointwise_then_depthwise_is_one_record(act, stride, rng, tmp_path):
    """A pointwise convolution (and its activation) read only by a depthwise
    one: one tcc_cpu_conv2d_pw_dw record, as the compiled code's pair."""
    from tcc.runtime.generic.tape import T_CONV_PW_DW, Step
    c, hidden = 5, 12
    nodes = [helper.make_node("Conv", ["x", "wp", "bp"], ["p" if act else "e"], kernel_shape=[1, 1])]
    if act == "SiLU":
        nodes += [helper.make_node("Sigmoid", ["p"], ["sg"]), helper.make_node("Mul", ["p", "sg"], ["e"])]
    elif act:
        nodes.append(helper.make_node(act, ["p"], ["e"]))
    nodes.append(helper.make_node("Conv", ["e", "wd", "bd"], ["y0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                  group=hidden, strides=[stride, stride]))
    inits = [("wp", rng.standard_normal((hidden, c, 1, 1)).astype(np.float32)),
             ("bp", rng.standard_normal(hidden).astype(np.float32)),
             ("wd", rng.standard_normal((hidden, 1, 3, 3)).astype(np.float32)),
             ("bd", rng.standard_normal(hidden).astype(np.float32))]
    m = _model(nodes, [("x", F, 4)], inits=inits)
    _, tapes = check_tape(m, tmp_path, rng, [([1, c, 9, 8],), ([2, c, 6, 11],)], dict(rtol=1e-3, atol=1e-4))
    for t in tapes:
        ops = [r.op for seg in t._segments if seg[0] == "native" for r in (Step * seg[2]).from_address(seg[1])]
        assert ops == [T_CONV_PW_DW], ops


@pytest.mark.parametrize("c,hidden,hw,serial", [(16, 64, 16, 0), (4, 8, 6, 1)], ids=["both-threads", "caller"])
def test_a_pointwise_depthwise_pair_runs_on_one_thread_by_their_work_together(c, hidden, hw, serial, rng,
                                                                            tmp_path):
    """The pair's record runs on the caller's thread alone where the two
    convolutions' work with their SiLUs (codegen.call_work: 24 multiply-adds
    an activated output) is below codegen.SERIAL_WORK, as the compiled code
    decides: 16 -> 64 channels on 16x16 is 0.26M + 0.15M multiply-adds,
    1.2M with the SiLUs (both threads); 4 -> 8 on 6x6 is 20K (the caller's)."""
    nodes = [helper.make_node("Conv", ["x", "wp", "bp"], ["p"], kernel_shape=[1, 1]),
             helper.make_node("Sigmoid", ["p"], ["sp"]), helper.make_node("Mul", ["p", "sp"], ["e"]),
             helper.make_node("Conv", ["e", "wd", "bd"], ["d"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=hidden),
             helper.make_node("Sigmoid", ["d"], ["sd"]), helper.make_node("Mul", ["d", "sd"], ["y0"])]
    inits = [("wp", rng.standard_normal((hidden, c, 1, 1)).astype(np.float32)),
             ("bp", rng.standard_normal(hidden).astype(np.float32)),
             ("wd", rng.standard_normal((hidden, 1, 3, 3)).astype(np.float32)),
             ("bd", rng.standard_normal(hidden).astype(np.float32))]
    m = _model(nodes, [("x", F, 4)], inits=inits)
    _, tapes = check_tape(m, tmp_path, rng, [([1, c, hw, hw],)], dict(rtol=1e-3, atol=1e-4))
    from tcc.runtime.generic.tape import T_CONV_PW_DW
    recs = _records(tapes[0])
    assert [r.op for r in recs] == [T_CONV_PW_DW] and recs[0].rank == serial, [(r.op, r.rank) for r in recs]


RESIDUAL_CASES = dict(CONV, packed=(dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), [[1, 16, 10, 9], [2, 16, 7, 12]]))


def _records(tape):
    from tcc.runtime.generic.tape import Step
    return [r for seg in tape._segments if seg[0] == "native" for r in (Step * seg[2]).from_address(seg[1])]


@pytest.mark.parametrize("act", [None, "Relu", "Sigmoid", "LeakyRelu"])
@pytest.mark.parametrize("case", list(RESIDUAL_CASES))
def test_conv_plus_a_residual_and_its_activation_is_one_record(case, act, rng, tmp_path):
    """act(Conv(x) + r), r another branch's result of the same shape (left
    or right of the Add): one convolution record with the residual and the
    activation in its epilogue, on every kernel the tape calls."""
    from tcc.runtime.generic.tape import T_CONV
    attrs, shapes = RESIDUAL_CASES[case]
    group, ks, c = attrs.get("group", 1), attrs["kernel_shape"], shapes[0][1]
    m_out = 32 if case == "packed" else 6
    left = len(case) % 2 == 0  # the residual on either side, by case
    nodes = [helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], **attrs),
             helper.make_node("Relu", ["c2"], ["r"]),
             helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs),
             helper.make_node("Add", ["c", "r"] if left else ["r", "c"], ["s" if act else "y0"])]
    if act:
        nodes.append(helper.make_node(act, ["s"], ["y0"], **({"alpha": 0.2} if act == "LeakyRelu" else {})))
    inits = [(n, rng.standard_normal((m_out, c // group) + tuple(ks)).astype(np.float32)) for n in ("w", "w2")]
    inits += [(n, rng.standard_normal(m_out).astype(np.float32)) for n in ("b", "b2")]
    m = _model(nodes, [("x", F, len(shapes[0]))], inits=inits)
    _, tapes = check_tape(m, tmp_path, rng, [(s,) for s in shapes], dict(rtol=1e-3, atol=1e-4))
    for t in tapes:
        recs = _records(t)
        assert [r.op for r in recs] == [T_CONV, T_CONV], [r.op for r in recs]
        assert recs[1].slot[5] >= 0 and recs[1].kind == {None: 0, "Relu": 1, "Sigmoid": 3, "LeakyRelu": 5}[act]


@pytest.mark.parametrize("case", ["conv-is-an-output", "sum-is-an-output", "residual-after", "broadcast",
                                  "conv-has-act"])
def test_conv_and_add_that_cannot_be_one_record(case, rng, tmp_path):
    """Where the sum cannot go in the convolution's epilogue (the conv's own
    result or the sum is also an output, the residual is computed after the
    convolution, it broadcasts, the activation comes first), the records
    stay apart and the results right."""
    from tcc.runtime.generic.tape import T_CONV
    w = lambda: rng.standard_normal((6, 4, 3, 3)).astype(np.float32)  # noqa: E731
    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    branch = [helper.make_node("Conv", ["x", "w2"], ["c2"], **conv), helper.make_node("Relu", ["c2"], ["r"])]
    main = [helper.make_node("Conv", ["x", "w"], ["c"], **conv)]
    inits = [("w", w()), ("w2", w())]
    if case == "residual-after":
        nodes = main + branch + [helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y0"])]
    elif case == "broadcast":
        inits.append(("r", rng.standard_normal((6, 1, 1)).astype(np.float32)))
        nodes = main + [helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y0"])]
    elif case == "conv-has-act":
        nodes = branch + main + [helper.make_node("Relu", ["c"], ["a"]), helper.make_node("Add", ["a", "r"], ["y0"])]
    elif case == "conv-is-an-output":
        main = [helper.make_node("Conv", ["x", "w"], ["y1"], **conv)]
        nodes = branch + main + [helper.make_node("Add", ["y1", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y0"])]
    else:
        nodes = branch + main + [helper.make_node("Add", ["c", "r"], ["y1"]), helper.make_node("Relu", ["y1"], ["y0"])]
    m = _model(nodes, [("x", F, 4)], n_out=2 if case.endswith("output") else 1, inits=inits)
    _, tapes = check_tape(m, tmp_path, rng, [([1, 4, 7, 6],), ([2, 4, 5, 9],)], dict(rtol=1e-3, atol=1e-4))
    for t in tapes:
        recs = [r for r in _records(t) if r.op == T_CONV]
        fused = [r for r in recs if r.slot[5] >= 0]
        if case == "sum-is-an-output":  # the Add fuses, the activation stays a record
            assert len(fused) == 1 and fused[0].kind == 0, [(r.kind, r.slot[5]) for r in recs]
        else:
            assert not fused, case


def _shuffle_nodes(src, dst, g, c, perm=(0, 2, 1, 3, 4)):
    """ShuffleNet's channel shuffle of src (N, c, H, W) as exporters write it:
    Reshape to (N, g, c/g, H, W) with the dims read by Shape, Transpose, Reshape back."""
    return [helper.make_node("Shape", [src], [src + "_s"]),
            helper.make_node("Slice", [src + "_s", "i0", "i1"], [src + "_n"]),
            helper.make_node("Slice", [src + "_s", "i2", "i4"], [src + "_hw"]),
            helper.make_node("Concat", [src + "_n", "gc", src + "_hw"], [src + "_t"], axis=0),
            helper.make_node("Reshape", [src, src + "_t"], [src + "_5"]),
            helper.make_node("Transpose", [src + "_5"], [src + "_p"], perm=list(perm)),
            helper.make_node("Reshape", [src + "_p", src + "_s"], [dst])]


def _shuffle_inits(g, c):
    return [("i0", np.array([0], np.int64)), ("i1", np.array([1], np.int64)), ("i2", np.array([2], np.int64)),
            ("i4", np.array([4], np.int64)), ("gc", np.array([g, c // g], np.int64))]


@pytest.mark.parametrize("case", ["grouped-1x1-g2", "grouped-1x1-g3", "grouped-1x1-g4", "dense-3x3", "dense-1x1",
                                  "grouped-1x1-g6", "not-a-shuffle", "conv-is-an-output"])
def test_a_channel_shuffle_after_a_conv_is_its_output_channels_permuted(case, rng, tmp_path):
    """Conv -> Relu -> channel shuffle -> depthwise Conv: the shuffle's copy
    folds into the first convolution's weights (a grouped 1x1 one made dense,
    up to 4 groups), and a 1x1 one then pairs with the depthwise one; where it
    cannot fold (6 groups, a Transpose that is no channel shuffle, the conv's
    result also an output) the copy stays. Right results either way."""
    from tcc.runtime.generic.tape import T_CONV, T_CONV_PW_DW, T_COPY
    c = 12
    g = int(case.rsplit("g", 1)[1]) if "-g" in case else 1
    ks = [3, 3] if case == "dense-3x3" else [1, 1]
    shuffle_g = 3 if case in ("dense-3x3", "dense-1x1", "not-a-shuffle", "conv-is-an-output") else g
    first = "y1" if case == "conv-is-an-output" else "c1"
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], [first], kernel_shape=ks, group=g,
                              pads=[k // 2 for k in ks] * 2),
             helper.make_node("Relu", [first], ["a"])]
    nodes += _shuffle_nodes("a", "sh", shuffle_g, c, perm=(0, 1, 2, 4, 3) if case == "not-a-shuffle" else
                            (0, 2, 1, 3, 4))
    nodes.append(helper.make_node("Conv", ["sh", "wd", "bd"], ["y0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                  group=c))
    inits = [("w1", rng.standard_normal((c, c // g) + tuple(ks)).astype(np.float32)),
             ("b1", rng.standard_normal(c).astype(np.float32)),
             ("wd", rng.standard_normal((c, 1, 3, 3)).astype(np.float32)),
             ("bd", rng.standard_normal(c).astype(np.float32))] + _shuffle_inits(shuffle_g, c)
    m = _model(nodes, [("x", F, 4)], n_out=2 if first == "y1" else 1, inits=inits)
    shapes = [([1, c, 6, 6],), ([2, c, 5, 7],)] if case != "not-a-shuffle" else [([1, c, 6, 6],), ([2, c, 5, 5],)]
    _, tapes = check_tape(m, tmp_path, rng, shapes, dict(rtol=1e-3, atol=1e-4))
    for t in tapes:
        ops = [r.op for r in _records(t)]
        if case in ("grouped-1x1-g6", "not-a-shuffle", "conv-is-an-output"):
            assert T_COPY in ops, ops
        elif ks == [1, 1]:
            assert ops == [T_CONV_PW_DW], ops
        else:
            assert ops == [T_CONV, T_CONV], ops


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes,keepdims", [([-1], 0), ([1, 2], 1), ([0], 0), (None, 1), ([-2, -1], 0)],
                         ids=["last", "middle-keep", "first", "all", "last-two"])
def test_reductions_over_contiguous_axes(op, axes, keepdims, rng, tmp_path):
    ins = ["x"] + (["axes"] if axes is not None else [])
    inits = [("axes", np.array(axes, np.int64))] if axes is not None else []
    m = _model([helper.make_node(op, ins, ["y0"], keepdims=keepdims)], [("x", F, 3)], inits=inits)
    # rows of 37 and 111: tape.c's 16-lane loop, its lanes' combination and the tail
    check_tape(m, tmp_path, rng, [([2, 3, 4],), ([3, 5, 2],), ([2, 3, 37],)])


@pytest.mark.parametrize("op,opset", [("ReduceSum", 13), ("ReduceMean", 13)])
def test_reductions_at_older_opsets(op, opset, rng, tmp_path):
    """ReduceSum 13 takes axes as an input, ReduceMean 13 as an attribute."""
    if op == "ReduceSum":
        node = helper.make_node(op, ["x", "axes"], ["y0"], keepdims=1)
        inits = [("axes", np.array([1], np.int64))]
    else:
        node = helper.make_node(op, ["x"], ["y0"], axes=[1], keepdims=1)
        inits = []
    m = _model([node], [("x", F, 3)], inits=inits, opset=opset)
    check_tape(m, tmp_path, rng, [([2, 3, 4],), ([1, 6, 2],)])


@pytest.mark.parametrize("case", ["const-neg-axis0", "const-neg-axis1", "data-indices", "const-table", "int64-data"])
def test_gather(case, rng, tmp_path):
    if case.startswith("const-neg"):
        axis = 0 if case.endswith("0") else -1
        m = _model([helper.make_node("Gather", ["x", "i"], ["y0"], axis=axis)], [("x", F, 3)],
                   inits=[("i", np.array([[-1, 0], [1, -2]], np.int64))])
        shapes = [([3, 4, 5],), ([2, 3, 2],)]
        draw = None
    elif case == "data-indices":
        m = _model([helper.make_node("Gather", ["x", "i"], ["y0"], axis=1)], [("x", F, 3), ("i", I64, 2)])
        shapes = [([2, 5, 3], [2, 4]), ([1, 3, 4], [3, 1])]

        def draw(rng, s):
            x = _draw(rng, m, s)
            n = s[0][1]
            x["i"] = rng.integers(-n, n, size=s[1]).astype(np.int64)
            return x
    elif case == "int64-data":  # 8-byte rows
        m = _model([helper.make_node("Gather", ["x", "i"], ["y0"], axis=-1)], [("x", I64, 2)],
                   inits=[("i", np.array([2, -1, 0], np.int64))])
        shapes = [([2, 3],), ([4, 5],)]
        draw = None
    else:  # an embedding table, the ids data (llama's first step)
        m = _model([helper.make_node("Gather", ["table", "ids"], ["y0"])], [("ids", I64, 2)],
                   inits=[("table", rng.standard_normal((11, 6)).astype(np.float32))])
        shapes = [([2, 7],), ([3, 1],)]

        def draw(rng, s):
            return {"ids": rng.integers(-11, 11, size=s[0]).astype(np.int64)}
    check_tape(m, tmp_path, rng, shapes, draw=draw)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_concat(axis, rng, tmp_path):
    """Two data operands and a constant one (its shape fixes every dim but axis)."""
    const_shape = {-1: (2, 3, 1), 0: (1, 3, 4), 1: (2, 2, 4)}[axis]
    m = _model([helper.make_node("Concat", ["a", "k", "b"], ["y0"], axis=axis)], [("a", F, 3), ("b", F, 3)],
               inits=[("k", rng.standard_normal(const_shape).astype(np.float32))])
    grow = {-1: 2, 0: 0, 1: 1}[axis]

    def sh(n1, n2):
        a, b = list(const_shape), list(const_shape)
        a[grow], b[grow] = n1, n2
        return a, b
    check_tape(m, tmp_path, rng, [sh(2, 3), sh(1, 4)])


BIG = 2 ** 62
VIEW_CASES = {
    "transpose": ([helper.make_node("Transpose", ["x"], ["y0"], perm=[2, 0, 1])], 3, [[2, 3, 4], [1, 5, 2]], 1),
    "transpose-6d": ([helper.make_node("Transpose", ["x"], ["y0"], perm=[5, 3, 1, 4, 2, 0])], 6,
                     [[2, 3, 2, 3, 2, 2], [3, 2, 1, 2, 2, 3]], 1),
    "slice-negative-steps": ([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y0"])], 3,
                             [[2, 5, 6], [3, 4, 3]], 1),
    "slice-step-minus-2": ([helper.make_node("Slice", ["x", "st2", "en2", "ax2", "sp2"], ["y0"])], 2,
                           [[7, 3], [4, 2]], 1),
    "expand": ([helper.make_node("Expand", ["x", "es"], ["y0"])], 3, [[1, 3, 1], [2, 1, 1]], 1),  # to [2, 1, 4]
    "split": ([helper.make_node("Split", ["x"], ["y0", "y1", "y2"], axis=-1, num_outputs=3)], 2,
              [[2, 7], [3, 9]], 3),
    "split-sizes": ([helper.make_node("Split", ["x", "sizes"], ["y0", "y1"], axis=0)], 2, [[3, 4], [3, 1]], 2),
    "squeeze": ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Squeeze", ["r", "a1"], ["y0"])], 3,
                [[2, 1, 4], [3, 1, 1]], 1),
    "unsqueeze": ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Unsqueeze", ["r", "ua"], ["y0"])], 2,
                  [[2, 3], [1, 4]], 1),
    "flatten": ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Flatten", ["r"], ["y0"], axis=-1)], 3,
                [[2, 3, 4], [1, 2, 5]], 1),
    "reshape": ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "rs"], ["y0"])], 3,
                [[2, 3, 4], [3, 1, 5]], 1),
    "identity": ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y0"])], 2,
                 [[2, 3], [4, 1]], 1),
    "transpose-then-reshape-then-neg": ([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
                                         helper.make_node("Reshape", ["t", "rs"], ["r"]),
                                         helper.make_node("Neg", ["r"], ["y0"])], 3, [[2, 3, 4], [4, 1, 2]], 1),
    "slice-then-add": ([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s"]),
                        helper.make_node("Add", ["s", "s"], ["y0"])], 3, [[2, 5, 6], [1, 2, 3]], 1),
}


@pytest.mark.parametrize("case", list(VIEW_CASES))
def test_view_ops(case, rng, tmp_path):
    """Layout ops as copy records (probe-read offsets and strides) or
    aliases of a buffer (a native op beside them, so the tape has a record)."""
    nodes, rank, shapes, n_out = VIEW_CASES[case]
    inits = {"st": [-1, 0], "en": [-BIG, BIG], "ax": [1, -1], "sp": [-1, 2],
             "st2": [100], "en2": [-BIG], "ax2": [0], "sp2": [-2],
             "es": [2, 1, 4], "sizes": [1, 2], "a1": [1], "ua": [0, -1], "rs": [0, -1]}
    used = {i for n in nodes for i in n.input}
    m = _model(nodes, [("x", F, rank)], n_out, [(n, np.array(v, np.int64)) for n, v in inits.items() if n in used])
    plan, _ = check_tape(m, tmp_path, rng, [(s,) for s in shapes])
    assert not plan.fallbacks


@pytest.mark.parametrize("t", [TensorProto.FLOAT16, B, I64, TensorProto.UINT8], ids=["f16", "bool", "i64", "u8"])
def test_layout_copies_of_other_element_sizes(t, rng, tmp_path):
    """tape.c's copy for 2-, 1- and 8-byte elements: a Transpose, a Slice
    with a negative step and a Concat of an other-dtype input."""
    m = _model([helper.make_node("Transpose", ["x"], ["y0"], perm=[1, 0, 2]),
                helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y1"]),
                helper.make_node("Concat", ["x", "x"], ["y2"], axis=1)], [("x", t, 3)], 3,
               [("st", np.array([-1], np.int64)), ("en", np.array([-BIG], np.int64)), ("ax", np.array([2], np.int64)),
                ("sp", np.array([-2], np.int64))])
    dt = helper.tensor_dtype_to_np_dtype(t)

    def draw(rng, shapes):
        return {"x": (rng.random(shapes[0]) < 0.5) if t == B else
                rng.integers(0, 100, size=shapes[0]).astype(dt) if t != TensorProto.FLOAT16 else
                rng.standard_normal(shapes[0]).astype(dt)}
    _, tapes = check_tape(m, tmp_path, rng, [([2, 3, 5],), ([4, 2, 6],)], draw=draw)
    assert all(tp.n_native == 4 for tp in tapes), [tp.n_native for tp in tapes]  # Concat: one copy per operand


# ---- 2. broadcasting of binary ops -----------------------------------------------------

BCAST = {
    # name: (node inputs, data inputs (name, rank), initializers, shapes per key)
    "3d-and-1d": (["a", "b"], [("a", 3), ("b", 1)], [], [([2, 3, 4], [4]), ([3, 1, 5], [5])]),
    "2-1-4-and-3-1": (["a", "b"], [("a", 3), ("b", 2)], [], [([2, 1, 4], [3, 1]), ([3, 1, 2], [4, 1])]),
    "scalar-second": (["a", "b"], [("a", 2), ("b", 0)], [], [([2, 3], []), ([4, 1], [])]),
    "scalar-first": (["a", "b"], [("a", 0), ("b", 2)], [], [([], [2, 3]), ([], [1, 5])]),
    "one-shaped": (["a", "b"], [("a", 3), ("b", 1)], [], [([2, 3, 4], [1]), ([1, 1, 6], [1])]),
    "const-second": (["a", "k4"], [("a", 3)], ["k4"], [([2, 3, 4],), ([1, 5, 4],)]),
    "const-first": (["k31", "a"], [("a", 3)], ["k31"], [([2, 3, 5],), ([4, 3, 1],)]),
    "scalar-const-first": (["ks", "a"], [("a", 2)], ["ks"], [([3, 4],), ([1, 2],)]),
    "6d-alternating": (["a", "b"], [("a", 6), ("b", 6)], [], [([2, 1, 3, 1, 2, 1], [1, 3, 1, 2, 1, 2]),
                                                              ([1, 2, 1, 2, 1, 3], [2, 1, 3, 1, 2, 1])]),
    "both-broadcast-4d": (["a", "b"], [("a", 4), ("b", 4)], [], [([2, 1, 3, 1], [1, 4, 1, 5]),
                                                               ([1, 2, 1, 3], [3, 1, 2, 1])]),
}


@pytest.mark.parametrize("op", ["Sub", "Div", "Pow", "Max"])
@pytest.mark.parametrize("case", list(BCAST))
def test_binary_broadcasting(op, case, rng, tmp_path):
    ins, data, consts, shapes = BCAST[case]
    pos = op == "Pow"
    values = {"k4": rng.standard_normal(4), "k31": rng.standard_normal((3, 1)), "ks": rng.standard_normal(())}
    inits = [(k, (np.abs(values[k]) + 0.1 if pos else values[k]).astype(np.float32)) for k in consts]
    m = _model([helper.make_node(op, ins, ["y0"])], [(n, F, r) for n, r in data], inits=inits)
    check_tape(m, tmp_path, rng, shapes, draw=lambda rng, s: _draw(rng, m, s, positive=pos))


# ---- 3. products ----------------------------------------------------------------------

BIG_TOL = dict(rtol=1e-4, atol=1e-4)
MATMUL = {
    # name: (data inputs (name, rank), constant B shape or None, shapes per key, tolerance)
    "2d-2d": ([("a", 2), ("b", 2)], None, [([3, 5], [5, 4]), ([7, 16], [16, 7])], TOL),
    "2d-const": ([("a", 2)], (5, 6), [([3, 5],), ([8, 5],)], TOL),
    "3d-const-packed": ([("a", 3)], (5, 6), [([2, 3, 5],), ([1, 7, 5],)], TOL),
    "3d-2d-data": ([("a", 3), ("b", 2)], None, [([2, 3, 5], [5, 6]), ([1, 4, 9], [9, 2])], TOL),
    "2d-3d": ([("a", 2), ("b", 3)], None, [([4, 5], [3, 5, 2]), ([1, 3], [2, 3, 4])], TOL),
    "4d-4d": ([("a", 4), ("b", 4)], None, [([2, 3, 4, 5], [2, 3, 5, 6]), ([1, 2, 7, 16], [1, 2, 16, 7])], TOL),
    "broadcast-batch": ([("a", 4), ("b", 3)], None, [([2, 1, 4, 5], [3, 5, 6]), ([1, 1, 2, 3], [4, 3, 2])], TOL),
    "large-2d": ([("a", 2), ("b", 2)], None, [([64, 256], [256, 256]), ([32, 256], [256, 128])], BIG_TOL),
    "large-3d-data": ([("a", 3), ("b", 2)], None, [([2, 32, 256], [256, 128]), ([1, 64, 256], [256, 64])],
                      BIG_TOL),
    "large-const-packed": ([("a", 3)], (256, 256), [([2, 32, 256],), ([1, 64, 256],)], BIG_TOL),
    "batched-const-b": ([("a", 3)], (2, 5, 6), [([2, 3, 5],), ([2, 1, 5],)], TOL),
    "broadcast-const-b": ([("a", 4)], (1, 5, 6), [([2, 3, 4, 5],), ([1, 2, 1, 5],)], TOL),
    "large-batched": ([("a", 3), ("b", 3)], None, [([4, 64, 128], [4, 128, 64]), ([2, 32, 64], [2, 64, 256])],
                      BIG_TOL),
}


@pytest.mark.parametrize("case", list(MATMUL))
def test_matmul(case, rng, tmp_path):
    data, const, shapes, tol = MATMUL[case]
    ins = [n for n, _ in data] + (["w"] if const else [])
    inits = [("w", rng.standard_normal(const).astype(np.float32))] if const else []
    m = _model([helper.make_node("MatMul", ins, ["y0"])], [(n, F, r) for n, r in data], inits=inits)
    _, tapes = check_tape(m, tmp_path, rng, shapes, tol)
    assert all(t.n_native == 1 for t in tapes)


def test_an_empty_product_keeps_the_numpy_path_at_its_key(rng, tmp_path):
    m = _model([helper.make_node("MatMul", ["a", "b"], ["y0"])], [("a", F, 2), ("b", F, 2)])
    check_tape(m, tmp_path, rng, [([0, 5], [5, 4]), ([3, 5], [5, 4])], untaped=(0,))


def test_a_product_over_an_empty_inner_dim_is_zeros(rng, tmp_path):
    """K = 0: the sum of no products (numpy could not infer a reshape's -1 there)."""
    m = _model([helper.make_node("MatMul", ["a", "b"], ["y0"])], [("a", F, 3), ("b", F, 2)])
    check_tape(m, tmp_path, rng, [([2, 3, 5], [5, 4]), ([2, 3, 0], [0, 4])])


def test_a_constant_weight_shared_by_a_matmul_and_a_transposed_gemm(rng, tmp_path):
    w = rng.standard_normal((6, 6)).astype(np.float32)
    m = _model([helper.make_node("MatMul", ["a", "W"], ["y0"]), helper.make_node("Gemm", ["b", "W"], ["y1"], transB=1)],
               [("a", F, 2), ("b", F, 2)], 2, [("W", w)])
    check_tape(m, tmp_path, rng, [([3, 6], [4, 6]), ([5, 6], [2, 6])])


def test_matmul_of_a_transposed_operand(rng, tmp_path):
    m = _model([helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
                helper.make_node("MatMul", ["xt", "b"], ["y0"])], [("x", F, 3), ("b", F, 3)])
    check_tape(m, tmp_path, rng, [([2, 5, 3], [2, 5, 4]), ([1, 6, 2], [1, 6, 3])], min_native=1)


EPILOGUE = {
    "bias": ["Add"], "bias-first": ["Add(b, mm)"], "bias-relu": ["Add", "Relu"], "bias-silu": ["Add", "SiLU"],
    "relu": ["Relu"], "sigmoid": ["Sigmoid"], "scalar-bias-tanh": ["Add(scalar)", "Tanh"], "silu": ["SiLU"],
}


@pytest.mark.parametrize("size", ["tiny", "large"])
@pytest.mark.parametrize("case", list(EPILOGUE))
def test_matmul_fused_epilogue(case, size, rng, tmp_path):
    """MatMul(x, constant W) with a constant bias and an activation fused in
    (fusion.py): the product's one record applies them."""
    k, n = (6, 5) if size == "tiny" else (256, 192)
    nodes, cur = [helper.make_node("MatMul", ["x", "w"], ["mm"])], "mm"
    inits = [("w", rng.standard_normal((k, n)).astype(np.float32)),
             ("b", rng.standard_normal(n).astype(np.float32)), ("s", np.array(0.7, np.float32))]
    parts = EPILOGUE[case]
    for j, p in enumerate(parts):
        out = "y0" if j == len(parts) - 1 else f"t{j}"
        if p == "Add":
            nodes.append(helper.make_node("Add", [cur, "b"], [out]))
        elif p == "Add(b, mm)":
            nodes.append(helper.make_node("Add", ["b", cur], [out]))
        elif p == "Add(scalar)":
            nodes.append(helper.make_node("Add", [cur, "s"], [out]))
        elif p == "SiLU":
            nodes += [helper.make_node("Sigmoid", [cur], [f"sg{j}"]), helper.make_node("Mul", [cur, f"sg{j}"], [out])]
        else:
            nodes.append(helper.make_node(p, [cur], [out]))
        cur = out
    used = {i for nd in nodes for i in nd.input}
    m = _model(nodes, [("x", F, 3)], inits=[i for i in inits if i[0] in used])
    shapes = [([2, 3, k],), ([1, 4, k],)] if size == "tiny" else [([2, 32, k],), ([1, 48, k],)]
    plan, tapes = check_tape(m, tmp_path, rng, shapes, EXP_TOL if size == "tiny" else dict(rtol=1e-3, atol=1e-4))
    assert plan.fused and "MatMul +" in plan.fused[0], plan.fused
    assert all(t.n_native == 1 for t in tapes), "the epilogue is part of the product's record"


GEMM_ATTRS = [dict(), dict(transA=1, alpha=0.5, beta=2.0), dict(transB=1, alpha=1.5, beta=0.5),
              dict(transA=1, transB=1, alpha=2.0, beta=-1.0), dict(beta=0.0)]


@pytest.mark.parametrize("attrs", GEMM_ATTRS, ids=["plain", "tA", "tB", "tA-tB", "beta0"])
@pytest.mark.parametrize("cshape", ["N", "MN", "M1", "1N", "11", "1", "scalar", "none"])
def test_gemm(attrs, cshape, rng, tmp_path):
    """Gemm with a data C of every shape tape.py's epilogue serves, at a
    tiny key (tape.c's loop) and one past SMALL_GEMM (tcc_cpu_gemm)."""
    ta, tb = attrs.get("transA", 0), attrs.get("transB", 0)
    crank = {"N": 1, "MN": 2, "M1": 2, "1N": 2, "11": 2, "1": 1, "scalar": 0, "none": None}[cshape]
    spec = [("a", F, 2), ("b", F, 2)] + ([("c", F, crank)] if crank is not None else [])
    m = _model([helper.make_node("Gemm", ["a", "b"] + (["c"] if crank is not None else []), ["y0"], **attrs)], spec)

    def key(M, K, N):
        c = {"N": [N], "MN": [M, N], "M1": [M, 1], "1N": [1, N], "11": [1, 1], "1": [1], "scalar": [],
             "none": None}[cshape]
        return ([K, M] if ta else [M, K], [N, K] if tb else [K, N]) + (() if c is None else (c,))
    check_tape(m, tmp_path, rng, [key(3, 4, 5), key(40, 200, 48)], BIG_TOL)


@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)], ids=["plain", "tB", "tA", "tA-tB"])
@pytest.mark.parametrize("act", [None, "Relu"])
@pytest.mark.parametrize("c", ["const-N", "data-MN", "data-M1"])
def test_gemm_with_a_constant_b(ta, tb, act, c, rng, tmp_path):
    """A constant B is packed once (gemm_packed.c, transposed operands by
    strides), C a constant per column or data, an activation fused: one
    record, at a tiny key and a large one."""
    K, N = 48, 40
    w = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["a", "w", "c"], ["g" if act else "y0"], transA=ta, transB=tb, alpha=0.75,
                              beta=1.25)]
    if act:
        nodes.append(helper.make_node(act, ["g"], ["y0"]))
    inits = [("w", w)] + ([("c", rng.standard_normal(N).astype(np.float32))] if c == "const-N" else [])
    spec = [("a", F, 2)] + ([("c", F, 2)] if c != "const-N" else [])

    def key(M):
        return ([K, M] if ta else [M, K],) + (() if c == "const-N" else ([M, N] if c == "data-MN" else [M, 1],))
    _, tapes = check_tape(_model(nodes, spec, inits=inits), tmp_path, rng, [key(3), key(300)], BIG_TOL)
    assert all(t.n_native == 1 for t in tapes)


# ---- 4. softmax -----------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis,opset", [(-1, 13), (1, 13), (0, 13), (None, 11), (2, 11)],
                         ids=["last", "middle", "first", "legacy-default", "legacy-2"])
def test_softmax(op, axis, opset, rng, tmp_path):
    """Opset 13: over one axis (inner > 1 for axis 1); before 13 over the
    flattened [axis:] dims."""
    attrs = {} if axis is None else {"axis": axis}
    m = _model([helper.make_node(op, ["x"], ["y0"], **attrs)], [("x", F, 4)], opset=opset)
    check_tape(m, tmp_path, rng, [([2, 5, 3, 2],), ([3, 4, 6, 1],)], EXP_TOL)


@pytest.mark.parametrize("fill", [-np.inf, -3.4e38], ids=["-inf", "-3.4e38"])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_of_a_causal_mask(fill, op, rng, tmp_path):
    """scores + causal mask -> softmax over the last axis: exactly 0 (or
    -inf for LogSoftmax of -inf) where masked, as onnxruntime."""
    m = _model([helper.make_node("Add", ["x", "mask"], ["s"]), helper.make_node(op, ["s"], ["y0"], axis=-1)],
               [("x", F, 4), ("mask", F, 2)], opset=13)
    masked = {}

    def draw(rng, shapes):
        t = shapes[1][0]
        up = np.triu(np.ones((t, t), bool), 1)
        masked[t] = up
        return {"x": rng.standard_normal(shapes[0]).astype(np.float32) * 3,
                "mask": np.where(up, np.float32(fill), np.float32(0)).astype(np.float32)}
    plan, _ = check_tape(m, tmp_path, rng, [([2, 3, 5, 5], [5, 5]), ([1, 2, 8, 8], [8, 8])], EXP_TOL, draw=draw)
    for t in (5, 8):
        x = draw(rng, ([1, 2, t, t], [t, t]))
        y = plan.run([x["x"], x["mask"]])[0]
        up = np.broadcast_to(masked[t], y.shape)
        if op == "Softmax":
            assert (y[up] == 0).all() and (y[~up] > 0).all()
            np.testing.assert_allclose(y.sum(-1), 1, rtol=1e-5)
        elif fill == -np.inf:
            assert (y[up] == -np.inf).all()


def _shape_mask_model():
    """scores [b, h, t, t] + a causal mask the exporters' way (Shape ->
    Gather -> Range -> LessOrEqual -> Where: a shape value kept per key,
    no data step) -> Softmax."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i3"], ["t"]),
             helper.make_node("Range", ["zero", "t", "one"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "axm1"], ["rc"]),
             helper.make_node("LessOrEqual", ["r", "rc"], ["keep"]),
             helper.make_node("Where", ["keep", "fzero", "fneg"], ["mask"]),
             helper.make_node("Add", ["x", "mask"], ["sc"]),
             helper.make_node("Softmax", ["sc"], ["y0"], axis=-1)]
    inits = [("i3", np.array(3, np.int64)), ("zero", np.array(0, np.int64)), ("one", np.array(1, np.int64)),
             ("axm1", np.array([-1], np.int64)), ("fzero", np.array(0.0, np.float32)),
             ("fneg", np.array(-np.inf, np.float32))]
    return _model(nodes, [("x", F, 4)], inits=inits)


def test_softmax_of_a_causal_mask_kept_per_key(rng, tmp_path):
    """The mask is a shape value: each key's tape reads that key's mask;
    keys alternate, each run against onnxruntime."""
    m = _shape_mask_model()
    plan, _ = check_tape(m, tmp_path, rng, [([2, 3, 5, 5],), ([1, 2, 8, 8],)], EXP_TOL)
    assert plan._shape_slots
    ref, calls = _ort(m), _spy(plan)
    for shape in ([2, 3, 5, 5], [1, 2, 8, 8]) * 3:
        x = rng.standard_normal(shape).astype(np.float32)
        y = plan.run([x])[0]
        _close([y], ref.run(None, {"x": x}), **EXP_TOL)
        assert (y[..., np.triu(np.ones(shape[-2:], bool), 1)] == 0).all()
    assert not calls


def test_keys_dropped_and_built_again(rng, tmp_path, monkeypatch):
    """At most executor.KEYS keys keep their shape values and tapes: a
    dropped key runs the numpy path, then builds its tape again."""
    from tcc.runtime.generic import executor
    monkeypatch.setattr(executor, "KEYS", 2)
    m = _shape_mask_model()
    plan = _plan(m, tmp_path)
    for shapes in ([[1, 1, 3, 3]], [[1, 1, 4, 4]], [[1, 1, 5, 5]], [[1, 1, 3, 3]]):
        check_tape(m, tmp_path, rng, [shapes], EXP_TOL, plan=plan)
        assert len(plan._tapes) <= 2
    assert list(plan._tapes) == [((1, 1, 5, 5),), ((1, 1, 3, 3),)]


# ---- 5. Python steps between native records ------------------------------------------

MIXED = {
    "cumsum": ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("CumSum", ["r", "ax"], ["c"]),
                helper.make_node("Mul", ["c", "two"], ["y0"])], [("x", F, 2)], 1, 2),
    "noncontiguous-reduce": ([helper.make_node("Relu", ["x"], ["r"]),
                              helper.make_node("ReduceSum", ["r", "ax02"], ["s"], keepdims=1),
                              helper.make_node("Sigmoid", ["s"], ["y0"])], [("x", F, 3)], 1, 2),
    "reference-op": ([helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Hardmax", ["e"], ["h"], axis=-1),
                      helper.make_node("Add", ["h", "e"], ["y0"])], [("x", F, 2)], 1, 2),
    "python-output-too": ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("CumSum", ["r", "ax"], ["y1"]),
                           helper.make_node("Neg", ["y1"], ["y0"])], [("x", F, 2)], 2, 2),
}


@pytest.mark.parametrize("case", list(MIXED))
def test_python_steps_between_native_records(case, rng, tmp_path):
    nodes, spec, n_out, n_native = MIXED[case]
    inits = {"ax": np.array(1, np.int64), "two": np.array(2.0, np.float32), "three": np.array(3.0, np.float32),
             "ax02": np.array([0, 2], np.int64)}
    used = {i for n in nodes for i in n.input}
    m = _model(nodes, spec, n_out, [(k, v) for k, v in inits.items() if k in used])
    shapes = [([2, 3, 4],), ([1, 5, 2],)] if spec[0][2] == 3 else [([3, 4],), ([2, 7],)]
    _, tapes = check_tape(m, tmp_path, rng, shapes, EXP_TOL, pure=False, min_native=n_native)
    assert all(t.n_python >= 1 for t in tapes), [(t.n_native, t.n_python) for t in tapes]


def test_cast_and_int64_arithmetic_are_native(rng, tmp_path):
    nodes = [helper.make_node("Mul", ["x", "three"], ["m"]), helper.make_node("Cast", ["m"], ["i"], to=I64),
             helper.make_node("Add", ["i", "k"], ["j"]), helper.make_node("Mul", ["j", "k"], ["jk"]),
             helper.make_node("Less", ["jk", "k"], ["lt"]), helper.make_node("Not", ["lt"], ["ge"]),
             helper.make_node("Cast", ["ge"], ["g"], to=F), helper.make_node("Cast", ["jk"], ["f"], to=F),
             helper.make_node("Add", ["f", "g"], ["y0"])]
    m = _model(nodes, [("x", F, 2), ("k", I64, 2)], 1, [("three", np.array(3.0, np.float32))])
    check_tape(m, tmp_path, rng, [([3, 4], [3, 4]), ([1, 6], [1, 1])], EXP_TOL, min_native=9)


# ---- 6. the caller owns every output -----------------------------------------------

def _warm_up(plan, arrays):
    for _ in range(2):
        plan.run(arrays)
    assert isinstance(plan._tapes[tuple(a.shape for a in arrays)], Tape)


def test_an_output_changed_in_place_does_not_change_the_next_run(rng, tmp_path):
    """Outputs a native record writes (one also read by a later record) and
    one a Python step makes: each run's are fresh arrays."""
    m = _model([helper.make_node("Relu", ["x"], ["y0"]), helper.make_node("Exp", ["y0"], ["e"]),
                helper.make_node("CumSum", ["e", "ax"], ["y1"]), helper.make_node("Neg", ["y1"], ["y2"])],
               [("x", F, 2)], 3, [("ax", np.array(-1, np.int64))])
    plan, ref = _plan(m, tmp_path), _ort(m)
    calls = _spy(plan)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    want = ref.run(None, {"x": x})
    _warm_up(plan, [x])
    first = plan.run([x])
    _close(first, want, **EXP_TOL)
    for y in first:
        y[...] = 1e9
    second = plan.run([x])
    _close(second, want, **EXP_TOL)
    for a in first:
        for b in second:
            assert not np.shares_memory(a, b)
    x2 = rng.standard_normal((3, 5)).astype(np.float32)
    third = plan.run([x2])
    _close(second, want, **EXP_TOL)  # a later run does not write into an earlier run's outputs
    _close(third, ref.run(None, {"x": x2}), **EXP_TOL)
    assert not calls, "the tape served every run after the first"


def test_an_output_that_is_a_reshape_of_an_input_is_a_copy(rng, tmp_path):
    m = _model([helper.make_node("Reshape", ["x", "s"], ["y0"]), helper.make_node("Relu", ["x"], ["y1"]),
                helper.make_node("Identity", ["x"], ["y2"])], [("x", F, 2)], 3, [("s", np.array([-1], np.int64))])
    plan, ref = _plan(m, tmp_path), _ort(m)
    calls = _spy(plan)
    for run in range(3):
        x = rng.standard_normal((3, 4)).astype(np.float32)
        keep = x.copy()
        got = plan.run([x])
        _close(got, ref.run(None, {"x": x}), **TOL)
        for y in got:
            assert not np.shares_memory(y, x), run
            y[...] = 7.0
        np.testing.assert_array_equal(x, keep)
    assert isinstance(plan._tapes[((3, 4),)], Tape) and not calls


SHARED_OUTPUTS = {  # outputs one value, or views of one value, would give
    "reshape-transpose": ([helper.make_node("Relu", ["x"], ["y0"]), helper.make_node("Reshape", ["y0", "s"], ["y1"]),
                           helper.make_node("Transpose", ["y0"], ["y2"])], 3),
    "identity": ([helper.make_node("Relu", ["x"], ["y0"]), helper.make_node("Identity", ["y0"], ["y1"])], 2),
}


@pytest.mark.parametrize("case", list(SHARED_OUTPUTS))
def test_outputs_of_one_value_do_not_share(case, rng, tmp_path):
    nodes, n_out = SHARED_OUTPUTS[case]
    m = _model(nodes, [("x", F, 2)], n_out, [("s", np.array([-1], np.int64))] if n_out == 3 else [])
    plan, ref = _plan(m, tmp_path), _ort(m)
    calls = _spy(plan)
    for run in range(3):
        x = rng.standard_normal((3, 4)).astype(np.float32)
        want = ref.run(None, {"x": x})
        got = plan.run([x])
        _close(got, want, **TOL)
        assert not any(np.shares_memory(got[0], g) for g in got[1:]), run
        got[0][...] = -5.0
        _close(got[1:], want[1:], **TOL)
    assert isinstance(plan._tapes[((3, 4),)], Tape) and not calls


def test_a_non_contiguous_input_at_a_taped_key(rng, tmp_path):
    m = _model([helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Add", ["m", "a"], ["y0"])],
               [("a", F, 2)], 1, [("w", rng.standard_normal((4, 4)).astype(np.float32))])
    plan, ref = _plan(m, tmp_path), _ort(m)
    calls = _spy(plan)
    for run in range(4):
        base = rng.standard_normal((4, 6)).astype(np.float32)
        x = base.T if run % 2 else base.T.copy()[::-1]  # a transposed view, a negative-stride one
        assert x.shape == (6, 4)
        got = plan.run([x])
        _close(got, ref.run(None, {"a": np.ascontiguousarray(x)}), **TOL)
    assert isinstance(plan._tapes[((6, 4),)], Tape) and not calls


# ---- 7. threads -----------------------------------------------------------------------

@pytest.mark.parametrize("keys", ["one-key", "two-keys", "one-key-cold"])
def test_two_threads_on_one_plan(keys, rng, tmp_path):
    """Two threads, 50 runs each, on one plan (the same key, or one key
    each; "cold": the key's first runs and its tape's build in the race
    too): one caller at a time runs the tape, the other the numpy path
    meanwhile; every result right."""
    m = _model([helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["s"]),
                helper.make_node("Softmax", ["s"], ["p"], axis=-1), helper.make_node("CumSum", ["p", "ax"], ["c"]),
                helper.make_node("Mul", ["c", "x2"], ["y0"])], [("x", F, 2), ("x2", F, 2)], 1,
               [("w", rng.standard_normal((8, 8)).astype(np.float32)), ("b", rng.standard_normal(8).astype(np.float32)),
                ("ax", np.array(-1, np.int64))])
    plan, ref = _plan(m, tmp_path), _ort(m)
    rows = [6, 3] if keys == "two-keys" else [6, 6]
    work = []
    for r in rows:
        xs = [(rng.standard_normal((r, 8)).astype(np.float32), rng.standard_normal((r, 8)).astype(np.float32))
              for _ in range(50)]
        work.append([(x, ref.run(None, {"x": x[0], "x2": x[1]})[0]) for x in xs])
        if keys != "one-key-cold":
            _warm_up(plan, list(xs[0]))
    served = []
    for key in {((r, 8), (r, 8)) for r in rows} if keys != "one-key-cold" else ():
        tape = plan._tapes[key]
        run = tape.run
        tape.run = lambda arrays, run=run: (lambda got: served.append(got is not None) or got)(run(arrays))
    barrier, errors, results = threading.Barrier(2), [], [[], []]

    def worker(k):
        try:
            barrier.wait(30)
            for x, _ in work[k]:
                results[k].append(plan.run(list(x))[0])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for k in range(2):
        assert len(results[k]) == 50
        for got, (_, want) in zip(results[k], work[k]):
            np.testing.assert_allclose(got, want, **EXP_TOL)
    if keys == "one-key-cold":
        assert isinstance(plan._tapes[((6, 8), (6, 8))], Tape)
    else:
        assert any(served), "the tape served some of the runs"


# ---- 8. the switch ------------------------------------------------------------------

def test_tape_switched_off(rng, tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_GENERIC_TAPE", "0")
    m = _model([helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Relu", ["m"], ["y0"])],
               [("a", F, 2), ("b", F, 2)])
    plan, ref = _plan(m, tmp_path), _ort(m)
    for shapes in (([3, 4], [4, 5]), ([2, 2], [2, 6])):
        for _ in range(3):
            x = _draw(rng, m, shapes)
            _close(plan.run([x["a"], x["b"]]), ref.run(None, x), **TOL)
        assert not isinstance(plan._tapes.get(tuple(tuple(s) for s in shapes)), Tape)
    assert not any(isinstance(v, Tape) for v in plan._tapes.values())


def test_tape_switched_off_after_it_served(rng, tmp_path, monkeypatch):
    """The switch stops a built tape too, also where a session calls it
    straight by its fast key (run_generic)."""
    m = _model([helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Relu", ["m"], ["y0"])],
               [("a", F, 2), ("b", F, 2)])
    sess, ref = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc"), cache=False)), _ort(m)
    for _ in range(3):
        x = _draw(rng, m, ([3, 4], [4, 5]))
        _close(sess.run_generic(x), ref.run(None, x), **TOL)
    assert sess._fast_tapes
    tape = next(iter(sess._fast_tapes.values()))
    monkeypatch.setenv("TCC_GENERIC_TAPE", "0")
    x = _draw(rng, m, ([3, 4], [4, 5]))
    assert tape.run(sess._arrange(x)) is None  # the tape itself declines
    _close(sess.run_generic(x), ref.run(None, x), **TOL)


# ---- the tape reuses a key's recorded shapes: values whose shape is data ------------

def test_reshape_to_a_data_shape_at_one_key(rng, tmp_path):
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["z"]), helper.make_node("Relu", ["z"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", F, ["a", "b"]),
                                helper.make_tensor_value_info("s", I64, [2])],
                          [helper.make_tensor_value_info("y", F, ["p", "q"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    plan, ref = _plan(m, tmp_path), _ort(m)
    for s in ([2, 6], [2, 6], [6, 2], [6, 2]):
        x = {"x": rng.standard_normal((3, 4)).astype(np.float32), "s": np.array(s, np.int64)}
        _close(plan.run([x["x"], x["s"]]), ref.run(None, x), **TOL)
    # a value shaped by data: the plan builds no tape (it would bake in the first run's shape)
    assert not plan._tapeable and not isinstance(plan._tapes.get(((3, 4), (2,))), Tape)


def test_a_reshape_that_does_not_fit_at_a_taped_key_is_an_error(rng, tmp_path):
    from tcc.runtime.generic import GenericShapeError
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["z"], name="rs"),
                           helper.make_node("Relu", ["z"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", F, ["a", "b", "c"]),
                                helper.make_tensor_value_info("s", I64, [2])],
                          [helper.make_tensor_value_info("y", F, ["p", "q"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    plan = _plan(m, tmp_path)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    for _ in range(3):
        assert plan.run([x, np.array([6, 4], np.int64)])[0].shape == (6, 4)
    # a value shaped by data: the plan builds no tape (it would bake in the first run's shape)
    assert not plan._tapeable and not isinstance(plan._tapes.get(((2, 3, 4), (2,))), Tape)
    with pytest.raises(GenericShapeError, match=r"node 'rs' \(onnx.Reshape\) cannot reshape"):
        plan.run([x, np.array([5, -1], np.int64)])


def test_slice_by_data_bounds_then_a_native_op_at_one_key(rng, tmp_path):
    g = helper.make_graph([helper.make_node("Slice", ["x", "st", "en"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", F, ["a"]),
                                helper.make_tensor_value_info("st", I64, [1]),
                                helper.make_tensor_value_info("en", I64, [1])],
                          [helper.make_tensor_value_info("y", F, ["p"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    plan, ref = _plan(m, tmp_path), _ort(m)
    for st, en in ((0, 4), (0, 4), (2, 9), (2, 9)):
        x = {"x": rng.standard_normal(10).astype(np.float32), "st": np.array([st]), "en": np.array([en])}
        _close(plan.run([x["x"], x["st"], x["en"]]), ref.run(None, x), **TOL)
    # a value shaped by data: the plan builds no tape (it would bake in the first run's shape)
    assert not plan._tapeable and not isinstance(plan._tapes.get(((10,), (1,), (1,))), Tape)


def test_squeeze_by_data_axes_at_one_key(rng, tmp_path):
    g = helper.make_graph([helper.make_node("Squeeze", ["x", "ax"], ["z"]), helper.make_node("Relu", ["z"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", F, ["a", "b", "c"]),
                                helper.make_tensor_value_info("ax", I64, [1])],
                          [helper.make_tensor_value_info("y", F, ["p", "q"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    plan, ref = _plan(m, tmp_path), _ort(m)
    for a in (0, 0, 2, 2):
        x = {"x": rng.standard_normal((1, 3, 1)).astype(np.float32), "ax": np.array([a], np.int64)}
        _close(plan.run([x["x"], x["ax"]]), ref.run(None, x), **TOL)
    # a value shaped by data: the plan builds no tape (it would bake in the first run's shape)
    assert not plan._tapeable and not isinstance(plan._tapes.get(((1, 3, 1), (1,))), Tape)


def test_an_empty_view_as_a_graph_output(rng, tmp_path):
    m = _model([helper.make_node("Split", ["x", "sz"], ["y0", "y1", "y2"], axis=-1)], [("x", F, 2)], 3,
               [("sz", np.array([2, 0, 3], np.int64))])
    check_tape(m, tmp_path, rng, [([3, 5],), ([1, 5],)], untaped=(0, 1))


def test_an_empty_view_read_by_a_python_step(rng, tmp_path):
    m = _model([helper.make_node("Slice", ["x", "st", "en"], ["s"]), helper.make_node("CumSum", ["s", "ax"], ["y1"]),
                helper.make_node("Relu", ["x"], ["y0"])], [("x", F, 2)], 2,
               [("st", np.array([3], np.int64)), ("en", np.array([3], np.int64)), ("ax", np.array(0, np.int64))])
    check_tape(m, tmp_path, rng, [([5, 2],), ([3, 4],)], pure=False)


def test_a_sequence_of_views_outlives_its_buffer(rng, tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("SplitToSequence", ["a"], ["seq"], axis=0, keepdims=1),
             helper.make_node("Exp", ["x"], ["b"]),
             helper.make_node("SequenceAt", ["seq", "zero"], ["s0"]),
             helper.make_node("Add", ["s0", "b"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", "m"])],
                          [helper.make_tensor_value_info("y", F, ["n", "m"])],
                          [numpy_helper.from_array(np.array(0, np.int64), "zero")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    # a sequence's element shapes are not a tensor shape the plan knows: Relu and Exp are
    # records, the sequence ops and the Add after them Python steps, and the sequence's
    # elements (views of Relu's arena buffer) are copied before the next call reuses it
    _, tapes = check_tape(m, tmp_path, rng, [([3, 4],), ([2, 6],)], EXP_TOL, pure=False, min_native=2)
    assert all(t.n_python == 3 for t in tapes), [(t.n_native, t.n_python) for t in tapes]


def test_a_data_dependent_count_feeding_a_gather_at_one_key(rng, tmp_path):
    g = helper.make_graph([helper.make_node("Greater", ["x", "zero"], ["pos"]),
                           helper.make_node("NonZero", ["pos"], ["nz"]),
                           helper.make_node("Squeeze", ["nz", "ax0"], ["idx"]),
                           helper.make_node("Gather", ["x", "idx"], ["g"]),
                           helper.make_node("Relu", ["g"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", F, ["n"])],
                          [helper.make_tensor_value_info("y", F, ["k"])],
                          [numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
                           numpy_helper.from_array(np.array([0], np.int64), "ax0")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    plan, ref = _plan(m, tmp_path), _ort(m)
    for n_pos in (3, 3, 6, 6, 1, 8, 0, 5):  # the count changes at one key, up and down
        x = -np.abs(rng.standard_normal(8)).astype(np.float32) - np.float32(0.1)
        x[rng.permutation(8)[:n_pos]] *= -1
        _close(plan.run([x]), ref.run(None, {"x": x}), **TOL)
    # values shaped by data: the key's tape has a record for Greater alone (its shape is the
    # key's); NonZero and every step after it are Python steps, so no record bakes in a count
    assert not plan._tapeable
    tape = plan._tapes.get(((8,),))
    assert isinstance(tape, Tape) and tape.n_native == 1 and tape.n_python == 4, (tape.n_native, tape.n_python)


# ---- 9. end to end ------------------------------------------------------------------

def test_llama_through_the_public_api(rng, tmp_path):
    import os

    from tcc.model_report import CORPUS, feeds, manifest
    path = os.path.join(CORPUS, "llama.onnx")
    entry = manifest()["llama"]
    sess = tcc.load(tcc.compile(path, maccel=["cpu"], output=str(tmp_path / "m.tcc")))
    ref = _ort(onnx.load(path))
    shape = entry["inputs"][0]["shapes"][0]
    for run in range(3):
        x = feeds(entry, 0, rng)
        got = sess.run_generic(x)
        assert got is not None, f"run {run + 1}: the generic path could not run"
        _close(got, ref.run(None, x), rtol=1e-3, atol=1e-4, what=f"run {run + 1}")
    tape = sess._generic.plan._tapes.get((tuple(shape),))
    assert isinstance(tape, Tape), tape
    assert tape.n_native > 10
