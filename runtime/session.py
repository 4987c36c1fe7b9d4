"""`Session`: runs a host-only compiled artifact (`tcc.load(path)` returns one;
`runtime/loader.py` picks the session kind).

The host object code is loaded by `runtime/jit.py`; signatures and input
checks are `runtime/signature.py`'s.

One `run` is one call of the native entry (no per-op Python); weights are
memory-mapped from the artifact once per session, the workspace is allocated
once per session, inputs are passed in place when already contiguous, 64-byte
aligned and of the right dtype (copied into aligned buffers otherwise), and
outputs are fresh 64-byte aligned arrays."""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from .artifact import read_artifact
from .jit import jit_entry
from .signature import InputError, SignatureMixin, aligned_empty, data_ptr, format_specs


class Session(SignatureMixin):
    def __init__(self, path, artifact=None):
        self.artifact = art = artifact if artifact is not None else read_artifact(path)
        self.path = art.path
        self.manifest = art.manifest
        self._inputs, self._outputs = art.inputs, art.outputs
        self._engine, self._entry = jit_entry(art.host_object)
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
                args[i] = data_ptr(a)
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
        return f"<tcc.Session {self.path}: ({format_specs(self._inputs)}) -> ({format_specs(self._outputs)})>"
