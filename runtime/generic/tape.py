"""The native tape: a warm generic run at one input-shape key as records
that runtime/native/tape.c runs in one call, where numpy and ctypes cost a
call per step.

Built on the second run at a key, from what the first run left: every
value's shape and dtype at that key, and the key's shape values (fixed for
it). Each data step becomes records where its op and operands allow:
float32 elementwise ops with broadcasting, comparisons, bool logic, int64
arithmetic and Cast; MatMul/Gemm with their fused bias and activation (a
constant B packed once per session as the compiled code packs it, a
batched operand read through a view op's strides); Softmax,
LayerNormalization, the fused RMS normalization; Conv (packed weights where
the compiled code packs them, and as the compiled code fuses them: a
pointwise+depthwise pair as one record, a residual Add and its activation in
the epilogue, a channel shuffle folded into the weights); LSTM and GRU; reductions over contiguous
axes, ArgMax/ArgMin, Gather, GatherND, Concat; and every layout op numpy
answers with a view (Transpose, Slice, Expand, Split, Squeeze...: run once
on a probe, the view's offset and strides read off it). A reshape of a
contiguous value is no record at all, the same buffer under another shape.
Any other step stays a Python call between two native runs, on numpy views
of the tape's buffers.

Buffers: each value a native record writes gets one in an arena planned by
liveness (a buffer is reused once its last reader has run), except the
graph outputs, fresh per call (the caller owns them); inputs, a Python
step's results and constants are read where they are. The records find
every buffer through one table of addresses, by slot, so a call sets only
the inputs' and outputs' entries. A tape runs one call at a time (a second
caller at the same key takes the numpy path meanwhile)."""
from __future__ import annotations

import ctypes
import math
import os
import threading

import numpy as np

from tcc.accelerators.cpu import packing
from tcc.accelerators.cpu.codegen import SERIAL_WORK, conv_work

from .toolkit import RnnParams, c_kernels, ptr, rt_kernels

MAXR = 6
(T_COPY, T_ELT, T_GEMM, T_SOFTMAX, T_LAYERNORM, T_RMSNORM, T_CONV, T_REDUCE, T_GATHER, T_RNN, T_ARG,
 T_GATHER_ND, T_CONV_PW_DW) = range(1, 14)
E_ADD, E_SUB, E_MUL, E_DIV, E_MAX, E_MIN, E_POW = range(1, 8)
(E_NEG, E_EXP, E_LOG, E_SQRT, E_RECIP, E_TANH, E_SIGMOID, E_RELU, E_ERF, E_GELU, E_ABS, E_SILU, E_SQUARE, E_CUBE,
 E_LEAKY, E_CLIP) = range(20, 36)
E_ISNAN, E_WHERE = 50, 51
COMPARE = {"Equal": 60, "Less": 61, "Greater": 62, "LessOrEqual": 63, "GreaterOrEqual": 64}
LOGIC = {"And": 70, "Or": 71, "Xor": 72, "Not": 73}
INT_ARITH = {"Add": 80, "Sub": 81, "Mul": 82}
E_CAST = 90
TYPES = {np.dtype(np.float32): 0, np.dtype(np.int64): 1, np.dtype(np.bool_): 2, np.dtype(np.int32): 3,
         np.dtype(np.float64): 4}
BINARY = {"Add": E_ADD, "Sub": E_SUB, "Mul": E_MUL, "Div": E_DIV, "Max": E_MAX, "Min": E_MIN}
UNARY = {"Neg": E_NEG, "Exp": E_EXP, "Log": E_LOG, "Sqrt": E_SQRT, "Reciprocal": E_RECIP, "Tanh": E_TANH,
         "Sigmoid": E_SIGMOID, "Relu": E_RELU, "Erf": E_ERF, "Abs": E_ABS}
REDUCE = {"ReduceSum": 1, "ReduceMean": 2, "ReduceMax": 3, "ReduceMin": 4}
ALIAS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
# ops numpy answers with a view of their first operand (the rest fixed per key)
VIEW_OPS = {"Transpose", "Slice", "Expand", "Split", "Squeeze", "Unsqueeze", "Flatten", "Reshape", "Identity"}
SMALL_GEMM = 32768  # M*N*K up to which tape.c's own loop beats a tcc_cpu_gemm call (~3 us)
# products below codegen.SERIAL_WORK multiply-adds (codegen.ACT_WORK per
# output of an activation) run on the caller's thread, as in the compiled code
ACT_NAMES = {3: "sigmoid", 4: "tanh", 6: "silu"}  # tcc_epilogue act codes ACT_WORK counts
# A key's arena larger than this gets no tape (its numpy path allocates per
# call instead): past it the per-step cost the tape saves is noise beside the
# compute, and up to executor.KEYS tapes stay allocated between calls.
MAX_ARENA = 32 << 20
F32 = np.dtype(np.float32)


class Step(ctypes.Structure):  # tape.c's tcc_step
    _fields_ = [("op", ctypes.c_int64), ("kind", ctypes.c_int64), ("rank", ctypes.c_int64),
                ("esize", ctypes.c_int64), ("slot", ctypes.c_int64 * 6), ("dims", ctypes.c_int64 * MAXR),
                ("st", (ctypes.c_int64 * MAXR) * 4), ("off", ctypes.c_int64 * 4), ("n", ctypes.c_int64 * 8),
                ("f", ctypes.c_float * 4), ("fn", ctypes.c_void_p), ("aux", ctypes.c_void_p)]


def enabled():
    """TCC_GENERIC_TAPE=0 keeps the generic path on numpy alone."""
    return os.environ.get("TCC_GENERIC_TAPE", "1") != "0"


_fns = []


def _lib():
    """(runtime library, {name: address of a cpu-library kernel}) or None."""
    if not _fns:
        rt, cpu = rt_kernels(), c_kernels()
        got = None
        if rt is not None and cpu is not None and hasattr(rt, "tcc_tape_run"):
            rt.tcc_tape_run.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p]
            addr = {n: ctypes.cast(getattr(cpu, n), ctypes.c_void_p).value
                    for n in ("tcc_cpu_gemm", "tcc_cpu_gemm_packed", "tcc_cpu_softmax", "tcc_cpu_layernorm",
                              "tcc_cpu_conv2d", "tcc_cpu_conv2d_packed", "tcc_cpu_conv2d_pw", "tcc_cpu_set_inline",
                              "tcc_cpu_rnn", "tcc_cpu_conv2d_pw_dw")}
            cpu.tcc_cpu_isa.restype = ctypes.c_char_p
            addr["isa"] = cpu.tcc_cpu_isa().decode()
            rt.tcc_tape_init.argtypes = [ctypes.c_void_p]
            rt.tcc_tape_init(addr["tcc_cpu_set_inline"])
            got = (rt, addr)
        _fns.append(got)
    return _fns[0]


class Unsupported(Exception):
    """This step stays a Python call."""


def _contiguous_strides(shape):
    st, acc = [0] * len(shape), 1
    for k in range(len(shape) - 1, -1, -1):
        st[k] = acc
        acc *= shape[k]
    return st


def _coalesce(dims, strides):
    """dims and per-operand strides (elements) with size-1 dims dropped and
    adjacent dims merged where every operand allows it; at least one dim."""
    keep = [k for k, d in enumerate(dims) if d != 1]
    dims = [dims[k] for k in keep] or [1]
    strides = [[s[k] for k in keep] or [0] for s in strides]
    out_d, out_s = [dims[0]], [[s[0]] for s in strides]
    for k in range(1, len(dims)):
        if all(s[k - 1] == s[k] * dims[k] for s in strides):
            out_d[-1] *= dims[k]
            for o, s in zip(out_s, strides):
                o[-1] = s[k]
        else:
            out_d.append(dims[k])
            for o, s in zip(out_s, strides):
                o.append(s[k])
    if len(out_d) > MAXR:
        raise Unsupported
    return out_d, out_s


def _broadcast_strides(shape, out):
    """shape's contiguous strides right-aligned to out, 0 where it broadcasts."""
    st = _contiguous_strides(shape)
    pad = len(out) - len(shape)
    return [0] * pad + [0 if d == 1 and o != 1 else s for d, o, s in zip(shape, out[pad:], st)]


def _step(op, slots, **kw):
    s = Step()
    s.op = op
    for k in range(6):
        s.slot[k] = -1
    for k, v in enumerate(slots):
        s.slot[k] = -1 if v is None else v
    for name, v in kw.items():
        if name in ("dims", "off", "n", "f"):
            arr = getattr(s, name)
            for k, x in enumerate(v):
                arr[k] = x
        elif name == "st":
            for q, row in enumerate(v):
                for k, x in enumerate(row):
                    s.st[q][k] = x
        else:
            setattr(s, name, v)
    return s


class _Builder:
    """Turns one key's data steps into records (see the module docstring)."""

    def __init__(self, plan, table, infos):
        self.plan, self.table, self.infos = plan, table, infos
        self.rt, self.addr = _lib()
        self.canon = {}  # alias slot -> the slot whose buffer it is
        # a view op's result -> (its operand's slot, element offset, strides): a
        # batched product reads it there (attention's K^T) instead of its copy
        self.views = {}
        self.conv_src = {}  # id(conv record) -> (record, OIHW weights, bias, parameters, weight slot)
        self.keep = []  # objects the records point into (offset tables, parameter structs, constants)

    def c(self, i):
        while i in self.canon:
            i = self.canon[i]
        return i

    def info(self, i):
        got = self.infos.get(i)
        if got is None:
            raise Unsupported
        return got

    def fixed(self, i):
        """The value of a constant or this key's shape value, else None."""
        return self.table[i] if i and self.plan._kinds[i] in (0, 2) else None

    def f32(self, *slots):
        for i in slots:
            if self.info(i)[1] != F32:
                raise Unsupported

    # ---- per op ------------------------------------------------------------------------

    def emit(self, op, fn, ins, outs, node):
        """The records of one step, or Unsupported. A fused step (fusion.py)
        only where its kernel says what it fused: tape_epilogue on a
        product, tape_setup (with its activation) on a convolution."""
        fused = " + " in op
        short = op.split(" + ")[0].split(".")[-1]
        if fused and not (short in ("MatMul", "Gemm") and hasattr(fn, "tape_epilogue") or short == "Conv"):
            raise Unsupported
        if not fused:
            if short in ALIAS and len(outs) == 1:
                return self._alias(ins[0], outs[0])
            if short in BINARY or short in UNARY:
                return self._elementwise(short, ins, outs[0])
            if short in REDUCE:
                return self._reduce(short, ins, outs[0], node)
            if short in COMPARE:
                return self._compare(short, ins, outs[0])
            if short in LOGIC:
                return self._logic(short, ins, outs[0])
            if short in VIEW_OPS:
                return self._view(fn, ins, outs)
        handler = getattr(self, f"_op_{short}", None)
        if handler is None:
            raise Unsupported
        return handler(fn, ins, outs, node)

    def _alias(self, x, y):
        (xs, xd), (ys, yd) = self.info(x), self.info(y)
        if xd != yd or math.prod(xs) != math.prod(ys):
            raise Unsupported
        self.canon[y] = self.c(x)
        return []

    def _view(self, fn, ins, outs):
        """A step whose every result numpy gives as a view of its first
        operand (the rest this key's shape values or constants): one copy
        record per result, its offset and strides read off a probe."""
        if not ins or any(i and self.fixed(i) is None for i in ins[1:]):
            raise Unsupported
        xs, xd = self.info(ins[0])
        probe = np.empty(xs, xd)
        base = probe.__array_interface__["data"][0]
        with np.errstate(all="ignore"):
            got = fn(probe, *[self.fixed(i) if i else None for i in ins[1:]])
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        if len(got) != len(outs):
            raise Unsupported
        recs = []
        for r, o in zip(got, outs):
            if not isinstance(r, np.ndarray) or r.dtype != xd or r.shape != self.info(o)[0] or \
                    not np.may_share_memory(r, probe) and r.size:
                raise Unsupported
            es = xd.itemsize
            off = (r.__array_interface__["data"][0] - base) // es if r.size else 0
            if any(s % es for s in r.strides):
                raise Unsupported
            if r.size == 0:
                continue
            if r.flags.c_contiguous and off == 0 and r.size == probe.size:
                self.canon[o] = self.c(ins[0])
                continue
            self.views[o] = (self.c(ins[0]), off, [s // es for s in r.strides])
            dims, (src, dst) = _coalesce(list(r.shape), [[s // es for s in r.strides], _contiguous_strides(r.shape)])
            recs.append(_step(T_COPY, [self.c(ins[0]), o], rank=len(dims), esize=es, dims=dims, st=[src, dst],
                              off=[off, 0]))
        return recs

    def _elementwise(self, short, ins, y):
        ys, yd = self.info(y)
        args = [i for i in ins if i]
        if len(args) != len(ins) or not ys or math.prod(ys) == 0:
            raise Unsupported
        kind = BINARY.get(short) or UNARY.get(short)
        if short in BINARY and len(args) != 2:
            raise Unsupported
        if short in INT_ARITH and all(self.info(a)[1] == np.int64 for a in args) and yd == np.int64:
            return [self._elt(INT_ARITH[short], args, y, out_size=8, in_sizes=[8, 8])]
        self.f32(*args)
        if yd != F32:
            raise Unsupported
        return [self._elt(kind, args, y)]

    def _compare(self, short, ins, y):
        (_, ad), (_, bd) = self.info(ins[0]), self.info(ins[1])
        if ad != bd or ad not in (F32, np.dtype(np.int64)) or self.info(y)[1] != np.bool_ or not all(ins):
            raise Unsupported
        es = ad.itemsize
        return [self._elt(COMPARE[short], list(ins), y, out_size=1, in_sizes=[es, es], extra=[int(es == 8)])]

    def _logic(self, short, ins, y):
        if not all(ins) or any(self.info(i)[1] != np.bool_ for i in list(ins) + [y]) or \
                len(ins) != (1 if short == "Not" else 2):
            raise Unsupported
        return [self._elt(LOGIC[short], list(ins), y, out_size=1, in_sizes=[1] * len(ins))]

    def _op_Cast(self, fn, ins, outs, node):
        (_, xd), (_, yd) = self.info(ins[0]), self.info(outs[0])
        if xd not in TYPES or yd not in TYPES:
            raise Unsupported
        return [self._elt(E_CAST, [ins[0]], outs[0], out_size=yd.itemsize, in_sizes=[xd.itemsize],
                          extra=[TYPES[xd], TYPES[yd]])]

    def _elt(self, kind, args, y, f=(), out_size=4, in_sizes=None, extra=()):
        ys = list(self.info(y)[0])
        strides = [_broadcast_strides(list(self.info(a)[0]), ys) for a in args]
        dims, st = _coalesce(ys, strides + [_contiguous_strides(ys)])
        sizes = in_sizes or [4] * len(args)
        return _step(T_ELT, [self.c(a) for a in args] + [None] * (3 - len(args)) + [y], kind=kind, rank=len(dims),
                     dims=dims, st=st[:-1],
                     n=[len(args)] + list(sizes) + [0] * (3 - len(args)) + [out_size] + list(extra), f=list(f))

    def _op_Pow(self, fn, ins, outs, node):
        e = self.fixed(ins[1])
        self.f32(ins[0], outs[0])
        if e is not None and e.size == 1 and float(e.reshape(-1)[0]) in (2.0, 3.0) and \
                len(self.info(ins[0])[0]) >= e.ndim:
            return [self._elt(E_SQUARE if float(e.reshape(-1)[0]) == 2.0 else E_CUBE, [ins[0]], outs[0])]
        self.f32(ins[1])
        return [self._elt(E_POW, list(ins), outs[0])]

    def _op_LeakyRelu(self, fn, ins, outs, node):
        self.f32(ins[0], outs[0])
        return [self._elt(E_LEAKY, [ins[0]], outs[0], f=[float(node.get("alpha", 0.01))])]

    def _op_Gelu(self, fn, ins, outs, node):
        if node.get("approximate", "none") != "none":
            raise Unsupported
        self.f32(ins[0], outs[0])
        return [self._elt(E_GELU, [ins[0]], outs[0])]

    def _op_IsNaN(self, fn, ins, outs, node):
        self.f32(ins[0])
        return [self._elt(E_ISNAN, [ins[0]], outs[0], out_size=1)]

    def _op_Where(self, fn, ins, outs, node):
        c, a, b = ins
        if self.info(c)[1] != np.bool_ or not all((a, b, c)):
            raise Unsupported
        self.f32(a, b, outs[0])
        return [self._elt(E_WHERE, [c, a, b], outs[0], in_sizes=[1, 4, 4])]

    def _op_ArgMax(self, fn, ins, outs, node, kind=0):
        xs, xd = self.info(ins[0])
        ty = {F32: 0, np.dtype(np.int64): 1, np.dtype(np.int32): 2}.get(xd)
        if ty is None or not xs or not math.prod(xs) or self.info(outs[0])[1] != np.int64:
            raise Unsupported
        a = node.get("axis", 0) % len(xs)
        return [_step(T_ARG, [self.c(ins[0]), outs[0]], kind=kind,
                      n=[math.prod(xs[:a]), xs[a], math.prod(xs[a + 1:]), ty,
                         int(node.get("select_last_index", 0))])]

    def _op_ArgMin(self, fn, ins, outs, node):
        return self._op_ArgMax(fn, ins, outs, node, 1)

    def _op_GatherND(self, fn, ins, outs, node):
        (xs, xd), (is_, idt) = self.info(ins[0]), self.info(ins[1])
        b = node.get("batch_dims", 0)
        if idt != np.int64 or not is_ or not xs:
            raise Unsupported
        k = is_[-1]
        if k < 1 or b + k > len(xs) or k > MAXR or list(is_[:b]) != list(xs[:b]) or not math.prod(xs):
            raise Unsupported
        nb = math.prod(xs[:b])
        m = math.prod(is_) // (nb * k) if nb * k else 0
        return [_step(T_GATHER_ND, [self.c(ins[0]), self.c(ins[1]), outs[0]], dims=list(xs[b:b + k]),
                      n=[nb, m, math.prod(xs[b + k:]) * xd.itemsize, k])]

    def _op_Concat(self, fn, ins, outs, node):
        ys, yd = self.info(outs[0])
        axis = node.get("axis") % len(ys)
        yst = _contiguous_strides(ys)
        recs, at = [], 0
        for i in ins:
            xs, xd = self.info(i)
            if xd != yd:
                raise Unsupported
            if math.prod(xs):
                dims, (src, dst) = _coalesce(list(xs), [_contiguous_strides(xs), yst])
                recs.append(_step(T_COPY, [self.c(i), outs[0]], rank=len(dims), esize=yd.itemsize, dims=dims,
                                  st=[src, dst], off=[0, at * yst[axis]]))
            at += xs[axis]
        return recs

    def _op_Gather(self, fn, ins, outs, node):
        (xs, xd), (is_, idt) = self.info(ins[0]), self.info(ins[1])
        if idt != np.int64 or not xs:
            raise Unsupported
        a = node.get("axis", 0) % len(xs)
        return [_step(T_GATHER, [self.c(ins[0]), self.c(ins[1]), outs[0]],
                      n=[math.prod(xs[:a]), xs[a], math.prod(is_), math.prod(xs[a + 1:]) * xd.itemsize])]

    def _op_Softmax(self, fn, ins, outs, node, log=0):
        xs = self.info(ins[0])[0]
        self.f32(ins[0], outs[0])
        legacy = node.opset < 13
        a = node.get("axis", 1 if legacy else -1) % max(len(xs), 1)
        n = [math.prod(xs[:a]), math.prod(xs[a:]), 1] if legacy else \
            [math.prod(xs[:a]), xs[a], math.prod(xs[a + 1:])]
        if not math.prod(xs):
            raise Unsupported
        return [_step(T_SOFTMAX, [self.c(ins[0]), outs[0]], kind=log, n=n, fn=self.addr["tcc_cpu_softmax"])]

    def _op_LogSoftmax(self, fn, ins, outs, node):
        return self._op_Softmax(fn, ins, outs, node, 1)

    def _op_LayerNormalization(self, fn, ins, outs, node):
        if len(outs) > 1 and any(node.used[1:]):
            raise Unsupported
        xs = self.info(ins[0])[0]
        a = node.get("axis", -1) % len(xs)
        rows, cols = math.prod(xs[:a]), math.prod(xs[a:])
        scale, bias = ins[1], ins[2] if len(ins) > 2 and ins[2] else None
        self.f32(ins[0], scale, outs[0], *([bias] if bias else []))
        if math.prod(self.info(scale)[0]) != cols or (bias and math.prod(self.info(bias)[0]) != cols) or \
                not rows * cols:
            raise Unsupported
        return [_step(T_LAYERNORM, [self.c(ins[0]), self.c(scale), bias and self.c(bias), outs[0]], n=[rows, cols],
                      f=[float(node.get("epsilon", 1e-5))], fn=self.addr["tcc_cpu_layernorm"])]

    def _op_Pow_rms(self, fn, ins, outs):
        w, eps = fn.tape_rms
        xs = self.info(ins[0])[0]
        self.f32(ins[0], outs[0])
        if w is not None and xs[-1:] != w.shape or not math.prod(xs):
            raise Unsupported
        w_slot = None
        if w is not None:
            w_slot = self.const_slot(w)
        return [_step(T_RMSNORM, [self.c(ins[0]), w_slot, outs[0]], n=[math.prod(xs[:-1]), xs[-1]], f=[eps])]

    def const_slot(self, value):
        """A table slot of its own for an array the records read (a fused weight)."""
        self.keep.append(value)
        self.extra.append(value)
        return self.n_slots + len(self.extra) - 1

    def _product(self, a, b, y, ta, tb, alpha, epi, c=None, beta=0.0):
        (as_, (bs, _), ys) = self.info(a)[0], self.info(b), self.info(y)[0]
        self.f32(a, b, y)
        if len(as_) < 2 or len(bs) < 2:
            raise Unsupported
        bias, act = epi
        code, a0, a1 = act or (0, 0.0, 0.0)
        bias_slot, mode, scale = None, 0, 1.0
        M, K = (as_[-1], as_[-2]) if ta else (as_[-2], as_[-1])
        N = bs[-2] if tb else bs[-1]
        if len(bs) == 2 and not ta and len(as_) >= 2:  # every row of a against one b
            batch, M, offs = 1, math.prod(as_[:-1]), None
        else:
            bshape = list(ys[:-2])
            batch = math.prod(bshape)
            (a, a_off, sa, ta, lda_v), (b, b_off, sb, tb, ldb_v) = \
                self._operand(a, as_, ta, bshape), self._operand(b, bs, tb, bshape)
            offs = np.zeros((batch, 3), np.int64)
            for q, idx in enumerate(np.ndindex(*bshape) if bshape else [()]):
                offs[q] = (a_off + sum(i * s for i, s in zip(idx, sa)), b_off + sum(i * s for i, s in zip(idx, sb)),
                           q * M * N)
            self.keep.append(offs)
        if bias is not None or (c is not None and beta != 0.0):
            v = bias if bias is not None else self.fixed(c)
            if v is None:  # a data c: its slot
                cs = list(self.info(c)[0])
                bias_slot = self.c(c)
                self.f32(c)
            else:
                v = np.ascontiguousarray(v, np.float32)
                cs = list(v.shape)
                bias_slot = self.const_slot(v)
            cs = [1] * (2 - len(cs)) + cs if len(cs) < 2 else cs
            mode = 4 if math.prod(cs) == 1 else 1 if cs[-2:] == [1, N] and math.prod(cs) == N else \
                2 if cs[-2:] == [M, 1] and batch == 1 and math.prod(cs) == M else \
                3 if cs[-2:] == [M, N] and batch == 1 and math.prod(cs) == M * N else None
            if mode is None:
                raise Unsupported
            scale = 1.0 if bias is not None else float(beta)
        lda, ldb = (lda_v, ldb_v) if offs is not None else (as_[-1], bs[-1])
        b_slot, fn, packed = self.c(b), self.addr["tcc_cpu_gemm"], 0
        w = self.fixed(b) if len(bs) == 2 and self.plan._kinds[b] == 0 else None
        if w is not None:  # a constant B: packed once per plan, gemm_packed.c's panels (as the compiled code)
            got = self.plan._packed.get((b, "b", tb))  # (one constant may be B of a MatMul and B^T of a Gemm)
            if got is None:
                got = np.ascontiguousarray(packing.pack_b(w.T if tb else w))
                self.plan._packed[(b, "b", tb)] = got
            b_slot, fn, packed = self.const_slot(got), self.addr["tcc_cpu_gemm_packed"], 1
        elif M * N * K <= SMALL_GEMM:
            fn = None
        return [_step(T_GEMM, [self.c(a), b_slot, y, bias_slot], kind=mode, esize=packed,
                      rank=int(M * N * K * batch < SERIAL_WORK), n=[batch, M, N, K, ta, tb, lda, ldb],
                      f=[alpha, scale, a0, a1], off=[code], fn=fn, aux=None if offs is None else offs.ctypes.data)]

    def _operand(self, x, shape, trans, bshape):
        """(slot, element offset, batch strides over bshape, transposed?,
        leading dim) of a batched product's operand: a view op's result
        read where its operand lies, as op(X) = X or X^T, where its
        matrices have one unit stride (a transposed K, a slice); else its
        own contiguous buffer."""
        rows, cols = shape[-2], shape[-1]
        got = self.views.get(x)
        c = self.c(x)
        if got is None and c in self.views:  # a reshape of a view (heads merged into the batch)
            src, off, st = self.views[c]
            view = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), self.info(c)[0], [4 * v for v in st])
            view = view.view()
            try:
                view.shape = shape  # numpy refuses where the reshape would need a copy
                got = (src, off, [v // 4 for v in view.strides])
            except AttributeError:
                got = None
        if got is not None:
            src, off, st = got
            lead = None
            if st[-1] == 1 and st[-2] >= cols:
                lead = st[-2]
            elif st[-2] == 1 and st[-1] >= rows and not trans:
                trans, lead = 1, st[-1]
            if lead is not None:
                batch = list(st[:-2])
                pad = len(bshape) - len(batch)
                sb = [0] * pad + [0 if d == 1 and o != 1 else s
                                  for d, o, s in zip(shape[:-2], bshape[pad:], batch)]
                return src, off, sb, trans, lead
        sb = _broadcast_strides(list(shape[:-2]), bshape) if len(shape) > 2 else [0] * len(bshape)
        return self.c(x), 0, [s * rows * cols for s in sb], trans, cols

    def _op_MatMul(self, fn, ins, outs, node):
        return self._product(ins[0], ins[1], outs[0], 0, 0, 1.0, getattr(fn, "tape_epilogue", (None, None)))

    def _op_Gemm(self, fn, ins, outs, node):
        c = ins[2] if len(ins) > 2 and ins[2] else None
        return self._product(ins[0], ins[1], outs[0], int(node.get("transA", 0)), int(node.get("transB", 0)),
                             float(node.get("alpha", 1.0)), getattr(fn, "tape_epilogue", (None, None)), c,
                             float(node.get("beta", 1.0)))

    def _op_Conv(self, fn, ins, outs, node):
        setup = getattr(fn, "tape_setup", None)
        if setup is None or self.fixed(ins[1]) is None:
            raise Unsupported
        xs, ws = self.info(ins[0])[0], self.info(ins[1])[0]
        self.f32(ins[0], ins[1], outs[0])
        got = setup(xs, ws)
        if got is None:
            raise Unsupported
        p, n_scratch, (code, a0, a1) = got
        self.keep.append(p)
        scratch = self.scratch_slot(n_scratch)
        b = ins[2] if len(ins) > 2 and ins[2] else None
        if b is not None:
            self.f32(b)
        w = self.fixed(ins[1]) if self.plan._kinds[ins[1]] == 0 else None
        variant, fn, w_slot = self.conv_weights(p, w, ins[1])
        step = _step(T_CONV, [self.c(ins[0]), w_slot, outs[0], scratch, b and self.c(b)], kind=code,
                     esize=variant, rank=_serial(p), f=[a0, a1], fn=fn, aux=ctypes.addressof(p))
        if w is not None and w.ndim == 4 and (b is None or self.fixed(b) is not None):
            self.conv_src[id(step)] = (step, w, None if b is None else self.fixed(b), p, ins[1])
        return [step]

    def conv_weights(self, p, w, key, tag="conv"):
        """(variant, kernel, weights slot) for a convolution of parameters p:
        constant 2-D weights packed once per plan (under `key`, `tag`) as the
        compiled code packs them, for tcc_cpu_conv2d_pw (variant 2) or
        tcc_cpu_conv2d_packed (1); anything else tcc_cpu_conv2d's own (0)."""
        variant, fn = 0, self.addr["tcc_cpu_conv2d"]
        own = lambda: self.c(key) if tag == "conv" else self.const_slot(np.ascontiguousarray(w))  # noqa: E731
        if w is None or w.ndim != 4 or (p.dh, p.dw) != (1, 1):
            return variant, fn, own()
        geom = (p.kh, p.kw, p.sh, p.sw, p.pt, p.pl, p.pb, p.pr, p.group)
        xs4, ys4 = (p.n, p.c, p.h, p.w), (p.n, p.m, p.oh, p.ow)
        if geom == (1, 1, 1, 1, 0, 0, 0, 0, 1):
            variant, fn, make = 2, self.addr["tcc_cpu_conv2d_pw"], lambda: packing.pack_pw(w)
        elif packing.conv_packed(xs4, w.shape, ys4, (p.sh, p.sw), (p.pt, p.pl, p.pb, p.pr), p.group,
                                 self.addr["isa"]):
            variant, fn, make = 1, self.addr["tcc_cpu_conv2d_packed"], lambda: packing.pack_conv(w, p.group)
        else:
            return variant, fn, own()
        got = self.plan._packed.get((key, tag, variant))
        if got is None:
            got = np.ascontiguousarray(make(), np.float32)
            self.plan._packed[(key, tag, variant)] = got
        return variant, fn, self.const_slot(got)

    def _rnn(self, fn, ins, outs, node):
        """LSTM / GRU through tcc_cpu_rnn (rnn.py's native path: constant
        weights, no sequence_lens); Y_h as copies of Y's last steps."""
        nat = getattr(fn, "tape_native", None)
        if nat is None or nat.fixed is None or (len(ins) > 4 and ins[4]):
            raise Unsupported
        xs = self.info(ins[0])[0]
        self.f32(ins[0])
        if len(xs) != 3 or not math.prod(xs):
            raise Unsupported
        layout, nd, hidden = nat.layout, nat.nd, nat.hidden
        seq, batch = (xs[1], xs[0]) if layout else (xs[0], xs[1])
        prm = RnnParams(0 if nat.lstm else 1, nd, int(nat.dirs == ["reverse"]), layout, int(nat.lbr), 0, 0, 0.0,
                        seq, batch, xs[2], hidden)
        self.keep.append(prm)
        wt, rt, bias, rbh = nat.fixed
        self.keep.extend([wt, rt, bias, rbh])
        lib = c_kernels()
        scratch = self.scratch_slot(int(lib.tcc_cpu_rnn_scratch(ctypes.byref(prm))))
        extra = [i if k < len(ins) and i else None for k, i in ((5, ins[5] if len(ins) > 5 else 0),
                                                                (6, ins[6] if len(ins) > 6 else 0),
                                                                (7, ins[7] if len(ins) > 7 else 0))]
        if not nat.lstm:
            extra[1] = extra[2] = None
        for e in extra:
            if e is not None:
                self.f32(e)
        used = list(node.used) + [False] * 3
        if len(outs) > 2 and used[2]:
            raise Unsupported
        y = outs[0]  # (written even where unread: Y_h is copied from it)
        recs = [_step(T_RNN, [self.c(ins[0]), y, scratch] + [None if e is None else self.c(e) for e in extra],
                      n=[ptr(wt), ptr(rt), ptr(bias), 0 if rbh is None else ptr(rbh)], fn=self.addr["tcc_cpu_rnn"],
                      aux=ctypes.addressof(prm))]
        if len(outs) > 1 and used[1]:
            yh = outs[1]
            last = [0 if name == "reverse" else seq - 1 for name in nat.dirs]
            for d, t in enumerate(last):
                if layout:  # y [batch][seq][nd][hidden] -> yh [batch][nd][hidden]
                    recs.append(_step(T_COPY, [y, yh], rank=2, esize=4, dims=[batch, hidden],
                                      st=[[seq * nd * hidden, 1], [nd * hidden, 1]],
                                      off=[(t * nd + d) * hidden, d * hidden]))
                else:  # y [seq][nd][batch][hidden] -> yh [nd][batch][hidden]
                    recs.append(_step(T_COPY, [y, yh], rank=1, esize=4, dims=[batch * hidden],
                                      st=[[1], [1]], off=[(t * nd + d) * batch * hidden, d * batch * hidden]))
        return recs

    def _op_LSTM(self, fn, ins, outs, node):
        return self._rnn(fn, ins, outs, node)

    def _op_GRU(self, fn, ins, outs, node):
        return self._rnn(fn, ins, outs, node)

    def _reduce(self, short, ins, y, node):
        xs = list(self.info(ins[0])[0])
        self.f32(ins[0], y)
        if node.opset < (13 if short == "ReduceSum" else 18):
            axes = node.get("axes")
        elif len(ins) > 1 and ins[1]:
            v = self.fixed(ins[1])
            if v is None:
                raise Unsupported
            axes = v.reshape(-1).tolist()
        else:
            axes = None
        if not axes:
            if node.get("noop_with_empty_axes", 0):
                raise Unsupported
            axes = list(range(len(xs)))
        if not xs or not math.prod(xs):
            raise Unsupported
        axes = sorted(a % len(xs) for a in axes)
        if axes != list(range(axes[0], axes[-1] + 1)):
            raise Unsupported
        n = [math.prod(xs[:axes[0]]), math.prod(xs[axes[0]:axes[-1] + 1]), math.prod(xs[axes[-1] + 1:])]
        return [_step(T_REDUCE, [self.c(ins[0]), y], kind=REDUCE[short], n=n)]

    def scratch_slot(self, n_floats):
        """A slot of its own for a record's scratch buffer (in the arena)."""
        self.extra.append(None)
        i = self.n_slots + len(self.extra) - 1
        self.scratch[i] = max(int(n_floats), 1) * 4
        return i


def _conv_work(p, act):
    """codegen.conv_work for a record's parameters and activation code."""
    return conv_work((p.n, p.c, p.h, p.w), (p.m, p.c // p.group, p.kh, p.kw), (p.n, p.m, p.oh, p.ow),
                     ACT_NAMES.get(act))


def _serial(p, act=0):
    """A convolution record's rank flag: 1 where its work, activation
    included, is below codegen.SERIAL_WORK (the caller's thread alone)."""
    return int(_conv_work(p, act) < SERIAL_WORK)


def _set_serial(program):
    """Each convolution record's rank flag set again once the fusions are
    done, from the work codegen.call_work counts for the call the compiled
    code makes: the activation it took on, and a pointwise+depthwise pair's
    two halves together. Each half alone is below SERIAL_WORK in
    efficientnet's blocks (0.26M and 0.15M multiply-adds, 1.2M with the two
    SiLUs): the compiled code runs the pair on both threads, the tape ran it
    on one (20 us against 11 at 1x16x16x16 -> 64)."""
    from .toolkit import ConvParams
    for p in program:
        s = p[1] if p[0] == "native" else None
        if s is not None and s.op == T_CONV:
            s.rank = _serial(ConvParams.from_address(s.aux), s.kind)
        elif s is not None and s.op == T_CONV_PW_DW:
            pw, dw = ConvParams.from_address(s.aux), ConvParams.from_address(s.n[0])
            s.rank = int(_conv_work(pw, s.kind) + _conv_work(dw, s.n[1]) < SERIAL_WORK)
    return program


# lower.py's SHUFFLE_MAX_GROUP: a grouped 1x1 conv made dense to take a
# channel shuffle does g times its work (a gain measured at g = 3)
SHUFFLE_MAX_GROUP = 4


def _channel_permutation(copy, shape):
    """perm where the copy record writes dst[n, o, ...] = src[n, perm[o], ...]
    over an (N, C, ...) float32 value of `shape` (ShuffleNet's Reshape,
    Transpose, Reshape as the tape's one copy), else None."""
    if copy.esize != 4 or len(shape) != 4:
        return None
    size = math.prod(shape)
    r = copy.rank
    dims = [copy.dims[k] for k in range(r)]
    if math.prod(dims) != size:
        return None
    grid = np.indices(dims, dtype=np.int64).reshape(r, -1)
    src = copy.off[0] + sum(grid[k] * copy.st[0][k] for k in range(r))
    dst = copy.off[1] + sum(grid[k] * copy.st[1][k] for k in range(r))
    if src.min() < 0 or src.max() >= size or dst.min() < 0 or dst.max() >= size:
        return None
    got = np.full(size, -1, np.int64)
    got[dst] = src
    n, c = shape[0], shape[1]
    hw = size // (n * c)
    got = got.reshape(n, c, hw)
    perm = got[0, :, 0] // hw
    want = (np.arange(n)[:, None, None] * c + perm[None, :, None]) * hw + np.arange(hw)[None, None, :]
    if not np.array_equal(got, want) or sorted(perm.tolist()) != list(range(c)):
        return None
    return perm


def _fold_channel_shuffles(program, outs, b):
    """A channel shuffle's copy record of a constant convolution's result
    (ungrouped, or 1x1 with at most SHUFFLE_MAX_GROUP groups, made dense) as
    a permutation of that convolution's output channels: no copy, and a
    1x1 one then pairs with the depthwise convolution after the shuffle
    (_fuse_pw_dw). The compiled code's lower.fold_channel_shuffles."""
    from .toolkit import ConvParams
    readers = _readers(program)
    fold = {}
    for k, p in enumerate(program):
        if p[0] != "native" or p[1].op != T_CONV or id(p[1]) not in b.conv_src:
            continue
        s = p[1]
        _, w, bias, cp, key = b.conv_src[id(s)]
        g = cp.group
        if s.slot[2] in outs or (g > 1 and (cp.kh, cp.kw) != (1, 1)) or g > SHUFFLE_MAX_GROUP:
            continue
        got = readers.get(s.slot[2], [])
        if len(got) != 1 or program[got[0]][0] != "native" or program[got[0]][1].op != T_COPY or \
                program[got[0]][1].slot[0] != s.slot[2]:
            continue
        copy = program[got[0]][1]
        perm = _channel_permutation(copy, (cp.n, cp.m, cp.oh, cp.ow))
        if perm is None:
            continue
        if g > 1:
            w = packing.dense_groups(w, g)
        q = ConvParams.from_buffer_copy(cp)
        q.group = 1
        b.keep.append(q)
        variant, fn, w_slot = b.conv_weights(q, np.ascontiguousarray(w[perm]), key, ("shuffled",) + tuple(perm))
        scratch = s.slot[3]
        if variant != 2 and g > 1:
            scratch = b.scratch_slot(int(c_kernels().tcc_cpu_conv2d_scratch(ctypes.byref(q))))
        bias_slot = None if bias is None else b.const_slot(np.ascontiguousarray(np.asarray(bias, np.float32)[perm]))
        new = _step(T_CONV, [s.slot[0], w_slot, copy.slot[1], scratch, bias_slot], kind=s.kind, esize=variant,
                    rank=_serial(q), f=[s.f[0], s.f[1]], fn=fn, aux=ctypes.addressof(q))
        fold[k], fold[got[0]] = new, None
    if not fold:
        return program
    return [p if k not in fold else ("native", fold[k]) for k, p in enumerate(program) if fold.get(k, p) is not None]


def _fuse_pw_dw(program, outs, b):
    """A pointwise convolution record (packed weights) whose result only a
    depthwise one reads, as one tcc_cpu_conv2d_pw_dw record: the expanded
    tensor is never stored (the compiled code's cpu.conv_pw_dw)."""
    from .toolkit import ConvParams
    readers = _readers(program)
    fuse = {}
    for k, p in enumerate(program):
        if p[0] != "native" or p[1].op != T_CONV or p[1].esize != 2:
            continue
        mid = p[1].slot[2]
        got = readers.get(mid, [])
        if mid in outs or len(got) != 1:
            continue
        q = program[got[0]]
        if q[0] != "native" or q[1].op != T_CONV or q[1].esize != 0 or q[1].slot[0] != mid:
            continue
        pp, pd = ConvParams.from_address(p[1].aux), ConvParams.from_address(q[1].aux)
        if not (pd.group == pd.c == pd.m > 1 and pd.kh * pd.kw <= 64 and pd.sh * pd.sw <= 64 and pp.n == pd.n):
            continue
        fuse[k] = got[0]
    if not fuse:
        return program
    out, gone = [], set(fuse.values())
    for k, p in enumerate(program):
        if k in gone:
            continue
        if k in fuse:
            pw, dw = p[1], program[fuse[k]][1]
            b.keep.append(program[fuse[k]])
            p = ("native", _step(T_CONV_PW_DW, [pw.slot[0], pw.slot[1], dw.slot[2], dw.slot[1],
                                                None if pw.slot[4] < 0 else pw.slot[4],
                                                None if dw.slot[4] < 0 else dw.slot[4]],
                                 kind=pw.kind, rank=int(pw.rank and dw.rank), f=[pw.f[0], pw.f[1], dw.f[0], dw.f[1]],
                                 n=[dw.aux, dw.kind], fn=b.addr["tcc_cpu_conv2d_pw_dw"], aux=pw.aux))
        out.append(p)
    return out


# an activation record that can become a convolution's epilogue: ELT kind -> tcc_epilogue act
CONV_ACTS = {E_RELU: 1, E_SIGMOID: 3, E_TANH: 4, E_LEAKY: 5}


def _readers(program):
    """slot -> the program indices that read it."""
    readers = {}
    for k, p in enumerate(program):
        slots = ([p[1].slot[q] for q in range(6) if p[1].slot[q] >= 0 and q != _written(p[1])]
                 if p[0] == "native" else [i for i in p[2] if i])
        for i in slots:
            readers.setdefault(i, []).append(k)
    return readers


def _flat_elt(s, arity):
    """An elementwise record over equal-shaped contiguous float32 operands."""
    return s.op == T_ELT and s.n[0] == arity and s.rank == 1 and s.n[4] == 4 and \
        all(s.n[1 + q] == 4 and s.st[q][0] == 1 and s.off[q] == 0 for q in range(arity))


def _fuse_conv_residual(program, outs):
    """A convolution record with no activation whose result only an Add of
    an equal-shaped tensor reads, and that sum's single activation record,
    as one record with the residual and the activation in the kernel's
    epilogue (the compiled code's cpu.conv with has_residual: ResNet's and
    ShuffleNet's blocks). Two passes over the block's output saved."""
    readers = _readers(program)
    writer = {}
    for k, p in enumerate(program):
        for o in ([p[1].slot[_written(p[1])]] if p[0] == "native" else p[4]):
            writer[o] = k
    fused, gone = {}, set()
    for k, p in enumerate(program):
        s = p[1] if p[0] == "native" else None
        if s is None or s.op != T_CONV or s.kind != 0 or s.slot[5] >= 0 or s.slot[2] in outs:
            continue
        got = readers.get(s.slot[2], [])
        if len(got) != 1 or program[got[0]][0] != "native":
            continue
        a = program[got[0]][1]
        if not (_flat_elt(a, 2) and a.kind == E_ADD) or a.slot[0] == a.slot[1]:
            continue
        r = a.slot[1] if a.slot[0] == s.slot[2] else a.slot[0]
        if writer.get(r, -1) > k:  # the residual must exist when the convolution runs
            continue
        y, act, f, drop = a.slot[3], 0, (0.0, 0.0), [got[0]]
        after = readers.get(y, [])
        if y not in outs and len(after) == 1 and program[after[0]][0] == "native":
            u = program[after[0]][1]
            if _flat_elt(u, 1) and u.kind in CONV_ACTS and u.slot[0] == y:
                y, act, f = u.slot[3], CONV_ACTS[u.kind], (u.f[0], u.f[1])
                drop.append(after[0])
        fused[k] = (r, y, act, f)
        gone.update(drop)
    if not fused:
        return program
    out = []
    for k, p in enumerate(program):
        if k in gone:
            continue
        if k in fused:
            r, y, act, f = fused[k]
            s = p[1]
            s.slot[5], s.slot[2], s.kind, s.f[0], s.f[1] = r, y, act, f[0], f[1]
        out.append(p)
    return out


def _written(s):
    """The slot index (0-5) a record writes its result to (the first one)."""
    return {T_COPY: 1, T_ELT: 3, T_GEMM: 2, T_SOFTMAX: 1, T_LAYERNORM: 3, T_RMSNORM: 2, T_CONV: 2, T_REDUCE: 1,
            T_GATHER: 2, T_RNN: 1, T_ARG: 1, T_GATHER_ND: 2, T_CONV_PW_DW: 2}[s.op]


def _drop_dead_copies(program, outs):
    """The program without the copy records whose result nothing reads (a
    transpose a product reads through its operand's strides instead)."""
    while True:
        read = set(outs)
        for p in program:
            if p[0] == "native":
                s = p[1]
                ins = {T_COPY: [0], T_ELT: [0, 1, 2], T_GEMM: [0, 1, 3], T_SOFTMAX: [0], T_LAYERNORM: [0, 1, 2],
                       T_RMSNORM: [0, 1], T_CONV: [0, 1, 4, 5], T_REDUCE: [0], T_GATHER: [0, 1], T_RNN: [0, 3, 4, 5],
                       T_ARG: [0], T_GATHER_ND: [0, 1], T_CONV_PW_DW: [0, 1, 3, 4, 5]}[s.op]
                read.update(s.slot[k] for k in ins if s.slot[k] >= 0)
            else:
                read.update(i for i in p[2] if i)
        kept = [p for p in program if not (p[0] == "native" and p[1].op == T_COPY and p[1].slot[1] not in read)]
        if len(kept) == len(program):
            return program
        program = kept


def _fix(r):
    """A Python step's result as the tape keeps it: a view of anything but
    an array that owns its memory (an arena buffer's view, which a later
    record may overwrite) or a non-contiguous one copied, a sequence's
    elements likewise."""
    if r.__class__ is np.ndarray:
        base = r.base
        if (base is not None and (base.__class__ is not np.ndarray or not base.flags.owndata)) \
                or not r.flags.c_contiguous:
            return np.array(r)
        return r
    if isinstance(r, np.ndarray):
        return np.array(r)
    if isinstance(r, list):
        return [np.array(e) if isinstance(e, np.ndarray) and e.base is not None else e for e in r]
    return r


def _reshaped(x, shape):
    return x.reshape(shape) if isinstance(x, np.ndarray) else x


class Tape:
    """One key's records and buffers (see the module docstring); run()
    returns the outputs, or None where it cannot run this call."""

    def __init__(self, plan, table, infos, steps, nodes):
        b = _Builder(plan, table, infos)
        b.n_slots, b.extra, b.scratch = len(table), [], {}
        self._infos = infos
        outs_set = set(plan._outs)
        program = []  # ("native", Step) or ("python", fn, ins, outs, multi)
        for (fn, ins, res, multi, name), node in zip(steps, nodes):
            outs = list(res) if multi else [res]
            op = name.rsplit("(", 1)[1][:-1]
            recs = None
            used = list(node.used) if node is not None else []
            if node is not None and outs[0] in infos and \
                    all(o in infos for k, o in enumerate(outs) if k >= len(used) or used[k]) and \
                    all(math.prod(infos[o][0]) for o in outs if o in infos):  # an empty result: Python's
                try:
                    if " + " in op and hasattr(fn, "tape_rms"):
                        recs = b._op_Pow_rms(fn, ins, outs)
                    else:
                        recs = b.emit(op, fn, ins, outs, node)
                except Unsupported:
                    recs = None
                except (TypeError, ValueError, KeyError, IndexError, AttributeError):
                    recs = None
            if recs is None:
                for o in outs:  # a Python result's own array
                    b.canon.pop(o, None)
                    b.views.pop(o, None)
                program.append(("python", fn, tuple(b.c(i) if i else 0 for i in ins), ins, outs, multi))
            else:
                program.extend(("native", r) for r in recs)
        program = _fold_channel_shuffles(program, {b.c(o) for o in plan._outs}, b)
        program = _fuse_pw_dw(program, {b.c(o) for o in plan._outs}, b)
        program = _fuse_conv_residual(program, {b.c(o) for o in plan._outs})
        program = _drop_dead_copies(program, {b.c(o) for o in plan._outs})
        program = _set_serial(program)
        self.n_native = sum(1 for p in program if p[0] == "native")
        self.n_python = len(program) - self.n_native
        self._plan_buffers(plan, table, infos, b, program, outs_set)
        self._lock = threading.Lock()
        self._rt = b.rt

    def _plan_buffers(self, plan, table, infos, b, program, outs_set):
        n = b.n_slots + len(b.extra)
        self._ptrs = np.zeros(n, np.uint64)
        self._keep = [b.keep]
        kinds = plan._kinds
        written = {}  # native-written slot -> first program index
        last = {}
        for k, p in enumerate(program):
            if p[0] == "native":
                s = p[1]
                slots = [x for x in s.slot if x >= 0]
                out_pos = {T_COPY: [1], T_ELT: [3], T_GEMM: [2], T_SOFTMAX: [1], T_LAYERNORM: [3],
                           T_RMSNORM: [2], T_CONV: [2, 3], T_REDUCE: [1], T_GATHER: [2], T_RNN: [1, 2], T_ARG: [1],
                           T_GATHER_ND: [2], T_CONV_PW_DW: [2]}[s.op]
                for q in out_pos:
                    written.setdefault(s.slot[q], k)
                for x in slots:
                    last[x] = k
            else:
                for i in p[2]:
                    if i:
                        last[i] = k
        for o in plan._outs:
            last[b.c(o)] = len(program)
        # constants and this key's shape values: addresses now (contiguous copies kept)
        self._fixed = {}
        for i in set(last) | set(written):
            if i < b.n_slots and kinds[i] in (0, 2) and isinstance(table[i], np.ndarray):
                v = np.ascontiguousarray(table[i])
                self._keep.append(v)
                self._ptrs[i] = ptr(v) if v.size else 0
        for j, v in enumerate(b.extra):
            if v is not None:
                self._ptrs[b.n_slots + j] = ptr(v)
        self._fresh = []  # (slot, shape, dtype): graph outputs a native record writes
        out_canon = {b.c(o) for o in plan._outs}
        arena_slots = [i for i in written if i not in out_canon]
        # liveness: a buffer comes back to the pool after its slot's last reader
        free, size_of, offsets, ends = [], {}, {}, {}
        for i in arena_slots:
            if i in infos:
                shape, dtype = infos[i]
                size_of[i] = max(int(math.prod(shape)) * dtype.itemsize, 1)
            else:  # a scratch slot (convolution)
                size_of[i] = b.scratch[i]
        order = sorted(arena_slots, key=lambda i: written[i])
        releases = {}
        for i in order:
            releases.setdefault(last.get(i, written[i]), []).append(i)
        top = 0
        pending = sorted(order, key=lambda i: written[i])
        pos = 0
        for k in range(len(program) + 1):
            while pos < len(pending) and written[pending[pos]] == k:
                i = pending[pos]
                pos += 1
                need = (size_of[i] + 63) // 64 * 64
                fit = [f for f in free if f[1] >= need]
                if fit:
                    best = min(fit, key=lambda f: f[1])
                    free.remove(best)
                    offsets[i], ends[i] = best[0], best[1]
                else:
                    offsets[i], ends[i] = top, need
                    top += need
            for i in releases.get(k, []):
                free.append((offsets[i], ends[i]))
        if top > MAX_ARENA:
            raise Unsupported
        self._arena = np.empty(max(top, 64) // 4 + 16, np.float32)
        base = (ptr(self._arena) + 63) // 64 * 64
        for i in arena_slots:
            self._ptrs[i] = base + offsets[i]
        self._views = {}
        for i, (shape, dtype) in infos.items():
            c = b.c(i)
            if c in offsets and c in infos:
                buf = (ctypes.c_char * max(size_of[c], 1)).from_address(int(self._ptrs[c]))
                self._views[i] = np.frombuffer(buf, dtype, int(math.prod(shape))).reshape(shape)
        for i in written:
            if i in out_canon:
                self._fresh.append((i,) + infos[i])
        self._fresh_slots = {f[0] for f in self._fresh}
        self._canon = b.canon
        self._args = [(i, infos[i]) for i in plan._args]
        self._arg_slots = set(plan._args)
        self._outs = [(o, b.c(o), infos.get(o)) for o in plan._outs]
        self._table = table
        # the program as segments: ctypes arrays of records, and Python steps between
        segs, cur = [], []
        for p in program:
            if p[0] == "native":
                cur.append(p[1])
            else:
                if cur:
                    segs.append(self._segment(cur))
                    cur = []
                segs.append(p)
        if cur:
            segs.append(self._segment(cur))
        self._segments = segs
        self._table_ptr = self._ptrs.ctypes.data
        # the pure case (run_pure): one native segment, outputs fresh, distinct, of their slots' shapes
        self._pure, self._pure_outs = None, []
        fresh = {f[0]: f for f in self._fresh}
        if len(segs) == 1 and segs[0][0] == "native" and \
                all(c in fresh and info is not None and fresh[c][1] == info[0] and math.prod(info[0])
                    for _, c, info in self._outs) and len({c for _, c, _ in self._outs}) == len(self._outs) and \
                all(math.prod(sh) for _, (sh, _) in self._args):
            self._pure = segs[0][1:]
            self._pure_outs = [fresh[c] for _, c, _ in self._outs]
        self._body = self._straight_line(b, infos)

    def _straight_line(self, b, infos):
        """The segments as one generated Python function of the call's
        values (vals: the inputs and fresh outputs in, the Python steps'
        graph outputs out), as executor._straight_line does for the numpy
        path: each value a Python step reads is bound where it is known at
        build (an arena buffer's view, a constant, a shape value, a reshape
        of one) and a local variable where it is the call's (an input, a
        fresh output, a Python step's result); a Python result gets its
        address in the table only where a native record reads it.
        detection_nms (9 Python steps after NonMaxSuppression): the loop
        that looked each operand up per call took 23 us of a 64 us call."""
        env = {"np": np, "ptr": ptr, "run": b.rt.tcc_tape_run, "tp": self._table_ptr, "P": self._ptrs,
               "fix": _fix, "rs": _reshaped}
        runtime = set(self._arg_slots) | self._fresh_slots
        native_read = set()
        for seg in self._segments:
            if seg[0] == "native":
                for r in (Step * seg[2]).from_address(seg[1]):
                    native_read.update(x for x in r.slot if x >= 0)
            else:
                runtime.update(seg[4])
        lines, ready, consts = [], set(), {}

        def const(v):
            name = f"c{len(consts)}"
            consts[name] = v
            return name

        def var(i):
            if i not in ready:  # an input or a fresh output: from vals
                lines.append(f"    v{i} = vals[{i}]")
                ready.add(i)
            return f"v{i}"

        def expr(i):  # (source, bound at build?) of the value a Python step reads for slot i
            if i in self._views:
                return const(self._views[i]), True
            c = self._canon.get(i)
            if c is None:
                return (var(i), False) if i in runtime else (const(self._table[i]), True)
            src, fixed = expr(c)
            got = infos.get(i)
            if got is None:
                return src, fixed
            if fixed:
                x = consts[src]
                return (const(x.reshape(got[0])) if isinstance(x, np.ndarray) else src), True
            return f"rs({src}, {tuple(got[0])!r})", False
        for k, seg in enumerate(self._segments):
            if seg[0] == "native":
                lines.append(f"    run({seg[1]}, {seg[2]}, tp)")
                continue
            _, fn, _, ins, outs, multi = seg
            env[f"f{k}"] = fn
            call = f"f{k}({', '.join(expr(i)[0] if i else 'None' for i in ins)})"
            if multi:
                lines.append(f"    t = list({call})")
                got = [f"t[{q}]" for q in range(len(outs))]
            else:
                got = [call]
            for o, g in zip(outs, got):
                lines.append(f"    v{o} = fix({g})")
                ready.add(o)
                if o in native_read:
                    lines.append(f"    if v{o}.__class__ is np.ndarray: P[{o}] = ptr(v{o}) if v{o}.size else 0")
        for _, c, _ in self._outs:
            if c in ready and c not in self._arg_slots and c not in self._fresh_slots:
                lines.append(f"    vals[{c}] = v{c}")
        env.update(consts)
        src = "def body(vals):\n" + "\n".join(lines or ["    pass"]) + "\n"
        exec(compile(src, "<tcc generic tape>", "exec"), env)  # noqa: S102 - source built above from slot numbers
        return env["body"]

    def _segment(self, recs):
        arr = (Step * len(recs))(*recs)
        self._keep.append(arr)
        return ("native", ctypes.addressof(arr), len(recs))

    def run(self, arrays):
        """The outputs (the caller owns them), or None: TCC_GENERIC_TAPE=0
        (read per call, so it stops a built tape too), another thread in
        this tape, or inputs it was not built for."""
        if not enabled() or not self._lock.acquire(blocking=False):
            return None
        try:
            if self._pure is not None:  # one native call, each output a fresh buffer of its own
                out = self._run_pure(arrays)
                if out is not None:
                    return out
            return self._run(arrays)
        finally:
            self._lock.release()

    def _run_pure(self, arrays):
        """run() for a tape of native records only whose outputs are fresh
        buffers of their own shapes (most: ~1 us of Python less a call);
        None where an input needs the general path (a copy, a mismatch)."""
        ptrs = self._ptrs
        for (i, (shape, dtype)), a in zip(self._args, arrays):
            if a.__class__ is not np.ndarray or a.shape != shape or a.dtype != dtype or not a.flags.c_contiguous \
                    or not a.size:
                return None
            ptrs[i] = ptr(a)
        outs = []
        for i, shape, dtype in self._pure_outs:
            y = np.empty(shape, dtype)
            ptrs[i] = ptr(y)
            outs.append(y)
        self._rt.tcc_tape_run(self._pure[0], self._pure[1], self._table_ptr)
        return outs

    def _run(self, arrays):
        """run() in general: Python steps between native runs, outputs copied where not owned."""
        ptrs, vals = self._ptrs, {}
        for (i, (shape, dtype)), a in zip(self._args, arrays):
            if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != dtype:
                return None
            if not a.flags.c_contiguous:
                a = np.ascontiguousarray(a)
            vals[i] = a
            ptrs[i] = ptr(a) if a.size else 0
        for i, shape, dtype in self._fresh:
            y = np.empty(shape, dtype)
            vals[i] = y
            ptrs[i] = ptr(y) if y.size else 0
        self._body(vals)
        # outputs the caller owns: a fresh buffer once; anything else (an
        # input, a constant, a Python step's view, a buffer given twice) copied
        res, given = [], set()
        for o, c, info in self._outs:
            v = vals.get(c)
            if c in self._fresh_slots and c not in given:
                given.add(c)
                if info is not None and v.shape != info[0]:
                    v = v.reshape(info[0])
            elif isinstance(v, np.ndarray) and c not in self._arg_slots and c not in given and \
                    v.base is None and v.flags.writeable and v.flags.c_contiguous:
                given.add(c)  # a Python step's own result
                if info is not None and v.shape != info[0]:
                    v = v.reshape(info[0])
            elif v is None and c not in vals:
                got = self._views.get(c)
                v = np.array(got if got is not None else self._table[c])
                if info is not None and v.shape != info[0]:
                    v = v.reshape(info[0])
            elif isinstance(v, np.ndarray):
                v = np.array(v.reshape(info[0]) if info is not None else v)
            elif isinstance(v, list):  # a sequence a Python step made
                v = [np.array(e) for e in v]
            res.append(v)
        return res
