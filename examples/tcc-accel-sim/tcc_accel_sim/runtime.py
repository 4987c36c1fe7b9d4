"""Running sim code: a partition's payload is its sim-dialect IR (with its
constants); each function is interpreted with numpy on sim buffers."""
import numpy as np

from tcc.accelerators.numpy_kit import IRModule, interpret, pack_ir
from tcc.dialects.ir import to_numpy_dtype


def _erf(x):
    from math import erf
    return np.vectorize(erf, otypes=[x.dtype])(x)


NUMPY = {"onnx.Add": np.add, "onnx.Sub": np.subtract, "onnx.Mul": np.multiply, "onnx.Div": np.divide,
         "onnx.Relu": lambda x: np.maximum(x, 0).astype(x.dtype), "onnx.Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
         "onnx.Tanh": np.tanh, "onnx.Exp": np.exp, "onnx.Neg": np.negative, "onnx.Abs": np.abs,
         "onnx.Sqrt": np.sqrt, "onnx.Erf": _erf}


def conv2d(x, w, b, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (x.shape[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (x.shape[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, m, oh, ow), x.dtype)
    mg = m // group
    for g in range(group):
        xs = x[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dilations[0]:i * dilations[0] + strides[0] * oh:strides[0],
                           j * dilations[1]:j * dilations[1] + strides[1] * ow:strides[1]]
                out[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, w[g * mg:(g + 1) * mg, :, i, j])
    return out + (b.reshape(1, -1, 1, 1) if b is not None else 0)


def _step(op, ins):
    if op.name == "sim.matmul":
        out = np.matmul(*ins)
    elif op.name == "sim.conv":
        a = {k: op.get_attr(k) for k in ("strides", "pads", "dilations", "group") if op.get_attr(k) is not None}
        out = conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None, **a)
    elif op.name == "sim.fused_elementwise":
        out = evaluate(op.regions[0].blocks[0], ins)[0]
    else:
        out = NUMPY[op.name](*ins)
    return np.asarray(out, dtype=_dtype(op.results[0].type))


def evaluate(block, args):
    return interpret(block, args, _step, ("sim.yield", "func.return"))


def _dtype(t):
    return to_numpy_dtype(t.element) if hasattr(t, "element") else None


pack = pack_ir  # the payload: the sim functions' IR and their constants, zipped


def load(payload):
    from .dialect import dialect
    return IRModule(payload, [dialect()], evaluate)
