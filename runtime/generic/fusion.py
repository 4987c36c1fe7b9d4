"""Step fusion for the shape-generic plan: a producer whose kernel offers an
epilogue (Conv, MatMul, Gemm: `fn.epilogue(bias, act)`, see nn.py) absorbs
the elementwise steps that only it feeds, so that a run calls one step where
the graph has two or three:

- MatMul with a constant 2-D right operand, then Add of a constant bias
  (a scalar or one value per column): the bias is added in place;
- then (or straight after Conv, MatMul or Gemm) an activation: Relu,
  LeakyRelu, Sigmoid, Tanh, Clip with constant bounds, or SiLU (x *
  Sigmoid(x), the two steps EfficientNet-style exports write); the cpu
  library's convolution applies it in its epilogue, the products in place;
- the exporters' RMS normalization chain (Pow, ReduceMean, Add, Sqrt,
  Reciprocal or Div, Mul, Mul: llama, qwen2, t5) as one call into the
  runtime library (_rmsnorm).

Only data steps are fused, and only where every intermediate value is read
by the fused steps alone (not a graph output). Measured (generic warm, best
of 30, a loaded 2-core Zen 2, before/after in one session): efficientnet
50 -> 27 data steps, 1.05 -> 0.71 ms (its Sigmoid steps were 25 us each);
shufflenet 0.33 -> 0.31; the transformers' MatMul + bias pairs (12-16 a
model) barely pay: deit 0.94 -> 0.92, bart_encoder 0.52 -> 0.51."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from .elementwise import sigmoid
from .toolkit import ptr, rt_kernels

CONST = 0  # executor.py's value kinds: a constant slot
ACT_RELU, ACT_CLIP, ACT_SIGMOID, ACT_TANH, ACT_LEAKY, ACT_SILU = 1, 2, 3, 4, 5, 6  # tcc_cpu.h's TCC_ACT_*


def _activation(step, kinds, base):
    """(code, a0, a1) of tcc_cpu.h's epilogue for an activation step reading
    only its first operand (Clip: constant bounds), else None."""
    _, ins, _, multi, name, shape, node = step
    op = name.rsplit("(", 1)[1][:-1]
    if node is None or multi or shape:
        return None
    if op == "onnx.Relu":
        return ACT_RELU, 0.0, 0.0
    if op == "onnx.Sigmoid":
        return ACT_SIGMOID, 0.0, 0.0
    if op == "onnx.Tanh":
        return ACT_TANH, 0.0, 0.0
    if op == "onnx.LeakyRelu":
        return ACT_LEAKY, float(node.get("alpha", 0.01)), 0.0
    if op == "onnx.Clip":
        if node.opset < 11:
            lo, hi = node.get("min"), node.get("max")
        else:
            bounds = list(ins[1:]) + [0, 0]
            if any(i and kinds[i] != CONST for i in bounds[:2]):
                return None
            lo, hi = (None if not i else base[i] for i in bounds[:2])
        lo = -np.inf if lo is None else float(np.asarray(lo).reshape(-1)[0])
        hi = np.inf if hi is None else float(np.asarray(hi).reshape(-1)[0])
        return ACT_CLIP, lo, hi
    return None


def apply_activation(y, act):
    """act (a (code, a0, a1) triple) applied to the fresh float array y in place."""
    code, a0, a1 = act
    if code == ACT_RELU:
        np.maximum(y, y.dtype.type(0), out=y)
    elif code == ACT_CLIP:
        np.clip(y, y.dtype.type(a0), y.dtype.type(a1), out=y)
    elif code == ACT_TANH:
        np.tanh(y, out=y)
    elif code == ACT_LEAKY:
        np.multiply(y, y.dtype.type(a0), out=y, where=y < 0)
    else:
        s = sigmoid(y)
        if code == ACT_SILU:
            np.multiply(y, s, out=y)
        else:
            y[...] = s
    return y


def _op(step):
    return step[4].rsplit("(", 1)[1][:-1]


def _const(kinds, base, slot):
    return base[slot] if slot and kinds[slot] == CONST and isinstance(base[slot], np.ndarray) else None


def _rmsnorm(k, steps, only_reader, kinds, base):
    """((fn, in slots, out slot), chain step indices) where steps[k] starts
    the exporters' RMS normalization over the last axis, float32 (llama,
    qwen2, t5: Pow(x, 2) -> ReduceMean(last axis, keepdims) -> Add(eps) ->
    Sqrt -> Reciprocal (or Div(1, .)) -> Mul(x, .) [-> Mul(constant w, .)]),
    each intermediate read by the next step alone; else None. One call into
    generic_ops.c's tcc_rmsnorm_f32 instead of 6-7 numpy steps: llama's
    five norms ~35 -> ~5 us each."""
    st = steps[k]
    if _op(st) != "onnx.Pow" or st[5] or len(st[1]) != 2:
        return None
    x, two = st[1]
    two = _const(kinds, base, two)
    if two is None or two.size != 1 or float(two.reshape(-1)[0]) != 2.0:
        return None
    chain, cur = [k], st[2]

    def take(op, n_in=None):
        nonlocal cur
        j = only_reader(cur)
        if j is None or _op(steps[j]) != op or (n_in is not None and len(steps[j][1]) != n_in):
            return None
        chain.append(j)
        prev, cur = cur, steps[j][2]
        return steps[j], [i for i in steps[j][1] if i != prev]
    got = take("onnx.ReduceMean")
    if got is None:
        return None
    node = got[0][6]
    rank = node.ranks[0] if node is not None and node.ranks else None
    axes = node.get("axes") if node is not None and node.opset < 18 else \
        (_const(kinds, base, got[0][1][1]) if len(got[0][1]) > 1 else None)
    if rank is None or axes is None or not node.get("keepdims", 1) or \
            [a % rank for a in np.asarray(axes).reshape(-1).tolist()] != [rank - 1]:
        return None
    got = take("onnx.Add", 2)
    eps = _const(kinds, base, got[1][0]) if got and len(got[1]) == 1 else None
    if eps is None or eps.size != 1 or take("onnx.Sqrt", 1) is None:
        return None
    j = only_reader(cur)
    if j is None:
        return None
    if _op(steps[j]) == "onnx.Reciprocal":
        take("onnx.Reciprocal", 1)
    elif _op(steps[j]) == "onnx.Div" and steps[j][1][1] == cur:
        one = _const(kinds, base, steps[j][1][0])
        if one is None or one.size != 1 or float(one.reshape(-1)[0]) != 1.0:
            return None
        take("onnx.Div", 2)
    else:
        return None
    got = take("onnx.Mul", 2)
    if got is None or got[1] != [x]:
        return None
    w = None
    j = only_reader(cur)
    if j is not None and _op(steps[j]) == "onnx.Mul" and len(steps[j][1]) == 2:
        other = [i for i in steps[j][1] if i != cur]
        w = _const(kinds, base, other[0]) if len(other) == 1 else None
        if w is not None and (w.dtype != np.float32 or w.ndim != 1):
            w = None
        if w is not None:
            take("onnx.Mul", 2)
    lib = rt_kernels()
    if lib is None:
        return None
    keep = None if w is None else np.ascontiguousarray(w)  # held: w_ptr points into it
    w_ptr = None if keep is None else ptr(keep)
    eps = float(eps.reshape(-1)[0])
    f = lib.tcc_rmsnorm_f32

    def rmsnorm(x):
        if x.dtype != np.float32 or (keep is not None and x.shape[-1:] != keep.shape):
            # the chain in numpy (another dtype, or a weight that broadcasts otherwise)
            y = x * np.reciprocal(np.sqrt(np.add.reduce(x * x, axis=-1, keepdims=True) / x.dtype.type(x.shape[-1])
                                          + x.dtype.type(eps)))
            return y if keep is None else keep * y
        x = np.ascontiguousarray(x)
        y = np.empty(x.shape, np.float32)
        if x.size:
            f(x.size // x.shape[-1], x.shape[-1], ptr(x), w_ptr, eps, ptr(y))
        return y
    rmsnorm.tape_rms = (keep, eps)  # tape.py's record
    return (rmsnorm, (x,), cur), chain


def fuse(steps, graph_outs, base, kinds):
    """The steps (executor.py's 7-tuples) with each producer's absorbable
    consumers folded into it (see the module docstring)."""
    uses = defaultdict(int)
    readers = defaultdict(list)
    for k, st in enumerate(steps):
        for i in st[1]:
            if i:
                uses[i] += 1
                readers[i].append(k)
    for i in graph_outs:
        uses[i] += 1

    def only_reader(slot):
        if uses[slot] != 1 or len(readers[slot]) != 1:  # one step reads it, and it is no graph output
            return None
        k = readers[slot][0]
        st = steps[k]
        return None if st[3] or st[5] else k

    gone, out = set(), []
    for k, st in enumerate(steps):
        if k in gone:
            continue
        rms = _rmsnorm(k, steps, only_reader, kinds, base)
        if rms is not None:
            fused, chain = rms
            gone.update(chain[1:])
            what = "+".join(_op(steps[a]).split(".")[-1] for a in chain[1:])
            out.append((fused[0], fused[1], fused[2], False, f"{st[4][:-1]} + {what})", False, st[6]))
            continue
        fn, ins, res, multi, name, shape, node = st
        hook = getattr(fn, "epilogue", None)
        if hook is None or multi or shape:
            out.append(st)
            continue
        cur, bias, act, absorbed = res, None, None, []
        j = only_reader(cur)
        if j is not None and _op(steps[j]) == "onnx.Add" and len(steps[j][1]) == 2:
            other = [i for i in steps[j][1] if i != cur]
            if len(other) == 1 and other[0] and kinds[other[0]] == CONST and hook(base[other[0]], None) is not None:
                bias = base[other[0]]
                absorbed.append(j)
                cur = steps[j][2]
        j = only_reader(cur)
        if j is not None and steps[j][1][0] == cur:
            a = _activation(steps[j], kinds, base)
            if a is not None and (len(steps[j][1]) == 1 or a[0] == ACT_CLIP):
                act, cur = a, steps[j][2]
                absorbed.append(j)
        elif uses[cur] == 2 and cur not in graph_outs:  # SiLU: Sigmoid(cur) and Mul(cur, that)
            s, m = sorted(readers[cur])
            sig, mul = steps[s], steps[m]
            if _op(sig) == "onnx.Sigmoid" and _op(mul) == "onnx.Mul" and not sig[5] and not mul[5] and \
                    sorted(mul[1]) == sorted((cur, sig[2])) and only_reader(sig[2]) == m:
                act, cur = (ACT_SILU, 0.0, 0.0), mul[2]
                absorbed += [s, m]
        fused = hook(bias, act) if absorbed else None
        if fused is None:
            out.append(st)
            continue
        gone.update(absorbed)
        what = "+".join(_op(steps[a]).split(".")[-1] for a in absorbed)
        out.append((fused, ins, cur, False, f"{name[:-1]} + {what})", False, node))
    return out
