"""Run-time specialization: models with dynamic dims, or whose graph inputs
decide shapes (Reshape's shape, Slice's starts, Reduce's axes...), cannot be
compiled ahead of time to static loop nests. Their artifact holds the
optimized onnx-dialect IR instead; on each call the session specializes it
for the concrete input shapes and shape-deciding input values, compiles it
natively, and caches the result by that key, in memory and in the compile
cache (runtime/cache.py: the key also covers tcc's and the plugins' code and
the target), so a shape seen once never compiles again."""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading

import numpy as np

from tcc.dialects.ir.errors import TccError

from . import cache
from .artifact import TensorSpec
from .session import InputError, SignatureMixin, _fmt, host_array

IR_MEMBER, RES_MEMBER = "model.mlir", "model.mlir.resources"

# Operands whose VALUES decide result shapes (by schema input name): a graph
# input feeding one is specialized on its value, not only its shape.
SHAPE_OPERANDS = {"shape", "starts", "ends", "axes", "steps", "pads", "repeats", "k", "K", "split", "scales",
                  "sizes", "roi", "depth", "limit", "start", "delta", "num_outputs", "output_shape",
                  "axis", "reduction_axes", "image_shape", "block_shape", "size", "dft_length",
                  "frame_step", "frame_length", "M", "cond"}
# Ops whose result depends on their input's shape only, never its values: a
# graph input reaching a Reshape through Shape (x.reshape(x.shape[0], -1), as
# torch exports) is specialized on its shape alone, not recompiled per value.
SHAPE_OF = {"onnx.Shape", "onnx.Size"}
# ConstantOfShape / EyeLike-style ops whose first input is a shape.
SHAPE_FIRST_INPUT = {"onnx.ConstantOfShape"}


def _decides_shape(user, idx):
    from tcc.dialects.onnx.dialect import schema_for, split_op_name
    if user.name in SHAPE_FIRST_INPUT and idx == 0:
        return True
    dom, short = split_op_name(user.name)
    if dom is None:
        return False
    s = schema_for(dom, short)
    return s is not None and idx < len(s.inputs) and s.inputs[idx].name in SHAPE_OPERANDS


def _shape_like(v):
    """A small integer (or float, or bool) tensor: what shape arithmetic
    (Gather, Concat, Add, Slice of a shape; a Range length computed as
    ceil((limit - start) / delta) in floats) passes along."""
    t = v.type
    el = str(getattr(t, "element", ""))
    shape = getattr(t, "shape", None)
    return el in ("i64", "i32", "i1", "f16", "bf16", "f32", "f64") and shape is not None and len(shape) <= 1 and \
        all(d is not None and d <= 16 for d in shape)


def shape_operand_args(module):
    """Indices of @main_graph arguments whose values decide shapes: used as
    a shape operand, directly or through shape arithmetic on small integer
    tensors (an expanded function computing a Range limit from `size`)."""
    func = module.lookup_function("main_graph")
    out = set()
    for i, a in enumerate(func.regions[0].blocks[0].args):
        todo, seen = [a], set()
        while todo and i not in out:
            v = todo.pop()
            for user, idx in v.uses:
                if _decides_shape(user, idx):
                    out.add(i)
                    break
                if user in seen or user.name in SHAPE_OF or not user.results or \
                        not all(_shape_like(r) for r in user.results):
                    continue
                seen.add(user)
                todo.extend(user.results)
    return sorted(out)


def needs_specialization(module):
    func = module.lookup_function("main_graph")
    args = func.regions[0].blocks[0].args
    dynamic = any(not getattr(a.type, "has_static_shape", True) for a in args)
    return dynamic or bool(shape_operand_args(module))


def write_specializing_artifact(path, module, options):
    """The optimized onnx-dialect IR, to be specialized and compiled at run time."""
    from tcc.dialects.ir import print_module

    from .artifact import FORMAT, FORMAT_VERSION, write_zip
    func = module.lookup_function("main_graph")
    block = func.regions[0].blocks[0]

    def names(key, n, prefix):
        attrs = func.get_attr(key) or []
        return [(attrs[i]["onnx.name"].value if i < len(attrs) and "onnx.name" in attrs[i] else f"{prefix}{i}")
                for i in range(n)]

    def spec(name, t):
        from tcc.dialects.ir.types import TensorType
        if not isinstance(t, TensorType) or t.shape is None:
            raise TccError(f"'{name}' has type {t}: only tensors of known rank can be specialized at run time")
        shape = [-1 if d is None else d for d in t.shape]
        return TensorSpec(name, tuple(shape), str(t.element)).to_json()

    ins = [spec(n, a.type) for n, a in zip(names("arg_attrs", len(block.args), "input_"), block.args)]
    rets = block.last.operands
    outs = [spec(n, v.type) for n, v in zip(names("res_attrs", len(rets), "output_"), rets)]
    with tempfile.TemporaryDirectory(prefix="tcc-art-") as d:
        ir_path = os.path.join(d, IR_MEMBER)
        print_module(module, path=ir_path)
        members = {IR_MEMBER: open(ir_path, "rb").read()}
        if os.path.exists(ir_path + ".resources"):
            members[RES_MEMBER] = open(ir_path + ".resources", "rb").read()
    import tcc
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION,
                "signature": {"inputs": ins, "outputs": outs}, "weights": [],
                "plan": [{"kind": "specialize", "ir": IR_MEMBER}],
                "specialize": {"shape_operand_inputs": shape_operand_args(module), "opt_level": options.opt_level},
                "compile": {"tcc": tcc.__version__, "target": {"features": []},
                            "options": {"opt_level": options.opt_level, "maccel": list(options.maccel)}}}
    return write_zip(path, manifest, members, b"")


def is_specializing(manifest):
    return any(step.get("kind") == "specialize" for step in manifest.get("plan", []))


class SpecializingSession(SignatureMixin):
    def __init__(self, artifact):
        self.artifact = art = artifact
        self.path, self.manifest = art.path, art.manifest
        self._inputs, self._outputs = art.inputs, art.outputs
        self._ir = art.members[IR_MEMBER].decode("utf-8")
        self._res = art.members.get(RES_MEMBER)
        self._shape_args = set(self.manifest["specialize"]["shape_operand_inputs"])
        self._opt_level = int(self.manifest["specialize"].get("opt_level", 2))
        self._maccel = list(self.manifest.get("compile", {}).get("options", {}).get("maccel", []))
        self._digest = hashlib.sha256(art.members[IR_MEMBER] + (self._res or b"")).hexdigest()
        self._cache = {}
        self._base_key = None
        self._tmpdir = None
        self._lock = threading.Lock()

    @property
    def input_signature(self):
        return [{"name": t.name, "shape": [None if d < 0 else d for d in t.shape], "dtype": str(t.dtype)}
                for t in self._inputs]

    @property
    def output_signature(self):
        return [{"name": t.name, "shape": [None if d < 0 else d for d in t.shape], "dtype": str(t.dtype)}
                for t in self._outputs]

    def _check(self, inputs):
        specs = self._inputs
        inputs = [np.asarray(host_array(v)) for v in self._arrange(inputs)]
        for v, t in zip(inputs, specs):
            if v.dtype != t.dtype:
                raise InputError(f"input '{t.name}' has dtype {v.dtype}, expected {t.dtype} "
                                 f"(signature: {_fmt(specs)})")
            if len(v.shape) != len(t.shape) or any(d >= 0 and d != s for d, s in zip(t.shape, v.shape)):
                want = ["?" if d < 0 else d for d in t.shape]
                raise InputError(f"input '{t.name}' has shape {list(v.shape)}, expected {want} "
                                 f"(signature: {_fmt(specs)})")
        return inputs

    def _key(self, inputs):
        if self._base_key is None:  # the IR, options, code and target: once per session
            self._base_key = cache.make_key("specialize", self._digest.encode(),
                                            {"opt_level": self._opt_level, "maccel": self._maccel}, self._maccel)
        h = hashlib.sha256(self._base_key.encode())
        for i, v in enumerate(inputs):
            h.update(repr(v.shape).encode())
            if i in self._shape_args:
                h.update(np.ascontiguousarray(v).tobytes())
        return h.hexdigest()

    def _compiled(self, inputs):
        key = self._key(inputs)
        sess = self._cache.get(key)
        if sess is not None:
            return sess
        from .session import load  # a host Session, or a PlanSession when placed
        if not cache.plugins_cacheable(self._maccel):  # in-process plugins: no code to key on
            if self._tmpdir is None:
                self._tmpdir = tempfile.TemporaryDirectory(prefix="tcc-spec-")
            path = os.path.join(self._tmpdir.name, key + ".tcc")
            self._compile(inputs, path)
            sess = self._cache[key] = load(path)
            return sess
        path, hit = cache.get_or_build(key, lambda tmp: self._compile(inputs, tmp))
        try:
            sess = load(path)
        except TccError:
            if not hit:
                raise
            cache.remove(key)  # stale or corrupt: compile again
            sess = load(cache.get_or_build(key, lambda tmp: self._compile(inputs, tmp))[0])
        self._cache[key] = sess
        return sess

    def _compile(self, inputs, path):
        from tcc.dialects.ir import new_context, parse_module
        from tcc.dialects.ir import attributes as A
        from tcc.dialects.ir.core import Operation
        from tcc.dialects.ir.types import TensorType
        from tcc.driver.compile import emit
        from tcc.driver.options import CompileOptions
        from tcc.dialects.ir import PassManager, parse_pipeline
        from tcc.driver.pipeline import graph_pipeline, place
        ctx = new_context()
        if self._maccel:  # placed per shape: placement needs static shapes
            from tcc.accelerators.manager import load_accelerators
            from tcc.driver.accelerators import setup_context
            ctx = setup_context(ctx, load_accelerators(self._maccel), self._opt_level)
        with tempfile.TemporaryDirectory(prefix="tcc-spec-") as d:
            ir_path = os.path.join(d, IR_MEMBER)
            with open(ir_path, "w") as f:
                f.write(self._ir)
            if self._res is not None:
                with open(ir_path + ".resources", "wb") as f:
                    f.write(self._res)
            module = parse_module(self._ir, ir_path, ctx)
            for name in list(module.resources):  # the temp dir goes away: own the bytes
                module.resources.set(name, np.array(module.resources.get(name)))
        func = module.lookup_function("main_graph")
        block = func.regions[0].blocks[0]
        for i, (a, v) in enumerate(zip(block.args, inputs)):
            a.type = TensorType(v.shape, a.type.element)
            if i in self._shape_args:
                const = Operation("onnx.Constant", [], [a.type],
                                  {"value": A.DenseElementsAttr(np.array(v), a.type)})
                block.insert_before(block.first, const)
                for user, idx in list(a.uses):
                    user.set_operand(idx, const.results[0])
        options = CompileOptions(maccel=self._maccel, opt_level=self._opt_level, emit="tcc", output=path)
        PassManager(ctx, parse_pipeline(graph_pipeline(max(self._opt_level, 1)), ctx)).run(module)
        if self._maccel:
            place(module, ctx, options)
        emit(module, ctx, options)

    def specializations(self):
        """The sessions compiled so far (one per input shape/value key)."""
        return list(self._cache.values())

    def run(self, inputs, output_names=None, output_device=None):
        arrays = self._check(inputs)
        with self._lock:
            sess = self._compiled(arrays)
        return sess.run(arrays, output_names, output_device)

    def __repr__(self):
        return f"<tcc.SpecializingSession {self.path}: ({_fmt(self._inputs)}) -> ({_fmt(self._outputs)})>"
