import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from onnx import TensorProto, helper as h

from newops_helpers import RNG, check


def f(*s, dt=np.float32):
    return RNG.standard_normal(s).astype(dt)


def test_attention_4d_matches_ort():
    check([h.make_node("Attention", ["q", "k", "v"], ["y"])], {"q": f(2, 3, 4, 8), "k": f(2, 3, 6, 8),
                                                                "v": f(2, 3, 6, 5)}, {"y": 1}, rtol=1e-4, atol=1e-5)


def test_attention_3d_gqa_causal_bool_mask_matches_ort():
    mask = RNG.integers(0, 2, (4, 6)).astype(bool)
    mask[:, 0] = True
    check([h.make_node("Attention", ["q", "k", "v", "m"], ["y"], q_num_heads=4, kv_num_heads=2, is_causal=1)],
          {"q": f(2, 4, 32), "k": f(2, 6, 16), "v": f(2, 6, 12), "m": mask}, {"y": 1}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_past_present_qk_output(mode):
    """past cache + float mask (broadcast, shorter than kv: padded with -inf) + softcap + scale,
    every qk_matmul_output_mode (onnx.reference: ORT's modes differ)."""
    ins = {"q": f(2, 3, 4, 8), "k": f(2, 3, 5, 8), "v": f(2, 3, 5, 6), "m": f(2, 1, 4, 7),
           "pk": f(2, 3, 3, 8), "pv": f(2, 3, 3, 6)}
    check([h.make_node("Attention", ["q", "k", "v", "m", "pk", "pv"], ["y", "ok", "ov", "qk"],
                       qk_matmul_output_mode=mode, softcap=2.5, scale=0.3)],
          ins, {"y": 1, "ok": 1, "ov": 1, "qk": 1}, ref="onnx", rtol=1e-4, atol=1e-5)


def test_attention_window_nonpad_fully_masked_rows():
    """sliding window + causal + nonpad_kv_seqlen (opset 25), with rows left with no key."""
    ins = {"q": f(2, 2, 4, 8), "k": f(2, 2, 6, 8), "v": f(2, 2, 6, 8), "n": np.array([6, 1], np.int64)}
    check([h.make_node("Attention", ["q", "k", "v", "", "", "", "n"], ["y"], is_causal=1, left_window_size=1,
                       right_window_size=0)], ins, {"y": 1}, opset=25, ref="onnx", rtol=1e-4, atol=1e-5)


def test_attention_fp16_and_softmax_precision():
    ins = {"q": f(1, 2, 3, 8, dt=np.float16), "k": f(1, 2, 5, 8, dt=np.float16), "v": f(1, 2, 5, 4, dt=np.float16)}
    check([h.make_node("Attention", ["q", "k", "v"], ["y", "", "", "qk"], qk_matmul_output_mode=3,
                       softmax_precision=TensorProto.FLOAT)], ins, {"y": 10, "qk": 10}, opset=24, ref="onnx",
          rtol=2e-3, atol=2e-3)
