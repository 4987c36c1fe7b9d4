"""LSTM / GRU / RNN host lowerings against onnxruntime (onnx's reference
ignores sequence_lens, clip, activations and input_forget). onnxruntime has
no layout 1: batch-major cases are checked against it on the time-major
transposes of their inputs and outputs."""
import numpy as np
import pytest
from onnx import helper as h

from helpers import same_outputs
from newops_helpers import RNG, expected, lowered, model
from tcc.dialects.conversions.graph_to_loop import LoweringError
from tcc.dialects.conversions.loop_to_native.jit import run_native
from tcc.dialects.loop.interpreter import run_loop_module

G = {"LSTM": 4, "GRU": 3, "RNN": 1}


def f(*s, dt=np.float32):
    return (RNG.standard_normal(s) * 0.7).astype(dt)


def rnn(kind, T=3, B=2, I=4, H=3, direction="forward", layout=0, bias=True, sl=None, h0=False, c0=False,
        p=False, outs=("y", "yh", "yc"), dt=np.float32, const=False, ref="ort", rtol=1e-4,
        atol=1e-5, **attrs):
    """One `kind` node on random data; `const` makes W, R, B, P initializers."""
    nd = 2 if direction == "bidirectional" else 1
    x = f(T, B, I, dt=dt)
    ins, inits = {"x": x}, {}
    ws = inits if const else ins
    ws["w"], ws["r"] = f(nd, G[kind] * H, I, dt=dt), f(nd, G[kind] * H, H, dt=dt)
    names = ["x", "w", "r"]
    if bias:
        ws["b"] = f(nd, 2 * G[kind] * H, dt=dt)
    names.append("b" if bias else "")
    if sl is not None:
        ins["sl"] = np.array(sl, np.int32)
    names.append("sl" if sl is not None else "")
    states = ["h0", "c0"] if kind == "LSTM" else ["h0"]
    for s, want in zip(states, (h0, c0)):
        if want:
            ins[s] = f(nd, B, H, dt=dt)
        names.append(s if want else "")
    if kind == "LSTM" and p:
        ws["p"] = f(nd, 3 * H, dt=dt)
        names.append("p")
    while names[-1] == "":
        names.pop()
    onames = [o if o in outs else "" for o in (["y", "yh", "yc"] if kind == "LSTM" else ["y", "yh"])]
    while onames[-1] == "":
        onames.pop()
    node = h.make_node(kind, names, onames, direction=direction, hidden_size=H, **attrs)
    m = model([node], ins, {o: dt for o in onames if o}, initializers=inits)
    if ref == "ort" and dt == np.float64:  # no f64 kernels there: its f32 results, looser tolerances
        ins32 = {k: v.astype(np.float32) if v.dtype == dt else v for k, v in ins.items()}
        m32 = model([node], ins32, {o: np.float32 for o in onames if o},
                    initializers={k: v.astype(np.float32) for k, v in inits.items()})
        want = [w.astype(dt) for w in expected(m32, ins32, ref)]
    else:
        want = expected(m, ins, ref)
    if layout:
        node = h.make_node(kind, names, onames, direction=direction, hidden_size=H, layout=1, **attrs)
        ins = {k: v.transpose(1, 0, 2) if k in ("x", "h0", "c0") else v for k, v in ins.items()}
        m = model([node], ins, {o: dt for o in onames if o}, initializers=inits)
        want = [w.transpose(2, 0, 1, 3) if w.ndim == 4 else w.transpose(1, 0, 2) for w in want]
    mod = lowered(m)
    args = list(ins.values())
    same_outputs(run_loop_module(mod, args), want, rtol, atol, "interpreter")
    same_outputs(run_native(mod, args), want, rtol, atol, "native")


KINDS = ["LSTM", "GRU", "RNN"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_directions_layouts(kind, direction, layout):
    rnn(kind, direction=direction, layout=layout, h0=True, c0=True, p=True)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_lens(kind, direction):
    rnn(kind, T=4, B=3, direction=direction, sl=[4, 1, 2], h0=True, c0=True, p=True)


@pytest.mark.parametrize("kind", KINDS)
def test_zero_length_and_layout1_lens(kind):
    rnn(kind, T=3, B=3, direction="bidirectional", sl=[0, 3, 2], h0=True, c0=True)
    rnn(kind, T=3, B=2, direction="bidirectional", layout=1, sl=[2, 3], h0=True, c0=True)


@pytest.mark.parametrize("kind", KINDS)
def test_clip_no_bias_no_state(kind):
    rnn(kind, direction="bidirectional", bias=False, clip=0.4)


def test_lstm_input_forget_peepholes_clip():
    rnn("LSTM", direction="bidirectional", p=True, h0=True, c0=True, input_forget=1, clip=1.1)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_gru_linear_before_reset(direction):
    rnn("GRU", direction=direction, h0=True, linear_before_reset=1, sl=[3, 2] if direction == "forward" else None)
    rnn("GRU", direction=direction, bias=False, linear_before_reset=1, clip=0.5)


ACTS = [("Relu", [], []), ("Affine", [0.7], [0.2]), ("LeakyRelu", [0.2], []), ("ThresholdedRelu", [0.1], []),
        ("ScaledTanh", [1.2], [0.6]), ("HardSigmoid", [0.3], [0.4]), ("Elu", [0.8], []), ("Softsign", [], []),
        ("Softplus", [], []), ("Sigmoid", [], []), ("Tanh", [], [])]


@pytest.mark.parametrize("act,al,be", ACTS, ids=[a[0] for a in ACTS])
def test_activations(act, al, be):
    # The alpha/beta lists are consumed only by the activations that take them.
    kw = {}
    if al:
        kw["activation_alpha"] = al + [0.5]
    if be:
        kw["activation_beta"] = be + [0.3]
    rnn("RNN", activations=[act], **kw)
    rnn("GRU", direction="bidirectional", activations=[act, "Affine", "HardSigmoid", act],
        activation_alpha=al + [0.5, 0.25] + al, activation_beta=be + [0.3, 0.6] + be)
    rnn("LSTM", activations=["Sigmoid", act, "Elu"], activation_alpha=al + [0.9],
        **({"activation_beta": be} if be else {}))


def test_activation_defaults():
    # LeakyRelu 0.01, HardSigmoid (0.2, 0.5), Elu 1.0 without activation_alpha/beta
    rnn("LSTM", activations=["HardSigmoid", "LeakyRelu", "Elu"])


@pytest.mark.parametrize("kind,outs", [(k, o) for k in KINDS for o in [("y",), ("yh",)]]
                         + [("LSTM", ("yc",)), ("LSTM", ("y", "yc")), ("LSTM", ("yh", "yc"))])
def test_absent_outputs(kind, outs):
    rnn(kind, outs=outs, h0=True, sl=[2, 3])


@pytest.mark.parametrize("kind", KINDS)
def test_f64(kind):
    rnn(kind, direction="bidirectional", dt=np.float64, h0=True, c0=True, p=True, sl=[3, 1], clip=2.0)
    # and exactly, where onnx's reference covers the case
    rnn(kind, direction="bidirectional", dt=np.float64, h0=True, c0=True, p=True, ref="onnx", rtol=1e-12,
        atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_f16(kind):
    # onnxruntime has no f16 recurrent kernels: onnx's reference (defaults only)
    rnn(kind, direction="bidirectional", dt=np.float16, h0=True, c0=True, p=True, ref="onnx", rtol=3e-3,
        atol=3e-3)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("const", [False, True])
def test_native(kind, const):
    rnn(kind, T=5, B=3, I=7, H=5, direction="bidirectional", h0=True, c0=True, p=True, sl=[5, 2, 4], const=const, **({"linear_before_reset": 1} if kind == "GRU" and const else {}))


def test_native_gru_default_reset_and_f64():
    rnn("GRU", T=4, B=2, I=3, H=6, direction="reverse", const=True, clip=1.5)
    rnn("LSTM", T=4, B=2, I=3, H=6, dt=np.float64, const=True, p=True, input_forget=1)


def test_unknown_activation():
    m = model([h.make_node("RNN", ["x", "w", "r"], ["y"], hidden_size=2, activations=["Gelu"])],
              {"x": f(2, 1, 3), "w": f(1, 2, 3), "r": f(1, 2, 2)}, {"y": np.float32})
    with pytest.raises(LoweringError, match="activation"):
        lowered(m)


@pytest.mark.parametrize("kind", KINDS)
def test_compile_and_load(kind, tmp_path):
    """The whole pipeline (optimizations, artifact, runtime session)."""
    import tcc
    T, B, I, H = 6, 3, 5, 8
    nd, g = 2, G[kind]
    inits = {"w": f(nd, g * H, I), "r": f(nd, g * H, H), "b": f(nd, 2 * g * H)}
    if kind == "LSTM":
        inits["p"] = f(nd, 3 * H)
    ins = {"x": f(T, B, I), "sl": np.array([6, 2, 5], np.int32), "h0": f(nd, B, H)}
    names = ["x", "w", "r", "b", "sl", "h0"] + (["", "p"] if kind == "LSTM" else [])
    outs = ["y", "yh"] + (["yc"] if kind == "LSTM" else [])
    node = h.make_node(kind, names, outs, direction="bidirectional", hidden_size=H, clip=3.0)
    m = model([node], ins, {o: np.float32 for o in outs}, initializers=inits)
    want = expected(m, ins)
    s = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc")))
    same_outputs(s.run(list(ins.values())), want, 1e-4, 1e-5, "tcc.load")
