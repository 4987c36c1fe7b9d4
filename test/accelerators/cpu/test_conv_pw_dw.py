"""A pointwise conv read only by a depthwise one runs as one kernel
(kernels/conv_pw.c's cv_pointwise_depthwise: each 8-channel block of the
expanded tensor is computed into a per-thread buffer, then convolved
depthwise straight from it; on AVX2 and AVX-512 kernels/conv_pwdw8.c, two
or four blocks with the channels in the lanes), against onnxruntime on
fresh random data:
called directly on every ISA build at 1 and 2 threads through each
depthwise path (in place at stride 1, stride-2 rows, phase-plane packing),
and end to end through the lowering, which fuses only what it may."""
import ctypes
import zipfile

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from .helpers import check, model, rand, run_both
from .test_conv_paths import ConvParams, Epilogue, out_size, pw_lib  # noqa: F401 (fixture)

H = helper.make_node
ACT_NODES = {"Relu": lambda i, o: [H("Relu", [i], [o])], "Sigmoid": lambda i, o: [H("Sigmoid", [i], [o])],
             "Tanh": lambda i, o: [H("Tanh", [i], [o])], "Clip": lambda i, o: [H("Clip", [i, "lo", "hi"], [o])],
             "SiLU": lambda i, o: [H("Sigmoid", [i], [i + "_sg"]), H("Mul", [i, i + "_sg"], [o])],
             None: lambda i, o: [H("Identity", [i], [o])]}
ACT_CODES = {None: (0, 0.0, 0.0), "Relu": (1, 0.0, 0.0), "Clip": (2, 0.0, 6.0), "Sigmoid": (3, 0.0, 0.0),
             "Tanh": (4, 0.0, 0.0), "SiLU": (6, 0.0, 0.0)}


def block_model(n, c, h, w, hidden, k, s=(1, 1), d=(1, 1), pads=(1, 1, 1, 1), act1="Clip", act2="Clip",
                residual=False, pw_bias=True):
    """x -> Conv 1x1 (+ bias) -> act1 -> depthwise Conv k (+ bias) [+ residual] -> act2."""
    oh, ow = out_size(h, k, s[0], d[0], pads[0], pads[2]), out_size(w, k, s[1], d[1], pads[1], pads[3])
    inits = [("w1", rand(hidden, c, 1, 1)), ("w2", rand(hidden, 1, k, k)), ("b2", rand(hidden)),
             ("lo", np.array(0.0, np.float32)), ("hi", np.array(6.0, np.float32))]
    if pw_bias:
        inits.append(("b1", rand(hidden)))
    nodes = [H("Conv", ["x", "w1"] + (["b1"] if pw_bias else []), ["e"])] + ACT_NODES[act1]("e", "ea")
    nodes.append(H("Conv", ["ea", "w2", "b2"], ["d"], kernel_shape=[k, k], strides=list(s), dilations=list(d),
                   pads=list(pads), group=hidden))
    return _finish(nodes, inits, (n, c, h, w), "d", (n, hidden, oh, ow), residual, act2)


def _finish(nodes, inits, x_shape, cur, y_shape, residual, act):
    """The model of nodes from input x to value cur, then [+ residual input r] -> act -> y; with its feeds."""
    inputs, feeds = [("x", x_shape)], {"x": rand(*x_shape)}
    if residual:
        nodes.append(H("Add", [cur, "r"], ["res_sum"]))
        inputs.append(("r", y_shape))
        feeds["r"] = rand(*y_shape)
        cur = "res_sum"
    nodes += ACT_NODES[act](cur, "y")
    return model(nodes, inputs, [("y", y_shape)], inits), feeds


# hidden not a multiple of 8 (a block's tail), planes whose last 1..4 positions are dot products
# (P % 16), batch 2, each depthwise path, activations applied in registers and after the store
CASES = [
    ((1, 8, 14, 14, 20, 3), {}),                                                  # 196: 4 rest, 20 = 2.5 blocks
    ((2, 5, 9, 11, 16, 3), {"s": (2, 2)}),                                        # stride-2 rows, batch 2
    ((1, 16, 7, 7, 24, 3), {"residual": True, "act2": None}),                     # 49: one rest position
    ((1, 4, 17, 18, 9, 5), {"s": (2, 2), "pads": (2, 1, 2, 1), "act1": "Relu"}),  # 5 tap rows, stride 2
    ((1, 6, 12, 13, 8, 3), {"s": (2, 1), "act1": None, "pw_bias": False}),        # phase planes (packed)
    ((1, 6, 12, 13, 11, 3), {"d": (2, 2), "pads": (2, 2, 2, 2)}),                 # dilated, in place
    ((1, 3, 40, 40, 16, 3), {"act1": "Sigmoid", "act2": "Tanh"}),                 # activations after the store
    ((1, 5, 12, 14, 16, 3), {"act1": "SiLU", "act2": "SiLU", "residual": True}),  # efficientnet's x * sigmoid(x)
    ((1, 7, 3, 2, 10, 3), {"s": (2, 2), "pads": (0, 1, 1, 0)}),                   # plane under one vector
    # AVX2's channels-in-lanes kernel (conv_pwdw8.c): an odd block count (one pair half used), 1x1
    # planes, unpadded stride 2, each activation it specializes, a residual on a tile tail
    ((1, 12, 1, 1, 40, 3), {"act2": "Relu"}),                                     # 1x1, 5 blocks
    ((1, 9, 7, 7, 24, 3), {"s": (2, 2), "pads": (0, 0, 0, 0), "act2": None}),     # 7x7 -> 3x3
    ((1, 10, 14, 15, 36, 3), {"s": (2, 2), "act2": "Relu", "residual": True}),    # 7x8 outputs
    ((2, 7, 16, 15, 27, 3), {"s": (2, 2), "act1": "SiLU", "act2": "SiLU"}),       # efficientnet's stride 2
    ((1, 9, 7, 7, 13, 3), {"act1": "SiLU", "act2": "SiLU", "pads": (1, 0, 1, 0)}),  # 7x7, SiLU, one-sided pad
    ((1, 6, 9, 10, 17, 3), {"d": (1, 2), "pads": (1, 2, 1, 2), "act2": "SiLU"}),  # dilated columns: any-tap SiLU
    # AVX-512's items of four blocks, on 2 threads whole (even or many items) or in bands of
    # output rows (the cases above with fewer items): 2 per image, a partial last item of 3 blocks
    # (the last half of 4 channels), a batch of 2
    ((1, 8, 14, 14, 64, 3), {"s": (2, 2)}),                                       # 2 items
    ((1, 6, 5, 5, 500, 3), {"act2": "Relu", "residual": True}),                   # 16 items, 63 blocks
    ((2, 7, 9, 8, 72, 3), {"act1": "SiLU", "act2": "SiLU"}),                      # 2 x 3 items, 9 blocks
    # large planes: expanded blocks of 25 to 100 KB
    ((1, 8, 56, 56, 24, 3), {}),                                                  # MobileNetV2's 56x56
    ((1, 4, 112, 113, 16, 3), {"s": (2, 2), "act1": "Relu"}),                      # 56 stride-2 rows: AVX2 bands
    ((1, 6, 60, 58, 16, 3), {"s": (2, 2)}),                                       # stride-2 rows
    ((1, 5, 61, 30, 12, 5), {"s": (2, 2), "pads": (2, 2, 2, 2), "act2": "Tanh"}),  # odd rows, 5 tap rows
    ((1, 4, 29, 31, 9, 3), {"d": (2, 2), "pads": (2, 2, 2, 2), "act1": "Relu"}),  # dilated: halos of 2 rows
]


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize("threads", [1, 2])
def test_pw_dw_kernel_isa_threads(isa, threads, pw_lib):
    from tcc.accelerators.cpu.codegen import pack_pw
    for (n, c, h, w, hidden, k), kw in CASES:
        mdl, feeds = block_model(n, c, h, w, hidden, k, **kw)
        ref = ort.InferenceSession(mdl.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        inits = {i.name: numpy_helper.to_array(i) for i in mdl.graph.initializer}
        wp, w2 = np.ascontiguousarray(pack_pw(inits["w1"])), np.ascontiguousarray(inits["w2"])
        b1 = inits.get("b1")
        s, d = kw.get("s", (1, 1)), kw.get("d", (1, 1))
        pads = kw.get("pads", (1, 1, 1, 1))
        pp = ConvParams(n, c, h, w, hidden, 1, 1, h, w, 1, 1, 1, 1, 0, 0, 0, 0, 1)
        pd = ConvParams(n, hidden, h, w, hidden, k, k, ref.shape[2], ref.shape[3], *s, *d, *pads, hidden)
        code1, a01, a11 = ACT_CODES[kw.get("act1", "Clip")]
        code2, a02, a12 = ACT_CODES[kw.get("act2", "Clip")]
        e1 = Epilogue(b1.ctypes.data if b1 is not None else None, 2 if b1 is not None else 0, 1.0, None, code1,
                      a01, a11)
        e2 = Epilogue(inits["b2"].ctypes.data, 2, 1.0, feeds["r"].ctypes.data if "r" in feeds else None, code2,
                      a02, a12)
        y = np.full_like(ref, np.nan)
        ptr = ctypes.c_void_p
        pw_lib.tcc_cpu_conv2d_pw_dw(ctypes.byref(pp), ptr(feeds["x"].ctypes.data), ptr(wp.ctypes.data),
                                    ctypes.byref(e1), ctypes.byref(pd), ptr(w2.ctypes.data), ptr(y.ctypes.data),
                                    ctypes.byref(e2))
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4, err_msg=f"{isa} {(n, c, h, w, hidden, k)} {kw}")


def irb_model(n, c, h, w, hidden, k, mo, residual=False, **kw):
    """block_model's pair, then Conv 1x1 to mo channels (+ bias) [+ residual]: an inverted residual block."""
    mdl, feeds = block_model(n, c, h, w, hidden, k, **kw)
    g = mdl.graph
    oh, ow = [d.dim_value for d in g.output[0].type.tensor_type.shape.dim][2:]
    g.node[-1].output[0] = "dy"
    g.initializer.extend([numpy_helper.from_array(rand(mo, hidden, 1, 1), "w3"),
                          numpy_helper.from_array(rand(mo), "b3")])
    g.node.append(H("Conv", ["dy", "w3", "b3"], ["y" if not residual else "p"]))
    if residual:
        feeds["r3"] = rand(n, mo, oh, ow)
        g.input.append(helper.make_tensor_value_info("r3", 1, (n, mo, oh, ow)))
        g.node.append(H("Add", ["p", "r3"], ["y"]))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("y", 1, (n, mo, oh, ow)))
    return mdl, feeds


def _source(sess, tmp_path):
    from tcc.accelerators.cpu.runtime import c_source
    with zipfile.ZipFile(tmp_path / "m.tcc") as z:
        return c_source(z.read(sess.manifest["accelerators"]["cpu"]["member"]))


@pytest.mark.parametrize("case", CASES[:4])
def test_pw_dw_fused_end_to_end(case, tmp_path):
    (n, c, h, w, hidden, k), kw = case
    mdl, feeds = block_model(n, c, h, w, hidden, k, **kw)
    sess = check(mdl, feeds, atol=1e-4, tmp_path=tmp_path)
    src = _source(sess, tmp_path)
    assert src.count("tcc_cpu_conv2d_pw_dw(") == 1 and "tcc_cpu_conv2d(" not in src


def test_silu_is_a_convolution_epilogue(tmp_path):
    # x * Sigmoid(x) after both convolutions (and after the residual Add) is absorbed as TCC_ACT_SILU:
    # the fused pair alone, no elementwise pass
    mdl, feeds = block_model(1, 5, 12, 14, 16, 3, act1="SiLU", act2="SiLU", residual=True)
    sess = check(mdl, feeds, atol=1e-4, tmp_path=tmp_path)
    src = _source(sess, tmp_path)
    assert src.count("tcc_cpu_conv2d_pw_dw(") == 1 and src.count("TCC_ACT_SILU") == 2 and "ew_" not in src, src


def test_pw_dw_not_fused_when_expansion_is_read_twice(tmp_path):
    # the expanded tensor is also an output: it must reach memory, so the two convs stay apart
    mdl, feeds = block_model(1, 6, 10, 10, 16, 3)
    g = mdl.graph
    g.output.append(helper.make_tensor_value_info("ea", 1, (1, 16, 10, 10)))
    ours, ref, sess = run_both(mdl, feeds, tmp_path)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    src = _source(sess, tmp_path)
    assert "tcc_cpu_conv2d_pw_dw(" not in src and "tcc_cpu_conv2d_pw(" in src


def test_pw_dw_not_fused_after_a_strided_pointwise(tmp_path):
    # a 1x1 conv with stride 2 is no pointwise kernel's: the lowering leaves the pair alone
    x = rand(1, 4, 12, 12)
    inits = [("w1", rand(8, 4, 1, 1)), ("w2", rand(8, 1, 3, 3))]
    nodes = [H("Conv", ["x", "w1"], ["e"], strides=[2, 2]),
             H("Conv", ["e", "w2"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8)]
    mdl = model(nodes, [("x", x.shape)], [("y", (1, 8, 6, 6))], inits)
    sess = check(mdl, {"x": x}, atol=1e-4, tmp_path=tmp_path)
    assert "tcc_cpu_conv2d_pw_dw(" not in _source(sess, tmp_path)


# ---- channel shuffles (lower.py's fold_channel_shuffles) ------------------------------------
def shuffle_model(n, c, h, w, m, g_conv, g_shuf, s=1, act="Relu", bias=True, also_out=False):
    """x -> Conv 1x1 to m, group g_conv (+ bias) -> act -> ShuffleNet's channel shuffle in g_shuf
    groups (Reshape, Transpose (0, 2, 1, 3, 4), Reshape) -> depthwise 3x3 stride s -> Conv 1x1
    (group g_conv) to c; also_out: the shuffle's input is an output too."""
    oh, ow = out_size(h, 3, s, 1, 1, 1), out_size(w, 3, s, 1, 1, 1)
    inits = [("w1", rand(m, c // g_conv, 1, 1)), ("w2", rand(m, 1, 3, 3)), ("w3", rand(c, m // g_conv, 1, 1)),
             ("s5", np.array([n, g_shuf, m // g_shuf, h, w], np.int64)), ("s4", np.array([n, m, h, w], np.int64)),
             ("lo", np.array(0.0, np.float32)), ("hi", np.array(6.0, np.float32))]
    if bias:
        inits.append(("b1", rand(m)))
    nodes = [H("Conv", ["x", "w1"] + (["b1"] if bias else []), ["e"], group=g_conv)] + ACT_NODES[act]("e", "ea")
    nodes += [H("Reshape", ["ea", "s5"], ["r5"]), H("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
              H("Reshape", ["t5", "s4"], ["sh"]),
              H("Conv", ["sh", "w2"], ["d"], kernel_shape=[3, 3], strides=[s, s], pads=[1, 1, 1, 1], group=m),
              H("Conv", ["d", "w3"], ["y"], group=g_conv)]
    outs = [("y", (n, c, oh, ow))] + ([("ea", (n, m, h, w))] if also_out else [])
    return model(nodes, [("x", (n, c, h, w))], outs, inits), {"x": rand(n, c, h, w)}


@pytest.mark.parametrize("case,folded", [
    ((1, 12, 16, 16, 24, 3, 3, {}), True),                         # shufflenet's units: grouped 1x1 made dense
    ((2, 9, 11, 13, 24, 3, 3, {"s": 2}), True),                    # batch 2, odd planes, stride 2
    ((1, 8, 10, 9, 16, 1, 2, {"act": None, "bias": False}), True),  # ungrouped, 2 shuffle groups, no bias
    ((1, 10, 7, 7, 20, 1, 4, {"act": "Clip"}), True),              # Clip's scalar bounds between
    ((1, 12, 8, 8, 24, 6, 3, {}), False),                          # 6 groups: not made dense
    ((1, 12, 8, 8, 24, 3, 3, {"also_out": True}), False),          # the shuffle's input is read twice
])
def test_channel_shuffle_folded_into_the_conv(case, folded, tmp_path):
    # the shuffle becomes a permutation of the conv's output channels: no transpose, and the conv then
    # pairs with the depthwise conv after the shuffle; against onnxruntime on the unfolded model
    n, c, h, w, m, gc, gs, kw = case
    mdl, feeds = shuffle_model(n, c, h, w, m, gc, gs, **kw)
    src = _source(check(mdl, feeds, atol=1e-4, tmp_path=tmp_path), tmp_path)
    assert ("tcc_cpu_transpose(" not in src) == folded and ("tcc_cpu_conv2d_pw_dw(" in src) == folded, src


# ---- depthwise -> pointwise (kernels/conv_pw.c's cv_depthwise_pointwise) ---------------------
def dwpw_model(n, c, h, w, k, mo, s=(1, 1), d=(1, 1), pads=(1, 1, 1, 1), act1="Clip", act2=None, residual=False):
    """x -> depthwise Conv k (+ bias) -> act1 -> Conv 1x1 to mo (+ bias) [+ residual] -> act2."""
    oh, ow = out_size(h, k, s[0], d[0], pads[0], pads[2]), out_size(w, k, s[1], d[1], pads[1], pads[3])
    inits = [("w1", rand(c, 1, k, k)), ("b1", rand(c)), ("w2", rand(mo, c, 1, 1)), ("b2", rand(mo)),
             ("lo", np.array(0.0, np.float32)), ("hi", np.array(6.0, np.float32))]
    nodes = [H("Conv", ["x", "w1", "b1"], ["d"], kernel_shape=[k, k], strides=list(s), dilations=list(d),
               pads=list(pads), group=c)] + ACT_NODES[act1]("d", "da")
    nodes.append(H("Conv", ["da", "w2", "b2"], ["p"]))
    return _finish(nodes, inits, (n, c, h, w), "p", (n, mo, oh, ow), residual, act2)


# bands of rows over the threads (one band: a plane smaller than a band; bands whose first or last
# vector is shared with the next band), row tails of the projection (mo % 8), positions past the
# last full vector as dot products, each depthwise path, residual and activations after the store
DWPW_CASES = [
    ((1, 32, 112, 112, 3, 16), {}),                                       # MobileNetV2's first block
    ((2, 13, 9, 11, 3, 21), {"residual": True, "act2": "Relu"}),          # 99 positions: 3 rest
    ((1, 40, 30, 37, 3, 9), {"s": (2, 2), "act2": "Sigmoid"}),            # stride-2 rows, odd width
    ((1, 24, 25, 26, 5, 8), {"pads": (2, 2, 2, 2), "act1": "Tanh"}),      # 5x5 in place, tanh after
    ((1, 16, 20, 21, 3, 12), {"s": (2, 1), "act1": None}),                # phase planes (packed)
    ((1, 64, 7, 7, 3, 40), {"residual": True}),                           # 49: one rest position
]


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize("threads", [1, 2])
def test_dw_pw_kernel_isa_threads(isa, threads, pw_lib):
    from tcc.accelerators.cpu.codegen import pack_pw
    for (n, c, h, w, k, mo), kw in DWPW_CASES:
        mdl, feeds = dwpw_model(n, c, h, w, k, mo, **kw)
        ref = ort.InferenceSession(mdl.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        inits = {i.name: numpy_helper.to_array(i) for i in mdl.graph.initializer}
        w1, w2 = np.ascontiguousarray(inits["w1"]), np.ascontiguousarray(pack_pw(inits["w2"]))
        s, d = kw.get("s", (1, 1)), kw.get("d", (1, 1))
        pads = kw.get("pads", (1, 1, 1, 1))
        oh, ow = ref.shape[2:]
        pd = ConvParams(n, c, h, w, c, k, k, oh, ow, *s, *d, *pads, c)
        pq = ConvParams(n, c, oh, ow, mo, 1, 1, oh, ow, 1, 1, 1, 1, 0, 0, 0, 0, 1)
        e1 = Epilogue(inits["b1"].ctypes.data, 2, 1.0, None, *ACT_CODES[kw.get("act1", "Clip")])
        e2 = Epilogue(inits["b2"].ctypes.data, 2, 1.0, feeds["r"].ctypes.data if "r" in feeds else None,
                      *ACT_CODES[kw.get("act2")])
        y = np.full_like(ref, np.nan)
        ptr = ctypes.c_void_p
        pw_lib.tcc_cpu_conv2d_dw_pw(ctypes.byref(pd), ptr(feeds["x"].ctypes.data), ptr(w1.ctypes.data),
                                    ctypes.byref(e1), ctypes.byref(pq), ptr(w2.ctypes.data), ptr(y.ctypes.data),
                                    ctypes.byref(e2))
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(ref).max()),
                                   err_msg=f"{isa} {(n, c, h, w, k, mo)} {kw}")


@pytest.mark.parametrize("case", [c for c in DWPW_CASES if c[1].get("s", (1, 1)) != (2, 1)])
def test_dw_pw_fused_end_to_end(case, tmp_path):
    # fused on every build for the stride-1 same-size and stride-2 three-column shapes (read in
    # place on AVX-512, a band's rows packed elsewhere)
    (n, c, h, w, k, mo), kw = case
    mdl, feeds = dwpw_model(n, c, h, w, k, mo, **kw)
    src = _source(check(mdl, feeds, atol=1e-4, tmp_path=tmp_path), tmp_path)
    assert "tcc_cpu_conv2d_dw_pw(" in src and "tcc_cpu_conv2d(" not in src


def test_dw_pw_not_fused_with_packed_planes(tmp_path):
    # stride (2, 1) takes the phase-plane path: no fusion on any build
    (n, c, h, w, k, mo), kw = DWPW_CASES[4]
    mdl, feeds = dwpw_model(n, c, h, w, k, mo, **kw)
    src = _source(check(mdl, feeds, atol=1e-4, tmp_path=tmp_path), tmp_path)
    assert "tcc_cpu_conv2d_dw_pw(" not in src and "tcc_cpu_conv2d_pw(" in src


def test_separable_chain_pw_dw_first(tmp_path):
    # dw -> pw -> dw -> pw (MobileNet v1): pointwise -> depthwise fusion goes first (it keeps the
    # larger tensor, a stride-2 depthwise input, out of memory), so the middle pair fuses and the
    # first depthwise and the last pointwise conv run alone
    x = rand(1, 8, 20, 20)
    inits = [("w1", rand(8, 1, 3, 3)), ("w2", rand(16, 8, 1, 1)), ("w3", rand(16, 1, 3, 3)), ("w4", rand(12, 16, 1, 1))]
    nodes = [H("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8), H("Relu", ["a"], ["ar"]),
             H("Conv", ["ar", "w2"], ["b"]), H("Relu", ["b"], ["br"]),
             H("Conv", ["br", "w3"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], group=16),
             H("Relu", ["c"], ["cr"]), H("Conv", ["cr", "w4"], ["y"])]
    mdl = model(nodes, [("x", x.shape)], [("y", (1, 12, 10, 10))], inits)
    src = _source(check(mdl, {"x": x}, atol=1e-4, tmp_path=tmp_path), tmp_path)
    assert src.count("tcc_cpu_conv2d_pw_dw(") == 1 and "tcc_cpu_conv2d_dw_pw(" not in src


# ---- a pointwise conv reading cv_pointwise_depthwise's output: input channels split over threads
# (tcc_cpu_conv2d_pw_split_c: partial sums per thread, added up with the epilogue), or the plain
# kernel where that does not pay (one thread, batch 2, fewer channel blocks than threads, an input
# past L2)
SPLIT_CASES = [
    ((1, 144, 28, 28, 32), "Relu", True),    # MobileNetV2's 28x28 projection
    ((1, 384, 14, 14, 64), None, True),      # 4 positions as dot products
    ((1, 960, 7, 7, 160), "Sigmoid", False),  # one dot-product position, activation after the sums
    ((1, 20, 9, 9, 13), "Clip", True),       # 3 channel blocks: ranges of 2 and 1
    ((1, 8, 6, 6, 5), None, False),          # one channel block: the plain kernel
    ((2, 48, 10, 10, 24), "Relu", True),     # batch 2: the plain kernel
    ((1, 96, 56, 56, 24), None, True),       # input past L2: the plain kernel
]


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize("threads", [1, 2])
def test_pw_split_c_kernel_isa_threads(isa, threads, pw_lib):
    from tcc.accelerators.cpu.codegen import pack_pw

    from .test_conv_paths import conv_model
    codes = {None: (0, 0.0, 0.0), "Relu": (1, 0.0, 0.0), "Clip": (2, -0.5, 0.7), "Sigmoid": (3, 0.0, 0.0)}
    for (n, c, h, w, m), act, residual in SPLIT_CASES:
        mdl, feeds = conv_model(n, c, h, w, m, 1, act=act, residual=residual)
        ref = ort.InferenceSession(mdl.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        inits = {i.name: numpy_helper.to_array(i) for i in mdl.graph.initializer}
        wp, b = np.ascontiguousarray(pack_pw(inits["w"])), inits["b"]
        ep = Epilogue(b.ctypes.data, 2, 1.0, feeds["r"].ctypes.data if residual else None, *codes[act])
        p = ConvParams(n, c, h, w, m, 1, 1, h, w, 1, 1, 1, 1, 0, 0, 0, 0, 1)
        for _ in range(2):  # a second call: the partial sums start over
            y = np.full_like(ref, np.nan)
            ptr = ctypes.c_void_p
            pw_lib.tcc_cpu_conv2d_pw_split_c(ctypes.byref(p), ptr(feeds["x"].ctypes.data), ptr(wp.ctypes.data),
                                             ptr(y.ctypes.data), ctypes.byref(ep))
            np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(ref).max()),
                                       err_msg=f"{isa} {(n, c, h, w, m)} {act}")


def test_projection_after_pw_dw_splits_by_channels(tmp_path):
    mdl, feeds = irb_model(1, 16, 14, 14, 96, 3, 24, residual=True)
    src = _source(check(mdl, feeds, atol=1e-4, tmp_path=tmp_path), tmp_path)
    assert "tcc_cpu_conv2d_pw_dw(" in src and "tcc_cpu_conv2d_pw_split_c(" in src
