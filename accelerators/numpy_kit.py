"""Building blocks for accelerator plugins whose device memory is numpy
arrays and whose partitions run as interpreted IR: the `sim` example and the
packages `tcc-accel new` writes start from these, and a real device replaces
them piece by piece (its own `Device` methods, its own payload format).

- `NumpyDevice` / `NumpyFactory`: a device whose buffers are numpy byte
  arrays in its own space (a copy in or out is a real copy), with tcc's worker
  threads as streams; subclass the factory with your `device_type`.
- `array(buffer, shape, dtype)`: a typed numpy view of such a buffer.
- `pack_ir(module, names)` / `IRModule(payload, dialects, evaluate)`: a
  partition's IR and constants zipped into the artifact, and run back by
  calling `evaluate(entry_block, input_arrays) -> output arrays` on a stream;
  `interpret(block, args, step)` is such an evaluate, given `step(op, inputs)`
  for each op that is not a constant or the terminator.
"""
from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile

import numpy as np

from tcc.runtime.device import (Device, DeviceAttr, DeviceBuffer, DeviceManager, DeviceManagerFactory,
                                WorkerEvent, WorkerStream)

IR_MEMBER = "code.mlir"


class NumpyDevice(Device):
    device_name = "numpy"
    total_memory = 4 << 30

    def _get_attr(self, kind):
        return {DeviceAttr.EXIST: True, DeviceAttr.DEVICE_NAME: self.device_name,
                DeviceAttr.TOTAL_MEMORY: self.total_memory}.get(kind)

    def _alloc(self, nbytes, options):
        # Lazily mapped zeros: the conformance kit's 1 GiB allocation stays cheap.
        return DeviceBuffer(self, nbytes, np.zeros(nbytes, np.uint8))

    def _free(self, buffer, handle):
        pass

    def _create_stream(self):
        return WorkerStream(self)

    def _create_event(self):
        return WorkerEvent(self)

    def _copy_host_to_device(self, staged, dst, off, stream):
        view = dst.handle[off:off + staged.size]
        stream.launch_host_func(lambda: np.copyto(view, staged))

    def _copy_device_to_host(self, src, off, host, stream):
        view = src.handle[off:off + host.size]
        stream.launch_host_func(lambda: np.copyto(host, view))

    def _copy_device_to_device(self, src, so, dst, do, n, stream):
        a, b = src.handle[so:so + n], dst.handle[do:do + n]
        stream.launch_host_func(lambda: np.copyto(b, a))


class NumpyManager(DeviceManager):
    def _new_device(self, index):
        return self.device_class(self, index)

    def _device_count(self, primary_device_index):
        return 1


class NumpyFactory(DeviceManagerFactory):
    """Set `device_type` (and `device_class`, a NumpyDevice subclass) in a subclass."""
    device_class = NumpyDevice

    def new_manager(self, registry):
        manager = NumpyManager(registry, self.device_type)
        manager.device_class = self.device_class
        return manager


def array(buffer, shape, dtype):
    """A numpy view of a device buffer (kernels compute in place on it)."""
    dt = np.dtype(dtype)
    return buffer.handle[:int(np.prod(shape, dtype=np.int64)) * dt.itemsize].view(dt).reshape(shape)


def interpret(block, args, step, terminators=("func.return",)):
    """Runs `block` on numpy arrays: constants are materialized, the
    terminator's operands returned, every other op computed by `step(op, ins)`."""
    env = dict(zip(block.args, args))
    for op in block.ops:
        ins = [env.get(v) for v in op.operands]
        if op.name in terminators:
            return ins
        if op.name == "onnx.Constant":
            out = np.asarray(op.attributes["value"].value)
        elif op.name == "onnx.NoValue":
            out = None
        else:
            out = step(op, ins)
        env[op.results[0]] = out
    raise RuntimeError("function without a return")


def pack_ir(module, names):
    """Payload: the partition functions' IR and their constants, zipped."""
    from tcc.dialects.ir import print_module
    with tempfile.TemporaryDirectory() as d:
        print_module(module, path=os.path.join(d, IR_MEMBER))
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for f in sorted(os.listdir(d)):
                z.write(os.path.join(d, f), f)
            z.writestr("functions.json", json.dumps(list(names)))
        return buf.getvalue()


class IRModule:
    """A payload of `pack_ir` parsed with tcc's dialects and the plugin's
    `dialects`; each function runs `evaluate(block, inputs)` on the stream it
    is called with."""

    def __init__(self, payload, dialects, evaluate):
        from tcc.dialects.init_all import default_context
        from tcc.dialects.ir import parse_module
        self.evaluate = evaluate
        context = default_context().copy()
        for d in dialects:
            context.load(d)
        with tempfile.TemporaryDirectory() as d:
            with zipfile.ZipFile(io.BytesIO(payload)) as z:
                for name in z.namelist():  # only the members pack_ir writes, never a path
                    if name in (IR_MEMBER, IR_MEMBER + ".resources"):
                        with open(os.path.join(d, name), "wb") as f:
                            f.write(z.read(name))
            path = os.path.join(d, IR_MEMBER)
            with open(path) as f:
                self.module = parse_module(f.read(), path, context)
            for name in list(self.module.resources):  # constants outlive the temp dir
                self.module.resources.set(name, np.array(self.module.resources.get(name)))
        self.funcs = {f.get_attr("sym_name"): f for f in self.module.functions()}

    def get_function(self, name):
        from tcc.dialects.ir import to_numpy_dtype
        func = self.funcs[name]
        ft = func.get_attr("function_type")
        block = func.regions[0].blocks[0]

        def run(buffers, stream):
            ins = [array(b, t.shape, to_numpy_dtype(t.element)) for b, t in zip(buffers, ft.inputs)]
            outs = [array(b, t.shape, to_numpy_dtype(t.element))
                    for b, t in zip(buffers[len(ft.inputs):], ft.results)]

            def work():
                for o, v in zip(outs, self.evaluate(block, ins)):
                    np.copyto(o, v)
            stream.launch_host_func(work)
        return run
