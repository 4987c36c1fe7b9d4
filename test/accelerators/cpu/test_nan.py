"""NaN in, NaN out: the activations fused into the kernels' epilogues
(Relu, Clip, LeakyRelu after a Conv, Gemm or MatMul; Relu6 inside the
pointwise -> depthwise pair) let a NaN through as onnxruntime and the ONNX
reference do. They returned 0 (or Clip's bound) for it: max and min return
their second operand when either is NaN, and the kernels passed the
constant second, so a model fed NaN answered finite numbers."""
import numpy as np
import pytest
from onnx import helper

from .helpers import RNG, model, rand, run_both

H = helper.make_node


def _clip(i, o):
    return H("Clip", [i, "lo", "hi"], [o])


LOHI = [("lo", np.float32(0)), ("hi", np.float32(6))]
CASES = {
    "conv_relu": lambda: ([H("Conv", ["x", "w"], ["c"], pads=[1] * 4), H("Relu", ["c"], ["y"])],
                          [1, 8, 8, 8], [1, 8, 8, 8], [("w", rand(8, 8, 3, 3))]),
    "conv_clip": lambda: ([H("Conv", ["x", "w"], ["c"], pads=[1] * 4), _clip("c", "y")],
                          [1, 8, 8, 8], [1, 8, 8, 8], [("w", rand(8, 8, 3, 3))] + LOHI),
    "conv_leaky": lambda: ([H("Conv", ["x", "w"], ["c"], pads=[1] * 4), H("LeakyRelu", ["c"], ["y"])],
                           [1, 8, 8, 8], [1, 8, 8, 8], [("w", rand(8, 8, 3, 3))]),
    "depthwise_relu": lambda: ([H("Conv", ["x", "w"], ["c"], pads=[1] * 4, group=8), H("Relu", ["c"], ["y"])],
                               [1, 8, 8, 8], [1, 8, 8, 8], [("w", rand(8, 1, 3, 3))]),
    "stem_clip": lambda: ([H("Conv", ["x", "w"], ["c"], pads=[1] * 4, strides=[2, 2]), _clip("c", "y")],
                          [1, 3, 32, 32], [1, 32, 16, 16], [("w", rand(32, 3, 3, 3))] + LOHI),
    "pw_dw_clip": lambda: ([H("Conv", ["x", "w1"], ["a"]), _clip("a", "b"),
                            H("Conv", ["b", "w2"], ["c"], pads=[1] * 4, group=96), _clip("c", "d"),
                            H("Conv", ["d", "w3"], ["y"])],
                           [1, 16, 14, 14], [1, 24, 14, 14],
                           [("w1", rand(96, 16, 1, 1)), ("w2", rand(96, 1, 3, 3)), ("w3", rand(24, 96, 1, 1))] + LOHI),
    "gemm_relu": lambda: ([H("Gemm", ["x", "w"], ["c"]), H("Relu", ["c"], ["y"])],
                          [16, 64], [16, 32], [("w", rand(64, 32))]),
    "gemm_small_m_relu": lambda: ([H("Gemm", ["x", "w"], ["c"]), H("Relu", ["c"], ["y"])],
                                  [2, 64], [2, 5], [("w", rand(64, 5))]),
    "matmul_relu": lambda: ([H("MatMul", ["x", "b"], ["c"]), H("Relu", ["c"], ["y"])],
                            [4, 8, 32], [4, 8, 16], [("b", rand(4, 32, 16))]),
}


@pytest.mark.parametrize("every", [1, 7])
@pytest.mark.parametrize("case", sorted(CASES))
def test_nan_passes_through_fused_activations(case, every):
    nodes, xs, ys, inits = CASES[case]()
    x = rand(*xs)
    x.ravel()[int(RNG.integers(every))::every] = np.nan  # every input, or one in 7 from a random start
    (got,), (want,), _ = run_both(model(nodes, [("x", xs)], [("y", ys)], inits), {"x": x}, all_cpu=False)
    nan = np.isnan(want)
    assert nan.any()
    np.testing.assert_array_equal(np.isnan(got), nan)
    # atol scales with the outputs: pw_dw_clip's last conv sums 96 products
    # of up to 6 x |w|, and an output near 0 by cancellation was 1.3e-5 off
    # (--seed=154547234) in float32's reassociation alone
    scale = max(1.0, float(np.abs(want[~nan]).max(initial=0.0)))
    np.testing.assert_allclose(got[~nan], want[~nan], rtol=1e-4, atol=1e-5 * scale)


def _maxpool_ref(x, k, s, pad):
    """MaxPool over NCHW by numpy: a window holding a NaN gives NaN (np.max),
    as the ONNX reference and the host path answer; padding never wins."""
    n, c, h, w = x.shape
    xp = np.full((n, c, h + 2 * pad, w + 2 * pad), -np.inf, np.float32)
    xp[:, :, pad:pad + h, pad:pad + w] = x
    oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    win = np.stack([xp[:, :, i:i + s * oh:s, j:j + s * ow:s] for i in range(k) for j in range(k)])
    return np.max(win, axis=0)


# (kernel, stride, pad): ResNet's 3x3 stride 2 pad 1, a 2x2 stride 2, a 3x3 stride 1
@pytest.mark.parametrize("k,s,pad", [(3, 2, 1), (2, 2, 0), (3, 1, 1)])
@pytest.mark.parametrize("every", [1, 5, 37])
def test_nan_anywhere_in_a_maxpool_window_gives_nan(k, s, pad, every):
    """The cpu kernel reduced with max_ps, which keeps a NaN only when it is
    the last element read: a window's answer depended on where its NaN sat.
    numpy is the reference (onnxruntime's MaxPool has the same position
    dependence), and the host path must agree with it."""
    import tcc

    from .helpers import cpu_steps
    shape = [1, 16, 20, 23]
    x = rand(*shape)
    x.ravel()[int(RNG.integers(every))::every] = np.nan
    want = _maxpool_ref(x, k, s, pad)
    m = model([H("MaxPool", ["x"], ["y"], kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4)],
              [("x", shape)], [("y", list(want.shape))])
    sess = tcc.load(tcc.compile(m, maccel=["cpu"]))
    assert cpu_steps(sess)
    host = tcc.load(tcc.compile(m, maccel=["host"]))
    for got in (sess.run({"x": x})[0], host.run({"x": x})[0]):
        nan = np.isnan(want)
        assert nan.any()
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(got[~nan], want[~nan])
