"""The shape-generic executor's plan: the stored onnx-dialect IR walked once
per session into a flat list of steps over a value table indexed by
integers. Each step is a kernel closure (attributes parsed, constants
converted to numpy once: toolkit.py) and the table slots it reads and
writes; a run copies the table's initial state (constants), puts the inputs
in, and calls the steps in order: no per-call dict building, no attribute
parsing, no compile.

Values are sorted into kinds at build time: constants (and whatever
computes from constants only: folded once, here), *shape values* (computed
from constants and the input shapes only: the Shape/Gather/Concat/Range/
Where chains exporters write, causal masks included) and data. Shape
values are computed on the first run at an input-shape key and kept for
that key (the last KEYS keys), so later runs at it call only the data
steps, as one generated Python function (_straight_line); at build the
steps only one producer feeds are fused into it (fusion.py). A value's
shape counts as known from the input shapes where its op is not
data-dependent (ALWAYS_STAGED, host ops, control flow) and its operands'
shapes are, and every operand but the first is constant or a shape value,
or the op is one whose result shape follows its operands' shapes alone
(SHAPE_FOLLOWS).

An op with no kernel here (or attributes its kernel does not serve) runs
onnx.reference's implementation of that one op (the one-node model
runtime/staged.py builds, whose evaluator the two-phase path also uses, so
both paths give the same answer); an op runtime/host_ops computes (strings,
ai.onnx.ml, TfIdfVectorizer) runs that kernel, as the compiled path does."""
from __future__ import annotations

import threading
import warnings
from collections import OrderedDict

import numpy as np

from tcc.dialects.ir.errors import TccError
from tcc.dialects.ir.types import NONE

from ..containers import is_container
from ..containers import key as container_key
from ..host_ops import HostOpRunner, is_host_op
from ..staged import ALWAYS_STAGED, CONTAINER_OPS, Optional, _op_model, _reparse, _to_rank
from . import elementwise, nn, reduce, rnn, shape  # noqa: F401 - they register their kernels
from .fusion import fuse
from .tape import Tape
from .tape import enabled as tape_enabled
from .toolkit import KERNELS, GenericShapeError, Node

KEYS = 16  # input-shape keys whose shape values are kept
NONDETERMINISTIC = {"onnx.RandomNormal", "onnx.RandomUniform", "onnx.RandomNormalLike", "onnx.RandomUniformLike",
                    "onnx.Bernoulli", "onnx.Multinomial", "onnx.Dropout"}
# Ops whose result shapes depend on their operands' shapes only, never on values.
SHAPE_FOLLOWS = {"onnx." + n for n in (
    "Add Sub Mul Div Pow Mod Max Min Sum Mean Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor Not Where "
    "Abs Neg Exp Log Sqrt Reciprocal Sin Cos Tan Tanh Sigmoid Relu LeakyRelu Elu Gelu Erf Softplus Softsign "
    "HardSigmoid Floor Ceil Round Sign IsNaN IsInf Cast Identity Clip MatMul Gemm Softmax LogSoftmax "
    "LayerNormalization BatchNormalization Conv MaxPool AveragePool GlobalAveragePool GlobalMaxPool Transpose "
    "Gather GatherElements GatherND Concat Flatten Shape Size ArgMax ArgMin Einsum CumSum LSTM GRU RNN Trilu "
    "Dropout").split()}
SHAPE_SOURCES = {"onnx.Shape", "onnx.Size"}
CONST, ARG, SHAPE, DATA = range(4)


def _reference(op, model, values, host, multi):
    """fn(*operands) running one op as the compiled path's host steps do: a
    runtime/host_ops kernel, else onnx.reference's implementation."""
    names = [f"i{k}" if v.type is not NONE else None for k, v in enumerate(values)]
    if host:
        runner = HostOpRunner(model)
    else:
        from onnx.reference import ReferenceEvaluator
        runner = ReferenceEvaluator(model, new_ops=[Optional])  # staged.py's Optional: its value or None
    lock = threading.Lock()
    # per result its rank; "value" for a sequence or optional (a list / None, passed on as it is)
    ranks = ["value" if is_container(r.type) else len(r.type.shape) if getattr(r.type, "shape", None) is not None
             else None for r in op.results]

    if host and not runner.warns:
        # a kernel whose work is in C (NonMaxSuppression): its operands in
        # its node's order, without the feeds dict and catch_warnings (~3 us
        # a call, as in staged.StagedRun._resolve)
        fn, node, pos = runner.fn, runner.node, {n: k for k, n in enumerate(names) if n is not None}
        order = [pos.get(n) if n else None for n in runner.inputs]

        def direct(*xs):
            outs = fn(node, [None if k is None else xs[k] for k in order])
            outs = [o if r == "value" else _to_rank(np.asarray(o), r) for o, r in zip(outs, ranks)]
            return outs if multi else outs[0]
        return direct

    def reference(*xs):
        feeds = {n: x for n, x in zip(names, xs) if n is not None}
        with lock, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = runner.run(None, feeds)
        outs = [o if r == "value" else _to_rank(np.asarray(o), r) for o, r in zip(outs, ranks)]
        return outs if multi else outs[0]
    return reference


class GenericPlan:
    """Runs the stored IR at any input shape (see the module docstring).
    Raises TccError at build where the model has an op outside the onnx
    dialect. Sequences and optionals are table values like tensors (a list
    of arrays, None or a value): the ops taking or making one run their
    onnx.reference implementation, as the compiled path's host steps do;
    they and what reads their elements are data steps, never kept per key."""

    def __init__(self, ir, res):
        from tcc.dialects.init_all import new_context
        from tcc.dialects.onnx.exporter import opset_imports
        from tcc.dialects.transforms.constants import constant_value
        module = _reparse(ir, res, new_context())
        block = module.lookup_function("main_graph").regions[0].blocks[0]
        self._opsets = {o.domain: o.version for o in opset_imports(module)}
        self._base, self._kinds = [None], [CONST]
        slot, known = {}, set()  # value -> slot; slots whose shape follows the input shapes

        def new(kind, value=None):
            self._base.append(value)
            self._kinds.append(kind)
            return len(self._base) - 1

        self._args = []
        for a in block.args:
            slot[a] = new(ARG)
            if not is_container(a.type):  # a list's element shapes are not a tensor shape
                known.add(slot[a])
            self._args.append(slot[a])
        steps = []  # (fn, in slots, out slots, multi, node name, all results shape values)
        self.fallbacks = []  # op names run by onnx.reference (for tests and reports)
        for op in block.ops:
            if op.name == "func.return":
                self._outs = [slot[v] for v in op.operands]
                break
            if op.name in ("onnx.NoValue",):
                for r in op.results:
                    slot[r] = 0
                continue
            if op.name == "onnx.Constant":
                value = np.array(constant_value(op.results[0]))
                value.setflags(write=False)
                slot[op.results[0]] = new(CONST, value)
                known.add(slot[op.results[0]])
                continue
            if not op.name.startswith("onnx."):
                raise TccError(f"{op.name} has no shape-generic path")
            operands = list(op.operands)
            ins = [0 if v.type is NONE else slot[v] for v in operands]
            in_kinds = [self._kinds[i] for i in ins if i]
            host = is_host_op(op)
            container = op.name in CONTAINER_OPS or any(is_container(v.type) for v in operands + list(op.results))
            special = op.name in ALWAYS_STAGED or host or bool(op.regions) or container
            fn, multi, captured, name, node = self._kernel(op, module, ins, host)
            ins = ins + [slot[v] for v in captured]
            deterministic = op.name not in NONDETERMINISTIC and not host and not op.regions and not container
            if deterministic and all(k == CONST for k in in_kinds) and not captured:
                done = self._fold(fn, ins, multi, len(op.results))
                if done is not None:
                    for r, v in zip(op.results, done):
                        v = np.asarray(v) if v is not None else None
                        if v is not None:
                            v.setflags(write=False)
                        slot[r] = new(CONST, v)
                        known.add(slot[r])
                    continue
            if op.name in SHAPE_SOURCES:
                kind = SHAPE if all(i in known for i in ins if i) else DATA
            else:
                kind = SHAPE if deterministic and not special and all(k in (CONST, SHAPE) for k in in_kinds) \
                    else DATA
            outs = [new(kind) for _ in op.results]
            for r, o in zip(op.results, outs):
                slot[r] = o
            if kind == SHAPE or (not special and op.name not in NONDETERMINISTIC and all(i in known for i in ins if i)
                                 and (op.name in SHAPE_FOLLOWS or
                                      all(self._kinds[i] in (CONST, SHAPE) for i in ins[1:] if i))):
                known.update(outs)
            steps.append((fn, tuple(ins), outs if multi else outs[0], multi, f"'{name}' ({op.name})", kind == SHAPE,
                          node))
        self.step_ops = [s[4].rsplit("(", 1)[1][:-1] for s in steps]  # op names of the steps run (for tests)
        steps = fuse(steps, self._outs, self._base, self._kinds)
        self.fused = [s[4] for s in steps if " + " in s[4]]  # the fused steps' names (for tests)
        self._all = [s[:5] for s in steps]
        self._data = [s[:5] for s in steps if not s[5]]
        self._data_nodes = [s[6] for s in steps if not s[5]]
        self._warm = _straight_line(self._data, self._outs)
        self._shape_slots = [i for i, k in enumerate(self._kinds) if k == SHAPE]
        # The slots whose shape follows from the input shapes alone, and
        # whether every data value's is among them. A tape bakes in the
        # shapes of a key's first run, so in a model with a value shaped by
        # data (Reshape to a data shape, Slice with data bounds, NonZero,
        # NonMaxSuppression) a tape has native records only for the values
        # whose shapes are the key's, and every step after a data-shaped
        # value stays a Python step (detection_nms: its convolutions ran
        # tcc_cpu_conv2d one numpy call each, the generic path 0.11 ms warm
        # against 0.04 for the specialized code)
        self._known = frozenset(known)
        self._tapeable = all(i in known for st in steps if not st[5]
                             for i in (st[2] if st[3] else [st[2]]))
        self._keyed = OrderedDict()  # input shapes -> the table with their shape values filled in
        self._lock = threading.Lock()
        # input shapes -> their native tape (tape.py), or the values' shapes and
        # dtypes its build reads (the first run's), or False where it cannot be built
        self._tapes = {}
        self._tape_lock = threading.Lock()
        self._packed = {}  # (constant slot, layout) -> its packed weights (tape.py), for every key

    def _kernel(self, op, module, ins, host):
        """(fn, several results?, captured outer values, node name) for one op."""
        model, values = _op_model(op, module)
        proto = model.graph.node[0]
        name = proto.name or op.name
        domain = proto.domain if proto.domain not in ("", "ai.onnx") else ""
        multi = len(op.results) > 1
        captured = values[len(op.operands):]
        built = []

        def reference(*xs):  # this one op's reference implementation, built on first use
            if not built:
                built.append(_reference(op, model, values, host, multi))
            return built[0](*xs)
        if not host and not op.regions:
            make = KERNELS.get(op.name)
            if make is not None:
                node = Node(proto, self._opsets.get(domain, 1), len(op.results), op.name,
                            [self._base[i] if i and self._kinds[i] == CONST else None for i in ins],
                            [bool(i) for i in ins], [bool(list(r.uses)) for r in op.results],
                            [len(v.type.shape) if getattr(v.type, "shape", None) is not None else None
                             for v in op.operands])
                node.reference = reference  # for inputs the kernel does not serve (LSTM's sequence_lens)
                try:
                    fn = make(node)
                except Exception:  # noqa: BLE001 - attributes it does not know (a Cast to a new type)
                    fn = None
                if fn is not None:
                    return fn, multi, captured, name, node
            self.fallbacks.append(op.name)
        built.append(_reference(op, model, values, host, multi))  # now: an evaluator takes 10-200 ms to build
        return reference, multi, captured, name, None

    def _fold(self, fn, ins, multi, n):
        """The results of a step whose operands are all constants, or None
        where it fails here (it then runs, and fails, at run time)."""
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                r = fn(*[self._base[i] for i in ins])
        except Exception:  # noqa: BLE001 - reported when the step runs
            return None
        return list(r) if multi else [r]

    def run(self, arrays):
        """The outputs for these input arrays (in signature order). Raises
        GenericShapeError (a TccError) where an operand shape does not fit a
        node, another exception where a kernel fails."""
        key = _key(arrays)
        with self._lock:
            table = self._keyed.get(key)
            if table is not None:
                self._keyed.move_to_end(key)
        if table is not None:
            tape = self._tapes.get(key)
            if tape.__class__ is not Tape:
                tape = self._tape_for(key, table)
            if tape is not None:
                try:
                    outs = tape.run(arrays)  # owned outputs (tape.py)
                except Exception:  # noqa: BLE001 - the numpy path below runs it, naming a failing node
                    outs = None
                if outs is not None:
                    return outs
        steps = self._all if table is None else self._data
        t = list(self._base if table is None else table)
        for i, a in zip(self._args, arrays):
            t[i] = a
        if table is not None:
            try:
                with np.errstate(all="ignore"):
                    return _distinct([_owned(v, self._kinds[i] == DATA) for i, v in zip(self._outs, self._warm(t))])
            except Exception:  # noqa: BLE001 - the loop below runs it again, naming the node that fails
                pass
        step = None
        try:
            with np.errstate(all="ignore"):  # IEEE results (inf, nan), as the compiled code gives
                for step in steps:
                    fn, ins, outs, multi, _ = step
                    if multi:
                        for o, v in zip(outs, fn(*[t[i] for i in ins])):
                            t[o] = v
                    else:
                        t[outs] = fn(*[t[i] for i in ins])
        except GenericShapeError:
            raise
        except Exception as e:  # noqa: BLE001 - named by its node
            raise TccError(f"node {step[4] if step else '?'}: {type(e).__name__}: {e}".splitlines()[0]) from e
        if table is None:
            keep = list(self._base)
            for i in self._shape_slots:
                v = t[i]
                if isinstance(v, np.ndarray):
                    v.setflags(write=False)
                keep[i] = v
            infos = {i: (v.shape, v.dtype) for i, v in enumerate(t) if isinstance(v, np.ndarray)}
            with self._lock:
                self._keyed[key] = keep
                self._tapes[key] = infos
                while len(self._keyed) > KEYS:
                    self._tapes.pop(self._keyed.popitem(last=False)[0], None)
        return _distinct([_owned(t[i], self._kinds[i] == DATA) for i in self._outs])

    def tape_at(self, arrays):
        """The tape of these inputs' key, where one is built (None else)."""
        got = self._tapes.get(_key(arrays))
        return got if got.__class__ is Tape else None

    def _tape_for(self, key, table):
        """This key's native tape, built on its second run; None where there
        is none (yet, or for good)."""
        got = self._tapes.get(key)
        if got is None or got is False or isinstance(got, Tape):
            return got or None
        if not tape_enabled() or not self._tape_lock.acquire(blocking=False):
            return None  # another thread builds it: the numpy path meanwhile
        try:
            got = self._tapes.get(key)
            if isinstance(got, dict):
                infos = got if self._tapeable else {i: v for i, v in got.items() if i in self._known}
                try:
                    built = Tape(self, table, infos, self._data, self._data_nodes)
                    got = built if built.n_native else False
                except Exception:  # noqa: BLE001 - the numpy path serves this key
                    got = False
                with self._lock:
                    if key in self._keyed:
                        self._tapes[key] = got
        finally:
            self._tape_lock.release()
        return got or None


def _key(arrays):
    """The input-shape key of a call: per input its shape (a container's structure)."""
    return tuple(container_key(a) if a is None or isinstance(a, (list, dict)) else a.shape for a in arrays)


def _straight_line(steps, outs):
    """The data steps as one generated Python function of the value table:
    each slot a local variable, each step one line (`v12 = f3(v4, v7)`), so
    a warm run pays no per-step loop, tuple unpacking or argument list
    (bart_decoder_step, 117 data steps: 0.51 -> 0.45 ms warm; llama 0.53 ->
    0.47). Any exception in it (or a kernel returning another number of
    results than the op has) reruns the plain loop, which names the node."""
    env, lines, ready = {}, [], set()

    def use(i):
        if i not in ready:
            lines.append(f"    v{i} = t[{i}]")
            ready.add(i)
        return f"v{i}"
    for k, (fn, ins, res, multi, _) in enumerate(steps):
        env[f"f{k}"] = fn
        call = f"f{k}({', '.join(use(i) for i in ins)})"
        targets = res if multi else [res]
        lines.append(f"    {', '.join(f'v{o}' for o in targets)}{',' if multi else ''} = {call}")
        ready.update(targets)
    ret = ", ".join(use(i) for i in outs)  # an output no step writes is loaded from the table
    src = "def warm(t):\n" + "\n".join(lines) + f"\n    return [{ret}]\n"
    exec(compile(src, "<tcc generic plan>", "exec"), env)  # noqa: S102 - source built above from slot numbers
    return env["warm"]


def _distinct(outs):
    """The outputs with an array given twice (y1 = Identity(y0), both
    graph outputs) copied the second time: the caller owns each one."""
    seen = set()
    for k, v in enumerate(outs):
        if isinstance(v, np.ndarray):
            if id(v) in seen:
                outs[k] = np.array(v)
            seen.add(id(v))
    return outs


def _owned(v, data=True):
    """An output never a view of an input, a constant or a kept shape value
    (a sequence's elements: copied where they are one)."""
    if isinstance(v, list):
        return [_owned(e, False) for e in v]
    if isinstance(v, np.ndarray) and (not data or v.base is not None or not v.flags.writeable
                                      or not v.flags.c_contiguous):
        return np.array(v)
    return v
