"""The ai.onnx.preview.training optimizers (Adagrad, Adam, Momentum) against
onnx.reference on fresh random data, through the loop interpreter and the
native backend, and end to end with --maccel=cpu (host fallback)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import onnx
import pytest
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import tcc
from tcc.dialects.conversions.graph_to_loop.convert import LoweringError
from tcc.dialects.conversions.loop_to_native.jit import run_native
from tcc.dialects.loop.interpreter import run_loop_module

from helpers import same_outputs
from newops_helpers import RNG, lowered, tp

TRAINING = "ai.onnx.preview.training"
KINDS = {"Adagrad": ("XGH", "XH"), "Adam": ("XGVH", "XVH"), "Momentum": ("XGV", "XV")}


def _case(op, shapes, t, **attrs):
    ins_k, outs_k = KINDS[op]
    feeds = {"R": np.array(RNG.uniform(0.01, 0.5), np.float32), "T": np.array(t, np.int64)}
    for k in ins_k:
        for i, s in enumerate(shapes):
            a = RNG.standard_normal(s).astype(np.float32)
            feeds[f"{k}{i}"] = np.abs(a) if k == "H" else a  # accumulated squares are >= 0
    outs = [f"{k}{i}_new" for k in outs_k for i in range(len(shapes))]
    node = h.make_node(op, list(feeds), outs, domain=TRAINING, **attrs)
    vi = [h.make_tensor_value_info(n, tp(v.dtype), v.shape) for n, v in feeds.items()]
    ovi = [h.make_tensor_value_info(o, onnx.TensorProto.FLOAT, shapes[int(o[1:-4])]) for o in outs]
    m = h.make_model(h.make_graph([node], "g", vi, ovi),
                     opset_imports=[h.make_opsetid("", 21), h.make_opsetid(TRAINING, 1)])
    m.ir_version = 10
    return m, feeds


def _reference(m, feeds):
    """onnx.reference's outputs as the declared float32 (its single-tensor
    Adam returns them in float64: its learning-rate terms promote)."""
    return [np.asarray(w, np.float32) for w in ReferenceEvaluator(m).run(None, feeds)]


CASES = [
    ("Adagrad", [(3, 4)], 0, dict(decay_factor=0.1, epsilon=1e-6, norm_coefficient=0.01)),
    ("Adagrad", [(5,), (2, 3)], 7, dict(decay_factor=0.3, epsilon=1e-5, norm_coefficient=0.0)),
    ("Adam", [(2, 6)], 0, dict(alpha=0.9, beta=0.99, epsilon=1e-7, norm_coefficient=0.01)),
    ("Adam", [(4,), (3, 2)], 5, dict(alpha=0.8, beta=0.95, epsilon=1e-6, norm_coefficient=0.02,
                                     norm_coefficient_post=0.05)),
    ("Momentum", [(7,)], 0, dict(alpha=0.9, beta=0.5, mode="standard", norm_coefficient=0.01)),
    ("Momentum", [(2, 3), (4,)], 3, dict(alpha=0.7, beta=0.2, mode="nesterov", norm_coefficient=0.05)),
]


@pytest.mark.parametrize("op,shapes,t,attrs", CASES)
def test_optimizer_against_reference(op, shapes, t, attrs):
    m, feeds = _case(op, shapes, t, **attrs)
    want = _reference(m, feeds)
    mod = lowered(m)
    args = list(feeds.values())
    same_outputs(run_loop_module(mod, args), want, 1e-5, 1e-6, "interpreter")
    same_outputs(run_native(mod, args), want, 1e-5, 1e-6, "native")


def test_optimizer_with_cpu_accelerator(tmp_path):
    m, feeds = _case("Adam", [(3, 5)], 2, alpha=0.9, beta=0.999, epsilon=1e-7, norm_coefficient=0.0)
    got = tcc.load(tcc.compile(m, maccel=["cpu"], output=str(tmp_path / "m.tcc"))).run(feeds)
    same_outputs(got, _reference(m, feeds), 1e-5, 1e-6, "--maccel=cpu")


def test_momentum_bad_mode_is_one_line_error():
    m, _ = _case("Momentum", [(3,)], 1, alpha=0.9, beta=0.1, mode="heavy", norm_coefficient=0.0)
    with pytest.raises(LoweringError, match="mode 'heavy' is not 'standard' or 'nesterov'") as e:
        lowered(m)
    assert "\n" not in str(e.value)


def test_optimizer_shape_mismatch_is_one_line_error():
    m, _ = _case("Adagrad", [(3,)], 1)
    m.graph.input[3].type.tensor_type.shape.dim[0].dim_value = 4  # G0 of another size than X0
    with pytest.raises(LoweringError, match="G0 has shape") as e:
        lowered(onnx.shape_inference.infer_shapes(m))
    assert "\n" not in str(e.value)
