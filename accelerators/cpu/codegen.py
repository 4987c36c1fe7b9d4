"""loop-to-native for the cpu accelerator (TVM BYOC's C-source path): each
lowered partition function becomes a C function

    void tcc_part_<name>(void **args, void **weights, char *workspace)

(`args`: the partition's inputs then outputs, in signature order) calling the
kernel library (tcc_cpu.h) with every shape, stride and batch offset baked in
as constants, and fused elementwise trees emitted as loops of their own.
Intermediates live in one workspace, planned here (first fit over live
ranges; Reshape-like ops are views and cost nothing). Constants (weights,
already folded and laid out by lower.py) are collected into one list that the
runtime uploads once."""
from __future__ import annotations

import numpy as np

from tcc.dialects.ir.types import NONE
from tcc.dialects.transforms.qdq import ROUND_SHIFT

from . import elementwise
from .elementwise import flit
from .packing import (PANEL, PW_ROWS, SMALL_M, conv_packed, conv_scratch, narrow_gemm,  # noqa: F401
                      narrow_ldb, pack_b, pack_bt, pack_conv, pack_pw)
from .support import const_value, contiguous_strides

ALIGN = 64
ACT_CODES = {None: "TCC_ACT_NONE", "relu": "TCC_ACT_RELU", "clip": "TCC_ACT_CLIP", "sigmoid": "TCC_ACT_SIGMOID",
             "tanh": "TCC_ACT_TANH", "leaky": "TCC_ACT_LEAKY", "silu": "TCC_ACT_SILU",
             "qdq8": "TCC_ACT_QDQ8"}


def _size(t):
    return int(np.prod(t.shape, dtype=np.int64)) if t.shape else 1


# A kernel call with less work than this (multiply-adds, or their equivalent,
# see call_work) runs on the calling thread alone (tcc_cpu_set_inline). On
# the 2-core Zen 2 (2 threads, each layer of efficientnet and shufflenet
# timed in their generated C, interleaved with the same layer on one thread,
# medians): a 2x64x16x16 -> 16 pointwise conv (524K, 15 us on one core) ran
# no faster on two, nor did shufflenet's pointwise -> depthwise pairs (405K)
# and stem (331K); its 8-channel-group 1x1s (98K) took 3x the time; the
# SiLU pairs (1.0-2.4M with the activations counted) ran 1.3-1.6x faster.
# What two threads add is the other core's wake-up and the transfer of the
# half of the input that core did not write (a few us), not the pool's
# dispatch (~1 us).
SERIAL_WORK = 768 * 1024
# The multiply-add equivalents of one output of these activations (a vector
# exp and a division: with 16-24 input channels a SiLU costs about as much
# as the output's multiply-adds, see the README).
ACT_WORK = {"sigmoid": 24, "silu": 24, "tanh": 24}
# The same for one element of a fused elementwise loop's ops (per op).
EW_OP_WORK = {"Exp": 16, "Log": 16, "Tanh": 24, "Sigmoid": 24, "Erf": 24, "Pow": 16, "Div": 4, "Sqrt": 4}


def conv_work(x_shape, w_shape, y_shape, act):
    """A convolution's multiply-adds and its activation's equivalents (also
    the generic tape's thread choice, runtime/generic/tape.py)."""
    n, m, oh, ow = y_shape
    outs = n * m * oh * ow
    return outs * int(np.prod(w_shape[1:])) + outs * ACT_WORK.get(act, 0)


def call_work(op):
    """The work of the kernel call an op becomes, in multiply-adds (or
    equivalents), for SERIAL_WORK; None where the kernel decides its own
    split (GEMMs, softmax/layernorm, RNNs: their kernels keep small products
    on one thread already)."""
    n = op.name
    if n == "cpu.conv":
        return conv_work(op.operands[0].type.shape, op.operands[1].type.shape, op.results[0].type.shape,
                          op.get_attr("act"))
    if n in ("cpu.conv_pw_dw", "cpu.conv_dw_pw"):
        x, w1, w2 = op.operands[0], op.operands[1], op.operands[3 if op.get_attr(n[-5:-3] + "_has_bias") else 2]
        y = op.results[0].type.shape
        if n == "cpu.conv_pw_dw":
            mid = (x.type.shape[0], w1.type.shape[0]) + tuple(x.type.shape[2:])
            first = conv_work(x.type.shape, w1.type.shape, mid, op.get_attr("pw_act"))
        else:
            mid = (y[0], x.type.shape[1]) + tuple(y[2:])
            first = conv_work(x.type.shape, w1.type.shape, mid, op.get_attr("dw_act"))
        return first + conv_work(mid, w2.type.shape, y, op.get_attr("act"))
    if n in ("cpu.maxpool", "cpu.avgpool"):
        kh, kw = op.get_attr("kernel")
        return _size(op.results[0].type) * kh * kw
    if n in ("cpu.global_avgpool", "cpu.transpose"):
        return _size(op.operands[0].type)
    if n in ("cpu.strided", "cpu.concat"):
        return _size(op.results[0].type)
    if n == "cpu.elementwise":
        ops = [o.name[5:] for o in op.regions[0].blocks[0].ops if o.name.startswith("onnx.")]
        return _size(op.results[0].type) * sum(EW_OP_WORK.get(o, 1) for o in ops)
    return None


class Weights:
    """The module's constants, deduplicated, in upload order."""

    def __init__(self):
        self.arrays, self._index = [], {}

    def add(self, value) -> int:
        return self.add_array(id(value), lambda: const_value(value))

    def add_array(self, key, make) -> int:
        if key not in self._index:
            self._index[key] = len(self.arrays)
            self.arrays.append(np.ascontiguousarray(make()))
        return self._index[key]


# Winograd F(t x t, 3x3) weight transforms G (t + 2 x 3), by tile size t
WINO_G = {2: np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]]),
          4: np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                       [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])}
WINO_ROWS = 14  # kernels/conv_wino.c's WR
# Transformed weights are (t+2)^2/9 times the direct ones; past this they come
# from memory on every run of a model and cost more than the multiplies save
# (ResNet-18 end to end: F(2x2) on its 7x7 layers, 17 MB each, made the run
# 20 % slower; F(4x4) on 14x14, 9.4 MB, no faster than F(2x2) at 4.2 MB).
WINO_MAX_WEIGHT_BYTES = 8 << 20


def pack_wino(w, tile=2):
    """3x3 OIHW weights -> conv_wino.c's transformed weights U = G w G^T: per
    xi of the (tile + 2)^2 products, per block of output channels
    (ceil(M/14) blocks, rows b*M/nb up to (b+1)*M/nb), that block's [C][rows],
    so each GEMM reads its weights as one sequential stream."""
    w = np.asarray(w, np.float64)
    m, c = w.shape[:2]
    g = WINO_G[tile]
    nx = len(g) ** 2
    u = np.einsum("ai,mcij,bj->abcm", g, w, g).reshape(nx, c, m).astype(np.float32)
    nb = -(-m // WINO_ROWS)
    bounds = [b * m // nb for b in range(nb + 1)]
    return np.concatenate([u[:, :, bounds[b]:bounds[b + 1]].reshape(nx, -1) for b in range(nb)], axis=1)


WINO_ISAS = ("avx512", "avx2")


def wino_tile(x_shape, w_shape, y_shape, strides, dilations, pads, group, isa):
    """The Winograd tile size (2 or 4) a constant-weight conv runs with in
    conv_wino.c, or 0 for none: 3x3, stride 1, no dilation, one group, on
    AVX-512 or AVX2 (on an AVX2 EPYC, 1 thread, ResNet-18's 56x56, 28x28 and
    14x14 layers ran 1.3-3.6x faster than on conv_ocv.c), with enough channels for the transforms to be cheap next to the
    GEMMs. Of F(2x2) and F(4x4) (2.25x and 4x fewer multiplies than direct),
    the one whose tiles fill the 32-tile panels best, if that keeps at least
    1.6x (the last panel's empty lanes cost most on small planes), among
    those whose transformed weights stay under WINO_MAX_WEIGHT_BYTES."""
    m, c, kh, kw = w_shape
    if isa not in WINO_ISAS or (kh, kw) != (3, 3) or tuple(strides) != (1, 1) or tuple(dilations) != (1, 1):
        return 0
    if group != 1 or c < 16 or m < 16:
        return 0
    oh, ow = y_shape[2], y_shape[3]
    best, best_gain = 0, 1.6
    for t, fewer in ((2, 2.25), (4, 4.0)):
        if (t + 2) ** 2 * c * m * 4 > WINO_MAX_WEIGHT_BYTES:
            continue
        tiles = -(-oh // t) * -(-ow // t)
        panel = 16 if tiles <= 16 else 32
        computed = -(-tiles // panel) * panel * t * t  # outputs the panels compute
        gain = fewer * oh * ow / computed
        if gain >= best_gain:
            best, best_gain = t, gain
    return best


def pw_strided(w_shape, strides, pads, group, isa):
    """Whether a constant-weight 1x1 conv with strides and no pads runs as a
    pointwise one over its subsampled input (tcc_cpu_conv2d_pw_strided:
    conv_pw.c's kernel), not conv_ocv.c: AVX2 (ResNet-18's three 1x1
    stride-2 shortcuts, Zen 2, 1 thread, each against onnxruntime in one
    process: 0.94-1.09x its time, 1.27-1.47x on conv_ocv.c's 6 x 16 tiles,
    whose 28-, 14- and 7-column rows leave lanes idle and whose transposes
    are a large part of a K = 64..256 tile) and AVX-512 (the same three
    in ResNet-18 on an Intel Xeon with AVX-512, `tcc-run --profile`:
    0.150-0.157 -> 0.123-0.128 ms, 0.129-0.131 -> 0.120-0.121, 0.150 ->
    0.120 at 1 thread; 0.131-0.133 -> 0.083-0.084, 0.085 -> 0.071-0.073,
    0.085 -> 0.067 at 2)."""
    return (isa in ("avx2", "avx512") and tuple(w_shape[2:]) == (1, 1) and tuple(strides) != (1, 1) and not any(pads)
            and group == 1)


def split_by_channels(v):
    """Whether v's producer leaves it split over the threads' caches by
    channels (tcc_cpu_conv2d_pw_dw's blocks), for its reader to split alike."""
    src = getattr(v, "op", None)
    return src is not None and src.name == "cpu.conv_pw_dw"


class FunctionCodegen:
    def __init__(self, func, weights: Weights, uid, isa):
        self.func, self.weights, self.uid, self.isa = func, weights, uid, isa
        self.name = func.get_attr("sym_name")
        self.block = func.regions[0].blocks[0]
        self.lines, self.helpers = [], []
        self.storage = {}   # value -> C expression of a float pointer
        self.workspace = 0
        self.scratch = 0
        self.n_helpers = 0

    # -- storage ------------------------------------------------------------------
    def plan(self):
        ft = self.func.get_attr("function_type")
        nin = len(ft.inputs)
        for i, a in enumerate(self.block.args):
            self.storage[a] = f"((float *)args[{i}])"
        ret = self.block.last
        ops = list(self.block.ops)
        pos = {op: i for i, op in enumerate(ops)}
        root = {}
        for op in ops:
            if op.name == "cpu.reshape":
                src = op.operands[0]
                root[op.results[0]] = root.get(src, src)
        self.outputs = {}
        self.copies = []  # (output arg index, value) needing an explicit copy
        for j, v in enumerate(ret.operands):
            # a reshaped result is computed into its output in place (attention's heads
            # merged back: the copy was 5-8 us a layer on the bench BERT)
            r = root.get(v, v)
            p = getattr(r, "op", None)
            if p is not None and p.name not in ("cpu.reshape", "onnx.Constant") and r not in self.outputs:
                self.outputs[r] = nin + j
            else:
                self.copies.append((nin + j, v))
        last = {}
        for op in ops:
            for v in op.operands:
                r = root.get(v, v)
                last[r] = pos[op]
        events = []
        for op in ops:
            if op.name in ("onnx.Constant", "onnx.NoValue", "cpu.reshape", "func.return"):
                continue
            r = op.results[0]
            if r in self.outputs:
                self.storage[r] = f"((float *)args[{self.outputs[r]}])"
                continue
            size = (_size(r.type) * 4 + ALIGN - 1) // ALIGN * ALIGN
            events.append((pos[op], last.get(r, pos[op]), size, r))
        active = []  # (offset, size, last)
        for start, end, size, v in events:
            active = [a for a in active if a[2] >= start]
            off = 0
            for o, s, _ in sorted(active):
                if off + size <= o:
                    break
                off = max(off, o + s)
            active.append((off, size, end))
            self.workspace = max(self.workspace, off + size)
            self.storage[v] = f"((float *)(ws + {off}))"
        for op in ops:
            if op.name == "cpu.reshape":
                self.storage[op.results[0]] = self.ptr(op.operands[0])

    def ptr(self, v):
        if v in self.storage:
            return self.storage[v]
        p = getattr(v, "op", None)
        if p is not None and p.name == "onnx.Constant":
            s = f"((float *)W[{self.weights.add(v)}])"
            self.storage[v] = s
            return s
        raise KeyError(f"cpu codegen: no storage for {v}")

    # -- ops -------------------------------------------------------------------------
    def emit(self, s):
        self.lines.append("    " + s)

    def epilogue(self, op, bias, bias_mode, bias_scale, residual, name="ep", prefix=""):
        act = op.get_attr(prefix + "act")
        return (f"tcc_epilogue {name} = {{{bias or 'NULL'}, {bias_mode if bias else 0}, {flit(bias_scale)}, "
                f"{residual or 'NULL'}, {ACT_CODES[act]}, {flit(op.get_attr(prefix + 'act_a0', 0.0))}, "
                f"{flit(op.get_attr(prefix + 'act_a1', 0.0))}}};")

    @staticmethod
    def conv_params(x_shape, w_shape, y_shape, strides, dilations, pads, group):
        """A tcc_conv_params initializer."""
        n, c, h, wd = x_shape
        m, _, kh, kw = w_shape
        oh, ow = y_shape[2:]
        return (f"{{{n}, {c}, {h}, {wd}, {m}, {kh}, {kw}, {oh}, {ow}, {strides[0]}, {strides[1]}, "
                f"{dilations[0]}, {dilations[1]}, {pads[0]}, {pads[1]}, {pads[2]}, {pads[3]}, {group}}}")

    def _pair_operands(self, op, first):
        """(x, w1, b1, w2, bias, residual) of a fused pair of convs, `first` the
        first one's attribute prefix (its epilogue's); biases and residual are
        C pointers or None."""
        x, w1, *rest = op.operands
        b1 = self.ptr(rest.pop(0)) if op.get_attr(first + "has_bias") else None
        w2 = rest.pop(0)
        bias = self.ptr(rest.pop(0)) if op.get_attr("has_bias") else None
        res = self.ptr(rest.pop(0)) if op.get_attr("has_residual") else None
        return x, w1, b1, w2, bias, res

    def packed_pw(self, w):
        """Index of a pointwise conv's weights packed for conv_pw.c."""
        return self.weights.add_array(("pw", id(w)), lambda: pack_pw(const_value(w)))

    def op_conv_pw_dw(self, op):
        """The pointwise output (N, hidden, H, W) is the depthwise input and no value of the IR."""
        x, w_pw, b_pw, w_dw, bias, res = self._pair_operands(op, "pw_")
        y = op.results[0]
        n, _, h, wd = x.type.shape
        mid = (n, w_pw.type.shape[0], h, wd)
        pp = self.conv_params(x.type.shape, w_pw.type.shape, mid, (1, 1), (1, 1), (0, 0, 0, 0), 1)
        pd = self.conv_params(mid, w_dw.type.shape, y.type.shape, op.get_attr("strides"), op.get_attr("dilations"),
                              op.get_attr("pads"), op.get_attr("group"))
        self.emit(f"{{ static const tcc_conv_params pp = {pp}, pd = {pd};")
        self.emit("  " + self.epilogue(op, b_pw, 2, 1.0, None, "epp", "pw_"))
        self.emit("  " + self.epilogue(op, bias, 2, 1.0, res))
        self.emit(f"  tcc_cpu_conv2d_pw_dw(&pp, {self.ptr(x)}, (float *)W[{self.packed_pw(w_pw)}], &epp, &pd, "
                  f"{self.ptr(w_dw)}, {self.ptr(y)}, &ep); }}")

    def op_conv_dw_pw(self, op):
        """The depthwise output (N, C, OH, OW) is the pointwise input and no value of the IR."""
        x, w_dw, b_dw, w_pw, bias, res = self._pair_operands(op, "dw_")
        y = op.results[0]
        mid = (y.type.shape[0], x.type.shape[1]) + tuple(y.type.shape[2:])
        pd = self.conv_params(x.type.shape, w_dw.type.shape, mid, op.get_attr("strides"), op.get_attr("dilations"),
                              op.get_attr("pads"), op.get_attr("group"))
        pq = self.conv_params(mid, w_pw.type.shape, y.type.shape, (1, 1), (1, 1), (0, 0, 0, 0), 1)
        self.emit(f"{{ static const tcc_conv_params pd = {pd}, pq = {pq};")
        self.emit("  " + self.epilogue(op, b_dw, 2, 1.0, None, "epd", "dw_"))
        self.emit("  " + self.epilogue(op, bias, 2, 1.0, res))
        self.emit(f"  tcc_cpu_conv2d_dw_pw(&pd, {self.ptr(x)}, {self.ptr(w_dw)}, &epd, &pq, "
                  f"(float *)W[{self.packed_pw(w_pw)}], {self.ptr(y)}, &ep); }}")

    def op_conv(self, op):
        x, w = op.operands[0], op.operands[1]
        y = op.results[0]
        rest = list(op.operands[2:])
        bias = self.ptr(rest.pop(0)) if op.get_attr("has_bias") else None
        res = self.ptr(rest.pop(0)) if op.get_attr("has_residual") else None
        kh, kw = w.type.shape[2:]
        sh, sw = op.get_attr("strides")
        dh, dw = op.get_attr("dilations")
        pt, pl, pb, pr = op.get_attr("pads")
        g = op.get_attr("group")
        self.scratch = max(self.scratch, conv_scratch(x.type.shape, w.type.shape, y.type.shape, (sh, sw),
                                                      (pt, pl, pb, pr), g))
        params = self.conv_params(x.type.shape, w.type.shape, y.type.shape, (sh, sw), (dh, dw), (pt, pl, pb, pr), g)
        self.emit(f"{{ static const tcc_conv_params p = {params};")
        self.emit("  " + self.epilogue(op, bias, 2, 1.0, res))
        wop = getattr(w, "op", None)
        const_w = wop is not None and wop.name == "onnx.Constant"
        if const_w and (kh, kw, sh, sw, pt, pl, pb, pr, g) == (1, 1, 1, 1, 0, 0, 0, 0, 1):
            fn = "tcc_cpu_conv2d_pw_split_c" if split_by_channels(x) else "tcc_cpu_conv2d_pw"
            self.emit(f"  {fn}(&p, {self.ptr(x)}, ((float *)W[{self.packed_pw(w)}]), {self.ptr(y)}, &ep); }}")
            return
        if const_w and pw_strided(w.type.shape, (sh, sw), (pt, pl, pb, pr), g, self.isa):
            self.emit(f"  tcc_cpu_conv2d_pw_strided(&p, {self.ptr(x)}, ((float *)W[{self.packed_pw(w)}]), "
                      f"{self.ptr(y)}, scratch, &ep); }}")
            return
        tile = wino_tile(x.type.shape, w.type.shape, y.type.shape, (sh, sw), (dh, dw), (pt, pl, pb, pr), g, self.isa)
        if const_w and tile:
            idx = self.weights.add_array(("wino", id(w), tile), lambda: pack_wino(const_value(w), tile))
            self.emit(f"  tcc_cpu_conv2d_wino(&p, {tile}, {self.ptr(x)}, (float *)W[{idx}], {self.ptr(y)}, &ep); }}")
            return
        if const_w and conv_packed(x.type.shape, w.type.shape, y.type.shape, (sh, sw), (pt, pl, pb, pr), g, self.isa):
            idx = self.weights.add_array(("conv_packed", id(w), g), lambda: pack_conv(const_value(w), g))
            self.emit(f"  tcc_cpu_conv2d_packed(&p, {self.ptr(x)}, (float *)W[{idx}], {self.ptr(y)}, scratch, &ep); }}")
            return
        self.emit(f"  tcc_cpu_conv2d(&p, {self.ptr(x)}, {self.ptr(w)}, {self.ptr(y)}, scratch, &ep); }}")

    def q8_call(self, op, x, w, wzp, out_shape, pre=""):
        """(the `p` and `qp` declarations, the weights' index) of tcc_conv_q8's
        call for a conv_q8's operands and attributes (prefixed `pre`)."""
        from tcc.dialects.conversions.graph_to_loop.quantization.quantized_linear import pack_conv_weights
        wv = const_value(w)
        packed, layout = pack_conv_weights(wv, const_value(wzp).astype(wv.dtype), pointwise=True)
        idx = self.weights.add_array(("q8", id(w), id(wzp)), lambda: packed)
        n, c, h, wd = x.type.shape
        m, _, kh, kw = w.type.shape
        oh, ow = out_shape[2:]
        g = lambda k, d=None: op.get_attr(pre + k, d)  # noqa: E731
        (sh, sw), (dh, dw), pads = g("strides"), g("dilations"), g("pads")
        xs = g("xsigned")
        p = [n, c, h, wd, m, kh, kw, oh, ow, sh, sw, pads[0], pads[1], dh, dw, xs, int(wv.dtype == np.int8), 1, 0,
             layout]
        lo, hi = (-128, 127) if xs else (0, 255)
        qdq = g("act") == "qdq8"
        qp = [g("sx"), g("zx"), ROUND_SHIFT + lo, ROUND_SHIFT + hi, int(qdq),
              g("act_a0", 0.0) if qdq else 0.0, g("act_a1", 0.0) if qdq else 0.0]
        return (f"{{ static const int64_t p[] = {{{', '.join(map(str, p))}}};",
                f"  static const float qp[] = {{{', '.join(flit(v) for v in qp)}}};"), idx

    def op_conv_q8(self, op):
        """The host runtime's int8 convolution on float tensors (gemm_int.c's
        tcc_conv_q8, resolved from libtccrt, which build.load loads
        RTLD_GLOBAL before any partition)."""
        x, w, wzp, scale = op.operands[:4]
        y = op.results[0]
        bias = self.ptr(op.operands[4]) if op.get_attr("has_bias") else "NULL"
        decl, idx = self.q8_call(op, x, w, wzp, y.type.shape)
        for line in decl:
            self.emit(line)
        self.emit(f"  tcc_conv_q8(p, qp, {self.ptr(y)}, {self.ptr(x)}, W[{idx}], {self.ptr(scale)}, {bias}); }}")

    def op_conv_q8_dw(self, op):
        """The int8 1x1's output (N, hidden, H, W) is the depthwise input and
        no value of the IR. The AVX-512 build fuses the two where the CPU has
        VNNI (conv_pwdw8.c); other builds run them apart through scratch."""
        x, w, wzp, scale, *rest = op.operands
        y = op.results[0]
        b_q8 = self.ptr(rest.pop(0)) if op.get_attr("q8_has_bias") else "NULL"
        w_dw = rest.pop(0)
        bias = self.ptr(rest.pop(0)) if op.get_attr("has_bias") else None
        res = self.ptr(rest.pop(0)) if op.get_attr("has_residual") else None
        n, _, h, wd = x.type.shape
        mid = (n, w.type.shape[0], h, wd)
        decl, idx = self.q8_call(op, x, w, wzp, mid, "q8_")
        pd = self.conv_params(mid, w_dw.type.shape, y.type.shape, op.get_attr("strides"), op.get_attr("dilations"),
                              op.get_attr("pads"), op.get_attr("group"))
        for line in decl:
            self.emit(line)
        self.emit(f"  static const tcc_conv_params pd = {pd};")
        self.emit("  " + self.epilogue(op, bias, 2, 1.0, res))
        if self.isa == "avx512":
            self.emit(f"  tcc_cpu_conv2d_q8_dw(p, qp, {self.ptr(x)}, W[{idx}], {self.ptr(scale)}, {b_q8}, &pd, "
                      f"{self.ptr(w_dw)}, {self.ptr(y)}, &ep, tcc_conv_q8); }}")
            return
        size = int(np.prod(mid))
        self.scratch = max(self.scratch, size + conv_scratch(mid, w_dw.type.shape, y.type.shape, op.get_attr("strides"),
                                                             op.get_attr("pads"), op.get_attr("group")))
        self.emit(f"  tcc_conv_q8(p, qp, scratch, {self.ptr(x)}, W[{idx}], {self.ptr(scale)}, {b_q8});")
        self.emit(f"  tcc_cpu_conv2d(&pd, scratch, {self.ptr(w_dw)}, {self.ptr(y)}, scratch + {size}, &ep); }}")

    def op_gemm(self, op):
        a, b = op.operands[0], op.operands[1]
        y = op.results[0]
        ta, tb = op.get_attr("trans_a"), op.get_attr("trans_b")
        m, n = y.type.shape
        k = a.type.shape[0] if ta else a.type.shape[1]
        rest = list(op.operands[2:])
        mode = op.get_attr("bias_mode")
        bias = self.ptr(rest.pop(0)) if mode else None
        res = self.ptr(rest.pop(0)) if op.get_attr("has_residual") else None
        self.emit("{ " + self.epilogue(op, bias, mode, op.get_attr("beta"), res))
        bt = None if ta else self.narrow(b, m, n, k, tb)
        if bt is not None:
            self.emit(f"  tcc_cpu_gemm_narrow({m}, {n}, {k}, {flit(op.get_attr('alpha'))}, {self.ptr(a)}, {k}, "
                      f"{bt}, {narrow_ldb(k)}, {self.ptr(y)}, {n}, &ep); }}")
            return
        bp = self.packed(b, m, tb)
        if bp is not None:
            rsa, csa = (1, m) if ta else (k, 1)
            self.emit(f"  tcc_cpu_gemm_packed({m}, {n}, {k}, {flit(op.get_attr('alpha'))}, {self.ptr(a)}, {rsa}, "
                      f"{csa}, {bp}, {self.ptr(y)}, {n}, &ep); }}")
            return
        self.emit(f"  tcc_cpu_gemm({ta}, {tb}, {m}, {n}, {k}, {flit(op.get_attr('alpha'))}, {self.ptr(a)}, "
                  f"{a.type.shape[1]}, {self.ptr(b)}, {b.type.shape[1]}, {self.ptr(y)}, {n}, &ep); }}")

    def packed(self, b, m, transposed=False):
        """A constant 2-D B as packed panels (a C expression), else None. Not
        for products of at most SMALL_M rows (a batch-1 classifier): gemm.c
        streams B once for those, 3x faster than 12-row tiles of one row."""
        p = getattr(b, "op", None)
        if p is None or p.name != "onnx.Constant" or len(b.type.shape) != 2 or m <= SMALL_M:
            return None
        idx = self.weights.add_array(("packed", id(b), transposed),
                                     lambda: pack_b(np.asarray(const_value(b)).T if transposed else const_value(b)))
        return f"((float *)W[{idx}])"

    def narrow(self, b, m, n, k, transposed=False):
        """A constant 2-D B with few columns as gemm_narrow.c's B^T (a C
        expression), else None (see narrow_gemm; not for products of at
        most SMALL_M rows, as in `packed`)."""
        p = getattr(b, "op", None)
        if p is None or p.name != "onnx.Constant" or len(b.type.shape) != 2 or m <= SMALL_M \
                or not narrow_gemm(self.isa, n, k):
            return None
        idx = self.weights.add_array(("narrow", id(b), transposed),
                                     lambda: pack_bt(np.asarray(const_value(b)).T if transposed else const_value(b)))
        return f"((float *)W[{idx}])"

    def op_matmul(self, op):
        a, b = op.operands[0], op.operands[1]
        y = op.results[0]
        rest = list(op.operands[2:])
        bias = self.ptr(rest.pop(0)) if op.get_attr("bias_mode") else None
        res = self.ptr(rest.pop(0)) if op.get_attr("has_residual") else None
        views = [_view(op.get_attr(f"{w}_view")) for w in "abc"]
        ash = views[0][0] if views[0] else tuple(a.type.shape)
        bsh = views[1][0] if views[1] else tuple(b.type.shape)
        a2 = ash if len(ash) >= 2 else (1,) + ash
        b2 = bsh if len(bsh) >= 2 else bsh + (1,)
        m, k = a2[-2], a2[-1]
        n = b2[-1]
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
        nb = int(np.prod(batch, dtype=np.int64)) if batch else 1
        ep = self.epilogue(op, bias, 1, 1.0, res)
        alpha = flit(op.get_attr("alpha", 1.0))
        if any(views):
            self._matmul_views(op, views, a2, b2, batch, ep, alpha)
            return
        if nb == 1 or (all(d == 1 for d in b2[:-2]) and tuple(a2[:-2]) == tuple(batch)):
            # one GEMM: A's batch folds into its rows (B is shared)
            self.emit("{ " + ep)
            bt = self.narrow(b, nb * m, n, k) if len(bsh) == 2 else None
            if bt is not None:
                self.emit(f"  tcc_cpu_gemm_narrow({nb * m}, {n}, {k}, {alpha}, {self.ptr(a)}, {k}, {bt}, "
                          f"{narrow_ldb(k)}, {self.ptr(y)}, {n}, &ep); }}")
                return
            bp = self.packed(b, nb * m) if len(bsh) == 2 else None
            if bp is not None:
                self.emit(f"  tcc_cpu_gemm_packed({nb * m}, {n}, {k}, {alpha}, {self.ptr(a)}, {k}, 1, {bp}, "
                          f"{self.ptr(y)}, {n}, &ep); }}")
                return
            self.emit(f"  tcc_cpu_gemm(0, 0, {nb * m}, {n}, {k}, {alpha}, {self.ptr(a)}, {k}, {self.ptr(b)}, {n}, "
                      f"{self.ptr(y)}, {n}, &ep); }}")
            return
        offs = [[], []]
        shapes = [(1,) * (len(batch) - len(a2) + 2) + tuple(a2[:-2]), (1,) * (len(batch) - len(b2) + 2) + tuple(b2[:-2])]
        for idx in np.ndindex(*batch):
            for which, (bshape, mat) in enumerate(zip(shapes, (m * k, k * n))):
                flat = 0
                for i, sz in zip(idx, bshape):
                    flat = flat * sz + (i if sz != 1 else 0)
                offs[which].append(flat * mat)
        offs.append([i * m * n for i in range(nb)])
        self.emit("{ " + ep)
        for nm, o in zip("ABC", offs):
            self.emit(f"  static const long off{nm}[{nb}] = {{{', '.join(map(str, o))}}};")
        self.emit(f"  tcc_cpu_gemm_batch({nb}, offA, offB, offC, 0, 0, {m}, {n}, {k}, {alpha}, {self.ptr(a)}, {k}, "
                  f"{self.ptr(b)}, {n}, {self.ptr(y)}, {n}, &ep); }}")

    def _matmul_views(self, op, views, a2, b2, batch, ep, alpha):
        """A batched matmul reading or writing transposed tensors in place
        (lower.fold_transposes): per operand its strides, the batch offsets
        from the batch dims' strides, lda/ldb and trans from the matrix's."""
        shapes = [a2, b2, tuple(batch) + (a2[-2], b2[-1])]
        args, offs = [], []
        for shape, view in zip(shapes, views):
            strides = view[1] if view else contiguous_strides(shape)
            rows, cols = strides[-2:]
            trans, ld = (0, rows) if cols == 1 else (1, cols)
            bshape, bstr = shape[:-2], strides[:-2]
            bshape, bstr = (1,) * (len(batch) - len(bshape)) + tuple(bshape), (0,) * (len(batch) - len(bstr)) + tuple(bstr)
            offs.append([sum((i if sz != 1 else 0) * st for i, sz, st in zip(idx, bshape, bstr))
                         for idx in np.ndindex(*batch)] if batch else [0])
            args.append((trans, ld))
        nb = len(offs[0])
        m, k, n = a2[-2], a2[-1], b2[-1]
        a, b, y = op.operands[0], op.operands[1], op.results[0]
        self.emit("{ " + ep)
        for nm, o in zip("ABC", offs):
            self.emit(f"  static const long off{nm}[{nb}] = {{{', '.join(map(str, o))}}};")
        self.emit(f"  tcc_cpu_gemm_batch({nb}, offA, offB, offC, {args[0][0]}, {args[1][0]}, {m}, {n}, {k}, {alpha}, "
                  f"{self.ptr(a)}, {args[0][1]}, {self.ptr(b)}, {args[1][1]}, {self.ptr(y)}, {args[2][1]}, &ep); }}")

    def op_pool(self, op):
        x, y = op.operands[0], op.results[0]
        n, c, h, w = x.type.shape
        oh, ow = y.type.shape[2:]
        kh, kw = op.get_attr("kernel")
        sh, sw = op.get_attr("strides")
        dh, dw = op.get_attr("dilations")
        pt, pl, pb, pr = op.get_attr("pads")
        fn = "tcc_cpu_maxpool2d" if op.name == "cpu.maxpool" else "tcc_cpu_avgpool2d"
        self.emit(f"{{ static const tcc_pool_params p = {{{n}, {c}, {h}, {w}, {oh}, {ow}, {kh}, {kw}, {sh}, {sw}, "
                  f"{dh}, {dw}, {pt}, {pl}, {pb}, {pr}, {op.get_attr('count_include_pad')}}};")
        self.emit(f"  {fn}(&p, {self.ptr(x)}, {self.ptr(y)}); }}")

    def op_global_avgpool(self, op):
        x = op.operands[0]
        shp, a = x.type.shape, op.get_attr("axis")
        a = 2 if a is None else int(a)
        self.emit(f"tcc_cpu_global_avgpool({int(np.prod(shp[:a]))}, {int(np.prod(shp[a:]))}, {self.ptr(x)}, "
                  f"{self.ptr(op.results[0])});")

    def op_softmax(self, op):
        self.emit(f"tcc_cpu_softmax({op.get_attr('outer')}, {op.get_attr('axis')}, {op.get_attr('inner')}, "
                  f"{self.ptr(op.operands[0])}, {self.ptr(op.results[0])}, {op.get_attr('log')});")

    def op_layernorm(self, op):
        bias = self.ptr(op.operands[2]) if len(op.operands) > 2 else "NULL"
        fn = "tcc_cpu_softmax_layernorm" if op.get_attr("softmax") else "tcc_cpu_layernorm"
        self.emit(f"{fn}({op.get_attr('rows')}, {op.get_attr('cols')}, {self.ptr(op.operands[0])}, "
                  f"{self.ptr(op.operands[1])}, {bias}, {flit(op.get_attr('epsilon'))}, {self.ptr(op.results[0])});")

    def op_rnn(self, op):
        g = op.get_attr
        rest = list(op.operands[4:])

        def opt(flag, cast="const float *"):
            return f"({cast}){self.ptr(rest.pop(0))}" if g(flag) else "NULL"
        rbh, p = opt("has_rbh"), opt("has_p")
        lens, h0, c0 = opt("has_lens", "const int32_t *"), opt("has_h0"), opt("has_c0")
        fields = ["kind", "nd", "reverse", "layout", "linear_before_reset", "input_forget", "has_clip"]
        vals = [str(g(f)) for f in fields] + [flit(g("clip"))] + [str(g(f)) for f in ("T", "NB", "In", "H")]
        gates = 4 if g("kind") == 0 else 3
        t, nb, hid = g("T"), g("NB"), g("H")
        self.scratch = max(self.scratch, g("nd") * (t * nb * gates * hid + nb * gates * hid + 4 * nb * hid))
        x, wt, rt, bias = (self.ptr(v) for v in op.operands[:4])
        self.emit(f"{{ static const tcc_rnn_params p = {{{', '.join(vals)}}};")
        self.emit(f"  tcc_cpu_rnn(&p, {x}, {wt}, {rt}, {bias}, {rbh}, {p}, {lens}, {h0}, {c0}, "
                  f"{self.ptr(op.results[0])}, scratch); }}")

    def op_transpose(self, op):
        x = op.operands[0]
        shp, perm = list(x.type.shape), list(op.get_attr("perm"))
        if not shp:
            shp, perm = [1], [0]
        self.emit(f"{{ static const long shp[] = {{{', '.join(map(str, shp))}}}, perm[] = "
                  f"{{{', '.join(map(str, perm))}}};")
        self.emit(f"  tcc_cpu_transpose({len(shp)}, shp, perm, {self.ptr(x)}, {self.ptr(op.results[0])}); }}")

    def op_strided(self, op):
        x, y = op.operands[0], op.results[0]
        shape, strides = _coalesce(list(y.type.shape), list(op.get_attr("strides")))
        if not shape:
            shape, strides = [1], [1]
        off = int(op.get_attr("offset"))
        self.emit(f"{{ static const long shp[] = {{{', '.join(map(str, shape))}}}, str[] = "
                  f"{{{', '.join(map(str, strides))}}};")
        self.emit(f"  tcc_cpu_strided({len(shape)}, shp, str, {self.ptr(x)} + {off}, {self.ptr(y)}); }}")

    def op_concat(self, op):
        y = op.results[0]
        shape, axis = list(y.type.shape), int(op.get_attr("axis"))
        rows = int(np.prod(shape[:axis], dtype=np.int64))
        inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
        off = 0
        for x in op.operands:
            cols = x.type.shape[axis] * inner
            if cols and rows:
                self.emit(f"tcc_cpu_copy_rows({rows}, {cols}, {self.ptr(x)}, {cols}, {self.ptr(y)} + {off}, "
                          f"{shape[axis] * inner});")
            off += cols

    def op_elementwise(self, op):
        fname = f"ew_{self.uid}_{self.n_helpers}"
        self.n_helpers += 1
        helper, call = elementwise.generate(fname, op, self.ptr)
        self.helpers.append(helper)
        self.emit(call)

    # -- the function -------------------------------------------------------------------
    def generate(self):
        self.plan()
        labels = []  # per kernel call, for the TCC_PROFILE build (tcc-run --profile)
        for op in self.block.ops:
            n = op.name
            if n in ("onnx.Constant", "onnx.NoValue", "cpu.reshape", "func.return"):
                continue
            start = len(self.lines)
            if n in ("cpu.maxpool", "cpu.avgpool"):
                self.op_pool(op)
            else:
                getattr(self, "op_" + n[4:])(op)
            work = call_work(op)
            if work is not None and work < SERIAL_WORK:
                self.lines.insert(start, f"    {{ const int inline_ = tcc_cpu_set_inline(1); /* {work} multiply-adds */")
                self.lines.append("    tcc_cpu_set_inline(inline_); }")
            self.lines.insert(start, f"    TCC_PROF_BEGIN({len(labels)})")
            self.emit(f"TCC_PROF_END({len(labels)})")
            labels.append(_prof_label(op))
        if self.copies:
            self.emit(f"TCC_PROF_BEGIN({len(labels)})")
            for idx, v in self.copies:
                self.emit(f"tcc_cpu_copy((float *)args[{idx}], {self.ptr(v)}, {_size(v.type)});")
            self.emit(f"TCC_PROF_END({len(labels)})")
            labels.append("copy to outputs")
        if self.scratch:
            self.workspace = (self.workspace + ALIGN - 1) // ALIGN * ALIGN
        scratch_off = self.workspace
        self.workspace += self.scratch * 4
        names = ", ".join('"' + lb.replace("\\", "").replace('"', "") + '"' for lb in labels)
        head = [f"/* partition @{self.name} */",
                f"TCC_PROF_TABLE({self.name}, {max(len(labels), 1)}, {len(labels)}, {names or '0'})",
                f"void tcc_part_{self.name}(void **args, void **W, char *ws) {{",
                f"    float *scratch = (float *)(ws + {scratch_off}); (void)scratch; (void)W;",
                f"    TCC_PROF_USE({self.name})"]
        return "\n".join(self.helpers + head + self.lines + ["}", ""])


def _prof_label(op):
    """A kernel call's row in `tcc-run --profile`: the op and its first
    operand's and result's shapes."""
    def shape(v):
        return "x".join(map(str, getattr(v.type, "shape", ()) or ())) or "scalar"
    ins = f" {shape(op.operands[0])}" if op.operands else ""
    outs = f" -> {shape(op.results[0])}" if op.results else ""
    return op.name[4:] + ins + outs


def _view(attr):
    """A matmul operand's (shape, strides) from its [shape..., strides...] view attribute, or None."""
    if attr is None:
        return None
    vals = [int(x) for x in attr]
    r = len(vals) // 2
    return tuple(vals[:r]), tuple(vals[r:])


def _coalesce(shape, strides):
    """(shape, strides) of a contiguous output read with `strides`, size-1
    dims dropped and each dim merged into the one before it where the source
    steps over it evenly (a Slice of whole rows is one long run)."""
    out_s, out_t = [], []
    for n, t in zip(shape, strides):
        if n == 1:
            continue
        if out_s and out_t[-1] == t * n:
            out_s[-1] *= n
            out_t[-1] = t
        else:
            out_s.append(n)
            out_t.append(t)
    return out_s, out_t


PRELUDE = """/* Generated by tcc's cpu accelerator: one C function per partition,
 * calling the kernel library (accelerators/cpu/kernels/tcc_cpu.h). */
#include <math.h>
#include <stddef.h>
#include "tcc_cpu.h"
#include "mathfun.h"

#ifdef TCC_PROFILE /* tcc-run --profile's build of this source (runtime.py): each kernel call timed */
#include <time.h>
static double tcc_prof_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
#define TCC_PROF_TABLE(f, size, n, ...) \
    double tcc_prof_seconds_##f[size]; const int tcc_prof_count_##f = n; const char *tcc_prof_names_##f[size] = {__VA_ARGS__};
#define TCC_PROF_USE(f) double *const prof_ = tcc_prof_seconds_##f;
#define TCC_PROF_BEGIN(k) { const double prof_t0_ = tcc_prof_now();
#define TCC_PROF_END(k) prof_[k] += tcc_prof_now() - prof_t0_; }
#else
#define TCC_PROF_TABLE(f, size, n, ...)
#define TCC_PROF_USE(f)
#define TCC_PROF_BEGIN(k)
#define TCC_PROF_END(k)
#endif

"""


def generate(funcs, isa=None):
    """Lowered partition functions -> (C source, weights list, {name: workspace bytes}),
    for the kernel library build `isa` (default: this CPU's)."""
    from .build import best_isa
    isa = isa or best_isa()
    weights = Weights()
    parts, ws = [PRELUDE], {}
    for i, f in enumerate(funcs):
        g = FunctionCodegen(f, weights, i, isa)
        parts.append(g.generate())
        ws[g.name] = max(g.workspace, ALIGN)
    return "\n".join(parts), weights.arrays, ws
