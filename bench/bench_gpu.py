"""GPU benchmarks (on a machine with an NVIDIA GPU): each model's gpu partition
(weights resident, replayed as a CUDA graph) against torch eager and
torch.compile(mode="reduce-overhead") on the same ONNX graph, every output
checked against onnxruntime (rtol 1e-3), and the 8-op elementwise chain over
64M floats against device-to-device copy bandwidth. Prints a table; exits 0
(the numbers are the result). `--json PATH` also writes the rows.

The torch baseline runs the ONNX graph node by node with torch ops
(`TorchGraph`, the op set of these models): onnx2torch imports torchvision,
which the reference GPU machine does not have, so that baseline printed NaN.
A baseline that cannot run says why in the notes column."""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

CHAIN = 1 << 26  # floats in the elementwise-chain model (and the copy it is compared with)
MODELS = ("elementwise_chain_64M", "softmax_layernorm", "mlp", "cnn", "transformer_bert4", "resnet18")


def _models():
    from tcc import samples
    return {"elementwise_chain_64M": lambda: samples.elementwise_chain(CHAIN),
            "softmax_layernorm": lambda: samples.softmax_layernorm(8192, 1024),
            "mlp": lambda: samples.mlp(seed=0), "cnn": lambda: samples.cnn(seed=0),
            "transformer_bert4": lambda: samples.transformer(seq=128, d=256, heads=4, layers=4, seed=0),
            "resnet18": lambda: samples.resnet18(seed=0)}


def _timeit(fn, sync, reps=50, warm=5):
    for _ in range(warm):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t) / reps


# -- the torch baseline ------------------------------------------------------------------------------
def _attrs(node):
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _torch_ops():
    import torch
    import torch.nn.functional as F

    def pads2d(x, pads, value):
        t, l, b, r = pads
        if (t, l) == (b, r):
            return x, (t, l)
        return F.pad(x, (l, r, t, b), value=value), (0, 0)

    def conv(a, at):
        x, w = a[0], a[1]
        x, pad = pads2d(x, at.get("pads", [0, 0, 0, 0]), 0.0)
        return F.conv2d(x, w, a[2] if len(a) > 2 else None, tuple(at.get("strides", (1, 1))), pad,
                        tuple(at.get("dilations", (1, 1))), at.get("group", 1))

    def maxpool(a, at):
        x, pad = pads2d(a[0], at.get("pads", [0, 0, 0, 0]), float("-inf"))
        return F.max_pool2d(x, tuple(at["kernel_shape"]), tuple(at.get("strides", at["kernel_shape"])), pad)

    def gemm(a, at):
        A = a[0].t() if at.get("transA", 0) else a[0]
        B = a[1].t() if at.get("transB", 0) else a[1]
        y = at.get("alpha", 1.0) * (A @ B)
        return y + at.get("beta", 1.0) * a[2] if len(a) > 2 and a[2] is not None else y

    def layernorm(a, at):
        x = a[0]
        axis = at.get("axis", -1) % x.dim()
        return F.layer_norm(x, x.shape[axis:], a[1], a[2] if len(a) > 2 else None, at.get("epsilon", 1e-5))

    def reshape(a, at, shape):
        dims = [int(d) for d in shape]
        dims = [a[0].shape[i] if d == 0 else d for i, d in enumerate(dims)]
        return a[0].reshape(dims)

    return {
        "Add": lambda a, at: a[0] + a[1], "Sub": lambda a, at: a[0] - a[1], "Mul": lambda a, at: a[0] * a[1],
        "Div": lambda a, at: a[0] / a[1], "Relu": lambda a, at: torch.relu(a[0]),
        "Tanh": lambda a, at: torch.tanh(a[0]), "Abs": lambda a, at: torch.abs(a[0]),
        "Sqrt": lambda a, at: torch.sqrt(a[0]), "Erf": lambda a, at: torch.erf(a[0]),
        "Exp": lambda a, at: torch.exp(a[0]), "Sigmoid": lambda a, at: torch.sigmoid(a[0]),
        "Pow": lambda a, at: torch.pow(a[0], a[1]), "MatMul": lambda a, at: torch.matmul(a[0], a[1]),
        "Gemm": gemm, "Conv": conv, "MaxPool": maxpool,
        "BatchNormalization": lambda a, at: F.batch_norm(a[0], a[3], a[4], a[1], a[2], False, 0.0,
                                                         at.get("epsilon", 1e-5)),
        "GlobalAveragePool": lambda a, at: a[0].mean(dim=(2, 3), keepdim=True),
        "Flatten": lambda a, at: a[0].flatten(at.get("axis", 1)) if at.get("axis", 1) else a[0].reshape(1, -1),
        "Transpose": lambda a, at: a[0].permute(*at["perm"]),
        "Softmax": lambda a, at: torch.softmax(a[0], at.get("axis", -1)),
        "LayerNormalization": layernorm, "Reshape": reshape, "Identity": lambda a, at: a[0],
        "Clip": lambda a, at: torch.clamp(a[0], *[a[i] if len(a) > i and a[i] is not None else None
                                                  for i in (1, 2)]),
    }


def torch_graph(model, device):
    """The ONNX graph as a torch module: one torch op per node, weights on `device`."""
    import torch
    from onnx import numpy_helper
    ops = _torch_ops()
    missing = sorted({n.op_type for n in model.graph.node if n.op_type not in ops and n.op_type != "Constant"})
    if missing:
        raise NotImplementedError(f"torch baseline lacks {', '.join(missing)}")
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)

    class TorchGraph(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.env = {k: torch.from_numpy(np.array(v)).to(device) for k, v in consts.items()}
            self.nodes = []
            for n in model.graph.node:
                if n.op_type == "Constant":
                    continue
                at = _attrs(n)
                fn = ops[n.op_type]
                if n.op_type == "Reshape":
                    shape = [int(d) for d in consts[n.input[1]].reshape(-1)]
                    fn = (lambda s: lambda a, at: ops["Reshape"](a, at, s))(shape)
                self.nodes.append((fn, list(n.input), n.output[0], at))
            self.inputs = [i.name for i in model.graph.input if i.name not in consts]
            self.outputs = [o.name for o in model.graph.output]

        def forward(self, *xs):
            env = dict(self.env)
            env.update(zip(self.inputs, xs))
            for fn, ins, out, at in self.nodes:
                env[out] = fn([env[i] if i else None for i in ins], at)
            return tuple(env[o] for o in self.outputs)

    return TorchGraph().eval()


def _torch_times(model, feeds, ref):
    """(eager s, compiled s, note) for the torch baseline; None where it could not run."""
    try:
        import torch
    except ImportError as e:
        return None, None, f"no torch ({e})"
    try:
        m = torch_graph(model, "cuda")
    except Exception as e:  # noqa: BLE001
        return None, None, str(e)
    xs = [torch.from_numpy(v).cuda() for v in feeds.values()]
    note = ""
    with torch.no_grad():
        got = [t.cpu().numpy() for t in m(*xs)]
        if not all(np.allclose(g, r, rtol=1e-3, atol=1e-4) for g, r in zip(got, ref)):
            note = "torch baseline differs from onnxruntime; "
        eager = _timeit(lambda: m(*xs), torch.cuda.synchronize)
        try:
            cm = torch.compile(m, mode="reduce-overhead")
            compiled = _timeit(lambda: cm(*xs), torch.cuda.synchronize, warm=10)
        except Exception as e:  # noqa: BLE001 - inductor needs a C compiler and triton
            compiled = None
            note += f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}"
    return eager, compiled, note


# -- tcc ---------------------------------------------------------------------------------------------
def _tcc(dev, model, feeds, ins, outs, rm):
    """(seconds per replay, outputs, graph note)."""
    from tcc.accelerators.gpu import plugin
    mod = plugin.tcc_load_runtime_module(rm, dev)
    from test.accelerators.gpu.helpers import device_buffers, download
    stream = dev.create_stream()
    bufs = device_buffers(dev, stream, feeds, ins, outs)
    fn = mod.get_function("gpu_0")
    for _ in range(3):  # eager, capture, replay: the executor's own policy
        fn(bufs, stream)
    stream.sync()
    graph = "graph" if fn.capture_error is None else f"NO GRAPH ({fn.capture_error[:60]})"
    t = _timeit(lambda: fn(bufs, stream), stream.sync)
    got = download(dev, stream, bufs[len(ins):], outs)
    return t, got, graph


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--json", default=None)
    ap.add_argument("--copy-elems", type=int, default=CHAIN, help="floats in the copy-bandwidth test")
    a = ap.parse_args(argv)
    try:
        import cupy as cp
        cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        print(f"bench-gpu: skipped: no usable GPU ({type(e).__name__}: {str(e).splitlines()[0]})")
        return 0
    from tcc.accelerators.gpu import plugin
    from tcc.runtime.device import default_registry
    from test.accelerators.gpu.helpers import compile_partition, onnxruntime_outputs, random_inputs
    default_registry.register(plugin.tcc_device_manager_factory(), replace=True)
    dev = default_registry.get_device("gpu:0")
    n = CHAIN
    src, dst, s = dev.alloc(4 * a.copy_elems), dev.alloc(4 * a.copy_elems), dev.create_stream()
    rt = cp.cuda.runtime
    t_copy = _timeit(lambda: rt.memcpyAsync(dst.ptr, src.ptr, 4 * a.copy_elems, rt.memcpyDeviceToDevice, s.ptr),
                     s.sync)
    copy_bw = 2 * 4 * a.copy_elems / t_copy  # bytes read + written
    dev.free(src)
    dev.free(dst)
    rows = []
    makers = _models()
    for name in a.models.split(","):
        row = {"model": name, "tcc_ms": None, "eager_ms": None, "compile_ms": None, "notes": ""}
        try:
            model = makers[name]()
            rm, ins, outs = compile_partition(model)
            feeds = random_inputs(model)
            ref = onnxruntime_outputs(model, feeds)
            t, got, graph = _tcc(dev, model, feeds, ins, outs, rm)
            ok = all(np.allclose(g, r, rtol=1e-3, atol=1e-4) for g, r in zip(got, ref))
            err = max(float(np.max(np.abs(g - r))) for g, r in zip(got, ref))
            row.update(tcc_ms=t * 1e3, matches=ok)
            notes = [graph, "matches ort" if ok else f"MISMATCH vs ort (max abs err {err:.2g})"]
            if name.startswith("elementwise_chain"):
                bw = 2 * 4 * n / t
                row["chain_pct_of_copy"] = 100 * bw / copy_bw
                notes.append(f"{bw / 1e12:.2f} TB/s = {100 * bw / copy_bw:.0f}% of copy ({copy_bw / 1e12:.2f} TB/s)")
            eager, compiled, tnote = _torch_times(model, feeds, ref)
            row.update(eager_ms=eager and eager * 1e3, compile_ms=compiled and compiled * 1e3)
            if tnote:
                notes.append(tnote)
            row["notes"] = "; ".join(notes)
        except Exception as e:  # noqa: BLE001 - one model's failure must not hide the others
            row["notes"] = f"FAILED: {type(e).__name__}: {e}"[:160]
        rows.append(row)

    def ms(v):
        return f"{v:9.3f}" if v is not None else "      n/a"
    print(f"\n{'model':22} {'tcc ms':>9} {'eager ms':>9} {'compile':>9} {'tcc/comp':>8}  notes")
    for r in rows:
        ratio = f"{r['tcc_ms'] / r['compile_ms']:8.2f}" if r["tcc_ms"] and r["compile_ms"] else "     n/a"
        print(f"{r['model']:22} {ms(r['tcc_ms'])} {ms(r['eager_ms'])} {ms(r['compile_ms'])} {ratio}  {r['notes']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"copy_tb_s": copy_bw / 1e12, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
