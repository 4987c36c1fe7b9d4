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
The artifact itself is written ahead of time by `driver/specializing.py`.

A new input shape does not wait for its compile (issue 16, item 2): the
compile starts on a background thread (one per process: compiles run one at
a time), and until it lands, calls at that shape run the shape-generic path,
the stored IR itself (dynamic dims) through tcc's shape-generic executor
(runtime/generic: numpy and the cpu accelerator's C kernels, a plan built
once per session, no compile). Host ops (strings, ai.onnx.ml), the
two-phase ops (NonZero, NonMaxSuppression...) and the sequence and optional
ops run there as in the compiled path (the same host kernels and reference
evaluator for that op; a sequence is a list in the plan's table, as it is
between the compiled path's stages). Where the generic
path cannot run a call (an input the model cannot take), the call waits for
the compile instead, which gives the one-line error. The plan is built at
load (10-130 ms on the corpus), so the first run at a new shape is only a
run. A specialization already in the compile cache on disk is loaded at
once (a staged one too: runtime/staged.py). A session compiles at most TCC_MAX_SPECIALIZATIONS keys (64) in the
background; later keys stay on the generic path. `TCC_SPECIALIZE=sync` compiles on the caller's thread (as before;
there, on the main thread, a plugin hook that hangs is also timed out:
TCC_HOOK_TIMEOUT needs the main thread's SIGALRM).

Why a generic executor and not symbolic dims in the loop nests: every
graph-to-loop lowering and both native code generators assume static
shapes, while kernels that take their sizes at run time exist already.
Measured on the corpus (README's scoreboard, a loaded 2-core machine): a
specialization compile takes 1-30 s (graph passes and the verifier after
each ~50 %, gcc ~25 %, llvmlite ~15 %), a generic call ~0.13-0.76 ms
(0.6-1.8x the specialized code on the host, 0.9-4.5x with --maccel=cpu),
a specialized one 0.05-0.85 ms. A generic call beside a compile shares the GIL with it: see
_responsive."""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tcc.dialects.ir.errors import TccError

from . import cache, containers
from .artifact import read_artifact
from .signature import InputError, SignatureMixin, check_index_range, format_specs

IR_MEMBER, RES_MEMBER = "model.mlir", "model.mlir.resources"


class _Staged(Exception):
    """Carries a StagedRun that cannot be saved (a constant numpy stores
    only with pickle) out of the compile cache's build callback: it runs as
    an object, uncached."""


_worker = None
_worker_lock = threading.Lock()


def _background():
    """The process's one compile thread (a compile is mostly Python: two at
    once would only share the GIL). A process exiting while it compiles
    waits for it; the result lands in the compile cache for the next one."""
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tcc-specialize")
        return _worker


_queued = [0]  # background compiles queued or running in this process


def _counted(fn, *args):
    try:
        return fn(*args)
    finally:
        with _worker_lock:
            _queued[0] -= 1


def _submit(fn, *args):
    with _worker_lock:
        _queued[0] += 1
    return _background().submit(_counted, fn, *args)


def queued():
    """How many background specializations are queued or compiling in this process."""
    return _queued[0]


def wait_all():
    """Waits for every background specialization of this process (the test
    suite does after each test, so none lands in the next one's time)."""
    with _worker_lock:
        worker = _worker
    if worker is not None:
        worker.submit(lambda: None).result()  # one thread, first in first out


def background_enabled():
    mode = os.environ.get("TCC_SPECIALIZE", "background")
    if mode not in ("background", "sync"):
        raise TccError(f"TCC_SPECIALIZE={mode!r}: expected 'background' or 'sync'")
    return mode == "background"


DEFAULT_MAX_SPECIALIZATIONS = 64


def max_specializations():
    """How many input-shape keys one session compiles in the background
    (TCC_MAX_SPECIALIZATIONS, default 64). A server that sees a new sequence
    length on most calls would otherwise queue a 0.2-10 s compile per length,
    each holding a loaded native library for the life of the session; past
    the limit, new keys stay on the shape-generic path (0.6-4.5x the
    specialized code on the corpus, README's scoreboard; no compile at all)."""
    raw = os.environ.get("TCC_MAX_SPECIALIZATIONS", str(DEFAULT_MAX_SPECIALIZATIONS))
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0:
        raise TccError(f"TCC_MAX_SPECIALIZATIONS={raw!r}: expected a whole number >= 0")
    return n


_responsive_lock = threading.Lock()
_responsive_calls = [0, None]  # generic calls running while a compile does, the interval they replaced
RESPONSIVE_INTERVAL = 2e-4


@contextlib.contextmanager
def _responsive():
    """While a generic call runs beside a background compile, Python's
    thread switch interval is 0.2 ms instead of 5: each time the call
    releases the GIL (numpy loops over 500+ elements, BLAS), the compile
    thread takes it and kept it up to the interval before the caller got
    it back. Measured on llama --maccel=cpu, a generic call during a
    compile: median 24 ms at 5 ms, see README (the compile itself barely
    slows: it gets the GIL whenever the caller is not running)."""
    with _responsive_lock:
        if _responsive_calls[0] == 0:
            _responsive_calls[1] = sys.getswitchinterval()
            sys.setswitchinterval(RESPONSIVE_INTERVAL)
        _responsive_calls[0] += 1
    try:
        yield
    finally:
        with _responsive_lock:
            _responsive_calls[0] -= 1
            if _responsive_calls[0] == 0:
                sys.setswitchinterval(_responsive_calls[1])


GENERIC_KEYS = 16  # fast keys whose tape a session keeps (the generic plan keeps 16 keys' tapes: executor.KEYS)
FAST_KEYS = 1024  # fast keys a session remembers as checked or generic for good (then it forgets them all)


class _Generic:
    """The shape-generic path: runtime/generic's plan over the stored IR,
    dynamic dims and all (built once per session)."""

    def __init__(self, ir, res):
        from .generic import GenericPlan
        self.plan = GenericPlan(ir, res)

    def run(self, arrays, compiling=False):
        with _responsive() if compiling else contextlib.nullcontext():
            return self.plan.run(list(arrays))


def _snapshot(v, values):
    """What a background compile keeps of an input (a sequence's or
    optional's structure included), as the caller may reuse its arrays: a
    copy where the input decides shapes (`values`), else only its shapes
    and dtypes."""
    if v is None:
        return None
    if isinstance(v, list):
        return [_snapshot(e, values) for e in v]
    if isinstance(v, dict):
        return {k: _snapshot(e, values) for k, e in v.items()}
    return np.array(v) if values else np.broadcast_to(np.zeros((), v.dtype), v.shape)


def _fits(value, spec):
    """Whether a generic-path output has the signature's type (a sequence or
    optional: containers.check's structure, dtypes and shapes)."""
    if spec.container:
        try:
            containers.check(spec.name, spec.container, spec.shape, spec.dtype, value)
        except ValueError:
            return False
        return True
    return isinstance(value, np.ndarray) and value.dtype == spec.dtype and value.ndim == len(spec.shape) and \
        all(d < 0 or d == n for d, n in zip(spec.shape, value.shape))


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
        # (dtype, shape[, bytes of a shape-deciding input]) per input -> the
        # session _cache holds for the call that made that tuple: see _fast_key
        self._fast = {}
        self._fast_ok = not any(t.container or t.dtype == object for t in self._inputs)
        # fast keys whose inputs _check_dynamic passed unchanged (the generic
        # path needs no second check), and those the generic path serves for
        # good (past TCC_MAX_SPECIALIZATIONS): no check, key hash or lookup
        self._fast_checked, self._fast_generic = set(), set()
        self._fast_tapes = {}  # fast key -> the generic plan's tape that served it (at most GENERIC_KEYS)
        self._bounded = [(i, t) for i, t in enumerate(self._inputs) if t.index_bound]
        self._base_key = None
        self._tmpdir = None
        self._pending = {}  # key -> Future of its background compile
        self._generic = None  # the shape-generic path, built on first need (False: cannot)
        self._lock = threading.Lock()  # guards the dicts above, never held during a compile
        if compiler is not None and \
                os.environ.get("TCC_SPECIALIZE", "background") == "background":
            # Built at load (10-130 ms on the corpus: parsing the IR is half), so
            # that the session's first run at a new shape is only a run.
            self._generic_path()

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

    def _fast_key(self, arrays):
        """The in-memory key of a call whose inputs are all numpy arrays: per
        input its dtype and shape, and a shape-deciding input's bytes; None
        for anything else (lists, device tensors, strings, containers take
        the checked path). A call is entered under it only after
        _check_dynamic passed it unchanged, so a hit needs no check and no
        hash: on detection_nms (two specializing stages per call) the check
        and the sha256 key took ~10 us of each stage's ~11 us of Python."""
        if not self._fast_ok:
            return None
        parts = []
        for i, v in enumerate(arrays):
            if type(v) is not np.ndarray:
                return None
            parts.append(v.dtype)
            parts.append(v.shape)
            if i in self._shape_args:
                parts.append(v.tobytes())
        return tuple(parts)

    def _compiled(self, inputs, key):
        """The session of `key`'s specialization: loaded from the compile
        cache, or compiled (and cached) now."""
        load = self._load  # a host Session, or a PlanSession when placed
        if not cache.plugins_cacheable(self._maccel):  # in-process plugins: no code to key on
            with self._lock:
                if self._tmpdir is None:
                    self._tmpdir = tempfile.TemporaryDirectory(prefix="tcc-spec-")
            path = os.path.join(self._tmpdir.name, key + ".tcc")
            return self._compile(inputs, path) or load(path)

        built = []  # a staged run compiled here: the object (its stages are loaded already)

        def build(tmp):
            staged = self._compile(inputs, tmp)
            if staged is None:
                return
            try:
                saved = staged.save(tmp)  # then cached as a file like any specialization
            finally:
                for side in (".prefix.tcc", ".suffix.tcc"):  # loaded (mapped) already: the files may go
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(tmp + side)
            if not saved:
                raise _Staged(staged, tmp)
            built.append(staged)

        def load_entry(path):
            if built:
                return built[0]
            art = read_artifact(path)
            from .staged import StagedRun, is_staged
            if is_staged(art.manifest):
                return StagedRun.from_artifact(art, self._compiler, len(self._inputs))
            return load(path, art)
        try:
            path, hit = cache.get_or_build(key, build)
        except _Staged as e:
            return e.args[0]
        try:
            return load_entry(path)
        except TccError:
            if not hit:
                raise
            cache.remove(key)  # stale or corrupt: compile again
            return load_entry(cache.get_or_build(key, build)[0])

    def _specialize(self, key, inputs, root=None):
        with cache.pinned_root(root) if root is not None else contextlib.nullcontext():
            sess = self._compiled(inputs, key)
        self._cache[key] = sess
        with self._lock:
            self._pending.pop(key, None)
        return sess

    def _new_shape(self, key, arrays, output_names, output_device):
        """The session for a key not compiled in this session yet, or (while
        its compile runs in the background) the generic path's outputs."""
        on_worker = threading.current_thread().name.startswith("tcc-specialize")
        if on_worker or self._compiler is None or not background_enabled() or \
                (cache.plugins_cacheable(self._maccel) and cache.lookup(key) is not None):
            return self._specialize(key, arrays)  # a cache hit loads in ms; no compiler raises
        generic = output_device is None
        if generic:
            # Built before the compile starts: both import onnx, and a module
            # two threads import at once can be seen half initialized
            # ("partially initialized module 'onnx' has no attribute 'defs'").
            self._generic_path()
        with self._lock:
            fut = self._pending.get(key)
            full = fut is None and generic and len(self._cache) + len(self._pending) >= max_specializations()
        if full and self._generic_path():
            outs = self._run_generic(arrays, output_names)
            if outs is not None:  # past the limit: no compile for this key
                return outs
        with self._lock:
            fut = self._pending.get(key)
            if fut is None:
                # the compile reads shapes, and the values of shape-deciding
                # inputs: those are copied, as the caller may reuse its arrays
                snap = [_snapshot(v, i in self._shape_args) for i, v in enumerate(arrays)]
                fut = self._pending[key] = _submit(self._specialize, key, snap, cache.cache_root())
        if not fut.done() and generic:
            outs = self._run_generic(arrays, output_names)
            if outs is not None:
                return outs
        return fut.result()  # the compile's error, if it failed, for every call at this key

    def _generic_path(self):
        """The generic path, built on first need; False where it cannot be."""
        with self._lock:
            if self._generic is None:
                try:
                    self._generic = _Generic(self._ir, self._res)
                except Exception:  # noqa: BLE001 - an op with no ONNX form or no reference kernel
                    self._generic = False
        return self._generic

    def _run_generic(self, arrays, output_names=None, fast=None):
        """The generic path's outputs, or None where it cannot run them
        (the call then waits for the compile, which names what is wrong).
        With the inputs' fast key (checked inputs): its native tape
        straight away once one served it (runtime/generic/tape.py), not
        the plan's lookup and the outputs' signature check again (shufflenet
        --maccel=cpu: ~10 us of Python around a 23 us tape)."""
        tape = self._fast_tapes.get(fast) if fast is not None else None
        outs = None
        if tape is not None:
            try:
                outs = tape.run(arrays)  # None: another thread is in it
            except Exception:  # noqa: BLE001 - the plan's path below runs it
                outs = None
        if outs is None:
            if not self._generic_path():
                return None
            try:
                outs = self._generic.run(arrays, _queued[0] > 0)
            except Exception:  # noqa: BLE001 - the compile reports it properly
                return None
            if len(outs) != len(self._outputs) or not all(_fits(o, t) for o, t in zip(outs, self._outputs)):
                return None
            if fast is not None and tape is None:
                tape = self._generic.plan.tape_at(arrays)
                if tape is not None:
                    with self._lock:
                        if len(self._fast_tapes) >= GENERIC_KEYS:
                            self._fast_tapes.pop(next(iter(self._fast_tapes)))
                        self._fast_tapes[fast] = tape
        if output_names is not None:
            by_name = dict(zip(self.output_names, outs))
            unknown = [n for n in output_names if n not in by_name]
            if unknown:
                raise InputError(f"unknown output '{unknown[0]}'; the model has outputs {', '.join(by_name)}")
            outs = [by_name[n] for n in output_names]
        return outs

    def specialize(self, inputs):
        """Compiles (or loads from the compile cache) the specialization for
        these inputs now, on the caller's thread, and returns its session:
        a warm-up for shapes known ahead of traffic."""
        arrays = self._check_dynamic(inputs)
        key = self._key(arrays)
        sess = self._cache.get(key)
        if sess is None:
            with self._lock:
                fut = self._pending.get(key)
            sess = fut.result() if fut is not None else self._specialize(key, arrays)
        return sess

    def run_generic(self, inputs, output_names=None):
        """The shape-generic path alone (the scoreboard times it): outputs,
        or None where it cannot run these inputs."""
        given = self._arrange(inputs)
        fast = self._fast_key(given)
        return self._run_generic(self._checked(given, fast), output_names, fast)

    def _checked(self, given, fast=None):
        """The inputs checked (_check_dynamic), or as given where inputs of
        this fast key passed the check unchanged before (then only their
        index bounds are read again, as a warm specialized call does)."""
        fast = self._fast_key(given) if fast is None else fast
        if fast is not None and fast in self._fast_checked:
            for i, spec in self._bounded:
                check_index_range(spec, given[i])
            return given
        arrays = self._check_dynamic(given)
        if fast is not None and all(a is b for a, b in zip(arrays, given)):
            self._remember(self._fast_checked, fast)
        return arrays

    def _remember(self, keys, fast):
        """fast added to one of the fast-key sets, which a server seeing a
        new shape on most calls would otherwise grow without end."""
        with self._lock:
            if len(keys) >= FAST_KEYS:
                keys.clear()
            keys.add(fast)

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

    def wait(self):
        """Waits for the specializations compiling in the background, those
        of the stages inside them too (a staged run's suffix specializes on
        the data-dependent op's output shape)."""
        with self._lock:
            pending = list(self._pending.values())
        for fut in pending:
            with contextlib.suppress(Exception):  # a failed compile raises at its next run
                fut.result()
        for sess in list(self._cache.values()):
            for inner in getattr(sess, "specializations", lambda: [])():
                if hasattr(inner, "wait"):
                    inner.wait()

    def specializations(self):
        """The sessions compiled (one per input shape/value key), once those
        compiling in the background are done."""
        self.wait()
        return list(self._cache.values())

    def session_for(self, inputs):
        """The session that runs these inputs (tcc-run --profile times its steps)."""
        return self.specialize(inputs)

    def run(self, inputs, output_names=None, output_device=None):
        given = self._arrange(inputs)
        fast = self._fast_key(given)
        sess = self._fast.get(fast) if fast is not None else None
        if sess is not None:
            for i, spec in self._bounded:  # the one check a warm call keeps: what it reads may be refused
                check_index_range(spec, given[i])
            return sess.run(given, output_names, output_device)
        if fast is not None and fast in self._fast_generic and output_device is None:
            outs = self._run_generic(self._checked(given, fast), output_names, fast)
            if outs is not None:
                return outs
        arrays = self._check_dynamic(given)
        key = self._key(arrays)
        sess = self._cache.get(key)
        if sess is None:
            sess = self._new_shape(key, arrays, output_names, output_device)
            if isinstance(sess, list):  # the generic path ran it
                if fast is not None and key not in self._pending and key not in self._cache and \
                        all(a is b for a, b in zip(arrays, given)):
                    # no compile for this key (past the limit): the generic path for good
                    self._remember(self._fast_checked, fast)
                    self._remember(self._fast_generic, fast)
                return sess
        if fast is not None and all(a is b for a, b in zip(arrays, given)):
            self._fast[fast] = sess
        return sess.run(arrays, output_names, output_device)

    def __repr__(self):
        return f"<tcc.SpecializingSession {self.path}: ({format_specs(self._inputs)}) -> ({format_specs(self._outputs)})>"
