"""LSTM and GRU on the cpu accelerator (kernels/rnn.c) against onnxruntime
on fresh random data: every direction, both layouts, GRU's two reset
placements, peepholes, clip, input_forget, initial states, sequence_lens
(reverse sequences reversed within their own lengths, zero-length
entries), hidden sizes that are not a multiple of the vector width, batch
and sequence length 1, and steps large enough for the recurrent product to
go to the GEMM. What the kernel does not take (other activations, a used
Y_h) stays on the host path with the reason in the placement report."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc

from .helpers import c_source_of, cpu_steps, host_steps, kernels_called

RNG = np.random.default_rng()
F, I32 = TensorProto.FLOAT, TensorProto.INT32
GATES = {"LSTM": 4, "GRU": 3}


def rnn_model(kind, t, nb, i, h, direction="forward", layout=0, bias=True, lens=False, h0=False, c0=False,
              peep=False, y_h=False, **attrs):
    nd = 2 if direction == "bidirectional" else 1
    g = GATES[kind]
    inits = [numpy_helper.from_array((RNG.standard_normal((nd, g * h, i)) * 0.4).astype(np.float32), "W"),
             numpy_helper.from_array((RNG.standard_normal((nd, g * h, h)) * 0.4).astype(np.float32), "R")]
    names = ["x", "W", "R", "B" if bias else "", "lens" if lens else "", "h0" if h0 else ""]
    if bias:
        inits.append(numpy_helper.from_array((RNG.standard_normal((nd, 2 * g * h)) * 0.3).astype(np.float32), "B"))
    xs = (nb, t, i) if layout else (t, nb, i)
    state = (nb, nd, h) if layout else (nd, nb, h)
    inputs = [helper.make_tensor_value_info("x", F, xs)]
    if lens:
        inputs.append(helper.make_tensor_value_info("lens", I32, [nb]))
    if h0:
        inputs.append(helper.make_tensor_value_info("h0", F, state))
    if kind == "LSTM":
        names += ["c0" if c0 else "", "P" if peep else ""]
        if c0:
            inputs.append(helper.make_tensor_value_info("c0", F, state))
        if peep:
            inits.append(numpy_helper.from_array((RNG.standard_normal((nd, 3 * h)) * 0.3).astype(np.float32), "P"))
    while names[-1] == "":
        names.pop()
    ys = (nb, t, nd, h) if layout else (t, nd, nb, h)
    node = helper.make_node(kind, names, ["y", "y_h"] if y_h else ["y"], hidden_size=h, direction=direction,
                            **({"layout": 1} if layout else {}), **attrs)
    outs = [helper.make_tensor_value_info("y", F, ys)] + ([helper.make_tensor_value_info("y_h", F, state)]
                                                          if y_h else [])
    m = helper.make_model(helper.make_graph([node], "g", inputs, outs, inits),
                          opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def feeds_for(m, nb, t, lens_vals=None):
    f = {}
    for v in m.graph.input:
        shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
        if v.name == "lens":
            f[v.name] = np.asarray(lens_vals if lens_vals is not None else RNG.integers(1, t + 1, nb), np.int32)
        else:
            f[v.name] = RNG.standard_normal(shape).astype(np.float32)
    return f


class Reference:
    """onnxruntime on the model; for layout 1 (which onnxruntime refuses) on
    its layout-0 twin (same weights), inputs and outputs transposed."""

    def __init__(self, m):
        node = m.graph.node[0]
        self.layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
        if self.layout:
            m = onnx.ModelProto.FromString(m.SerializeToString())
            node = m.graph.node[0]
            for a in node.attribute:
                if a.name == "layout":
                    a.i = 0
            for v in list(m.graph.input) + list(m.graph.output):
                dims = v.type.tensor_type.shape.dim
                perm = {3: [1, 0, 2], 4: [1, 2, 0, 3]}.get(len(dims))  # x, states; y
                if perm is not None and v.name != "lens":
                    vals = [dims[p].dim_value for p in perm]
                    for d, val in zip(dims, vals):
                        d.dim_value = val
        self.sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])

    def run(self, feeds):
        if not self.layout:
            return self.sess.run(None, feeds)
        f = {k: (np.ascontiguousarray(v.transpose(1, 0, 2)) if v.ndim == 3 else v) for k, v in feeds.items()}
        return [np.ascontiguousarray(y.transpose(2, 0, 1, 3) if y.ndim == 4 else y.transpose(1, 0, 2))
                for y in self.sess.run(None, f)]


def run(m, feeds, tmp_path, on_cpu=True):
    sess = tcc.load(tcc.compile(m, maccel=["cpu"], output=str(tmp_path / "m.tcc")))
    called = kernels_called(c_source_of(sess.path)) if cpu_steps(sess) else set()
    assert ("tcc_cpu_rnn" in called) == on_cpu, (called, sess.manifest["plan"])
    if on_cpu:
        assert not host_steps(sess), sess.manifest["plan"]
    ref = Reference(m)
    for _ in range(2):  # fresh data, same artifact
        ours, want = sess.run(feeds), ref.run(feeds)
        for a, b in zip(ours, want):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)
        feeds = {k: (RNG.standard_normal(v.shape).astype(np.float32) if v.dtype == np.float32 else v)
                 for k, v in feeds.items()}
    return sess


CASES = [  # kind, T, batch, input, hidden, attributes
    ("LSTM", 5, 3, 7, 10, dict(h0=True, c0=True)),
    ("LSTM", 1, 1, 4, 8, dict(direction="bidirectional")),
    ("LSTM", 6, 2, 5, 13, dict(direction="reverse", bias=False)),
    ("LSTM", 7, 3, 6, 9, dict(direction="bidirectional", peep=True, clip=0.8, h0=True)),
    ("LSTM", 4, 2, 3, 5, dict(input_forget=1)),
    ("LSTM", 5, 3, 8, 12, dict(layout=1, direction="bidirectional", h0=True, c0=True)),
    ("LSTM", 20, 16, 32, 64, dict(direction="bidirectional")),
    ("LSTM", 6, 3, 16, 96, dict(h0=True)),  # a step past the direct loop, few rows: tcc_cpu_gemm
    ("GRU", 5, 3, 7, 10, dict(h0=True)),
    ("GRU", 6, 2, 5, 11, dict(linear_before_reset=1, direction="bidirectional")),
    ("GRU", 1, 1, 3, 4, dict(direction="reverse", linear_before_reset=1)),
    ("GRU", 4, 3, 6, 9, dict(layout=1, clip=0.5, h0=True)),
    ("GRU", 12, 16, 24, 72, dict(linear_before_reset=1)),
    ("GRU", 12, 16, 24, 72, dict(direction="bidirectional", bias=False)),
]


@pytest.mark.parametrize("kind,t,nb,i,h,attrs", CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_rnn_matches_onnxruntime(tmp_path, kind, t, nb, i, h, attrs):
    m = rnn_model(kind, t, nb, i, h, **attrs)
    run(m, feeds_for(m, nb, t), tmp_path)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_sequence_lens(tmp_path, kind, direction, layout):
    """Entries shorter than the sequence (one of length 0, one of the full
    length): their steps past the end keep the state and write zeros."""
    t, nb = 6, 4
    m = rnn_model(kind, t, nb, 5, 11, direction=direction, layout=layout, lens=True, h0=True,
                  **({"linear_before_reset": 1} if kind == "GRU" and layout else {}))
    run(m, feeds_for(m, nb, t, lens_vals=[t, 0, 3, 1]), tmp_path)


def _reason(m):
    from tcc.accelerators.cpu import support
    from tcc.dialects.onnx.importer import import_model
    mod = import_model(m)
    op = next(o for o in mod.walk() if o.name in ("onnx.LSTM", "onnx.GRU"))
    return support.check(op, mod).reason


def test_other_activations_and_final_states_stay_on_the_host(tmp_path):
    m = rnn_model("GRU", 4, 2, 3, 6, activations=["Sigmoid", "Relu"])
    assert "activations" in _reason(m)
    run(m, feeds_for(m, 2, 4), tmp_path, on_cpu=False)
    m = rnn_model("LSTM", 4, 2, 3, 6, y_h=True)
    assert "only the Y output" in _reason(m)
    run(m, feeds_for(m, 2, 4), tmp_path, on_cpu=False)
