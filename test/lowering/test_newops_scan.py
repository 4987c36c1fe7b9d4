"""Scan (opset 9+) against onnxruntime on fresh random data, through the
loop interpreter and the native backend: several states, scan inputs and
outputs on other axes and in reverse, a body that captures an outer value,
a body that yields one value as both state and scan output."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from onnx import TensorProto, helper as h

from newops_helpers import RNG, check

F = TensorProto.FLOAT


def f(*s):
    return RNG.standard_normal(s).astype(np.float32)


def vi(name, shape):
    return h.make_tensor_value_info(name, F, shape)


def test_running_sum_state_and_output():
    body = h.make_graph([h.make_node("Add", ["s", "x"], ["s2"]), h.make_node("Identity", ["s2"], ["o"])], "body",
                        [vi("s", [3]), vi("x", [3])], [vi("s2", [3]), vi("o", [3])])
    check([h.make_node("Scan", ["init", "xs"], ["final", "all"], body=body, num_scan_inputs=1)],
          {"init": f(3), "xs": f(5, 3)}, {"final": np.float32, "all": np.float32}, opset=11)


@pytest.mark.parametrize("in_axis,in_dir,out_axis,out_dir", [(0, 0, 0, 0), (1, 1, 0, 0), (1, 0, 1, 1),
                                                             (-1, 1, -1, 0)])
def test_axes_and_directions(in_axis, in_dir, out_axis, out_dir):
    # state: a 2x4 matrix h; per step h = tanh(h @ W + x), output h * 2
    body = h.make_graph([h.make_node("MatMul", ["hs", "W"], ["hw"]), h.make_node("Add", ["hw", "x"], ["a"]),
                         h.make_node("Tanh", ["a"], ["h2"]), h.make_node("Add", ["h2", "h2"], ["o"])], "body",
                        [vi("hs", [2, 4]), vi("x", [2, 4])], [vi("h2", [2, 4]), vi("o", [2, 4])])
    T = 6
    xs_shape = [2, 4]
    xs_shape.insert(in_axis % 3, T)
    check([h.make_node("Scan", ["h0", "xs"], ["hT", "hs_all"], body=body, num_scan_inputs=1,
                       scan_input_axes=[in_axis], scan_input_directions=[in_dir], scan_output_axes=[out_axis],
                       scan_output_directions=[out_dir])],
          {"h0": f(2, 4), "xs": f(*xs_shape)}, {"hT": np.float32, "hs_all": np.float32}, opset=11,
          initializers={"W": f(4, 4) * 0.5}, rtol=1e-5, atol=1e-5)


def test_two_states_two_scan_inputs_no_scan_output():
    body = h.make_graph([h.make_node("Mul", ["a", "x"], ["a2"]), h.make_node("Add", ["b", "y"], ["b2"])], "body",
                        [vi("a", [4]), vi("b", [2, 4]), vi("x", [4]), vi("y", [2, 4])],
                        [vi("a2", [4]), vi("b2", [2, 4])])
    check([h.make_node("Scan", ["a0", "b0", "xs", "ys"], ["aT", "bT"], body=body, num_scan_inputs=2,
                       scan_input_axes=[0, 2])],
          {"a0": f(4), "b0": f(2, 4), "xs": f(3, 4), "ys": f(2, 4, 3)}, {"aT": np.float32, "bT": np.float32},
          opset=11)


def _loop_body():
    # carried s (2x3), per step: s = s * 0.5 + i, scan output s + x (captured)
    I64 = TensorProto.INT64
    return h.make_graph([h.make_node("Cast", ["i"], ["fi"], to=F), h.make_node("Mul", ["s", "half"], ["sh"]),
                         h.make_node("Add", ["sh", "fi"], ["s2"]), h.make_node("Add", ["s2", "x"], ["o"]),
                         h.make_node("Identity", ["c"], ["c2"])], "body",
                        [h.make_tensor_value_info("i", I64, []), h.make_tensor_value_info("c", TensorProto.BOOL, []),
                         vi("s", [2, 3])],
                        [h.make_tensor_value_info("c2", TensorProto.BOOL, []), vi("s2", [2, 3]), vi("o", [2, 3])],
                        [h.make_tensor(n, F, [], [0.5]) for n in ["half"]])


@pytest.mark.parametrize("trips,cond", [(4, True), (1, True), (3, False)])
def test_loop_with_known_trip_count(trips, cond):
    inits = {"M": np.array(trips, np.int64), "c0": np.array(cond)}
    check([h.make_node("Loop", ["M", "c0", "s0"], ["sT", "all"], body=_loop_body())],
          {"s0": f(2, 3), "x": f(2, 3)}, {"sT": (np.float32, [2, 3]), "all": (np.float32, [trips if cond else 0, 2, 3])},
          opset=11, initializers=inits)


@pytest.mark.parametrize("direction", [0, 1])
def test_scan8_batch_axis(direction):
    """Scan-8: batch axis 0 on every operand and result, the scan along axis
    1, no sequence_lens; a running sum and a running max as the state."""
    body = h.make_graph([h.make_node("Add", ["s", "x"], ["s2"]), h.make_node("Max", ["m", "x"], ["m2"]),
                         h.make_node("Mul", ["s2", "m2"], ["o"])], "body",
                        [vi("s", [3]), vi("m", [3]), vi("x", [3])], [vi("s2", [3]), vi("m2", [3]), vi("o", [3])])
    check([h.make_node("Scan", ["", "s0", "m0", "xs"], ["s", "m", "os"], body=body, num_scan_inputs=1,
                       directions=[direction])],
          {"s0": f(2, 3), "m0": f(2, 3), "xs": f(2, 5, 3)}, {"s": np.float32, "m": np.float32, "os": np.float32},
          opset=8)


def test_scan8_sequence_lens_refused_in_one_line():
    from newops_helpers import model

    import tcc
    from tcc.dialects.ir.errors import TccError
    body = h.make_graph([h.make_node("Add", ["s", "x"], ["s2"])], "body", [vi("s", [3]), vi("x", [3])], [vi("s2", [3])])
    m = model([h.make_node("Scan", ["lens", "s0", "xs"], ["s"], body=body, num_scan_inputs=1)],
              {"lens": np.array([5, 3], np.int64), "s0": f(2, 3), "xs": f(2, 5, 3)}, {"s": np.float32}, opset=8)
    with pytest.raises(TccError) as e:
        tcc.compile(m, maccel=[], cache=False)
    text = str(e.value)
    assert len(text.splitlines()) == 1 and "Scan-8 with sequence_lens is not supported" in text, text
