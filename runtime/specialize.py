"""Run-time specialization: models with dynamic dims, or whose graph inputs
decide shapes (Reshape's shape, Slice's starts, Reduce's axes...), cannot be
compiled ahead of time to static loop nests. Their artifact holds the
optimized onnx-dialect IR instead; on each call the session specializes it
for the concrete input shapes and shape-deciding input values, compiles it
natively, and caches the result by that key, in memory and in the compile
cache (runtime/cache.py: the key also covers every recorded option, tcc's and
the plugins' code and the target), so a shape seen once never compiles again.

The runtime does not compile: it is handed a compiler, a callable
`compiler(module, options, path)` that compiles the specialized onnx-dialect
module with the options the artifact recorded (a dict) into the artifact at
`path` (`tcc.load` hands it the driver's `pipeline.compile_specialized`).
The artifact itself is written ahead of time by `driver/specializing.py`."""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading

import numpy as np

from tcc.dialects.ir.errors import TccError

from . import cache, containers
from .signature import InputError, SignatureMixin, format_specs

IR_MEMBER, RES_MEMBER = "model.mlir", "model.mlir.resources"


class _Staged(Exception):
    """Carries a StagedRun out of the compile cache's build callback: a
    specialization cut at a data-dependent op runs as an object, not a file."""


def is_specializing(manifest):
    return any(step.get("kind") == "specialize" for step in manifest.get("plan", []))


class SpecializingSession(SignatureMixin):
    def __init__(self, artifact, compiler=None, load_static=None):
        """`compiler` compiles a specialization (see above); `load_static`
        loads the static artifact it writes (runtime.loader hands it in)."""
        self.artifact = art = artifact
        self._compiler, self._load = compiler, load_static
        self.path, self.manifest = art.path, art.manifest
        self._inputs, self._outputs = art.inputs, art.outputs
        self._ir = art.members[IR_MEMBER].decode("utf-8")
        self._res = art.members.get(RES_MEMBER)
        self._shape_args = set(self.manifest["specialize"]["shape_operand_inputs"])
        # Every compile option, as recorded: each specialization is the same compile.
        self._options = dict(self.manifest.get("compile", {}).get("options", {}))
        self._options.setdefault("opt_level", int(self.manifest["specialize"].get("opt_level", 2)))
        self._opt_level = int(self._options["opt_level"])
        self._maccel = list(self._options.get("maccel", []))
        self._digest = hashlib.sha256(art.members[IR_MEMBER] + (self._res or b"")).hexdigest()
        self._cache = {}
        self._base_key = None
        self._tmpdir = None
        self._lock = threading.Lock()

    def _key(self, inputs):
        if self._base_key is None:  # the IR, every recorded option, code and target: once per session
            self._base_key = cache.make_key("specialize", self._digest.encode(), self._options, self._maccel)
        h = hashlib.sha256(self._base_key.encode())
        for i, (v, t) in enumerate(zip(inputs, self._inputs)):
            if t.container:  # a list / None: its structure and element shapes
                h.update(containers.key(v).encode())
                continue
            h.update(repr(v.shape).encode())
            if i in self._shape_args:
                h.update(np.ascontiguousarray(v).tobytes())
        return h.hexdigest()

    def _compiled(self, inputs):
        key = self._key(inputs)
        sess = self._cache.get(key)
        if sess is not None:
            return sess
        load = self._load  # a host Session, or a PlanSession when placed
        if not cache.plugins_cacheable(self._maccel):  # in-process plugins: no code to key on
            if self._tmpdir is None:
                self._tmpdir = tempfile.TemporaryDirectory(prefix="tcc-spec-")
            path = os.path.join(self._tmpdir.name, key + ".tcc")
            sess = self._cache[key] = self._compile(inputs, path) or load(path)
            return sess

        def build(tmp):
            staged = self._compile(inputs, tmp)
            if staged is not None:
                raise _Staged(staged, tmp)
        try:
            path, hit = cache.get_or_build(key, build)
        except _Staged as e:
            sess, tmp = e.args
            for side in (".prefix.tcc", ".suffix.tcc"):  # loaded (mapped) already: the files may go
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp + side)
            self._cache[key] = sess
            return sess
        try:
            sess = load(path)
        except TccError:
            if not hit:
                raise
            cache.remove(key)  # stale or corrupt: compile again
            sess = load(cache.get_or_build(key, build)[0])
        self._cache[key] = sess
        return sess

    def _compile(self, inputs, path):
        from tcc.dialects.ir import parse_module
        from tcc.dialects.init_all import new_context
        from tcc.dialects.ir import attributes as A
        from tcc.dialects.ir.core import Operation
        from tcc.dialects.ir.types import TensorType
        if self._compiler is None:
            raise TccError(f"{self.path}: this model compiles for each input shape at run time, and this "
                           f"session was given no compiler (load it with tcc.load)")
        ctx = new_context()  # the stored IR is unplaced onnx: the in-tree dialects parse it
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
            if containers.is_container(a.type):
                a.type = containers.concrete_type(a.type, v)
                continue
            a.type = TensorType(v.shape, a.type.element)
            if i in self._shape_args:
                const = Operation("onnx.Constant", [], [a.type],
                                  {"value": A.DenseElementsAttr(np.array(v), a.type)})
                block.insert_before(block.first, const)
                for user, idx in list(a.uses):
                    user.set_operand(idx, const.results[0])
        from tcc.dialects.transforms.shape_inference import ShapeMismatch
        try:
            res = self._compiler(module, dict(self._options), path)
        except ShapeMismatch as e:
            given = ", ".join(f"'{t.name}' {list(v.shape)}" for t, v in zip(self._inputs, inputs))
            raise InputError(f"inputs {given} do not fit the model: {e}") from None
        # the compiled file's path, or a StagedRun (a data-dependent output
        # shape: runtime/staged.py) that runs itself
        return res if hasattr(res, "run") else None

    def specializations(self):
        """The sessions compiled so far (one per input shape/value key)."""
        return list(self._cache.values())

    def run(self, inputs, output_names=None, output_device=None):
        arrays = self._check_dynamic(inputs)
        with self._lock:
            sess = self._compiled(arrays)
        return sess.run(arrays, output_names, output_device)

    def __repr__(self):
        return f"<tcc.SpecializingSession {self.path}: ({format_specs(self._inputs)}) -> ({format_specs(self._outputs)})>"
