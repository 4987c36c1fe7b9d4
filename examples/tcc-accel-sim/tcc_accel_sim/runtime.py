"""Running sim code: a partition's payload is its sim-dialect IR (with its
constants); each function is interpreted with numpy on sim buffers."""
import io
import json
import os
import tempfile
import zipfile

import numpy as np

from tcc.dialects.ir import parse_module, print_module, to_numpy_dtype
from tcc.dialects.init_all import default_context

from .device import array


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


def evaluate(block, args):
    env = dict(zip(block.args, args))
    for op in block.ops:
        ins = [env.get(v) for v in op.operands]
        if op.name in ("sim.yield", "func.return"):
            return ins
        if op.name == "onnx.Constant":
            out = np.asarray(op.attributes["value"].value)
        elif op.name == "onnx.NoValue":
            out = None
        elif op.name == "sim.matmul":
            out = np.matmul(*ins)
        elif op.name == "sim.conv":
            a = {k: op.get_attr(k) for k in ("strides", "pads", "dilations", "group") if op.get_attr(k) is not None}
            out = conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None, **a)
        elif op.name == "sim.fused_elementwise":
            out = evaluate(op.regions[0].blocks[0], ins)[0]
        else:
            out = NUMPY[op.name](*ins)
        env[op.results[0]] = None if out is None else np.asarray(out, dtype=_dtype(op.results[0].type))
    raise RuntimeError("function without a return")


def _dtype(t):
    return to_numpy_dtype(t.element) if hasattr(t, "element") else None


def pack(module, names):
    """Payload: the sim functions' IR and their constants, zipped."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "sim.mlir")
        print_module(module, path=path)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for f in os.listdir(d):
                z.write(os.path.join(d, f), f)
            z.writestr("functions.json", json.dumps(names))
        return buf.getvalue()


class SimModule:
    def __init__(self, payload, context):
        with tempfile.TemporaryDirectory() as d:
            with zipfile.ZipFile(io.BytesIO(payload)) as z:
                z.extractall(d)
            path = os.path.join(d, "sim.mlir")
            self.module = parse_module(open(path).read(), path, context)
            # Constants must outlive the temp dir: load them into memory.
            for name in list(self.module.resources):
                self.module.resources.set(name, np.array(self.module.resources.get(name)))
        self.funcs = {f.get_attr("sym_name"): f for f in self.module.functions()}

    def get_function(self, name):
        func = self.funcs[name]
        ft = func.get_attr("function_type")
        block = func.regions[0].blocks[0]

        def run(buffers, stream):
            ins = [array(b, t.shape, _dtype(t)) for b, t in zip(buffers, ft.inputs)]
            outs = [array(b, t.shape, _dtype(t)) for b, t in zip(buffers[len(ft.inputs):], ft.results)]

            def work():
                for o, v in zip(outs, evaluate(block, ins)):
                    np.copyto(o, v)
            stream.launch_host_func(work)
        return run


def load(payload):
    ctx = default_context().copy()
    from .dialect import dialect
    ctx.load(dialect())
    return SimModule(payload, ctx)
