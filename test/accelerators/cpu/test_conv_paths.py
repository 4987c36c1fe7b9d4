"""Every path of the cpu kernel library's convolution (kernels/conv*.c)
against onnxruntime on fresh random data: the direct kernel (input used in
place or packed into phase planes, full and tail register tiles, flat and
row-wise stores, q chunks and m blocks split over threads), the kernel on
weights packed at compile time (conv_ocv.c: pixel tiles of one or two rows,
panel tails, channel blocks, groups; also called directly in the other ISA
builds), the packed pointwise kernel (conv_pw.c), the depthwise kernel (3x3
and other tap counts, strides, dilations, pads), the im2col fallback for
strides beyond the phase table, and every fused epilogue. On AVX-512 a conv
with constant weights takes a packed kernel; the direct kernel's tests pass
the weights as an input. Each compiled-model test names the kernel the
generated C must call; the packed and Winograd tests make the selection
answer as for the AVX-512 build, so those kernels run on whichever build
this CPU runs (the choice itself is tested per ISA in test_kernel_choice.py)."""
import ctypes

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from .helpers import c_source_for_isa, c_source_of, check, choose_as, kernels_for_isa, model, rand, run_both, skip_unless_runs

H = helper.make_node


def out_size(n, k, s, d, pb, pe):
    return (n + pb + pe - d * (k - 1) - 1) // s + 1


def conv_model(n, c, h, w, m, k, s=(1, 1), d=(1, 1), pads=(0, 0, 0, 0), g=1, bias=True, act=None,
               residual=False, alpha=0.1, w_input=False):
    kh, kw = (k, k) if isinstance(k, int) else k
    oh, ow = out_size(h, kh, s[0], d[0], pads[0], pads[2]), out_size(w, kw, s[1], d[1], pads[1], pads[3])
    x, wt, b = rand(n, c, h, w), rand(m, c // g, kh, kw), rand(m)
    ins = ["x", "w"] + (["b"] if bias else [])
    nodes = [H("Conv", ins, ["c"], kernel_shape=[kh, kw], strides=list(s), dilations=list(d), pads=list(pads),
               group=g)]
    inits = ([] if w_input else [("w", wt)]) + ([("b", b)] if bias else [])
    inputs, feeds, cur = [("x", x.shape)], {"x": x}, "c"
    if w_input:  # not a constant: the direct kernel, weights read as they are
        inputs.append(("w", wt.shape))
        feeds["w"] = wt
    if residual:
        r = rand(n, m, oh, ow)
        nodes.append(H("Add", [cur, "r"], ["s"]))
        inputs.append(("r", r.shape))
        feeds["r"] = r
        cur = "s"
    if act == "Clip":
        nodes.append(H("Clip", [cur, "lo", "hi"], ["y"]))
        inits += [("lo", np.array(-0.5, np.float32)), ("hi", np.array(0.7, np.float32))]
    elif act == "LeakyRelu":
        nodes.append(H("LeakyRelu", [cur], ["y"], alpha=alpha))
    elif act == "SiLU":  # as exporters write it: x * Sigmoid(x), absorbed as one epilogue
        nodes += [H("Sigmoid", [cur], ["sg"]), H("Mul", [cur, "sg"], ["y"])]
    elif act:
        nodes.append(H(act, [cur], ["y"]))
    else:
        nodes.append(H("Identity", [cur], ["y"]))
    return model(nodes, inputs, [("y", (n, m, oh, ow))], inits), feeds


ACTS = [None, "Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "SiLU"]


# ---- direct kernel ---------------------------------------------------------------------
@pytest.mark.parametrize("n,c,h,w,m,k,s,d,pads,g", [
    (1, 7, 9, 5, 13, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),     # width < one vector, m tail
    (1, 5, 11, 37, 19, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),   # odd width, several q tiles
    (2, 6, 13, 21, 8, 3, (2, 2), (1, 1), (1, 1, 1, 1), 1),    # stride 2 phase planes, batch 2
    (1, 4, 16, 17, 7, 3, (2, 2), (1, 1), (0, 1, 2, 0), 1),    # asymmetric pads, odd left pad parity
    (1, 3, 23, 29, 9, 7, (2, 2), (1, 1), (3, 2, 3, 4), 1),    # stem-like 7x7 stride 2
    (1, 4, 19, 20, 6, 3, (3, 2), (1, 1), (1, 2, 0, 1), 1),    # stride 3 rows (generic packing)
    (1, 5, 17, 18, 7, 3, (1, 3), (1, 1), (2, 1, 1, 2), 1),    # stride 3 columns
    (1, 4, 21, 23, 6, 5, (4, 4), (1, 1), (2, 1, 0, 3), 1),    # stride 4: four-way column split
    (2, 3, 32, 32, 16, 8, (8, 8), (1, 1), (0, 0, 0, 0), 1),   # a ViT's patch embedding: kernel = stride 8
    (1, 3, 20, 26, 5, 5, (5, 5), (1, 1), (2, 6, 1, 3), 1),    # stride 5, a left pad past the stride
    (1, 4, 15, 14, 5, 3, (1, 1), (2, 3), (2, 3, 2, 3), 1),    # dilations
    (1, 4, 15, 14, 5, 3, (2, 2), (2, 2), (1, 1, 2, 2), 1),    # stride and dilation: all taps in one phase
    (1, 6, 10, 9, 9, 3, (1, 1), (1, 1), (0, 0, 0, 0), 1),     # unpadded: input read in place, junk columns
    (1, 6, 7, 11, 10, (2, 3), (1, 1), (1, 1), (0, 1, 1, 0), 1),  # non-square kernel
    (1, 12, 9, 10, 15, 3, (1, 1), (1, 1), (1, 1, 1, 1), 3),   # groups
    (2, 8, 11, 7, 6, 1, (1, 1), (1, 1), (0, 0, 0, 0), 2),     # grouped pointwise
])
@pytest.mark.parametrize("w_input", [True, False])
def test_direct_shapes(n, c, h, w, m, k, s, d, pads, g, w_input):
    mdl, feeds = conv_model(n, c, h, w, m, k, s, d, pads, g, bias=True, w_input=w_input)
    check(mdl, feeds)


# Pointwise convolutions use the input in place and store flat tiles (epilogue in registers);
# q = h*w covers a full tile plus tails of 1..NR vectors, partial or whole.
@pytest.mark.parametrize("hw", [(1, 1), (3, 5), (7, 7), (4, 16), (9, 15), (10, 13), (8, 24), (11, 17)])
def test_pointwise_tails(hw):
    mdl, feeds = conv_model(1, 11, hw[0], hw[1], 14, 1, bias=True, act="Relu")
    check(mdl, feeds)


@pytest.mark.parametrize("s,pads", [((2, 2), (0, 0, 0, 0)), ((2, 2), (1, 0, 0, 1)), ((3, 3), (0, 0, 0, 0))])
@pytest.mark.parametrize("w_input", [True, False])
def test_pointwise_strided(s, pads, w_input):
    mdl, feeds = conv_model(2, 9, 13, 15, 10, 1, s=s, pads=pads, w_input=w_input)
    check(mdl, feeds)


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("residual", [False, True])
def test_direct_epilogues(k, act, residual):
    pads = (k // 2,) * 4
    mdl, feeds = conv_model(2, 5, 9, 19, 11, k, pads=pads, act=act, residual=residual, w_input=True)
    check(mdl, feeds)


def test_direct_no_bias_leaky_negative_alpha():
    mdl, feeds = conv_model(1, 3, 8, 8, 5, 3, pads=(1, 1, 1, 1), bias=False, act="LeakyRelu", alpha=-0.7,
                            w_input=True)
    check(mdl, feeds)


def test_direct_large_plane_chunks():
    # input larger than one q chunk's L2 budget: several chunks, split over the threads
    mdl, feeds = conv_model(1, 48, 50, 53, 20, 3, pads=(1, 1, 1, 1), act="Relu", residual=True, w_input=True)
    check(mdl, feeds, rtol=1e-4, atol=1e-4)


def test_direct_small_plane_many_channels():
    # one q tile, m split into blocks across threads; long reduction
    mdl, feeds = conv_model(1, 160, 5, 5, 70, 3, pads=(1, 1, 1, 1), act="Clip", w_input=True)
    check(mdl, feeds, rtol=1e-4, atol=1e-4)


def test_large_stride_falls_back_to_im2col():
    mdl, feeds = conv_model(1, 3, 30, 31, 4, 3, s=(9, 8), pads=(1, 1, 1, 1), act="Relu", residual=True)
    check(mdl, feeds)


# ---- depthwise -------------------------------------------------------------------------
@pytest.mark.parametrize("n,c,h,w,k,s,d,pads", [
    (1, 5, 12, 12, 3, (1, 1), (1, 1), (1, 1, 1, 1)),
    (2, 4, 9, 7, 3, (1, 1), (1, 1), (1, 1, 1, 1)),       # width < one vector, batch 2
    (1, 3, 21, 37, 3, (1, 1), (1, 1), (1, 1, 1, 1)),     # rows of several vectors with a tail
    (1, 3, 14, 21, 3, (1, 1), (1, 1), (1, 1, 1, 1)),     # tiles of 4 rows: 2 rows left, 3 vectors
    (1, 2, 11, 16, 3, (1, 1), (1, 1), (1, 1, 1, 1)),     # 3 rows left, 2 whole vectors
    (1, 3, 10, 53, 3, (1, 1), (1, 1), (1, 1, 1, 1)),     # read in place: 2 rows left, tail of 5
    (2, 2, 7, 64, 3, (1, 1), (1, 1), (1, 1, 1, 1)),      # 3 rows left, whole vectors, batch 2
    (1, 2, 5, 17, 3, (1, 1), (1, 1), (1, 1, 1, 1)),      # one column past whole vectors (AVX2), 16 + 1 (AVX-512)
    (1, 2, 1, 12, 3, (1, 1), (1, 1), (1, 1, 1, 1)),      # one row
    (1, 3, 10, 53, 3, (1, 1), (1, 1), (0, 1, 2, 1)),     # uneven pads: packed row tiles (AVX-512: >= 48 columns)
    (1, 3, 9, 8, 3, (1, 1), (1, 1), (2, 1, 0, 1)),       # uneven pads, one vector (AVX2)
    (1, 6, 15, 14, 3, (2, 2), (1, 1), (1, 1, 1, 1)),     # stride 2
    (1, 6, 16, 17, 3, (2, 2), (1, 1), (0, 1, 1, 0)),     # stride 2, other column parity
    (1, 3, 40, 45, 3, (2, 2), (1, 1), (2, 2, 1, 0)),     # stride 2, wide rows (deinterleave blocks)
    (1, 4, 17, 19, 3, (3, 2), (1, 1), (1, 1, 1, 1)),     # stride 3 rows
    (1, 4, 13, 14, 3, (1, 1), (2, 2), (2, 2, 2, 2)),     # dilation
    (1, 5, 11, 14, 5, (1, 1), (1, 1), (2, 2, 2, 2)),     # 5x5: other tap count
    (1, 5, 11, 14, 5, (2, 2), (1, 1), (2, 1, 2, 3)),
    (1, 7, 10, 9, 3, (1, 1), (1, 1), (0, 0, 0, 0)),      # unpadded: plane read in place
    (1, 7, 10, 9, 1, (1, 1), (1, 1), (0, 0, 0, 0)),      # 1x1 depthwise (a per-channel scale)
    (1, 4, 9, 10, (1, 3), (1, 1), (1, 1), (0, 1, 0, 1)),  # 1x3
])
def test_depthwise_shapes(n, c, h, w, k, s, d, pads):
    mdl, feeds = conv_model(n, c, h, w, c, k, s, d, pads, g=c)
    check(mdl, feeds)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("s", [1, 2])
@pytest.mark.parametrize("w", [18, 50])  # 50: AVX-512's row tiles too
def test_depthwise_epilogues(act, residual, s, w):
    mdl, feeds = conv_model(2, 6, 13, w, 6, 3, s=(s, s), pads=(1, 1, 1, 1), g=6, act=act, residual=residual)
    check(mdl, feeds)


@pytest.mark.parametrize("mult", [2, 3])
@pytest.mark.parametrize("w_input", [True, False])
def test_depthwise_multiplier_uses_grouped_direct(mult, w_input):
    mdl, feeds = conv_model(1, 5, 11, 13, 5 * mult, 3, pads=(1, 1, 1, 1), g=5, act="Relu", w_input=w_input)
    check(mdl, feeds)


def test_depthwise_large_stride_falls_back():
    mdl, feeds = conv_model(1, 4, 27, 27, 4, 3, s=(9, 9), pads=(1, 1, 1, 1), g=4, act="Clip")
    check(mdl, feeds)


# ---- depthwise read in place (AVX-512 build) ----------------------------------------------
# Stride 1 with the output plane the input's size: the plane is swept flat, taps outside it
# masked per (vector, tap); tiny planes, planes of whole vectors, other tap counts, dilations.
@pytest.mark.parametrize("n,c,h,w,k,d,pads", [
    (1, 3, 1, 1, 3, (1, 1), (1, 1, 1, 1)),        # one pixel: every tap but the centre masked
    (1, 4, 2, 3, 3, (1, 1), (1, 1, 1, 1)),
    (2, 5, 4, 4, 3, (1, 1), (1, 1, 1, 1)),        # plane of exactly one vector, batch 2
    (1, 6, 8, 16, 3, (1, 1), (1, 1, 1, 1)),       # whole vectors, one per row
    (1, 37, 7, 7, 3, (1, 1), (1, 1, 1, 1)),       # many small planes, last vector's tail
    (1, 3, 14, 14, 3, (1, 1), (2, 0, 0, 2)),      # asymmetric pads, same size
    (1, 3, 13, 19, 5, (1, 1), (2, 2, 2, 2)),      # 5x5
    (1, 3, 12, 11, 3, (3, 2), (3, 2, 3, 2)),      # dilations
    (1, 4, 9, 23, (3, 1), (1, 1), (1, 0, 1, 0)),  # 3x1
])
def test_depthwise_in_place(n, c, h, w, k, d, pads):
    mdl, feeds = conv_model(n, c, h, w, c, k, d=d, pads=pads, g=c)
    check(mdl, feeds)


# Column stride 2 with 3 taps per row: even/odd splits of two loads per tap row, column masks.
@pytest.mark.parametrize("n,c,h,w,k,s,pads", [
    (1, 5, 14, 14, 3, (2, 2), (1, 1, 1, 1)),          # 7x7 output: one partial vector per row
    (1, 3, 64, 64, 3, (2, 2), (1, 1, 1, 1)),          # 32 outputs per row: two whole vectors
    (1, 3, 9, 67, 3, (2, 2), (0, 0, 0, 0)),           # 33 per row: a one-lane tail, no pads
    (1, 4, 11, 40, 3, (2, 2), (1, 2, 1, 2)),          # left pad 2
    (2, 3, 9, 21, 3, (1, 2), (1, 1, 1, 1)),           # stride 1 rows, batch 2
    (1, 3, 19, 30, 3, (3, 2), (1, 1, 1, 0)),          # stride 3 rows
    (1, 3, 13, 30, (5, 3), (2, 2), (2, 1, 2, 1)),     # 5 tap rows
    (1, 3, 13, 30, (1, 3), (2, 2), (0, 1, 0, 1)),     # one tap row
    (1, 4, 15, 15, 3, (2, 2), (1, 1, 1, 1)),          # last tap row below the plane (zero row)
    (1, 3, 21, 20, (9, 3), (2, 2), (4, 1, 4, 1)),     # 9 tap rows: beyond the row table, packed path
])
def test_depthwise_stride2_in_place(n, c, h, w, k, s, pads):
    mdl, feeds = conv_model(n, c, h, w, c, k, s=s, pads=pads, g=c)
    check(mdl, feeds)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("s", [1, 2])
def test_depthwise_in_place_epilogues(act, s):
    mdl, feeds = conv_model(2, 5, 7, 37, 5, 3, s=(s, s), pads=(1, 1, 1, 1), g=5, act=act, residual=True)
    check(mdl, feeds)


# ---- pointwise: channel blocks and dot-product tails ---------------------------------------
# Grouped: the direct kernel, k > one block's worth (partial sums carried between channel
# blocks); one group: the packed kernel (below). Planes whose last few outputs are dot products
# along k instead of a masked vector.
@pytest.mark.parametrize("n,c,h,w,m,g", [
    (1, 200, 7, 7, 13, 1),      # 3 channel blocks, 1 dot-product output per row, m tail
    (1, 200, 14, 14, 20, 1),    # 4 dot-product outputs
    (1, 200, 5, 5, 9, 1),       # 9 left over: masked vector instead
    (1, 200, 1, 1, 7, 1),       # one pixel: only dot products
    (2, 300, 3, 6, 10, 2),      # groups of 150 channels, batch 2
    (1, 130, 16, 16, 17, 1),    # whole vectors, 2 channel blocks
])
def test_pointwise_channel_blocks(n, c, h, w, m, g):
    mdl, feeds = conv_model(n, c, h, w, m, 1, g=g, act="Relu", residual=True)
    check(mdl, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act", ACTS)
def test_pointwise_channel_blocks_epilogues(act):
    mdl, feeds = conv_model(1, 160, 7, 7, 11, 1, act=act, residual=act is None)
    check(mdl, feeds, rtol=1e-4, atol=1e-4)


# ---- direct kernel: tiles stored in place across dropped columns (AVX-512 build) ----------
# Flat rows at least one vector wide with dropped columns: each vector ends one output row and
# starts the next, stored with two masked stores; residuals loaded the same way.
@pytest.mark.parametrize("n,c,h,w,m,k,s,d,pads", [
    (1, 3, 20, 16, 7, 3, (1, 1), (1, 1), (1, 1, 1, 1)),   # rows of exactly one vector
    (1, 3, 17, 23, 8, 7, (1, 1), (1, 1), (3, 3, 3, 3)),   # 6 dropped columns per row
    (1, 4, 30, 41, 13, 3, (2, 2), (1, 1), (1, 1, 1, 1)),  # stride 2 planes, m tail
    (2, 3, 21, 19, 5, 3, (1, 1), (2, 2), (2, 2, 2, 2)),   # dilation, batch 2
])
@pytest.mark.parametrize("act,residual", [("Clip", True), ("LeakyRelu", False), ("Sigmoid", True)])
def test_direct_gap_stores(n, c, h, w, m, k, s, d, pads, act, residual):
    mdl, feeds = conv_model(n, c, h, w, m, k, s, d, pads, act=act, residual=residual, w_input=True)
    check(mdl, feeds)


# ---- weights packed at compile time: output channels in the lanes (conv_ocv.c) --------------
# Tiles are runs of up to 14 pixels of one output row (two rows when a row holds at most 7),
# times 32 output channels (AVX2: 6 pixels, two rows of at most 3, x 16 channels; rows wider
# than 6 and no multiple of it in runs of 6 consecutive outputs across row ends); input
# channels go in blocks when a panel's weights exceed L1.
PACKED = [
    (1, 5, 7, 7, 32, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),      # 7x7: two-row tiles, the last one row
    (1, 6, 14, 14, 45, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),    # one 14-pixel tile per row, panel tail
    (1, 4, 9, 29, 13, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),     # 29 = 10 + 10 + 9 per row, m < 32
    (2, 3, 6, 15, 70, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),     # 8 + 7 per row, three panels, batch 2
    (1, 40, 12, 12, 33, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),   # 40 channels: three channel blocks
    (1, 70, 5, 3, 40, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),     # two-row tiles of 3, channel blocks
    (1, 24, 20, 17, 16, 3, (2, 2), (1, 1), (1, 1, 1, 1), 1),   # stride 2 phase planes
    (1, 3, 57, 60, 32, 3, (2, 2), (1, 1), (1, 1, 1, 1), 1),    # stem: one panel, rows packed in slices per thread
    (1, 8, 15, 16, 24, 3, (2, 2), (1, 1), (0, 1, 1, 0), 1),    # asymmetric pads
    (1, 3, 30, 29, 20, 7, (2, 2), (1, 1), (3, 3, 3, 3), 1),    # stem-like 7x7: tap table
    (1, 6, 13, 14, 18, 3, (1, 1), (2, 2), (2, 2, 2, 2), 1),    # dilations
    (1, 8, 30, 70, 20, 4, (4, 4), (1, 1), (0, 0, 0, 0), 1),    # patchify: stride 4, rows > 64 columns
    (1, 5, 19, 37, 12, 3, (2, 4), (1, 1), (1, 3, 1, 2), 1),    # stride 4 columns, left pad 3
    (1, 6, 13, 14, 18, 5, (1, 1), (1, 1), (2, 1, 2, 1), 1),    # 5x5
    (2, 36, 9, 9, 40, 1, (2, 2), (1, 1), (0, 0, 0, 0), 1),     # 1x1 stride 2
    (1, 6, 10, 9, 9, 3, (1, 1), (1, 1), (0, 0, 0, 0), 1),      # unpadded: input read in place
    (1, 12, 9, 10, 40, 3, (1, 1), (1, 1), (1, 1, 1, 1), 2),    # groups: panels per group
    (1, 1, 1, 1, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),       # one pixel
    (1, 24, 9, 11, 20, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),    # AVX2: runs across row ends (11 columns), channel blocks
    (1, 9, 2, 7, 19, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),      # AVX2: 14 outputs as runs of 4, 5, 5
    (1, 13, 5, 10, 21, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),    # AVX2: 50 outputs as runs of 5 and 6
]


@pytest.fixture
def no_winograd(monkeypatch):
    # 3x3 stride-1 shapes would take conv_wino.c and strided 1x1s on AVX2 conv_pw.c (both tested
    # on their own): keep them on conv_ocv.c here
    from tcc.accelerators.cpu import codegen
    monkeypatch.setattr(codegen, "wino_tile", lambda *a: 0)
    monkeypatch.setattr(codegen, "pw_strided", lambda *a: False)
    choose_as(monkeypatch, "conv_packed")  # and on conv_ocv.c whatever this CPU's build would pick


PACKED_KERNEL = "tcc_cpu_conv2d_packed"


@pytest.fixture
def threads_limit(request):
    """The loaded kernel library limited to the test's `threads` for its duration."""
    from tcc.accelerators.cpu import build
    lib = build.load_kernels()
    saved = lib.tcc_cpu_num_threads()
    lib.tcc_cpu_set_num_threads(request.node.callspec.params["threads"])
    yield
    lib.tcc_cpu_set_num_threads(saved)


@pytest.mark.parametrize("n,c,h,w,m,k,s,d,pads,g", PACKED)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_shapes(n, c, h, w, m, k, s, d, pads, g, threads, threads_limit, no_winograd):
    mdl, feeds = conv_model(n, c, h, w, m, k, s, d, pads, g, act="Relu", residual=True)
    check(mdl, feeds, rtol=1e-4, atol=1e-4, kernel=PACKED_KERNEL)


@pytest.mark.parametrize("shape", [(5, 7, 40, 3), (4, 30, 13, 3), (3, 17, 35, 7)])
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("residual", [False, True])
def test_packed_epilogues(shape, act, residual, no_winograd):
    c, hw, m, k = shape
    mdl, feeds = conv_model(2, c, hw, hw, m, k, s=(1 if k == 3 else 2,) * 2, pads=(k // 2,) * 4, act=act,
                            residual=residual)
    check(mdl, feeds, kernel=PACKED_KERNEL)


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_packed_chosen_on_avx512_and_avx2(isa, monkeypatch):
    # compiled for that build on any machine (TCC_CPU_ISA), not run
    mdl, _ = conv_model(1, 8, 9, 9, 16, 3, pads=(1, 1, 1, 1))
    assert PACKED_KERNEL in kernels_for_isa(mdl, isa, monkeypatch)


# ---- few input channels: positions in the lanes, on the same packed weights (conv_rows.c) -----
# AVX-512: K = c/g*kh*kw <= 64 and rows of >= 49 columns, tiles of 2 channels x R rows x NV
# vectors of a row segment, packed rows rounded up to whole vectors (their extra columns never
# zeroed, never stored). AVX2: K <= 64 on rows of >= 9 columns or K <= 160 on >= 96 (not 1x1), tiles of
# 2 channels x 3 rows x 2 vectors, 2 x 3 or 1 x 3..6, the last vector of a packed row loaded
# whole (its lanes past the row read the next row or the buffer's slack: NaN in the tests'
# scratch) and stored masked; inputs read in place load it masked.
ROWS = [
    (1, 3, 112, 112, 32, 3, (2, 2), (1, 1), (1, 1, 1, 1), 1),  # 56 columns: 4 vectors, the last 8 lanes
    (1, 3, 60, 224, 24, 3, (2, 2), (1, 1), (1, 1, 1, 1), 1),   # the stem's 112 columns: 7 whole vectors
    (1, 2, 50, 150, 16, 5, (2, 2), (1, 1), (2, 2, 2, 2), 1),   # 5x5: K = 50, tap table, 75 columns
    (1, 4, 20, 300, 33, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),   # 3 segments of 100, odd m over two panels
    (1, 2, 9, 130, 7, 3, (1, 1), (1, 1), (0, 0, 0, 0), 1),     # unpadded: read in place, unaligned
    (1, 6, 16, 100, 8, 3, (1, 1), (1, 1), (1, 1, 1, 1), 2),    # groups of 3 channels
    (1, 3, 30, 80, 10, 3, (1, 1), (2, 2), (2, 2, 2, 2), 1),    # dilated, 5 whole vectors
    (2, 3, 17, 130, 12, 3, (2, 2), (1, 1), (1, 1, 1, 1), 1),   # batch 2, 65 columns, rows in a last short group
    (1, 3, 40, 224, 10, 7, (2, 2), (1, 1), (3, 3, 3, 3), 1),   # ResNet's 7x7 stem: K = 147 (AVX2: 112 columns)
    (1, 3, 14, 12, 5, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),     # AVX2: 12 columns, 2 vectors x 3 rows, last masked
    (1, 3, 9, 33, 6, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),      # AVX2: 33 columns, 5 vectors x 1 row
    (1, 3, 11, 40, 6, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),     # AVX2: 5 whole vectors
    (1, 3, 11, 24, 6, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),     # AVX2: 3 whole vectors x 2 rows
    (1, 5, 12, 22, 7, 3, (1, 1), (1, 1), (0, 0, 0, 0), 1),     # AVX2: read in place, 20 columns, last masked
]


@pytest.mark.parametrize("n,c,h,w,m,k,s,d,pads,g", ROWS)
@pytest.mark.parametrize("threads", [1, 2])
def test_rows_kernel_shapes(n, c, h, w, m, k, s, d, pads, g, threads, threads_limit, no_winograd):
    # conv_rows.c is chosen inside tcc_cpu_conv2d_packed (AVX-512 build); the others run conv_ocv.c
    mdl, feeds = conv_model(n, c, h, w, m, k, s, d, pads, g, act="Clip", residual=True)
    check(mdl, feeds, rtol=1e-4, atol=1e-4, kernel=PACKED_KERNEL)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("residual", [False, True])
def test_rows_kernel_epilogues(act, residual, no_winograd):
    mdl, feeds = conv_model(1, 3, 23, 98, 9, 3, s=(2, 2), pads=(1, 1, 1, 1), act=act, residual=residual)
    check(mdl, feeds, rtol=1e-4, atol=1e-4, kernel=PACKED_KERNEL)


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize("offset", [0, 1])
def test_rows_kernel_direct_call(isa, offset):
    # scratch aligned or not (an unaligned one: the rows kernel packs into its own aligned
    # buffer instead); the other builds run these shapes on conv_ocv.c
    lib = isa_lib(isa)
    for shape in ROWS:
        packed_direct_call(lib, shape, "Sigmoid", offset)


# ---- pointwise with weights packed at compile time (kernels/conv_pw.c) -----------------------
# 8-row blocks (m tails), tiles of 1..3 vectors with masked tails, the last 1..4 positions of a
# plane as dot products (in groups of 4 blocks, fewer at the end), planes under one vector,
# inputs over the L2 budget (chunks, next-tile prefetch), threads splitting positions (input
# larger than the weights) or row blocks.
@pytest.mark.parametrize("n,c,h,w,m", [
    (1, 96, 7, 7, 160),      # 7x7: 3 vectors + 1 dot-product position, 20 blocks
    (1, 64, 14, 14, 40),     # 4 dot-product positions, 5 blocks: a group of one
    (2, 13, 5, 7, 21),       # 35 positions: 2 vectors + 3 dot products, m tail, batch 2
    (1, 5, 2, 2, 3),         # 4 positions: only dot products, m < 8
    (3, 7, 1, 3, 9),         # 3 positions, batch 3
    (1, 11, 3, 9, 17),       # 27 positions: masked tail of 11 lanes
    (1, 1, 9, 9, 8),         # c = 1
    (1, 40, 60, 61, 12),     # input over the L2 budget: chunks, prefetch, 1 dot product per plane
    (1, 384, 14, 14, 64),    # input larger than the weights: positions split over threads
    (2, 32, 28, 28, 16),     # whole vectors, batch 2
    (1, 144, 20, 20, 22),    # AVX2: a block's halves run by run (144 channels' column in L1), m tail
    (1, 320, 7, 7, 70),      # halves in turn, each block's first tile prefetching the next block
])
def test_pointwise_packed(n, c, h, w, m):
    mdl, feeds = conv_model(n, c, h, w, m, 1, act="Clip", residual=True)
    check(mdl, feeds, rtol=1e-4, atol=1e-4, kernel="tcc_cpu_conv2d_pw")


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("residual", [False, True])
def test_pointwise_packed_epilogues(act, residual):
    mdl, feeds = conv_model(1, 24, 9, 11, 19, 1, bias=act != "Relu", act=act, residual=residual)
    check(mdl, feeds, rtol=1e-4, atol=1e-4, kernel="tcc_cpu_conv2d_pw")


@pytest.fixture
def pw_lib(request):
    """The `isa` build limited to `threads` (the loaded library's own pool when it is that build:
    the limit is lifted afterwards)."""
    from tcc.accelerators.cpu import build
    isa, threads = request.node.callspec.params["isa"], request.node.callspec.params["threads"]
    skip_unless_runs(isa)
    lib = ctypes.CDLL(build.library_path(isa), mode=ctypes.RTLD_LOCAL)
    lib.tcc_cpu_set_num_threads(threads)
    yield lib
    lib.tcc_cpu_set_num_threads(0)


class ConvParams(ctypes.Structure):
    _fields_ = [(f, ctypes.c_long) for f in "n c h w m kh kw oh ow sh sw dh dw pt pl pb pr group".split()]


class Epilogue(ctypes.Structure):
    _fields_ = [("bias", ctypes.c_void_p), ("bias_mode", ctypes.c_int), ("bias_scale", ctypes.c_float),
                ("residual", ctypes.c_void_p), ("act", ctypes.c_int), ("a0", ctypes.c_float), ("a1", ctypes.c_float)]


def isa_lib(isa):
    """The `isa` build of the kernel library, loaded on its own (skips when this CPU lacks it)."""
    from tcc.accelerators.cpu import build
    skip_unless_runs(isa)
    lib = ctypes.CDLL(build.library_path(isa), mode=ctypes.RTLD_LOCAL)
    lib.tcc_cpu_conv2d_scratch.restype = ctypes.c_size_t
    return lib


def packed_direct_call(lib, shape, act, offset=0):
    """tcc_cpu_conv2d_packed on `shape` (a PACKED row) with a residual and `act` ("Relu" or
    "Sigmoid"), scratch full of NaN (padding the packing leaves unzeroed would show) starting
    `offset` floats past a 64-byte boundary, against onnxruntime."""
    from tcc.accelerators.cpu.codegen import pack_conv
    n, c, h, w, m, k, s, d, pads, g = shape
    mdl, feeds = conv_model(n, c, h, w, m, k, s, d, pads, g, act=act, residual=True)
    ref = ort.InferenceSession(mdl.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    inits = {i.name: np.frombuffer(i.raw_data, np.float32) for i in mdl.graph.initializer}
    kh, kw = (k, k) if isinstance(k, int) else k
    wp = np.ascontiguousarray(pack_conv(inits["w"].reshape(m, c // g, kh, kw), g))
    p = ConvParams(n, c, h, w, m, kh, kw, ref.shape[2], ref.shape[3], *s, *d, *pads, g)
    ep = Epilogue(inits["b"].ctypes.data, 2, 1.0, feeds["r"].ctypes.data, {"Relu": 1, "Sigmoid": 3}[act], 0.0, 0.0)
    buf = np.full(lib.tcc_cpu_conv2d_scratch(ctypes.byref(p)) + 32, np.nan, np.float32)
    scratch = buf[(-buf.ctypes.data % 64) // 4 + offset:]
    y = np.full_like(ref, np.nan)
    lib.tcc_cpu_conv2d_packed(ctypes.byref(p), ctypes.c_void_p(feeds["x"].ctypes.data),
                              ctypes.c_void_p(wp.ctypes.data), ctypes.c_void_p(y.ctypes.data),
                              ctypes.c_void_p(scratch.ctypes.data), ctypes.byref(ep))
    # atol 1e-4 as the pointwise test's: outputs of magnitude ~10 summed over K = C/G*KH*KW products
    # round differently from onnxruntime's order by a few 1e-6 of that (2.4e-5 seen on a 0.02 output)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4, err_msg=f"{shape} offset {offset}")


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
def test_packed_other_isa_builds(isa):
    # an artifact compiled for AVX-512 runs on whichever kernel library the loading machine picks
    lib = isa_lib(isa)
    for shape in PACKED[:4] + PACKED[6:9] + PACKED[13:]:
        packed_direct_call(lib, shape, "Sigmoid" if shape[1] % 2 else "Relu")


# The packed kernel called directly on every ISA build at 1 and 2 threads (tcc_cpu_conv2d_pw with
# codegen.pack_pw's layout): AVX2 and generic take 4-row halves of the 8-row blocks.
@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize("threads", [1, 2])
def test_pointwise_packed_isa_threads(isa, threads, pw_lib):
    import onnxruntime as ort

    from tcc.accelerators.cpu.codegen import pack_pw
    acts = {None: (0, 0.0, 0.0), "Relu": (1, 0.0, 0.0), "Clip": (2, -0.5, 0.7), "LeakyRelu": (5, 0.1, 0.0),
            "Sigmoid": (3, 0.0, 0.0)}
    # (1, 200, 9, 13, 22): a block's two halves run by run (input column within PW_L1_COLUMN), an m tail
    for (n, c, h, w, m), act in zip([(1, 96, 7, 7, 160), (2, 13, 5, 7, 21), (1, 5, 2, 2, 3), (1, 40, 60, 61, 12),
                                     (1, 384, 14, 14, 64), (1, 200, 9, 13, 22)], [*acts, "Clip"]):
        mdl, feeds = conv_model(n, c, h, w, m, 1, act=act, residual=True)
        ref = ort.InferenceSession(mdl.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        inits = {i.name: numpy_helper.to_array(i) for i in mdl.graph.initializer}
        wp, b = np.ascontiguousarray(pack_pw(inits["w"])), inits["b"]
        y = np.full_like(ref, np.nan)
        code, a0, a1 = acts[act]
        ep = Epilogue(b.ctypes.data, 2, 1.0, feeds["r"].ctypes.data, code, a0, a1)
        p = ConvParams(n, c, h, w, m, 1, 1, h, w, 1, 1, 1, 1, 0, 0, 0, 0, 1)
        ptr = ctypes.c_void_p
        pw_lib.tcc_cpu_conv2d_pw(ctypes.byref(p), ptr(feeds["x"].ctypes.data), ptr(wp.ctypes.data), ptr(y.ctypes.data),
                                 ctypes.byref(ep))
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4, err_msg=f"{isa} {(n, c, h, w, m)} {act}")


# A strided 1x1 with constant weights as a pointwise conv over the subsampled input
# (tcc_cpu_conv2d_pw_strided; the AVX2 and AVX-512 choice, made to answer so on every build): odd planes,
# strides 2 and 3 per axis, channels not a multiple of 8, batch 2, ResNet's shortcut shapes.
@pytest.mark.parametrize("n,c,h,w,m,s", [
    (1, 9, 13, 15, 10, (2, 2)),
    (2, 13, 11, 7, 21, (2, 2)),       # batch 2: one subsampling per image
    (1, 5, 17, 10, 3, (3, 2)),
    (1, 1, 9, 9, 8, (2, 3)),          # c = 1
    (1, 64, 56, 56, 128, (2, 2)),     # ResNet-18's first shortcut
    (1, 256, 14, 14, 512, (2, 2)),    # 7 x 7 outputs: a tail of one position per vector row
])
def test_pointwise_strided_packed(n, c, h, w, m, s, monkeypatch):
    choose_as(monkeypatch, "pw_strided", "avx2")
    mdl, feeds = conv_model(n, c, h, w, m, 1, s=s, act="Relu", residual=True)
    check(mdl, feeds, rtol=1e-4, atol=1e-4, kernel="tcc_cpu_conv2d_pw_strided")


@pytest.mark.parametrize("act", ACTS)
def test_pointwise_strided_packed_epilogues(act, monkeypatch):
    choose_as(monkeypatch, "pw_strided", "avx2")
    mdl, feeds = conv_model(1, 24, 9, 11, 19, 1, s=(2, 2), bias=act != "Relu", act=act)
    check(mdl, feeds, rtol=1e-4, atol=1e-4, kernel="tcc_cpu_conv2d_pw_strided")


# ... and called directly on every ISA build at 1 and 2 threads, scratch full of NaN (a position
# the subsampling leaves unwritten would show)
@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize("threads", [1, 2])
def test_pointwise_strided_isa_threads(isa, threads, pw_lib):
    from tcc.accelerators.cpu.codegen import pack_pw
    pw_lib.tcc_cpu_conv2d_scratch.restype = ctypes.c_size_t
    ptr = ctypes.c_void_p
    for n, c, h, w, m, s in [(2, 13, 11, 7, 21, (2, 2)), (1, 96, 14, 15, 40, (2, 3)), (1, 5, 3, 3, 9, (2, 2))]:
        mdl, feeds = conv_model(n, c, h, w, m, 1, s=s, act="Relu", residual=True)
        ref = ort.InferenceSession(mdl.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        inits = {i.name: numpy_helper.to_array(i) for i in mdl.graph.initializer}
        wp, b = np.ascontiguousarray(pack_pw(inits["w"])), inits["b"]
        p = ConvParams(n, c, h, w, m, 1, 1, ref.shape[2], ref.shape[3], *s, 1, 1, 0, 0, 0, 0, 1)
        scratch = np.full(pw_lib.tcc_cpu_conv2d_scratch(ctypes.byref(p)), np.nan, np.float32)
        assert scratch.size == c * ref.shape[2] * ref.shape[3]
        y = np.full_like(ref, np.nan)
        ep = Epilogue(b.ctypes.data, 2, 1.0, feeds["r"].ctypes.data, 1, 0.0, 0.0)
        pw_lib.tcc_cpu_conv2d_pw_strided(ctypes.byref(p), ptr(feeds["x"].ctypes.data), ptr(wp.ctypes.data),
                                         ptr(y.ctypes.data), ptr(scratch.ctypes.data), ctypes.byref(ep))
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4, err_msg=f"{isa} {(n, c, h, w, m, s)}")


# ---- 3x3 stride 1 as Winograd F(2x2, 3x3) and F(4x4, 3x3) (kernels/conv_wino.c) -------------
# Called directly on every ISA build at 1 and 2 threads with codegen.pack_wino's layout: tiles
# numbered row by row and gathered from the phase planes, runs of tiles cut at tile rows and at
# the panel edge (32 tiles, 16 on planes of at most 16), output sizes that are not multiples of the tile (its last rows or
# columns dropped), stride-4 phase planes (F(4x4)), asymmetric
# pads, output-channel blocks of 1..14 rows, panels transformed by each thread for its run of
# items (a group's transform reused by the next share of its channel blocks, redone where a
# thread's range starts inside a group) or, with fewer groups than threads, once and shared
# (split over panels and input channels), weights past 1 MB (pairs of panels where every thread
# still gets a pair).
WINO = [
    (1, 16, 14, 14, 16, (1, 1, 1, 1)),     # ResNet-like plane, two panels, blocks of 8
    (2, 20, 9, 13, 30, (1, 1, 1, 1)),      # odd width, batch 2, blocks of 10
    (1, 17, 11, 10, 29, (0, 1, 2, 0)),     # asymmetric pads: odd output height
    (1, 33, 15, 16, 15, (2, 2, 2, 2)),     # pads 2: 17 x 18 outputs
    (1, 5, 3, 3, 7, (0, 0, 0, 0)),         # one output pixel, one block of 7
    (1, 24, 34, 36, 45, (1, 1, 1, 1)),     # 10 panels (F(2x2)), or 3 split over 2 threads (F(4x4))
    (1, 160, 8, 8, 120, (1, 1, 1, 1)),     # weights > 1 MB, one panel
    (1, 136, 14, 14, 128, (1, 1, 1, 1)),   # weights > 1 MB, 2 panels (F(2x2)): a pair at 1 thread, one each at 2
    (1, 136, 40, 40, 128, (1, 1, 1, 1)),   # weights > 1 MB, 4 (F(4x4)) or 13 panels: pairs at 1 and 2 threads
    (1, 3, 40, 7, 1, (1, 0, 1, 0)),        # one output channel, tall narrow plane
    (1, 20, 7, 7, 33, (1, 1, 1, 1)),       # 16 tiles (F(2x2)) or 4 (F(4x4)): one narrow panel
    (1, 9, 23, 5, 18, (1, 1, 1, 1)),       # 3-tile rows: a vector spans many row ends
]


def wino_lib(isa, threads):
    from tcc.accelerators.cpu import build
    skip_unless_runs(isa)
    lib = ctypes.CDLL(build.library_path(isa), mode=ctypes.RTLD_LOCAL)
    lib.tcc_cpu_set_num_threads(threads)
    return lib


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("tile", [2, 4])
def test_winograd_isa_threads(isa, threads, tile):
    from tcc.accelerators.cpu.codegen import pack_wino
    lib = wino_lib(isa, threads)
    acts = [(None, 0, 0.0, 0.0), ("Relu", 1, 0.0, 0.0), ("Clip", 2, -0.5, 0.7), ("LeakyRelu", 5, 0.1, 0.0),
            ("Sigmoid", 3, 0.0, 0.0), ("Tanh", 4, 0.0, 0.0)]
    try:
        for i, (n, c, h, w, m, pads) in enumerate(WINO):
            act, code, a0, a1 = acts[i % len(acts)]
            residual = i % 3 != 1
            mdl, feeds = conv_model(n, c, h, w, m, 3, pads=pads, act=act, residual=residual)
            ref = ort.InferenceSession(mdl.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
            inits = {t.name: numpy_helper.to_array(t) for t in mdl.graph.initializer}
            u, b = np.ascontiguousarray(pack_wino(inits["w"], tile)), inits["b"]
            ep = Epilogue(b.ctypes.data, 2, 1.0, feeds["r"].ctypes.data if residual else None, code, a0, a1)
            p = ConvParams(n, c, h, w, m, 3, 3, ref.shape[2], ref.shape[3], 1, 1, 1, 1, *pads, 1)
            y = np.full_like(ref, np.nan)  # every output written exactly where it belongs
            lib.tcc_cpu_conv2d_wino(ctypes.byref(p), tile, ctypes.c_void_p(feeds["x"].ctypes.data),
                                    ctypes.c_void_p(u.ctypes.data), ctypes.c_void_p(y.ctypes.data), ctypes.byref(ep))
            # sums of 9c products of unit normals (~sqrt(9c) before the activation): the transforms
            # combine up to 4 (F(2x2)) or 36 with factors up to 8 (F(4x4)) of them, so the absolute
            # error scales with that
            atol = (4e-6 if tile == 2 else 6e-5) * (9 * c) ** 0.5
            np.testing.assert_allclose(y, ref, rtol=1e-4, atol=atol, err_msg=f"{isa} {WINO[i]} {act}")
    finally:
        lib.tcc_cpu_set_num_threads(0)


def test_winograd_chosen_and_matches(monkeypatch):
    # ResNet's 3x3 layers on the AVX-512 and AVX2 builds: F(4x4) on 56x56 and 28x28 planes, F(2x2) on 14x14
    # (256 channels: F(4x4)'s weights would pass 8 MB), the direct packed kernel on 7x7 (512
    # channels: 17 MB even with F(2x2)) and for strided convolutions; with few channels small
    # planes take narrow 16-tile panels
    from tcc.accelerators.cpu.codegen import wino_tile

    def tile(hw, c=64, s=1, isa="avx512"):
        return wino_tile((1, c, hw * s, hw * s), (c, c, 3, 3), (1, c, hw, hw), (s, s), (1, 1), (1,) * 4, 1, isa)
    for isa in ("avx512", "avx2"):
        assert (tile(56, isa=isa), tile(28, isa=isa), tile(14, 256, isa=isa), tile(7, 512, isa=isa),
                tile(28, s=2, isa=isa)) == (4, 4, 2, 0, 0)
        assert (tile(14, isa=isa), tile(7, isa=isa)) == (4, 2)
    assert tile(56, isa="generic") == 0
    # the AVX-512 build's choice, compiled (not run) on any machine; then run here with that choice
    choose_as(monkeypatch, "wino_tile")
    for hw, t in ((28, 4), (14, 4), (7, 2)):
        mdl, feeds = conv_model(1, 32, hw, hw, 48, 3, pads=(1, 1, 1, 1), act="Relu", residual=True)
        assert f"tcc_cpu_conv2d_wino(&p, {t}," in c_source_for_isa(mdl, "avx512", monkeypatch)
        ours, ref, sess = run_both(mdl, feeds)
        np.testing.assert_allclose(ours[0], ref[0], rtol=1e-4, atol=6e-5 * (9 * 32) ** 0.5)  # as in the kernel test
        assert f"tcc_cpu_conv2d_wino(&p, {t}," in c_source_of(sess.path)
