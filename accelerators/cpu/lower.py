"""graph-to-loop for the cpu accelerator: a partition function's onnx ops
become `cpu` dialect ops, each one call into the kernel library (or one
generated loop nest), with their epilogues fused:

    cpu.conv(x, w, [bias], [residual])   {strides, pads, dilations, group, act, act_a0, act_a1, has_bias, has_residual}
    cpu.conv_pw_dw(x, w_pw, [b_pw], w_dw, [bias], [residual])
                                         {pw_has_bias, pw_act, pw_act_a0, pw_act_a1, and the depthwise conv's}
    cpu.conv_dw_pw(x, w_dw, [b_dw], w_pw, [bias], [residual])
                                         {dw_has_bias, dw_act, dw_act_a0, dw_act_a1, the depthwise conv's
                                          strides, pads, dilations, group; the pointwise conv's}
    cpu.conv_q8(x, W, w_zero_point, scale, [bias])
                                         {strides, pads, dilations, sx, zx, xsigned, has_bias, act, ...}
                                         (QDQ's int8 1x1 conv, float in and out: the host runtime's tcc_conv_q8)
    cpu.conv_q8_dw(x, W, w_zero_point, scale, [b_q8], w_dw, [bias], [residual])
                                         {q8_has_bias, q8_sx, ..., and the depthwise conv's}
                                         (a cpu.conv_q8 read only by a depthwise conv: its output never stored)
    cpu.gemm(a, b, [c], [residual])      {trans_a, trans_b, alpha, beta, bias_mode, act, ...}
    cpu.matmul(a, b, [bias], [residual]) {alpha, bias_mode, act, ...}   (batched, broadcasting)
                                         {[a_view, b_view, c_view]: a transposed operand or result
                                          read or written in place, [shape..., strides...]}
    cpu.maxpool / cpu.avgpool(x)         {kernel, strides, pads, dilations, count_include_pad}
    cpu.global_avgpool(x) {[axis]}       (the mean over the axes from `axis`, default 2)
    cpu.softmax(x) {axis, log}           cpu.layernorm(x, scale, [bias]) {axis, epsilon, [softmax]}
    cpu.transpose(x) {perm}              cpu.reshape(x)   (a view: no copy unless it is an output)
    cpu.strided(x) {offset, strides}     (y[i...] = x[offset + sum i_d * strides_d]: Slice, Expand)
    cpu.concat(xs...) {axis}
    cpu.rnn(x, W^T, R^T, bias, [rb_h], [P], [sequence_lens], [initial_h], [initial_c])
                                         {kind, nd, reverse, layout, linear_before_reset, ..., has_*}  (LSTM, GRU)
    cpu.elementwise(inputs...) ({^bb0(args): onnx elementwise ops ... cpu.yield(r)})

Rewrites done here: BatchNormalization after a constant-weight Conv is
folded into its weights and bias (other BNs become Mul+Add); a channel
shuffle (Reshape, Transpose, Reshape) after a constant conv becomes a
permutation of that conv's output channels; Add of a
per-channel constant becomes the bias, Add of a same-shaped tensor the
residual, and Relu/Clip/Sigmoid/Tanh/LeakyRelu the activation of the
Conv/Gemm/MatMul before them; a MatMul's product or operand scaled by a
constant scalar takes the scale as its alpha; chains and trees of single-use elementwise
ops become one cpu.elementwise (one pass over memory); a LayerNormalization
of a single-use Softmax over the same rows takes it in (softmax = 1); a
pointwise conv read only by a depthwise one becomes one cpu.conv_pw_dw (the
expanded tensor of an inverted residual block never reaches memory), and
a cpu.conv_q8 read only by a depthwise conv one cpu.conv_q8_dw, and
a depthwise conv left alone and read only by a pointwise one, one
cpu.conv_dw_pw (in bands of rows: each thread reads back what it computed);
a Transpose between a MatMul and its operand or result (attention's heads)
becomes strides of the batched GEMM; the QuantizeLinear -> ConvInteger ->
Cast -> Mul that qdq-to-integer writes for a QDQ 1x1 conv (placed whole,
support.CONV_Q8), with its bias and pair, one cpu.conv_q8."""
from __future__ import annotations

import numpy as np

from tcc.dialects.ir import PURE, TERMINATOR, ISOLATED, Block, Dialect, OpDef, OperandDef, Operation, Region
from tcc.dialects.ir import attributes as A
from tcc.dialects.onnx.dialect import NAN_TO_MIN
from tcc.dialects.transforms.qdq import ROUND_SHIFT  # the pair's rounding add (qdq.py's rewrite)
from tcc.dialects.ir.types import NONE, TensorType, f32

from . import packing
from .support import (CONV_Q8, ELEMENTWISE, const_value, contiguous_strides, conv_q8_parts, opset,
                      reduce_mean_start, slice_view)

ACTS = {"onnx.Relu": "relu", "onnx.Sigmoid": "sigmoid", "onnx.Tanh": "tanh", "onnx.LeakyRelu": "leaky",
        "onnx.Clip": "clip"}


def dialect():
    def op(name, regions=0, traits=frozenset({PURE})):
        return OpDef(name, [OperandDef("inputs", "variadic")], [OperandDef("result")], traits=traits,
                     num_regions=regions)
    ops = [op(f"cpu.{n}") for n in ("conv", "conv_pw_dw", "conv_dw_pw", "conv_q8", "conv_q8_dw", "gemm", "matmul", "maxpool",
                                     "avgpool", "global_avgpool", "softmax", "layernorm", "transpose", "reshape",
                                     "rnn", "strided", "concat")]
    ops.append(op("cpu.elementwise", 1, frozenset({PURE, ISOLATED})))
    ops.append(OpDef("cpu.yield", [OperandDef("values", "variadic")], traits=frozenset({TERMINATOR, PURE})))
    return Dialect("cpu", ops, "the cpu accelerator's kernel calls")


def _attr_default(ctx, module, op, name, fallback=None):
    v = op.get_attr(name)
    if v is not None:
        return v
    try:
        d = ctx.lookup(op.name, module).attr_default(name)
    except Exception:
        d = None
    d = getattr(d, "value", d)
    return fallback if d is None else d


# Ops in one cpu.elementwise at most: its loop body is one basic block, and
# GCC's time on it grows faster than its length (a chain of unary ops, C
# compile: 1000 ops 0.66 s, 2000 1.6 s, 10000 14 s, 20000 ~60 s); a pass
# over memory per 256 ops costs nothing next to that many ops per element.
EW_MAX_OPS = 256

class Lowering:
    def __init__(self, func, module, ctx):
        self.func, self.module, self.ctx = func, module, ctx
        self.block = func.regions[0].blocks[0]

    def attr(self, op, name, fallback=None):
        return _attr_default(self.ctx, self.module, op, name, fallback)

    # -- constants -----------------------------------------------------------
    def new_const(self, before, array, base="cpu_w"):
        array = np.ascontiguousarray(array, dtype=np.float32)
        t = TensorType(tuple(array.shape), f32)
        if array.size <= 16:
            attr = A.DenseElementsAttr(array, t)
        else:
            name = self.module.resources.add(base, array)
            attr = A.DenseResourceAttr(name, t, self.module.resources)
        c = Operation("onnx.Constant", [], [t], {"value": attr}, loc=before.loc)
        self.block.insert_before(before, c)
        return c.results[0]

    # -- BatchNormalization ----------------------------------------------------
    def fold_batchnorm(self):
        for op in list(self.block.ops):
            if op.name != "onnx.BatchNormalization" or op.parent is None:
                continue
            x = op.operands[0]
            scale, bias, mean, var = (const_value(v) for v in op.operands[1:5])
            eps = float(self.attr(op, "epsilon", 1e-5))
            s = (scale / np.sqrt(var.astype(np.float64) + eps)).astype(np.float32)
            t = (bias - mean * s).astype(np.float32)
            conv = getattr(x, "op", None)
            if (conv is not None and conv.name == "onnx.Conv" and len(x.uses) == 1
                    and const_value(conv.operands[1]) is not None
                    and (len(conv.operands) < 3 or conv.operands[2].type is NONE
                         or const_value(conv.operands[2]) is not None)):
                w = const_value(conv.operands[1])
                b = const_value(conv.operands[2]) if len(conv.operands) > 2 and conv.operands[2].type is not NONE \
                    else np.zeros(w.shape[0], np.float32)
                nw = self.new_const(conv, w * s.reshape(-1, 1, 1, 1), "cpu_conv_bn_w")
                nb = self.new_const(conv, b * s + t, "cpu_conv_bn_b")
                ops = list(conv.operands[:2]) + [None]
                ops[1], ops[2] = nw, nb
                conv.set_operands(ops)
                op.results[0].replace_all_uses_with(x)
                op.erase()
                continue
            shape = (len(s),) + (1,) * (x.type.rank - 2)
            sv, tv = self.new_const(op, s.reshape(shape), "cpu_bn_scale"), self.new_const(op, t.reshape(shape),
                                                                                        "cpu_bn_shift")
            mul = Operation("onnx.Mul", [x, sv], [x.type], loc=op.loc)
            self.block.insert_before(op, mul)
            add = Operation("onnx.Add", [mul.results[0], tv], [x.type], loc=op.loc)
            self.block.insert_before(op, add)
            op.results[0].replace_all_uses_with(add.results[0])
            op.erase()

    # -- epilogues -------------------------------------------------------------
    def absorb(self, anchor, per_channel_dim, allow_bias=True, silu=False, qdq=False, start=None):
        """Follows anchor's single-use chain (from `start`, default its
        result) of Add (bias or residual) and one activation (with `silu`,
        also x * Sigmoid(x): two uses of x; with `qdq`, an 8-bit
        quantize-dequantize pair: the convolution kernels' act). Returns
        (chain ops, bias value, residual value, act attrs)."""
        out_t = anchor.results[0].type
        cur, chain, bias, residual, act = start or anchor.results[0], [], None, None, None
        while act is None:
            pair = self._silu(cur) if silu and len(cur.uses) == 2 else None
            if pair is not None:
                chain += pair
                cur = pair[1].results[0]
                act = {"act": A.StringAttr("silu"), "act_a0": A.FloatAttr(0.0), "act_a1": A.FloatAttr(0.0)}
                break
            if len(cur.uses) != 1:
                break
            q = self._qdq8(cur) if qdq else None
            if q is not None:
                chain += q[0]
                act = q[1]
                break
            user, idx = cur.uses[0]
            if user.name == "onnx.Add" and len(user.operands) == 2 and user.results[0].type == out_t:
                other = user.operands[1 - idx]
                if residual is None and other.type == out_t:
                    residual = other
                elif allow_bias and bias is None and self._is_channel_bias(other, out_t, per_channel_dim):
                    bias = other
                else:
                    break
            elif user.name in ACTS and user.results[0].type == out_t:
                act = self._act(user)
                if act is None:
                    break
            else:
                break
            chain.append(user)
            cur = user.results[0]
        return chain, bias, residual, act

    @staticmethod
    def _scalar_factor(op):
        """(f, x) when `op` is x * c, c * x or x / c (f = 1 / c) with c a
        one-element f32 constant and the result of x's type, else None: a
        MatMul's alpha (attention's 1/sqrt(d), on the scores or on q and k)."""
        if op.name not in ("onnx.Mul", "onnx.Div") or len(op.operands) != 2:
            return None
        for i in ((0, 1) if op.name == "onnx.Mul" else (0,)):
            x, c = op.operands[i], const_value(op.operands[1 - i])
            if c is None or c.size != 1 or c.dtype != np.float32 or x.type != op.results[0].type:
                continue
            c = float(c.reshape(-1)[0])
            if op.name == "onnx.Div":
                if c == 0.0:
                    return None
                c = 1.0 / c
            return c, x
        return None

    def _qdq8(self, v):
        """([Div, Add, Clip, Sub, Mul], act attrs) when v's single-use chain
        is qdq.py's form of an 8-bit quantize-dequantize pair with one scale
        s and one zero point z: (Clip(v / s + M, M + qmin - z, M + qmax - z)
        [NaN to the minimum] - M) * s (kernels' TCC_ACT_QDQ8, a0 = s, a1 =
        M + qmin - z), else None. The quantized MobileNetV2 that
        quantize_static's QDQ format writes has one after every convolution,
        each a pass over memory of its own: 4.48 -> 3.30 ms at 1 thread
        with its convolutions float, onnxruntime 1.52-1.65 (AMD EPYC family
        26 model 2)."""
        ops, cur = [], v
        for name in ("onnx.Div", "onnx.Add", "onnx.Clip", "onnx.Sub", "onnx.Mul"):
            if len(cur.uses) != 1:
                return None
            user, idx = cur.uses[0]
            if user.name != name or idx != 0 or user.results[0].type != v.type:
                return None
            ops.append(user)
            cur = user.results[0]
        div, add, clip, sub, mul = ops

        def scalar(op, i):
            c = const_value(op.operands[i]) if len(op.operands) > i and op.operands[i].type is not NONE else None
            return None if c is None or c.size != 1 or c.dtype != np.float32 else np.float32(c.reshape(-1)[0])
        s, m, lo, hi, m2, s2 = (scalar(div, 1), scalar(add, 1), scalar(clip, 1), scalar(clip, 2), scalar(sub, 1),
                                scalar(mul, 1))
        if None in (s, m, lo, hi, m2, s2) or len(div.operands) != 2 or len(mul.operands) != 2:
            return None
        if not clip.get_attr(NAN_TO_MIN) or m != ROUND_SHIFT or m2 != ROUND_SHIFT or hi - lo != 255:
            return None
        if s.tobytes() != s2.tobytes() or not (np.isfinite(s) and s > 0) or lo != np.floor(lo) or \
                not ROUND_SHIFT - 255 <= lo <= ROUND_SHIFT + 255:
            return None
        return ops, {"act": A.StringAttr("qdq8"), "act_a0": A.FloatAttr(float(s)), "act_a1": A.FloatAttr(float(lo))}

    @staticmethod
    def _silu(v):
        """[Sigmoid, Mul] when v's two uses are s = Sigmoid(v) and Mul(v, s)
        (an exporter's SiLU: efficientnet's after every convolution), else None."""
        sig = [u for u, _ in v.uses if u.name == "onnx.Sigmoid"]
        mul = [u for u, _ in v.uses if u.name == "onnx.Mul"]
        if len(sig) != 1 or len(mul) != 1 or len(sig[0].results[0].uses) != 1:
            return None
        s, m = sig[0], mul[0]
        if s.results[0].uses[0][0] is not m or {id(o) for o in m.operands} != {id(v), id(s.results[0])}:
            return None
        if m.results[0].type != v.type:
            return None
        return [s, m]

    @staticmethod
    def _is_channel_bias(v, out_t, dim):
        c = const_value(v)
        if c is None or c.ndim > out_t.rank:
            return False
        shape = (1,) * (out_t.rank - c.ndim) + tuple(c.shape)
        d = dim % out_t.rank
        return all(s == 1 for i, s in enumerate(shape) if i != d) and shape[d] == out_t.shape[d]

    def _act(self, op):
        kind = ACTS[op.name]
        a0, a1 = 0.0, 0.0
        if kind == "leaky":
            a0 = float(self.attr(op, "alpha", 0.01))
        elif kind == "clip":
            if op.get_attr(NAN_TO_MIN):  # cv_act_v's clip keeps NaN
                return None
            lo = const_value(op.operands[1]) if len(op.operands) > 1 and op.operands[1].type is not NONE else None
            hi = const_value(op.operands[2]) if len(op.operands) > 2 and op.operands[2].type is not NONE else None
            if (len(op.operands) > 1 and op.operands[1].type is not NONE and lo is None) or \
                    (len(op.operands) > 2 and op.operands[2].type is not NONE and hi is None):
                return None
            a0 = float(lo.reshape(-1)[0]) if lo is not None else -3.4028234663852886e38
            a1 = float(hi.reshape(-1)[0]) if hi is not None else 3.4028234663852886e38
        return {"act": A.StringAttr(kind), "act_a0": A.FloatAttr(a0), "act_a1": A.FloatAttr(a1)}

    def _replace(self, anchor, chain, name, operands, attrs):
        last = chain[-1] if chain else anchor
        new = Operation(name, operands, [last.results[0].type], attrs, loc=last.loc)
        self.block.insert_before(last, new)
        last.results[0].replace_all_uses_with(new.results[0])
        for o in reversed(chain):
            o.erase()
        if anchor.parent is not None:
            anchor.erase()
        return new

    @staticmethod
    def _present(op, i):
        return len(op.operands) > i and op.operands[i].type is not NONE

    # -- int8 convolutions ---------------------------------------------------------
    def fuse_conv_q8(self):
        """Each CONV_Q8 chain (placed whole: support.conv_q8_parts), with the
        per-channel bias Add and the quantize-dequantize pair after it where
        they follow, -> one cpu.conv_q8(x, W, W's zero point, scale [, bias])
        {strides, pads, dilations, sx, zx, xsigned, has_bias, act}: the
        host runtime's tcc_conv_q8."""
        for q in list(self.block.ops):
            if q.parent is None or q.name != "onnx.QuantizeLinear":
                continue
            chain = [q]
            while len(chain) < len(CONV_Q8) and len(chain[-1].results[0].uses) == 1 and \
                    chain[-1].results[0].uses[0][0].name == CONV_Q8[len(chain)]:
                chain.append(chain[-1].results[0].uses[0][0])
            parts = conv_q8_parts(chain) if len(chain) == len(CONV_Q8) else None
            if parts is None:
                raise ValueError(f"cpu: {q.name} at {q.loc} is not the start of an int8 convolution's chain "
                                 f"({' -> '.join(CONV_Q8)})")
            ci, mul = chain[1], chain[3]
            out_t = mul.results[0].type
            cur, rest, bias = mul.results[0], [], None
            if len(cur.uses) == 1:
                user, idx = cur.uses[0]
                if user.name == "onnx.Add" and len(user.operands) == 2 and user.results[0].type == out_t and \
                        self._is_channel_bias(user.operands[1 - idx], out_t, 1):
                    bias = const_value(user.operands[1 - idx]).reshape(-1)
                    rest.append(user)
                    cur = user.results[0]
            pair = self._qdq8(cur)
            if pair is not None:
                rest += pair[0]
            m = parts["w"].shape[0]
            operands = [parts["x"], ci.operands[1], self.new_const(q, parts["wzp"].astype(np.float32)),
                        self.new_const(q, parts["scale"])]
            if bias is not None:
                operands.append(self.new_const(q, np.broadcast_to(bias, (m,))))
            attrs = {"strides": A.DenseArrayAttr(list(self.attr(ci, "strides", None) or [1, 1])),
                     "pads": A.DenseArrayAttr(list(self.attr(ci, "pads", None) or [0, 0, 0, 0])),
                     "dilations": A.DenseArrayAttr(list(self.attr(ci, "dilations", None) or [1, 1])),
                     "sx": A.FloatAttr(float(parts["sx"])), "zx": A.IntegerAttr(parts["zx"]),
                     "xsigned": A.IntegerAttr(parts["xsigned"]), "has_bias": A.IntegerAttr(int(bias is not None)),
                     **(pair[1] if pair is not None else {})}
            self._replace(q, chain[1:] + rest, "cpu.conv_q8", operands, attrs)

    # -- channel shuffles -------------------------------------------------------------
    SHUFFLE_MAX_GROUP = 4  # a grouped 1x1 conv made dense to take the shuffle: g times its work (measured at g = 3)

    def fold_channel_shuffles(self):
        """A channel shuffle (ShuffleNet's Reshape to (N, g, C/g, H, W),
        Transpose (0, 2, 1, 3, 4), Reshape back to (N, C, H, W)) of a constant
        1x1 or ungrouped conv's output, through per-element ops only, becomes a
        permutation of that conv's output channels (weights and bias): no
        transpose pass, and the conv then pairs with the depthwise conv after
        the shuffle (cpu.conv_pw_dw). A grouped 1x1 conv is made dense first
        (block-diagonal weights). The corpus shufflenet (Zen 2, 1 and 2 threads):
        0.86-0.90x onnxruntime's time with this, 1.10-1.13x without; every
        grouped 1x1 conv made dense, shuffles or not, was 1.2x."""
        for t in list(self.block.ops):
            if t.name != "onnx.Transpose" or t.parent is None:
                continue
            if list(self.attr(t, "perm", None) or []) != [0, 2, 1, 3, 4]:
                continue
            r1, users = getattr(t.operands[0], "op", None), t.results[0].users
            r2 = users[0] if len(users) == 1 else None
            if (r1 is None or r1.name != "onnx.Reshape" or len(r1.results[0].uses) != 1 or r2 is None
                    or r2.name != "onnx.Reshape" or r1.operands[0].type.rank != 4):
                continue
            v = r1.operands[0]
            n, c, h, w = v.type.shape
            n5, a, b, h5, w5 = r1.results[0].type.shape
            if (n5, a * b, h5, w5) != (n, c, h, w) or tuple(r2.results[0].type.shape) != (n, c, h, w):
                continue
            conv = self._shuffle_source(v)
            if conv is None:
                continue
            wt, g = const_value(conv.operands[1]), int(self.attr(conv, "group", 1))
            if g > 1:
                wt = packing.dense_groups(wt, g)
                conv.set_attr("group", A.IntegerAttr(1))
            # the shuffle's output channel o is its input channel (o % a) * b + o // a
            perm = np.array([(o % a) * b + o // a for o in range(c)])
            ops = list(conv.operands)
            ops[1] = self.new_const(conv, wt[perm], "cpu_conv_shuffled_w")
            if self._present(conv, 2):
                ops[2] = self.new_const(conv, const_value(conv.operands[2])[perm], "cpu_conv_shuffled_b")
            conv.set_operands(ops)
            r2.results[0].replace_all_uses_with(v)
            for o in (r2, t, r1):
                o.erase()

    def _shuffle_source(self, v):
        """The conv whose output v is, through single-use per-element ops (any
        other operand a scalar), if its output channels may be permuted: constant
        weights and bias, ungrouped or a 1x1 with at most SHUFFLE_MAX_GROUP groups."""
        while True:
            op = getattr(v, "op", None)
            if op is None or len(v.uses) != 1:
                return None
            if op.name == "onnx.Conv":
                break
            if op.name not in ELEMENTWISE or any(o.type is not NONE and int(np.prod(o.type.shape)) != 1
                                                 for o in op.operands[1:]):
                return None
            v = op.operands[0]
        g = int(self.attr(op, "group", 1))
        wt = const_value(op.operands[1])
        if wt is None or (self._present(op, 2) and const_value(op.operands[2]) is None):
            return None
        if g > 1 and (wt.shape[2:] != (1, 1) or g > self.SHUFFLE_MAX_GROUP):
            return None
        return op

    def lower_conv(self, op):
        x, w = op.operands[0], op.operands[1]
        has_bias = self._present(op, 2)
        chain, bias, res, act = self.absorb(op, 1, allow_bias=not has_bias, silu=True, qdq=True)
        kh, kw = w.type.shape[2], w.type.shape[3]
        strides = list(self.attr(op, "strides", None) or [1, 1])
        dil = list(self.attr(op, "dilations", None) or [1, 1])
        pads = list(self.attr(op, "pads", None) or [0, 0, 0, 0])
        auto = self.attr(op, "auto_pad", "NOTSET")
        h, wd = x.type.shape[2], x.type.shape[3]
        oh, ow = op.results[0].type.shape[2], op.results[0].type.shape[3]
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            pads = [0, 0, 0, 0]
            for i, (n, o, k, s, d) in enumerate(((h, oh, kh, strides[0], dil[0]), (wd, ow, kw, strides[1], dil[1]))):
                total = max(0, (o - 1) * s + (k - 1) * d + 1 - n)
                lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
                pads[i], pads[i + 2] = lo, total - lo
        elif auto == "VALID":
            pads = [0, 0, 0, 0]
        operands = [x, w]
        if has_bias:
            operands.append(op.operands[2])
        elif bias is not None:
            operands.append(bias)
        if res is not None:
            operands.append(res)
        attrs = {"strides": A.DenseArrayAttr(strides), "pads": A.DenseArrayAttr(pads),
                 "dilations": A.DenseArrayAttr(dil), "group": A.IntegerAttr(int(self.attr(op, "group", 1))),
                 "has_bias": A.IntegerAttr(int(has_bias or bias is not None)),
                 "has_residual": A.IntegerAttr(int(res is not None))}
        attrs.update(act or {})
        self._replace(op, chain, "cpu.conv", operands, attrs)

    # -- separable convolutions ---------------------------------------------------------
    PW_DW_MAX_PLANE = 32768  # kernels/conv_pw.c buffers 8 expanded planes per thread: at most 1 MB, in L2
    EPILOGUE_ATTRS = ("has_bias", "act", "act_a0", "act_a1")

    def _conv_pairs(self):
        """(first, second) cpu.conv pairs where second alone reads first's output."""
        for second in list(self.block.ops):
            if second.name != "cpu.conv" or second.parent is None:
                continue
            x = second.operands[0]
            first = getattr(x, "op", None)
            if first is not None and first.name == "cpu.conv" and len(x.uses) == 1:
                yield first, second

    def fuse_pw_dw(self):
        for pw, dw in self._conv_pairs():
            if not (self._fusable_pw(pw) and self._fusable_dw(dw)):
                continue
            attrs = dict(dw.attributes)
            attrs.update({"pw_" + k: v for k, v in pw.attributes.items() if k in self.EPILOGUE_ATTRS})
            self._replace_simple(dw, "cpu.conv_pw_dw", list(pw.operands) + list(dw.operands[1:]), attrs)
            pw.erase()

    def fuse_dw_pw(self):
        for dw, pw in self._conv_pairs():
            if (dw.get_attr("has_residual") or not self._fusable_dw(dw) or not self._dw_banded(dw)
                    or not self._fusable_pw(pw, residual=True)):
                continue
            attrs = {k: v for k, v in dw.attributes.items() if k in ("strides", "pads", "dilations", "group")}
            attrs.update({"dw_" + k: v for k, v in dw.attributes.items() if k in self.EPILOGUE_ATTRS})
            attrs.update({k: v for k, v in pw.attributes.items() if k in self.EPILOGUE_ATTRS + ("has_residual",)})
            self._replace_simple(pw, "cpu.conv_dw_pw", list(dw.operands) + list(pw.operands[1:]), attrs)
            dw.erase()

    def fuse_q8_dw(self):
        """A cpu.conv_q8 (int8 1x1, stride 1, no pads: support.conv_q8_parts) read only by a depthwise cpu.conv
        -> one cpu.conv_q8_dw: the expanded tensor of a quantized inverted
        residual block never reaches memory, as with cpu.conv_pw_dw."""
        for dw in list(self.block.ops):
            if dw.name != "cpu.conv" or dw.parent is None:
                continue
            x = dw.operands[0]
            q = getattr(x, "op", None)
            if q is None or q.name != "cpu.conv_q8" or len(x.uses) != 1 or not self._fusable_dw(dw) or \
                    dw.get_attr("act") in ("sigmoid", "tanh"):  # conv_pwdw8.c's tiles: cv_vec_act's only
                continue
            xin = q.operands[0].type.shape
            if xin[2] * xin[3] > self.PW_DW_MAX_PLANE:
                continue
            attrs = dict(dw.attributes)
            attrs.update({"q8_" + k: v for k, v in q.attributes.items()})
            self._replace_simple(dw, "cpu.conv_q8_dw", list(q.operands) + list(dw.operands[1:]), attrs)
            q.erase()

    @staticmethod
    def _const(v):
        p = getattr(v, "op", None)
        return p is not None and p.name == "onnx.Constant"

    def _fusable_pw(self, op, residual=False):
        x, w = op.operands[0], op.operands[1]
        return (x.type.rank == 4 and w.type.shape[2:] == (1, 1) and self._const(w) and op.get_attr("group") == 1
                and list(op.get_attr("strides")) == [1, 1] and not any(op.get_attr("pads"))
                and (residual or not op.get_attr("has_residual"))
                and x.type.shape[2] * x.type.shape[3] <= self.PW_DW_MAX_PLANE)

    def _fusable_dw(self, op):
        x, w = op.operands[0], op.operands[1]
        c, m, kh, kw = x.type.shape[1], w.type.shape[0], w.type.shape[2], w.type.shape[3]
        sh, sw = op.get_attr("strides")
        return (op.get_attr("group") == c == m > 1 and w.type.shape[1] == 1 and self._const(w)
                and kh * kw <= 64 and sh * sw <= 64)

    @staticmethod
    def _dw_banded(op):
        """Whether the depthwise -> pointwise fusion pays for this depthwise
        convolution: the shapes that the AVX-512 build reads in place
        (stride 1 same-size, stride-2 three-column rows), which every other
        build packs a band's input rows for (conv_dw.c). AMD EPYC Zen 4,
        AVX2 library, MobileNetV2's first block (32 channels at 112x112 ->
        16), alternating processes: 1 thread 0.367-0.382 -> 0.361-0.364 ms,
        2 threads 0.198-0.210 -> 0.176-0.181, and 0.54-0.58 -> 0.23 in the
        machine's slow 2-thread phase (apart, the pointwise step reads half
        its input from the other core's cache)."""
        x, w, y = op.operands[0], op.operands[1], op.results[0]
        kh, kw = w.type.shape[2:]
        strides, dw = tuple(op.get_attr("strides")), op.get_attr("dilations")[1]
        same = strides == (1, 1) and y.type.shape[2:] == x.type.shape[2:] and kh * kw <= 64
        return same or (strides[1] == 2 and kw == 3 and dw == 1 and kh <= 8)

    def lower_gemm(self, op):
        has_c = self._present(op, 2)
        chain, bias, res, act = self.absorb(op, -1, allow_bias=not has_c)
        operands = list(op.operands[:2])
        attrs = {"trans_a": A.IntegerAttr(int(self.attr(op, "transA", 0))),
                 "trans_b": A.IntegerAttr(int(self.attr(op, "transB", 0))),
                 "alpha": A.FloatAttr(float(self.attr(op, "alpha", 1.0))),
                 "beta": A.FloatAttr(float(self.attr(op, "beta", 1.0))),
                 "has_residual": A.IntegerAttr(int(res is not None))}
        m, n = op.results[0].type.shape
        if has_c or bias is not None:
            c = op.operands[2] if has_c else bias
            if not has_c:
                attrs["beta"] = A.FloatAttr(1.0)
            operands.append(c)
            attrs["bias_mode"] = A.IntegerAttr(_bias_mode(c.type.shape, m, n))
        else:
            attrs["bias_mode"] = A.IntegerAttr(0)
        if res is not None:
            operands.append(res)
        attrs.update(act or {})
        self._replace(op, chain, "cpu.gemm", operands, attrs)

    def lower_matmul(self, op):
        alpha, operands, scales = 1.0, list(op.operands[:2]), []
        for i, v in enumerate(operands):
            p = getattr(v, "op", None)
            f = self._scalar_factor(p) if p is not None and len(v.uses) == 1 and operands[1 - i] is not v else None
            if f is not None:
                alpha *= f[0]
                operands[i] = f[1]
                scales.append(p)
        head = []
        y = op.results[0]
        if len(y.uses) == 1:
            user = y.uses[0][0]
            f = self._scalar_factor(user)
            if f is not None and f[1] is y:
                alpha *= f[0]
                head = [user]
        chain, bias, res, act = self.absorb(op, -1, start=head[0].results[0] if head else None)
        chain = head + chain
        attrs = {"bias_mode": A.IntegerAttr(1 if bias is not None else 0),
                 "has_residual": A.IntegerAttr(int(res is not None)), "alpha": A.FloatAttr(alpha)}
        if bias is not None:
            operands.append(bias)
        if res is not None:
            operands.append(res)
        attrs.update(act or {})
        self._replace(op, chain, "cpu.matmul", operands, attrs)
        for p in scales:  # read only by the matmul
            p.erase()

    def fold_transposes(self):
        """A cpu.transpose read only by a cpu.matmul is a strided view of its
        input when the view keeps unit stride along a matrix's rows or
        columns (attention's (B, S, H, D) -> (B, H, S, D) and (B, H, D, S)):
        the batched GEMM reads the input in place. A cpu.matmul with no
        epilogue read only by a cpu.transpose keeping unit stride along its
        rows writes the transposed tensor directly. Measured on the bench
        BERT's attention (1x128x4x64, Intel Xeon): four transposes of
        4-7 us each per layer gone."""
        for op in list(self.block.ops):
            if op.name != "cpu.matmul" or op.parent is None:
                continue
            for i, name in ((0, "a_view"), (1, "b_view")):
                v = op.operands[i]
                t = getattr(v, "op", None)
                if t is None or t.name != "cpu.transpose" or len(v.uses) != 1 or v.type.rank < 2 \
                        or op.operands[1 - i] is v:
                    continue
                x = t.operands[0]
                cs = contiguous_strides(x.type.shape)
                strides = [cs[d] for d in t.get_attr("perm")]
                if 1 not in strides[-2:]:
                    continue
                op.set_operand(i, x)
                op.attributes[name] = A.DenseArrayAttr(list(v.type.shape) + strides)
                t.erase()
            y = op.results[0]
            if len(y.uses) != 1 or y.type.rank < 2 or op.get_attr("bias_mode") or op.get_attr("has_residual") \
                    or op.get_attr("act") not in (None, "none"):
                continue
            t = next(iter(y.uses))[0]
            if t.name != "cpu.transpose":
                continue
            z = t.results[0]
            perm = list(t.get_attr("perm"))
            cs = contiguous_strides(z.type.shape)
            strides = [0] * len(perm)
            for d, e in enumerate(perm):
                strides[e] = cs[d]
            if strides[-1] != 1:
                continue
            attrs = dict(op.attributes)
            attrs["c_view"] = A.DenseArrayAttr(list(y.type.shape) + strides)
            new = Operation("cpu.matmul", list(op.operands), [z.type], attrs, loc=op.loc)
            self.block.insert_before(op, new)
            z.replace_all_uses_with(new.results[0])
            t.erase()
            op.erase()

    def lower_pool(self, op):
        x = op.operands[0]
        k = list(self.attr(op, "kernel_shape"))
        strides = list(self.attr(op, "strides", None) or [1, 1])
        dil = list(self.attr(op, "dilations", None) or [1, 1])
        pads = list(self.attr(op, "pads", None) or [0, 0, 0, 0])
        auto = self.attr(op, "auto_pad", "NOTSET")
        oh, ow = op.results[0].type.shape[2:]
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            pads = [0, 0, 0, 0]
            for i, (n, o) in enumerate(((x.type.shape[2], oh), (x.type.shape[3], ow))):
                total = max(0, (o - 1) * strides[i] + (k[i] - 1) * dil[i] + 1 - n)
                lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
                pads[i], pads[i + 2] = lo, total - lo
        elif auto == "VALID":
            pads = [0, 0, 0, 0]
        name = "cpu.maxpool" if op.name == "onnx.MaxPool" else "cpu.avgpool"
        attrs = {"kernel": A.DenseArrayAttr(k), "strides": A.DenseArrayAttr(strides), "pads": A.DenseArrayAttr(pads),
                 "dilations": A.DenseArrayAttr(dil),
                 "count_include_pad": A.IntegerAttr(int(self.attr(op, "count_include_pad", 0) or 0))}
        self._replace_simple(op, name, [x], attrs)

    def _replace_simple(self, op, name, operands, attrs=None):
        new = Operation(name, operands, [op.results[0].type], attrs or {}, loc=op.loc)
        self.block.insert_before(op, new)
        op.results[0].replace_all_uses_with(new.results[0])
        op.erase()

    def _strided(self, op, offset, strides):
        self._replace_simple(op, "cpu.strided", [op.operands[0]],
                             {"offset": A.IntegerAttr(int(offset)), "strides": A.DenseArrayAttr([int(s) for s in strides])})

    def lower_softmax(self, op):
        x = op.operands[0]
        rank = x.type.rank
        old = opset(self.module) < 13
        axis = int(self.attr(op, "axis", 1 if old else -1))
        axis = axis + rank if axis < 0 else axis
        shape = x.type.shape
        outer = int(np.prod(shape[:axis], dtype=np.int64))
        if old:  # coerced to 2-D: softmax over everything from axis on
            a, inner = int(np.prod(shape[axis:], dtype=np.int64)), 1
        else:
            a, inner = shape[axis], int(np.prod(shape[axis + 1:], dtype=np.int64))
        attrs = {"outer": A.IntegerAttr(outer), "axis": A.IntegerAttr(a), "inner": A.IntegerAttr(inner),
                 "log": A.IntegerAttr(int(op.name == "onnx.LogSoftmax"))}
        self._replace_simple(op, "cpu.softmax", [x], attrs)

    def lower_layernorm(self, op):
        x = op.operands[0]
        axis = int(self.attr(op, "axis", -1))
        axis = axis + x.type.rank if axis < 0 else axis
        cols = int(np.prod(x.type.shape[axis:], dtype=np.int64))
        attrs = {"rows": A.IntegerAttr(x.type.num_elements // max(cols, 1)), "cols": A.IntegerAttr(cols),
                 "epsilon": A.FloatAttr(float(self.attr(op, "epsilon", 1e-5)))}
        src = getattr(x, "op", None)
        if (src is not None and src.name == "cpu.softmax" and len(x.uses) == 1 and src.get_attr("inner") == 1
                and not src.get_attr("log") and src.get_attr("axis") == cols):
            # a Softmax over the same rows: one pass (the probabilities never reach memory)
            x = src.operands[0]
            attrs["softmax"] = A.IntegerAttr(1)
        operands = [x, op.operands[1]] + ([op.operands[2]] if self._present(op, 2) else [])
        self._replace_simple(op, "cpu.layernorm", operands, attrs)
        if "softmax" in attrs:
            src.erase()

    # -- LSTM / GRU ------------------------------------------------------------------
    def lower_rnn(self, op):
        """cpu.rnn(x, W^T, R^T, bias, [rb_h], [P], [sequence_lens], [initial_h], [initial_c]):
        the weights transposed and the biases folded here (kernels/rnn.c)."""
        lstm = op.name == "onnx.LSTM"
        ops = list(op.operands) + [None] * (8 - len(op.operands))

        def present(i):
            return ops[i] is not None and ops[i].type is not NONE
        x = ops[0]
        w, r = (np.asarray(const_value(v), np.float32) for v in ops[1:3])
        nd, gh, hid = r.shape
        direction = self.attr(op, "direction", "forward")
        direction = direction.decode() if isinstance(direction, bytes) else direction
        lbr = not lstm and bool(self.attr(op, "linear_before_reset", 0))
        bias = np.zeros((nd, gh), np.float64)
        rbh = None
        if present(3):
            bb = np.asarray(const_value(ops[3]), np.float64)
            rb = bb[:, gh:].copy()
            if lbr:  # Rb_h sits inside r * (H R_h^T + Rb_h): not foldable
                rbh = rb[:, 2 * hid:].astype(np.float32)
                rb[:, 2 * hid:] = 0.0
            bias = bb[:, :gh] + rb
        elif lbr:
            rbh = None
        operands = [x, self.new_const(op, w.transpose(0, 2, 1), "cpu_rnn_w"),
                    self.new_const(op, r.transpose(0, 2, 1), "cpu_rnn_r"), self.new_const(op, bias, "cpu_rnn_b")]
        if rbh is not None:
            operands.append(self.new_const(op, rbh, "cpu_rnn_b"))
        has_p = lstm and present(7)
        if has_p:
            operands.append(self.new_const(op, const_value(ops[7]), "cpu_rnn_p"))
        for i in (4, 5) + ((6,) if lstm else ()):
            if present(i):
                operands.append(ops[i])
        layout = int(self.attr(op, "layout", 0) or 0)
        t, nb, i_ = x.type.shape if layout == 0 else (x.type.shape[1], x.type.shape[0], x.type.shape[2])
        clip = self.attr(op, "clip", None)
        attrs = {"kind": A.IntegerAttr(0 if lstm else 1), "nd": A.IntegerAttr(nd),
                 "reverse": A.IntegerAttr(int(direction == "reverse")), "layout": A.IntegerAttr(layout),
                 "linear_before_reset": A.IntegerAttr(int(lbr)),
                 "input_forget": A.IntegerAttr(int(lstm and bool(self.attr(op, "input_forget", 0)))),
                 "has_clip": A.IntegerAttr(int(clip is not None)), "clip": A.FloatAttr(float(clip or 0.0)),
                 "T": A.IntegerAttr(t), "NB": A.IntegerAttr(nb), "In": A.IntegerAttr(i_), "H": A.IntegerAttr(hid),
                 "has_rbh": A.IntegerAttr(int(rbh is not None)), "has_p": A.IntegerAttr(int(has_p)),
                 "has_lens": A.IntegerAttr(int(present(4))), "has_h0": A.IntegerAttr(int(present(5))),
                 "has_c0": A.IntegerAttr(int(lstm and present(6)))}
        self._replace_simple(op, "cpu.rnn", operands, attrs)

    # -- elementwise fusion ---------------------------------------------------------
    def fuse_elementwise(self):
        group = {}  # op -> list of ops (its fusion tree, the op last)
        for op in list(self.block.ops):
            if op.name not in ELEMENTWISE:
                continue
            members = []
            for v in op.operands:
                p = getattr(v, "op", None)
                if p is not None and p in group and len(v.uses) == 1 and p.results[0].uses[0][0] is op \
                        and len(members) + len(group[p]) < EW_MAX_OPS:
                    members.extend(group.pop(p))
            members.append(op)
            group[op] = members
        for root, members in group.items():
            self._outline(root, members)

    def _outline(self, root, members):
        inside = set(members)
        order = [o for o in self.block.ops if o in inside]
        inputs = []
        for o in order:
            for v in o.operands:
                if v.type is NONE:
                    continue
                p = getattr(v, "op", None)
                if p not in inside and v not in inputs:
                    inputs.append(v)
        body = Block([v.type for v in inputs])
        mapping = dict(zip(inputs, body.args))
        for o in order:
            ops = []
            for v in o.operands:
                if v.type is NONE:
                    nv = Operation("onnx.NoValue", [], [NONE])
                    body.append(nv)
                    ops.append(nv.results[0])
                else:
                    ops.append(mapping[v])
            # tcc's placement marks stay behind; qdq's NaN rule for a Clip goes along
            attrs = {k: a for k, a in o.attributes.items() if not k.startswith("tcc.") or k == NAN_TO_MIN}
            for k in ("alpha", "beta", "gamma", "approximate"):
                if k not in attrs:
                    d = _attr_default(self.ctx, self.module, o, k)
                    if d is not None:
                        attrs[k] = A.FloatAttr(float(d)) if not isinstance(d, str) else A.StringAttr(d)
            c = Operation(o.name, ops, [r.type for r in o.results], attrs, loc=o.loc)
            body.append(c)
            mapping[o.results[0]] = c.results[0]
        body.append(Operation("cpu.yield", [mapping[root.results[0]]]))
        new = Operation("cpu.elementwise", inputs, [root.results[0].type], {}, [Region([body])], root.loc)
        self.block.insert_before(root, new)
        root.results[0].replace_all_uses_with(new.results[0])
        for o in reversed(order):
            o.erase()

    # -- the whole function ------------------------------------------------------------
    def run(self):
        self.fold_batchnorm()
        self.fold_channel_shuffles()
        self.fuse_conv_q8()
        for op in list(self.block.ops):
            if op.parent is None:
                continue
            n = op.name
            if n == "onnx.Conv":
                self.lower_conv(op)
            elif n == "onnx.Gemm":
                self.lower_gemm(op)
            elif n == "onnx.MatMul":
                self.lower_matmul(op)
        self.fuse_pw_dw()  # first: it keeps the larger tensor (a stride-2 depthwise input) out of memory
        self.fuse_dw_pw()
        self.fuse_q8_dw()
        left = []
        for op in list(self.block.ops):
            n = op.name
            if n in ("onnx.MaxPool", "onnx.AveragePool"):
                self.lower_pool(op)
            elif n == "onnx.GlobalAveragePool":
                self._replace_simple(op, "cpu.global_avgpool", [op.operands[0]])
            elif n == "onnx.ReduceMean":  # over trailing axes (support.py): efficientnet's squeeze-excite
                a = reduce_mean_start(op, self.module)
                self._replace_simple(op, "cpu.global_avgpool", [op.operands[0]], {"axis": A.IntegerAttr(a)})
            elif n in ("onnx.Softmax", "onnx.LogSoftmax"):
                self.lower_softmax(op)
            elif n == "onnx.LayerNormalization":
                self.lower_layernorm(op)
            elif n in ("onnx.LSTM", "onnx.GRU"):
                self.lower_rnn(op)
            elif n == "onnx.Transpose":
                perm = self.attr(op, "perm", None) or list(range(op.operands[0].type.rank))[::-1]
                self._replace_simple(op, "cpu.transpose", [op.operands[0]], {"perm": A.DenseArrayAttr(list(perm))})
            elif n in ("onnx.Reshape", "onnx.Flatten", "onnx.Squeeze", "onnx.Unsqueeze"):
                self._replace_simple(op, "cpu.reshape", [op.operands[0]])
            elif n == "onnx.Slice":
                offset, strides = slice_view(op, self.module)
                self._strided(op, offset, strides)
            elif n == "onnx.Expand":
                self._strided(op, 0, _broadcast_strides(op.operands[0].type.shape, op.results[0].type.shape))
            elif n == "onnx.Concat":
                axis = int(self.attr(op, "axis", 0))
                axis = axis + op.results[0].type.rank if axis < 0 else axis
                self._replace_simple(op, "cpu.concat", list(op.operands), {"axis": A.IntegerAttr(axis)})
        self.fold_transposes()
        self.fuse_elementwise()
        for op in list(self.block.ops):
            if op.name.startswith("onnx.") and op.name not in ("onnx.Constant", "onnx.NoValue"):
                left.append(op.name)
        # constants nobody uses any more (folded BN statistics, replaced weights)
        for op in reversed(list(self.block.ops)):
            if op.name in ("onnx.Constant", "onnx.NoValue") and not any(r.uses for r in op.results):
                op.erase()
        return left


def _broadcast_strides(shape, out_shape):
    """Source strides (elements) per output dim of `shape` broadcast to
    `out_shape` (numpy's rule, right-aligned): 0 where a dim repeats."""
    shape = [1] * (len(out_shape) - len(shape)) + list(shape)
    cstride = contiguous_strides(shape)
    return [0 if n == 1 and o != 1 else c for n, o, c in zip(shape, out_shape, cstride)]


def _bias_mode(shape, m, n):
    """Gemm's C broadcast to (M, N): 1 per column, 2 per row, 3 full, 4 scalar."""
    shape = tuple(shape)
    size = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if size == 1:
        return 4
    full = (1,) * (2 - len(shape)) + shape
    if full == (m, n):
        return 3
    if full[0] == 1:
        return 1
    return 2


def lower_function(func, module, ctx):
    return Lowering(func, module, ctx).run()
