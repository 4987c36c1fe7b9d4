"""`tcc-accel new NAME [--dir DIR]`: writes a working accelerator plugin
package to start from: the entry point, a numpy-backed device, one op
claimed (Relu, f32) with its lowering into the plugin's own dialect and its
runtime, a README, and tests that run the conformance kit. After
`pip install -e DIR`, `tcc-accel check NAME` passes."""
from __future__ import annotations

import keyword
import os
import re

from .io import CLIError

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,30}$")

PYPROJECT = '''[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "tcc-accel-@NAME@"
version = "0.1.0"
description = "@NAME@: a tcc accelerator plugin"
requires-python = ">=3.10"
dependencies = ["tcc", "numpy"]

[project.optional-dependencies]
test = ["pytest", "onnxruntime"]

# This entry point is what makes `tcc --maccel=@NAME@` find the plugin.
[project.entry-points."tcc.accelerators"]
@NAME@ = "@MOD@:plugin"

[tool.setuptools]
packages = ["@MOD@"]
'''

INIT = '''"""@NAME@: a tcc accelerator plugin (written by `tcc-accel new`). Each hook
is one part of the contract in tcc.accelerators.hookspecs; this one claims
f32 Relu, lowers it to @NAME@.relu and runs it with numpy on its own device."""
from tcc.accelerators import API_VERSION, AcceleratorInfo, RuntimeModule, Support, hookimpl

from . import lowering, runtime
from .device import Factory

CLAIMED = {"onnx.Relu"}


class Plugin:
    @hookimpl
    def tcc_accelerator_info(self):
        return AcceleratorInfo("@NAME@", "0.1.0", API_VERSION, "numpy-backed @NAME@ accelerator")

    @hookimpl
    def tcc_register_dialects(self, context):
        context.load(lowering.dialect())

    @hookimpl
    def tcc_supports_op(self, op, module):
        """Which ops placement may give @NAME@; the reason shows in --placement-report."""
        if op.name not in CLAIMED:
            return Support.no("op unsupported")
        for v in list(op.operands) + list(op.results):
            if str(getattr(v.type, "element", v.type)) != "f32":
                return Support.no(f"dtype {v.type} unsupported (f32 only)")
            if not getattr(v.type, "has_static_shape", False):
                return Support.no(f"shape {v.type} unsupported (static shapes only)")
        return Support.yes()

    @hookimpl
    def tcc_graph_to_loop(self, func, module, context):
        return lowering.lower_function(func)

    @hookimpl
    def tcc_loop_to_native(self, funcs, module, context, target):
        names = [f.get_attr("sym_name") for f in funcs]
        return RuntimeModule("@NAME@", runtime.pack(module, names), tuple(names), format="@NAME@-ir-zip")

    @hookimpl
    def tcc_device_manager_factory(self):
        return Factory()

    @hookimpl
    def tcc_load_runtime_module(self, module, device):
        return runtime.load(module.payload)


plugin = Plugin()
'''

DEVICE = '''"""The @NAME@ device. It starts as tcc's numpy device (memory is numpy arrays
in its own space, so a copy in or out is a real copy; streams are tcc's
worker threads): override NumpyDevice's methods (_alloc, _free,
_copy_host_to_device, _copy_device_to_host, _copy_device_to_device,
_create_stream, _create_event, _get_attr) with your driver's calls."""
from tcc.accelerators.numpy_kit import NumpyDevice, NumpyFactory


class Device(NumpyDevice):
    device_name = "@NAME@ (numpy)"


class Factory(NumpyFactory):
    device_type = "@NAME@"
    device_class = Device
'''

LOWERING = '''"""The @NAME@ dialect and the lowering of a partition into it:
onnx.Relu -> @NAME@.relu. Add an OpDef and a branch per op you claim."""
from tcc.dialects.ir import PURE, Dialect, OpDef, OperandDef, Operation


def dialect():
    return Dialect("@NAME@", [
        OpDef("@NAME@.relu", [OperandDef("x")], [OperandDef("y")], traits=frozenset({PURE})),
    ], "the @NAME@ accelerator's ops")


def lower_function(func):
    """onnx ops of a @NAME@ partition -> @NAME@ ops; returns the op names left over."""
    left = []
    block = func.regions[0].blocks[0]
    for op in list(block.ops):
        if op.name == "onnx.Relu":
            new = Operation("@NAME@.relu", op.operands, [op.results[0].type], loc=op.loc)
            block.insert_before(op, new)
            op.results[0].replace_all_uses_with(new.results[0])
            op.erase()
        elif op.name not in ("onnx.Constant", "func.return"):
            left.append(op.name)
    return left
'''

RUNTIME = '''"""Running @NAME@ code: a partition's payload is its @NAME@-dialect IR
(tcc.accelerators.numpy_kit packs it); each function is interpreted with
numpy on device buffers. Replace `pack` and `load` with your compiler's
binary format and loader."""
import numpy as np

from tcc.accelerators.numpy_kit import IRModule, interpret, pack_ir

from .lowering import dialect

KERNELS = {"@NAME@.relu": lambda x: np.maximum(x, 0).astype(x.dtype)}


def evaluate(block, args):
    """Runs one partition function's block on numpy arrays; returns its results."""
    return interpret(block, args, lambda op, ins: KERNELS[op.name](*ins))


pack = pack_ir  # the payload stored in the artifact: the functions' IR and constants


def load(payload):
    return IRModule(payload, [dialect()], evaluate)
'''

TEST = '''"""The @NAME@ plugin against tcc's conformance kit and onnxruntime."""
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tcc


def tool(name):
    return os.path.join(os.path.dirname(sys.executable), name)


def test_conformance_kit():
    """The device conformance tests on @NAME@:0, then the ONNX Relu node tests through @NAME@."""
    r = subprocess.run([tool("tcc-accel"), "check", "@NAME@", "-k", "test_relu", "-j", "2"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "node tests: " in r.stdout and " 0 wrong, 0 crashed" in r.stdout, r.stdout


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 8, 8)])
def test_relu_runs_on_the_accelerator(tmp_path, shape):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(m, tmp_path / "m.onnx")
    sess = tcc.load(tcc.compile(str(tmp_path / "m.onnx"), maccel=["@NAME@"], cache=False))
    steps = [s.get("accelerator", "host") for s in sess.manifest["plan"]]
    assert "@NAME@" in steps, steps
    x = np.random.default_rng().standard_normal(shape).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(sess.run({"x": x})[0], want)
'''

README = '''# tcc-accel-@NAME@

A [tcc](https://pypi.org/project/tcc/) accelerator plugin, started with `tcc-accel new @NAME@`.
It claims f32 `Relu`, lowers it to its own `@NAME@.relu` op and runs it with numpy
on a device of its own (`@NAME@`), so copies in and out are real.

```sh
pip install -e .                          # registers the entry point "@NAME@"
tcc-accel check @NAME@                    # device conformance + ONNX node tests through @NAME@
tcc --maccel=@NAME@ --placement-report model.onnx
pip install -e '.[test]' && pytest tests  # the same checks, plus a run against onnxruntime
```

Where to go next:

| file | what to change |
|---|---|
| `@MOD@/__init__.py` | the hooks: `CLAIMED` and `tcc_supports_op` (what you take, and why not), composites, options |
| `@MOD@/lowering.py` | your dialect's ops and the rewrite of each claimed onnx op into them |
| `@MOD@/runtime.py` | packing a partition into the artifact and running it (`KERNELS`) |
| `@MOD@/device.py` | memory, copies, streams and events of your device |

Every hook is documented in `tcc.accelerators.hookspecs`; `examples/tcc-accel-sim`
in tcc's repository is a larger plugin (composites, options, a pass of its own).
'''

FILES = {"pyproject.toml": PYPROJECT, "README.md": README, "@MOD@/__init__.py": INIT,
         "@MOD@/device.py": DEVICE, "@MOD@/lowering.py": LOWERING, "@MOD@/runtime.py": RUNTIME,
         "tests/test_@MOD@.py": TEST}


def new_plugin(name: str, directory: str | None = None) -> str:
    """Writes the package for accelerator `name`; returns its folder."""
    if not _NAME.match(name) or keyword.iskeyword(name):
        raise CLIError(f"accelerator name {name!r}: use a lowercase identifier such as 'npu' "
                       f"(letters, digits, '_'; it names the dialect, the device type and the entry point)")
    from tcc.accelerators.manager import available_names
    if name in available_names():
        raise CLIError(f"accelerator name '{name}' is already installed (installed: {', '.join(available_names())})")
    directory = directory or f"tcc-accel-{name}"
    if os.path.exists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
        raise CLIError(f"{directory}: already exists and is not an empty folder")
    mod = f"tcc_accel_{name}"
    subs = {"@NAME@": name, "@MOD@": mod}
    written = []
    try:
        for rel, text in FILES.items():
            for k, v in subs.items():
                rel, text = rel.replace(k, v), text.replace(k, v)
            path = os.path.join(directory, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "x") as f:
                f.write(text)
            written.append(path)
    except OSError as e:
        for path in written:  # no half-written package left behind
            os.unlink(path)
        raise CLIError(f"{directory}: cannot write the package ({e.strerror})") from None
    return directory
