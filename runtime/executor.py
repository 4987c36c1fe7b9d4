"""Runs a plan artifact: host steps are native entries (one JIT-loaded
object each), accelerator steps are functions of the accelerators' runtime
modules, values move between devices by the device API's copies at step
boundaries. Accelerators are loaded by name from the installed plugins;
their runtime modules (and so their weights) are loaded once per session,
and every intermediate buffer is allocated once."""
from __future__ import annotations

import ctypes
import threading
import time

import numpy as np

from tcc.accelerators import RuntimeModule
from tcc.accelerators.manager import AcceleratorError, load_accelerators
from tcc.dialects.ir.errors import TccError

from .artifact import TensorSpec
from .device import get_device
from .jit import jit_entry
from .signature import (AllocationError, InputError, SignatureMixin, aligned_empty, check_index_range, data_ptr,
                        format_specs, target_device)

HOST = "cpu"


class PlanSession(SignatureMixin):
    def __init__(self, artifact):
        self.artifact = art = artifact
        self.path, self.manifest = art.path, art.manifest
        self._inputs, self._outputs = art.inputs, art.outputs
        m = self.manifest
        self.values = {n: TensorSpec(n, tuple(v["shape"]), v["element"]) for n, v in m["values"].items()}
        self.host = get_device(HOST)
        self._weights = art.weight_arrays()
        self.steps = []
        self._align = {}  # device -> allocation size multiple its accelerator asked for
        self._accel_modules = self._load_accelerators(m.get("accelerators", {}))
        for step in m["plan"]:
            if step["kind"] == "host":
                engine, entry = jit_entry(art.members[step["object"]])
                w = [self._weights[i] for i in step["weights"]]
                wptrs = (ctypes.c_void_p * max(len(w), 1))(*[a.ctypes.data for a in w])
                ws = aligned_empty((max(int(step["workspace_bytes"]), 1),), np.uint8)
                self.steps.append(("host", step, (engine, entry, w, wptrs, ws)))
            else:
                acc, device, stream, rmod = self._accel_modules[step["accelerator"]]
                try:
                    fn = rmod.get_function(step["function"])
                except Exception as e:
                    raise TccError(f"{self.path}: accelerator '{acc.name}' has no function "
                                   f"{step['function']} ({e})") from None
                self.steps.append(("accel", step, (acc, device, stream, fn)))
        self._buffers = {}  # (value, device) -> DeviceBuffer, allocated once
        self._sizes, self._views = {}, {}  # per value: bytes; per (buffer, value): its numpy view
        self._lock = threading.Lock()
        self._direct = self._direct_plan()

    def _direct_plan(self):
        """The plan as direct native calls, when every step runs on host
        memory through a native entry (host steps; accelerator functions
        with `host_entry`, e.g. the cpu accelerator's): (calls, input slots,
        output slots), else None. Each call keeps its ctypes args array; the
        intermediates' addresses are filled in here once, and a run only
        writes the caller's input arrays (read in place, as Session does)
        and the output arrays (written in place, not copied from a session
        buffer) into their slots. On a small model this is most of a run:
        the streams, buffer objects and two copies cost ~15 us per call."""
        ins = {t.name: i for i, t in enumerate(self._inputs)}
        outs = {t.name: i for i, t in enumerate(self._outputs)}
        if len(ins) != len(self._inputs) or len(outs) != len(self._outputs) or set(ins) & set(outs):
            return None
        calls, produced = [], set(ins)
        in_slots, out_slots = [[] for _ in ins], [[] for _ in outs]
        for kind, step, state in self.steps:
            if kind == "host":
                _engine, entry, _w, wptrs, ws = state
                call = [entry, None, wptrs, ws.ctypes.data, None]
            else:
                _acc, device, _stream, fn = state
                raw = getattr(fn, "host_entry", None)
                if device is not self.host or raw is None:
                    return None
                entry, wptrs, ws, lock = raw
                call = [entry, None, wptrs, ws, lock]
            names = list(step["inputs"]) + list(step["outputs"])
            if any(n not in produced for n in step["inputs"]):
                return None  # the slow path says what is missing
            produced.update(step["outputs"])
            args = call[1] = (ctypes.c_void_p * max(len(names), 1))()
            for i, n in enumerate(names):
                if n in ins:
                    in_slots[ins[n]].append((args, i))
                elif n in outs:
                    out_slots[outs[n]].append((args, i))
                else:
                    args[i] = self._buffer(n, self.host).ptr
            calls.append(tuple(call))
        if any(n not in produced for n in outs):
            return None
        return calls, in_slots, out_slots

    def _run_direct(self, arrays, output_names):
        calls, in_slots, out_slots = self._direct
        with self._lock:
            for v, slots in zip(arrays, in_slots):
                p = data_ptr(v)
                for args, i in slots:
                    args[i] = p
            outs = []
            for spec, slots in zip(self._outputs, out_slots):
                arr, p = self._output_buffer(spec.name, spec)
                for args, i in slots:
                    args[i] = p
                outs.append(arr)
            for entry, args, wptrs, ws, lock in calls:
                if lock is None:
                    entry(args, wptrs, ws)
                else:
                    with lock:
                        entry(args, wptrs, ws)
        if output_names is not None:
            by_name = dict(zip(self.output_names, outs))
            outs = [by_name[n] for n in output_names]
        return outs

    def _load_accelerators(self, accels):
        try:
            loaded = {a.name: a for a in load_accelerators(list(accels))}
        except AcceleratorError as e:
            raise TccError(f"{self.path}: needs accelerators {', '.join(accels)}: {e}") from None
        out = {}
        for name, info in accels.items():
            acc = loaded[name]
            factory = acc.call("tcc_device_manager_factory") if acc.has("tcc_device_manager_factory") else None
            device = get_device(f"{factory.device_type}:0") if factory is not None else self.host
            rm = RuntimeModule(name, self.artifact.members[info["member"]], tuple(info["functions"]),
                               info.get("format", "raw"), info.get("metadata", {}))
            rmod = acc.call("tcc_load_runtime_module", module=rm, device=device)
            if rmod is None:
                raise TccError(f"{self.path}: accelerator '{name}' cannot load its runtime module")
            out[name] = (acc, device, device.create_stream(), rmod)
            self._align[device] = max(self._align.get(device, 64), int(info.get("buffer_alignment", 64)))
        return out

    # -- buffers -------------------------------------------------------------------
    def _nbytes(self, name):
        n = self._sizes.get(name)
        if n is None:
            t = self.values[name]
            n = self._sizes[name] = max(int(np.prod(t.shape, dtype=np.int64)) * t.dtype.itemsize, 1)
        return n

    def _buffer(self, name, device):
        key = (name, device)
        b = self._buffers.get(key)
        if b is None:
            n = self._nbytes(name)
            align = self._align.get(device, 1)
            try:
                b = self._buffers[key] = device.alloc(n + (-n) % align)
            except MemoryError:
                t = self.values[name]
                raise AllocationError("value", name, t.dtype, t.shape, n, f" on {device}") from None
        return b

    def _host_array(self, buf, name):
        key = (id(buf), name)
        hit = self._views.get(key)
        if hit is not None and hit[0] is buf:
            return hit[1]
        t = self.values[name]
        n = int(np.prod(t.shape, dtype=np.int64)) * t.dtype.itemsize
        view = buf.handle[:n].view(t.dtype).reshape(t.shape)
        if len(self._views) < 4096:  # session buffers: a fixed set
            self._views[key] = (buf, view)
        return view

    def _on(self, name, device, where, stream):
        """Value `name` on `device`, copying from where it lives now."""
        src = where.get(name)
        if src is None:
            raise TccError(f"plan uses value '{name}' before it is computed")
        if src.device is device:
            return src
        dst = self._buffer(name, device)
        n = self._nbytes(name)
        if device is self.host:
            src.device.copy_device_to_host(src, dst.handle, n, stream=self._stream_of(src.device))
            self._stream_of(src.device).sync()
        elif src.device is self.host:
            device.copy_host_to_device(src.handle, dst, n, stream=stream)
        else:  # between two accelerators: through the host
            h = self._on(name, self.host, where, None)
            device.copy_host_to_device(h.handle, dst, n, stream=stream)
        where[name] = dst if device is not self.host else dst
        return dst

    def _stream_of(self, device):
        for _, d, s, _ in self._accel_modules.values():
            if d is device:
                return s
        raise TccError(f"no stream for {device}")

    def _stage_input(self, value, spec, where):
        """Host arrays are copied into the session's input buffer; device
        tensors (DLPack) are used where they are when the accelerator can
        take them as they are, else copied on their device."""
        v = self._prepare_any(value, spec)
        if isinstance(v, np.ndarray):
            buf = self._buffer(spec.name, self.host)
            self._host_array(buf, spec.name)[...] = v
            where[spec.name] = buf
            return
        dev = v.device
        if dev not in self._align:  # a device this plan never runs on: through the host
            buf = self._buffer(spec.name, self.host)
            self._host_array(buf, spec.name)[...] = v.numpy()
            where[spec.name] = buf
            return
        stream = self._stream_of(dev)
        if v.buffer.ready is not None:  # the producer's work (DLPack stream protocol) comes first
            stream.wait_event(v.buffer.ready)
        if not v.is_contiguous:
            if v.buffer.ready is not None:
                v.buffer.ready.sync()  # the copy below runs on the device's own stream
            v = v.to(dev)  # a contiguous copy on that device
        align = self._align[dev]
        # Kernels use 16-byte vector loads: a borrowed buffer is used in place only
        # when its address is aligned too (a slice such as x[1:] often is not).
        if v.byte_offset == 0 and v.buffer.nbytes % align == 0 and (v.buffer.ptr or 0) % align == 0:
            where[spec.name] = v.buffer
            return
        buf = self._buffer(spec.name, dev)
        dev.copy_device_to_device(v.buffer, buf, self._nbytes(spec.name), v.byte_offset, 0, stream)
        stream.sync()
        where[spec.name] = buf

    def _result(self, spec, where, device):
        """Output `spec` as a new array: numpy on the host, or a Tensor on
        `device` (copied device-to-device when it was computed there)."""
        from .device.tensor import Tensor
        src = where.get(spec.name)
        if device is not None and src is not None and src.device is device:
            out = Tensor.empty(spec.shape, spec.dtype, device)
            stream = self._stream_of(device)
            device.copy_device_to_device(src, out.buffer, self._nbytes(spec.name), 0, 0, stream)
            stream.sync()
            return out
        buf = self._on(spec.name, self.host, where, None)
        out, _ = self._output_buffer(spec.name, spec)
        out[...] = self._host_array(buf, spec.name)
        return out if device is None else Tensor.from_dlpack(out, device=device)

    def run(self, inputs, output_names=None, output_device=None):
        """Like Session.run; inputs may also be device tensors (cupy, torch
        CUDA tensors, tcc Tensors), and `output_device` ("gpu", ...) keeps
        the outputs there as Tensors."""
        arrays = self._arrange(inputs)
        if output_names is not None:
            for n in output_names:
                if n not in self.output_names:
                    raise InputError(f"unknown output '{n}'; the model has outputs {', '.join(self.output_names)}")
        if self._direct is not None and output_device is None:
            for v, spec in zip(arrays, self._inputs):
                if type(v) is not np.ndarray or v.dtype != spec.dtype or v.shape != spec.shape:
                    break
                f = v.flags
                if not (f.c_contiguous and f.aligned):
                    break
                if spec.index_bound:
                    check_index_range(spec, v)
            else:
                return self._run_direct(arrays, output_names)
        target = target_device(output_device)
        with self._lock:
            where = self._run_steps(arrays)
            wanted = output_names if output_names is not None else self.output_names
            specs = {t.name: t for t in self._outputs}
            return [self._result(specs[n], where, target) for n in wanted]

    def _run_steps(self, arrays, times=None, replace=None):
        """Runs every step on the staged inputs; -> {value: buffer}. With
        `times` (a list, one float per step), adds each step's seconds to its
        entry: its input copies and its work, the device synchronised after it.
        `replace`: {step index: function run instead of the step's own}."""
        where = {}
        for v, spec in zip(arrays, self._inputs):
            self._stage_input(v, spec, where)
        for k, (kind, step, state) in enumerate(self.steps):
            t0 = time.perf_counter() if times is not None else 0.0
            if kind == "host":
                engine, entry, _w, wptrs, ws = state
                bufs = [self._on(n, self.host, where, None) for n in step["inputs"]]
                outs = [self._buffer(n, self.host) for n in step["outputs"]]
                args = (ctypes.c_void_p * max(len(bufs) + len(outs), 1))(*[b.ptr for b in bufs + outs])
                entry(args, wptrs, ws.ctypes.data)
            else:
                acc, device, stream, fn = state
                if replace and k in replace:
                    fn = replace[k]
                bufs = [self._on(n, device, where, stream) for n in step["inputs"]]
                outs = [self._buffer(n, device) for n in step["outputs"]]
                fn(bufs + outs, stream)
                if device is self.host or times is not None:
                    stream.sync()  # host memory: later steps read it directly
            for n, b in zip(step["outputs"], outs):
                where[n] = b
            if times is not None:
                times[k] += time.perf_counter() - t0
        return where

    def profile_steps(self, inputs, runs):
        """[(step, where it runs, [seconds of each of `runs` runs])], one row per
        step of the plan, in order (what `tcc-run --profile` prints). A step
        whose function offers `op_profile()` (the cpu accelerator's: its
        partition rebuilt with each kernel call timed) runs that build here
        and gives a row per kernel call, then one for the rest of the step
        (its input copies and the call itself)."""
        arrays = self._arrange(inputs)
        inner = {}  # step index -> (function, labels, take)
        for k, (kind, _step, state) in enumerate(self.steps):
            op_profile = getattr(state[3], "op_profile", None) if kind == "accel" else None
            if op_profile is not None:
                try:
                    inner[k] = op_profile()
                except (TccError, OSError, ValueError):  # no C compiler where the artifact runs (TccError),
                    pass  # or an artifact from before the timing tables (ValueError): the step as one row
        per_run, per_op = [], {k: [] for k in inner}
        with self._lock:
            for _ in range(runs):
                times = [0.0] * len(self.steps)
                self._run_steps(arrays, times, {k: v[0] for k, v in inner.items()})
                per_run.append(times)
                for k, (_fn, _labels, take) in inner.items():
                    per_op[k].append(take())
        rows = []
        for k, (_kind, step, _state) in enumerate(self.steps):
            name, where = step.get("function") or step.get("callee") or f"step {k}", step.get("accelerator") or "host"
            total = [t[k] for t in per_run]
            if k not in inner:
                rows.append((name, where, total))
                continue
            for i, label in enumerate(inner[k][1]):
                rows.append((f"{name}: {label}", where, [r[i] for r in per_op[k]]))
            rows.append((f"{name}: rest of the step", where, [max(t - sum(r), 0.0) for t, r in zip(total, per_op[k])]))
        return rows

    def __repr__(self):
        steps = ", ".join(s.get("accelerator", "host") for _, s, _ in self.steps)
        return f"<tcc.PlanSession {self.path}: ({format_specs(self._inputs)}) -> ({format_specs(self._outputs)}) [{steps}]>"
