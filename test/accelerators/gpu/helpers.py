"""Compiling an ONNX model as one gpu partition through the plugin's hooks,
and running it on the CPU (the CUDA C compiled as host C++) or checking it
with nvcc."""
import numpy as np

from tcc.accelerators.gpu import plugin
from tcc.dialects.ir import attributes as A
from tcc.dialects.init_all import new_context
from tcc.dialects.onnx.importer import import_model


def compile_partition(model, name="gpu_0"):
    """-> (RuntimeModule, input names, output (shape, dtype) specs)."""
    m = import_model(model)
    f = m.lookup_function("main_graph")
    ins = [d.value["onnx.name"].value for d in f.attributes["arg_attrs"]]
    block = f.regions[0].blocks[0]
    outs = []
    from tcc.dialects.ir.types import to_numpy_dtype
    for v in block.last.operands:
        outs.append((tuple(v.type.shape), np.dtype(to_numpy_dtype(v.type.element))))
    f.attributes["sym_name"] = A.StringAttr(name)
    f.attributes["tcc.accelerator"] = A.StringAttr("gpu")
    for k in ("arg_attrs", "res_attrs"):
        f.attributes.pop(k, None)
    ctx = new_context()
    plugin.tcc_register_dialects(ctx)
    plugin.tcc_register_lowerings(ctx)
    left = plugin.tcc_graph_to_loop(f, m, ctx)
    assert left == [], left
    rm = plugin.tcc_loop_to_native([f], m, ctx, None)
    return rm, ins, outs


def onnxruntime_outputs(model, feeds):
    import onnxruntime as ort
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def random_inputs(model, seed=0):
    from onnx import numpy_helper  # noqa: F401
    import onnx
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        dt = onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
        feeds[i.name] = rng.standard_normal(shape).astype(dt)
    return feeds


def device_buffers(dev, stream, feeds, ins, outs):
    """The inputs uploaded to `dev` (in `ins` order), then one buffer per output."""
    bufs = []
    for k in ins:
        x = np.ascontiguousarray(feeds[k])
        b = dev.alloc(x.nbytes)
        dev.copy_host_to_device(x, b, stream=stream)
        bufs.append(b)
    for shape, dt in outs:
        bufs.append(dev.alloc(int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize))
    return bufs


def download(dev, stream, bufs, outs):
    """The output buffers as numpy arrays (NaN where a copy did not land)."""
    res = []
    for (shape, dt), b in zip(outs, bufs):
        r = np.full(shape, np.nan, dt)
        dev.copy_device_to_host(b, r, r.nbytes, stream=stream)
        res.append(r)
    stream.sync()
    return res
