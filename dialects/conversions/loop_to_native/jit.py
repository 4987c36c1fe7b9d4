"""`run_native(module, inputs)`: compiles a lowered module and runs it in
this process, the native twin of `tcc.dialects.loop.interpreter.run_loop_module`
(tests compare the two)."""
from __future__ import annotations

import ctypes

import numpy as np

from tcc.dialects.ir.types import to_numpy_dtype

from .codegen import lower_module
from tcc.dialects.loop.transforms.plan_memory import PlanMemory
from .target import emit_object, optimize


class NativeFunction:
    def __init__(self, module, opt_level=3, plan=True):
        from tcc.runtime.jit import jit_entry as _jit
        from tcc.runtime.signature import aligned_empty
        func = module.lookup_function("main_graph")
        if plan and func is not None and func.get_attr("tcc.workspace_bytes") is None:
            PlanMemory().run(module, None)
        self.lowered = low = lower_module(module)
        self.object = emit_object(optimize(low.llvm_ir, opt_level), opt_level)
        self._engine, self._entry = _jit(self.object)
        self._weights = [np.ascontiguousarray(w.array) for w in low.weights]
        self._wptrs = (ctypes.c_void_p * max(len(self._weights), 1))(*[w.ctypes.data for w in self._weights])
        self._ws = aligned_empty((max(low.workspace_bytes, 1),), np.uint8)
        self._aligned_empty = aligned_empty

    def __call__(self, *inputs):
        low = self.lowered
        ins = []
        for x, t in zip(inputs, low.inputs):
            a = self._aligned_empty(t.shape, to_numpy_dtype(t.element))
            a[...] = np.asarray(x).astype(a.dtype, copy=False).reshape(t.shape)
            ins.append(a)
        outs = [self._aligned_empty(t.shape, to_numpy_dtype(t.element)) for t in low.outputs]
        ptrs = (ctypes.c_void_p * max(len(ins) + len(outs), 1))(*[a.ctypes.data for a in ins + outs])
        self._entry(ptrs, self._wptrs, self._ws.ctypes.data)
        return outs


def run_native(module, inputs, opt_level=3):
    return NativeFunction(module, opt_level)(*inputs)
