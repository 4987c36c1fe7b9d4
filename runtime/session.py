"""`Session`: runs a compiled artifact (`tcc.load(path)` returns one).

The host object code is loaded with llvmlite's MCJIT (`add_object_file`)
rather than linked into a shared library with the system linker: it needs no
compiler or linker at run time and loads in ~2 ms against ~27 ms for
`cc -shared` + dlopen on a small model (measured on the 2-core CI machine).
Symbols resolve against the process (libm) and the runtime library
(`tcc_parallel_for`), loaded first.

One `run` is one call of the native entry (no per-op Python); weights are
memory-mapped from the artifact once per session, the workspace is allocated
once per session, inputs are passed in place when already contiguous, 64-byte
aligned and of the right dtype (copied into aligned buffers otherwise), and
outputs are fresh 64-byte aligned arrays."""
from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np

from tcc.dialects.ir.errors import TccError

from .artifact import ArtifactError, read_artifact

ALIGN = 64
_ENTRY_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class InputError(TccError):
    pass


def aligned_empty(shape, dtype, align=ALIGN):
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(n + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + n].view(dtype).reshape(shape)


def _jit(obj: bytes):
    import llvmlite.binding as llvm

    from tcc.dialects.conversions.loop_to_native.target import check_symbols
    check_symbols(obj, "the artifact's host code")  # loads the runtime and helper libraries
    tm = llvm.Target.from_default_triple().create_target_machine(jit=True)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    addr = engine.get_function_address("tcc_main_graph")
    if not addr:
        raise TccError("the artifact's object code has no tcc_main_graph entry")
    return engine, _ENTRY_T(addr)


def _sig(specs):
    return [{"name": t.name, "shape": list(t.shape), "dtype": str(t.dtype)} for t in specs]


def _fmt(specs):
    return ", ".join(f"{t.name}: {t.dtype}{list(t.shape)}" for t in specs)


_jit_entry = _jit


def device_tensor(value):
    """`value` as a tcc Tensor when it lives in non-host memory (anything
    speaking DLPack), else None."""
    from .device.tensor import Tensor
    if isinstance(value, Tensor):
        return value if value.device.host_view(value.buffer) is None else None
    if isinstance(value, np.ndarray) or not hasattr(value, "__dlpack_device__"):
        return None
    code, _ = value.__dlpack_device__()
    if int(code) in (1, 3):  # kDLCPU, kDLCUDAHost: numpy reads it in place
        return None
    return Tensor.from_dlpack(value)


def host_array(value):
    """`value` itself, or a host copy of it when it lives on a device."""
    t = device_tensor(value)
    return value if t is None else np.ascontiguousarray(t.numpy())


def _target_device(output_device):
    """The Device outputs go to, or None for plain numpy on the host."""
    if output_device is None:
        return None
    from .device import get_device
    dev = get_device(output_device)
    return None if dev.type == "cpu" else dev


def _refs(entry):
    """Reference counts of a cached output array and of its memory's owner."""
    return sys.getrefcount(entry[0]), sys.getrefcount(entry[1])


class SignatureMixin:
    """What every session kind shares: the signature (like onnx-mlir's
    OMExecutionSession) and matching the caller's inputs to it. Subclasses
    set `_inputs` and `_outputs` (TensorSpec lists)."""

    @property
    def input_signature(self):
        """[{name, shape, dtype}] of the inputs, in order."""
        return _sig(self._inputs)

    @property
    def output_signature(self):
        return _sig(self._outputs)

    @property
    def input_names(self):
        return [t.name for t in self._inputs]

    @property
    def output_names(self):
        return [t.name for t in self._outputs]

    def _output_buffer(self, i, spec):
        """A fresh output array, or last call's one when nothing outside
        this session references it or its memory any more: large outputs
        then cost no page faults per call (as a runtime's arena would)."""
        cache = self.__dict__.setdefault("_out_cache", {})
        hit = cache.get(i)
        if hit is not None and _refs(hit) == hit[2]:
            return hit[0], hit[3]
        arr = aligned_empty(spec.shape, spec.dtype)
        entry = [arr, arr.base if arr.base is not None else arr, None, arr.ctypes.data]
        del arr
        entry[2] = _refs(entry)  # the counts when only the cache holds them
        cache[i] = entry
        return entry[0], entry[3]

    def _arrange(self, inputs):
        specs = self._inputs
        if isinstance(inputs, dict):
            names = self.__dict__.get("_in_names")
            if names is None:
                names = self._in_names = tuple(t.name for t in specs)
            if len(inputs) == len(names):  # then every name present means no unknown one
                try:
                    return [inputs[n] for n in names]
                except KeyError:
                    pass
            unknown = [k for k in inputs if k not in {t.name for t in specs}]
            if unknown:
                raise InputError(f"unknown input '{unknown[0]}'; the model takes {_fmt(specs)}")
            missing = [t.name for t in specs if t.name not in inputs]
            if missing:
                raise InputError(f"missing input '{missing[0]}'; the model takes {_fmt(specs)}")
            return [inputs[t.name] for t in specs]
        inputs = list(inputs)
        if len(inputs) != len(specs):
            raise InputError(f"got {len(inputs)} inputs, the model takes {len(specs)}: {_fmt(specs)}")
        return inputs

    def _check_meta(self, spec, dtype, shape):
        if dtype != spec.dtype:
            raise InputError(f"input '{spec.name}' has dtype {dtype}, expected {spec.dtype} "
                             f"(signature: {_fmt(self._inputs)})")
        if tuple(shape) != tuple(spec.shape):
            raise InputError(f"input '{spec.name}' has shape {list(shape)}, expected {list(spec.shape)} "
                             f"(signature: {_fmt(self._inputs)})")

    def _prepare_any(self, value, spec):
        """A numpy array for host values, or a checked tcc Tensor for values
        living on another device (DLPack: cupy, torch CUDA tensors, Tensor)."""
        t = device_tensor(value)
        if t is None:
            return self._prepare(value, spec)
        self._check_meta(spec, t.dtype, t.shape)
        return t

    def _deliver(self, arrays, output_device):
        """Host output arrays as the caller asked: numpy (the default), or
        tcc Tensors on `output_device` (DLPack-capable: cupy.from_dlpack,
        torch.from_dlpack, .numpy())."""
        dev = _target_device(output_device)
        if dev is None:
            return arrays
        from .device.tensor import Tensor
        return [Tensor.from_dlpack(a, device=dev) for a in arrays]

    def _prepare(self, value, spec):
        if type(value) is np.ndarray and value.dtype == spec.dtype and value.shape == spec.shape \
                and value.flags.c_contiguous and value.flags.aligned:
            return value  # the common case, first: it is on every call's path
        value = host_array(value)  # device memory: a host session computes on a host copy
        if not isinstance(value, np.ndarray):
            value = np.asarray(value, dtype=spec.dtype)
        self._check_meta(spec, value.dtype, value.shape)
        # Generated code assumes only element alignment (what numpy
        # guarantees), so a contiguous array is used in place: copying a
        # large input cost more than the whole fused kernel.
        if value.flags.c_contiguous and value.flags.aligned:
            return value
        return np.ascontiguousarray(value)


class Session(SignatureMixin):
    def __init__(self, path, artifact=None):
        self.artifact = art = artifact if artifact is not None else read_artifact(path)
        self.path = art.path
        self.manifest = art.manifest
        self._inputs, self._outputs = art.inputs, art.outputs
        self._engine, self._entry = _jit(art.host_object)
        self._weights = art.weight_arrays()  # kept alive: the native code reads them
        self._wptrs = (ctypes.c_void_p * max(len(self._weights), 1))(*[w.ctypes.data for w in self._weights])
        ws = int(self.manifest["compile"].get("workspace_bytes", 0))
        self._workspace = aligned_empty((max(ws, 1),), np.uint8)
        self._workspace_ptr = self._workspace.ctypes.data
        self._args = (ctypes.c_void_p * max(len(self._inputs) + len(self._outputs), 1))()
        self._lock = threading.Lock()  # one workspace: runs on one session are serialised

    def run(self, inputs, output_names=None, output_device=None):
        """inputs: {name: array} or a list in signature order -> list of
        output arrays (all outputs, or those named in `output_names`);
        numpy arrays, or Tensors on `output_device` ("gpu", "gpu:1", ...)."""
        ins = [self._prepare(v, t) for v, t in zip(self._arrange(inputs), self._inputs)]
        if output_names is not None:
            known = self.output_names
            for n in output_names:
                if n not in known:
                    raise InputError(f"unknown output '{n}'; the model has outputs {', '.join(known)}")
        with self._lock:
            args = self._args
            for i, a in enumerate(ins):
                args[i] = a.ctypes.data
            outs = []
            for i, t in enumerate(self._outputs):
                arr, ptr = self._output_buffer(i, t)
                args[len(ins) + i] = ptr
                outs.append(arr)
            self._entry(args, self._wptrs, self._workspace_ptr)
        if output_names is not None:
            by_name = dict(zip(self.output_names, outs))
            outs = [by_name[n] for n in output_names]
        return self._deliver(outs, output_device)

    def __repr__(self):
        return f"<tcc.Session {self.path}: ({_fmt(self._inputs)}) -> ({_fmt(self._outputs)})>"


def load(path):
    """A Session for a host-only artifact; a PlanSession (runtime.executor)
    for a model placed on accelerators."""
    from .plan_artifact import is_plan
    from .specialize import is_specializing
    art = read_artifact(path)
    try:
        if is_specializing(art.manifest):
            from .specialize import SpecializingSession
            return SpecializingSession(art)
        if is_plan(art.manifest):
            from .executor import PlanSession
            return PlanSession(art)
        return Session(path, art)
    except MemoryError:
        raise ArtifactError(f"{art.path}: cannot allocate the memory the artifact asks for (workspace "
                            f"{art.manifest['compile'].get('workspace_bytes', '?')} bytes)") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as e:
        # read_artifact checks the manifest's common fields; what a session
        # kind reads beyond them (plan steps, specialization info) is checked
        # here: any of it malformed makes an invalid artifact, not a crash.
        raise ArtifactError(f"{art.path}: not a valid tcc artifact (malformed manifest: "
                            f"{type(e).__name__}: {e})") from None
