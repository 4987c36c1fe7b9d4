"""Data-dependent output shapes (NonZero, Compress, Unique,
NonMaxSuppression, TopK whose k is computed from data, Loop with a
data-dependent exit): two-phase execution.

When a specialization still has an op whose operands all have static shapes
but whose results do not (their sizes depend on the values), the graph is cut
there. The prefix (everything that op's operands need) is compiled for the
concrete input shapes and runs natively; the op itself runs on its operand
values through onnx's reference evaluator (these ops are comparisons, sorts
and gathers over small tensors: boxes, indices, masks); the suffix is the
whole graph again with that op's results as extra inputs, itself a
specializing model, so it is compiled per result shape (and cut again at the
next such op). Upper-bound allocation was the alternative: it would need
every consumer to carry a run-time length, which our static loop nests do
not have.

Sequences and optionals (runtime/containers.py: a list of arrays, None or a
value) take the same path: every op taking or making one is a host step
(host_step), cut at like a data-dependent op, so the suffix receives the
list as an argument and is specialized on its element shapes. A chain ends
in a ForwardRun: the sequences it returns are its arguments, its tensor
outputs compiled natively.

A StagedRun is saved as an artifact (`save`, `from_artifact`: a plan of one
'staged' step, the op as a one-node ONNX model, the stages' artifacts as
members) so the compile cache keeps it: uncached, every process compiled
detection_nms's specialization again in the background (its calls on the
generic path meanwhile, ~0.25 ms against 0.05)."""
from __future__ import annotations

import io
import os
import tempfile
import time
import warnings

import numpy as np
from onnx.reference.op_run import OpRun

from tcc.dialects.ir.types import NONE, TensorType

from .device.tensor import Tensor
from .signature import target_device
from .containers import is_container, unwrap, wrap


def _static(t):
    """Not a tensor of unknown dims (sequences, optionals and NONE count as static)."""
    return not isinstance(t, TensorType) or t.has_static_shape


# Data-dependent ops with no loop-nest lowering: staged even where the
# model declares their result shapes (a model with static inputs, written
# for one input's values).
ALWAYS_STAGED = {"onnx.NonZero", "onnx.Compress", "onnx.NonMaxSuppression", "onnx.Unique"}


# The optional ops also take plain tensors, or nothing (OptionalHasElement()
# is false): host steps like the rest of their family.
CONTAINER_OPS = {"onnx.Optional", "onnx.OptionalHasElement", "onnx.OptionalGetElement"}
# Ops that run as host steps, so the importer keeps them whole rather than
# expanding those ONNX defines as functions (SequenceMap into a Loop).
HOST_STEP_OPS = {"SequenceMap", "SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceAt",
                 "SequenceErase", "SequenceLength", "SplitToSequence", "ConcatFromSequence",
                 "Optional", "OptionalHasElement", "OptionalGetElement"}


def host_step(op):
    """An op that runs as a host step whatever the shapes: it takes or makes
    a sequence or optional (a Python list / None at run time: no loop nest
    holds one), or it is control flow whose body does (Loop carrying a
    sequence, If returning one, SequenceMap) or whose body's shapes change
    from one iteration to the next (a Slice by the iteration number)."""
    if op.name in CONTAINER_OPS or any(is_container(v.type) for v in list(op.operands) + list(op.results)):
        return True
    if not op.regions:
        return False
    for inner in op.walk():
        if inner is op:
            continue
        vals = list(inner.results) + [a for r in inner.regions for b in r.blocks for a in b.args]
        if any(is_container(v.type) or not _static(v.type) for v in vals):
            return True
    return False


def first_data_dependent(module):
    """Index (in @main_graph's body) of the first op whose operands all have
    static shapes and whose results do not (or one of ALWAYS_STAGED, a
    host_step, or an op the runtime computes in Python: runtime/host_ops), or
    None."""
    from .host_ops import is_host_op
    block = module.lookup_function("main_graph").regions[0].blocks[0]
    for i, op in enumerate(block.ops):
        if op.name.startswith("onnx.") and op.name not in ("onnx.Constant", "onnx.NoValue") and \
                (host_step(op) or all(_static(v.type) for v in op.operands) and
                 (op.name in ALWAYS_STAGED or is_host_op(op) or not all(_static(r.type) for r in op.results))):
            return i
    return None


def _reparse(text, res, ctx):
    from tcc.dialects.ir import parse_module
    from .specialize import IR_MEMBER
    with tempfile.TemporaryDirectory(prefix="tcc-stage-") as d:
        ir_path = os.path.join(d, IR_MEMBER)
        with open(ir_path, "w") as f:
            f.write(text)
        if res is not None:
            with open(ir_path + ".resources", "wb") as f:
                f.write(res)
        module = parse_module(text, ir_path, ctx)
        for name in list(module.resources):
            module.resources.set(name, np.array(module.resources.get(name)))
    return module


def _print(module):
    from tcc.dialects.ir import print_module
    from .specialize import IR_MEMBER
    with tempfile.TemporaryDirectory(prefix="tcc-stage-") as d:
        ir_path = os.path.join(d, IR_MEMBER)
        print_module(module, path=ir_path)
        text = open(ir_path).read()
        res = open(ir_path + ".resources", "rb").read() if os.path.exists(ir_path + ".resources") else None
    return text, res


class StagedRun:
    """One specialization cut at a data-dependent op: prefix session, the op
    on its values, suffix session."""

    def __init__(self, prefix, sources, evaluator, suffix, ranks, prefix_args=None, suffix_args=None, outmap=None,
                 out_names=None):
        self.prefix, self.sources, self.evaluator, self.suffix = prefix, sources, evaluator, suffix
        self.ranks = ranks
        # which of the inputs (then the op's results) each stage takes: the
        # arguments a stage does not use are dropped (a string input the
        # native code never reads could not be lowered)
        self.prefix_args, self.suffix_args = prefix_args, suffix_args
        # per result: ("out", k), the suffix's k-th, or ("arg", i), value i of the
        # inputs then the op's results (passed through); None: all the suffix's
        self.outmap, self.out_names = outmap, out_names
        # the op's type, for profile rows (a HostOpRunner's node, or the
        # one-node model onnx.reference runs)
        node = getattr(evaluator, "node", None)
        self.op_type = node.op if node is not None else getattr(evaluator, "op_type", "data-dependent op")
        self._plan = self._resolve()

    @classmethod
    def build(cls, module, index, options, path, make_ctx, compile_fn, compiler=None):
        """module: the specialized module after the graph passes; index: what
        first_data_dependent found; path: where this specialization's files
        go (path + '.prefix.tcc', path + '.suffix.tcc'); make_ctx: a fresh
        context per compile (placement registers state in it); compile_fn:
        the compiler the session was handed, compile_fn(module, ctx,
        options, place) writing options.output (the runtime never imports
        the driver). The suffix is compiled unplaced: with dynamic arguments
        it becomes a specializing artifact, placed per shape when run, and
        loaded with `compiler` (the session's run-time compiler)."""
        from tcc.dialects.builtin import set_function_type
        from tcc.dialects.ir import PassManager, parse_pipeline
        from tcc.dialects.ir import attributes as A
        from tcc.dialects.transforms.constants import constant_value
        from onnx.reference import ReferenceEvaluator

        from .loader import load as _load

        from .host_ops import HostOpRunner, is_host_op, refine_result_types

        def load(p):
            return _load(p, compiler)
        func = module.lookup_function("main_graph")
        block = func.regions[0].blocks[0]
        op = list(block.ops)[index]
        refine_result_types(op)  # the suffix takes its results as arguments: they need a rank
        text, res = _print(module)
        model, values = _op_model(op, module)
        evaluator = HostOpRunner(model) if is_host_op(op) else _reference(model, ReferenceEvaluator)
        # where each operand (then each value a body captures) comes from:
        # ("arg", i), ("const", array), ("prefix", k), or None for an absent
        # optional operand
        sources, returned = [], []
        for v in values:
            if v.type is NONE:
                sources.append(None)
            elif v in block.args:
                sources.append(("arg", block.args.index(v)))
            elif constant_value(v) is not None:
                const = np.array(constant_value(v))
                const.flags.writeable = False  # constant: a host kernel may parse it once (detection._params)
                sources.append(("const", const))
            else:
                sources.append(("prefix", len(returned)))
                returned.append(index_of_value(block, v))
        # per result: its rank, None for an unranked tensor, "value" for a
        # sequence or optional (a list / None, passed on as it is)
        ranks = [len(r.type.shape) if isinstance(r.type, TensorType) and r.type.shape is not None else
                 "value" if is_container(r.type) else None for r in op.results if r.type is not NONE]

        prefix, prefix_args = None, None
        if returned:
            pctx = make_ctx()
            pm = _reparse(text, res, pctx)
            pblock = pm.lookup_function("main_graph").regions[0].blocks[0]
            ret = pblock.last
            values = [value_at(pblock, loc) for loc in returned]
            ret.set_operands(values)
            pf = pm.lookup_function("main_graph")
            pf.attributes["res_attrs"] = A.ArrayAttr(
                [A.DictAttr({"onnx.name": A.StringAttr(f"stage_operand_{k}")}) for k in range(len(values))])
            set_function_type(pf)
            PassManager(pctx, parse_pipeline("dce", pctx)).run(pm)
            prefix_args = _drop_unused_args(pf)
            popts = _with_output(options, path + ".prefix.tcc")
            compile_fn(pm, pctx, popts, True)
            prefix = load(popts.output)

        sctx = make_ctx()
        sm = _reparse(text, res, sctx)
        sf = sm.lookup_function("main_graph")
        sblock = sf.regions[0].blocks[0]
        sop = list(sblock.ops)[index]
        names = list(sf.attributes["arg_attrs"].elements) if "arg_attrs" in sf.attributes else \
            [A.DictAttr({"onnx.name": A.StringAttr(f"input_{i}")}) for i in range(len(sblock.args))]
        for k, r in enumerate(sop.results):
            if r.type is NONE:
                continue
            # A sequence's or optional's element shapes are the value's (the
            # suffix is specialized on them): the inferred ones may be wrong
            # (a Loop growing a sequence of length-i tensors).
            a = sblock.add_arg(_unranked(r.type) if is_container(r.type) else r.type)
            r.replace_all_uses_with(a)
            names.append(A.DictAttr({"onnx.name": A.StringAttr(_fresh_name(names, f"stage_result_{index}_{k}"))}))
        # The op's operands the prefix computed are the suffix's arguments too
        # (after the op's results), so the suffix does not compute them again:
        # detection_nms's suffix gathers from the boxes, and recomputed the
        # whole convolutional net for them (38 of its 56 us).
        for k, loc in enumerate(returned):
            v = value_at(sblock, loc)
            a = sblock.add_arg(v.type)
            v.replace_all_uses_with(a)
            names.append(A.DictAttr({"onnx.name": A.StringAttr(_fresh_name(names, f"stage_operand_{index}_{k}"))}))
        sf.attributes["arg_attrs"] = A.ArrayAttr(names)
        set_function_type(sf)
        PassManager(sctx, parse_pipeline("dce", sctx)).run(sm)
        # Results that are arguments (a string result passed straight out, which
        # the native code could not take) bypass the suffix.
        sret = sblock.last
        attrs = sf.get_attr("res_attrs") or []
        out_names = [attrs[i]["onnx.name"].value if i < len(attrs) and "onnx.name" in attrs[i] else f"output_{i}"
                     for i in range(len(sret.operands))]
        outmap, kept = [], []
        for v in sret.operands:
            if v in sblock.args:
                outmap.append(("arg", sblock.args.index(v)))
            else:
                outmap.append(("out", len(kept)))
                kept.append(v)
        if len(kept) != len(sret.operands):
            sret.set_operands(kept)
            raw = sf.attributes.get("res_attrs")
            elems = list(raw.elements) if raw is not None else [A.DictAttr({})] * len(outmap)
            sf.attributes["res_attrs"] = A.ArrayAttr([a for a, (k, _) in zip(elems, outmap) if k == "out"])
            set_function_type(sf)
            PassManager(sctx, parse_pipeline("dce", sctx)).run(sm)
        suffix_args = _drop_unused_args(sf)
        suffix = None
        if kept:
            sopts = _with_output(options, path + ".suffix.tcc")
            compile_fn(sm, sctx, sopts, False)
            suffix = load(sopts.output)
        run = cls(prefix, sources, evaluator, suffix, ranks, prefix_args, suffix_args, outmap, out_names)
        run._files = (model.SerializeToString(), evaluator.__class__ is HostOpRunner,
                      prefix and popts.output, suffix and sopts.output)
        return run

    # ---- as a file: the compile cache keeps a staged specialization like any other ----------
    def save(self, path):
        """Writes this run as an artifact at `path` (a plan of one 'staged'
        step: the op as a one-node ONNX model, the prefix's and suffix's
        artifacts as members, constants as .npy): True, or False where it
        cannot be one (a constant numpy cannot store without pickle)."""
        from .artifact import FORMAT, FORMAT_VERSION, write_zip
        op_model, host, prefix_file, suffix_file = self._files
        members, sources = {STAGE_OP: op_model}, []
        for src in self.sources:
            if src is not None and src[0] == "const":
                if src[1].dtype.hasobject:
                    return False
                buf = io.BytesIO()
                np.save(buf, src[1], allow_pickle=False)
                name = f"const_{len(sources)}.npy"
                members[name] = buf.getvalue()
                sources.append(["const", name])
            else:
                sources.append(None if src is None else list(src))
        for name, f in ((STAGE_PREFIX, prefix_file), (STAGE_SUFFIX, suffix_file)):
            if f:
                with open(f, "rb") as fh:
                    members[name] = fh.read()
        step = {"kind": "staged", "host_op": host, "sources": sources,
                "ranks": self.ranks, "prefix_args": self.prefix_args, "suffix_args": self.suffix_args,
                "outmap": None if self.outmap is None else [list(o) for o in self.outmap],
                "out_names": self.out_names}
        manifest = {"format": FORMAT, "format_version": FORMAT_VERSION,
                    "signature": {"inputs": [], "outputs": []}, "compile": {}, "weights": [], "plan": [step]}
        write_zip(path, manifest, members, b"")
        return True

    @classmethod
    def from_artifact(cls, art, compiler, n_inputs):
        """The run `save` wrote (art: runtime.artifact.read_artifact's, its
        members' hashes checked), every index in the step checked against
        what it indexes: a malformed step is an invalid artifact."""
        from onnx.reference import ReferenceEvaluator

        from .artifact import ArtifactError
        from .host_ops import HostOpRunner
        from .loader import load

        def bad(why):
            return ArtifactError(f"{art.path}: not a valid tcc artifact (staged step: {why})")
        step = art.manifest["plan"][0]
        m = art.members

        def sub(name):
            if name not in m:
                return None
            fd, tmp = tempfile.mkstemp(prefix=".tmp-stage-", suffix=".tcc", dir=os.path.dirname(art.path))
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(m[name])
                return load(tmp, compiler)  # mapped: the file may go
            finally:
                os.unlink(tmp)
        prefix, suffix = sub(STAGE_PREFIX), sub(STAGE_SUFFIX)
        n_pre = len(prefix.output_names) if prefix is not None else 0
        ranks = step["ranks"]
        if not isinstance(ranks, list) or not all(r is None or r == "value" or type(r) is int for r in ranks):
            raise bad("ranks")
        sources = []
        for src in step["sources"]:
            if src is None:
                sources.append(None)
            elif src[0] == "const" and src[1] in m:
                # a copy: np.load's array is a view of the member's bytes, and a
                # host kernel parses only arrays owning their memory once
                # (detection._params: a cached run parsed NonMaxSuppression's
                # three parameters on every call)
                const = np.load(io.BytesIO(m[src[1]]), allow_pickle=False).copy()
                const.flags.writeable = False
                sources.append(("const", const))
            elif src[0] in ("arg", "prefix") and type(src[1]) is int and \
                    0 <= src[1] < (n_inputs if src[0] == "arg" else n_pre):
                sources.append((src[0], src[1]))
            else:
                raise bad(f"source {src!r}")
        n_values = n_inputs + len(ranks) + n_pre  # what the suffix's arguments index (see run)
        for key, bound in (("prefix_args", n_inputs), ("suffix_args", n_values)):
            idx = step[key]
            if idx is not None and not (isinstance(idx, list) and all(type(i) is int and 0 <= i < bound for i in idx)):
                raise bad(key)
        outmap = step["outmap"]
        if outmap is not None:
            n_out = len(suffix.output_names) if suffix is not None else 0
            if not all(isinstance(o, list) and len(o) == 2 and type(o[1]) is int and
                       0 <= o[1] < (n_out if o[0] == "out" else n_values if o[0] == "arg" else -1) for o in outmap):
                raise bad("outmap")
            outmap = [tuple(o) for o in outmap]
        elif suffix is None:
            raise bad("no suffix")
        out_names = step["out_names"]
        if out_names is not None and not (isinstance(out_names, list) and all(isinstance(n, str) for n in out_names)):
            raise bad("out_names")
        import onnx
        try:
            model = onnx.load_from_string(m[STAGE_OP])
            evaluator = HostOpRunner(model) if step["host_op"] is True else _reference(model, ReferenceEvaluator)
        except Exception as e:  # noqa: BLE001 - whatever onnx makes of a corrupt model
            raise bad(f"the op's model: {type(e).__name__}: {e}") from None
        return cls(prefix, sources, evaluator, suffix, ranks, step["prefix_args"], step["suffix_args"], outmap,
                   out_names)


    def specializations(self):
        """The sessions this run calls (for reports: where each stage was placed)."""
        return [s for s in (self.prefix, self.suffix) if s is not None]

    def _resolve(self):
        """What run needs, resolved once: (feed names, where each operand
        comes from, a host kernel to call directly or None). A kernel that
        emits no warnings (HostOpRunner.warns) takes its operand list as it
        is, in its node's input order: the evaluator's feeds dict and
        warnings.catch_warnings were ~5 us of a ~15 us NonMaxSuppression step."""
        ev = self.evaluator
        feeds = {f"i{i}": src for i, src in enumerate(self.sources) if src is not None}
        if getattr(ev, "warns", True):
            names = list(feeds)
            return names, [feeds[n] for n in names], None
        return list(ev.inputs), [feeds.get(n, (None, None)) if n else (None, None) for n in ev.inputs], ev.fn

    def run(self, inputs, output_names=None, output_device=None):
        pre = self.prefix.run(_pick(inputs, self.prefix_args)) if self.prefix is not None else []
        return self._finish(inputs, pre, self._between(inputs, pre), output_names, output_device)

    def profile_steps(self, inputs, runs):
        """The prefix's steps, the host op between the stages, the suffix's
        steps: PlanSession.profile_steps' rows, in the order they run."""
        pre_in = _pick(inputs, self.prefix_args)
        pre = self.prefix.run(pre_in) if self.prefix is not None else []
        rows = profile_rows(self.prefix, pre_in, runs) if self.prefix is not None else []
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            values = self._between(inputs, pre)
            times.append(time.perf_counter() - t0)
        rows.append((self.op_type, "host", times))
        if self.suffix is not None:
            rows += profile_rows(self.suffix, _pick(values, self.suffix_args), runs)
        return rows

    def _between(self, inputs, pre):
        """The data-dependent op on the prefix's values: the suffix's possible
        arguments (the inputs, the op's results, the prefix's results)."""
        names, where_from, kernel = self._plan
        operands = [None if kind is None else inputs[w] if kind == "arg" else w if kind == "const" else
                    np.asarray(pre[w]) for kind, w in where_from]
        if kernel is not None:
            outs = kernel(self.evaluator.node, operands)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outs = self.evaluator.run(None, {n: v for n, v in zip(names, operands) if n is not None})
        outs = [o if r == "value" else _to_rank(np.asarray(o), r) for o, r in zip(outs, self.ranks)]
        return list(inputs) + outs + [np.asarray(v) for v in pre]  # the suffix's arguments (see build)

    def _finish(self, inputs, pre, values, output_names, output_device):
        if self.outmap is None:
            return self.suffix.run(_pick(values, self.suffix_args), output_names, output_device)
        res = self.suffix.run(_pick(values, self.suffix_args), None, output_device) if self.suffix is not None else []
        dev = target_device(output_device)
        full = [res[i] if kind == "out" else
                (values[i] if dev is None else Tensor.from_dlpack(np.ascontiguousarray(values[i]), device=dev))
                for kind, i in self.outmap]
        if output_names is not None:
            full = [full[self.out_names.index(n)] for n in output_names]
        return full


def _reference(model, evaluator_class):
    """onnx.reference's evaluator of the op's one-node model, with the op's type."""
    ev = evaluator_class(model, new_ops=[Optional])
    ev.op_type = model.graph.node[0].op_type
    return ev


def _fresh_name(attrs, base):
    """`base`, or `base_1`, ... whichever no argument in `attrs` has: a stage
    cut again has its outer stage's results among its arguments (and a
    placed session finds its arguments by name: two of one name took one
    array for both)."""
    taken = {d.value["onnx.name"].value for d in attrs if "onnx.name" in d.value}
    name, j = base, 1
    while name in taken:
        name, j = f"{base}_{j}", j + 1
    return name


def profile_rows(sess, inputs, runs):
    """[(step, where it runs, [seconds per run])] for any session: its own
    profile_steps where it has one, else its whole run as one step."""
    if hasattr(sess, "profile_steps"):
        return sess.profile_steps(inputs, runs)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(inputs)
        times.append(time.perf_counter() - t0)
    return [("main_graph", "host", times)]


def _pick(values, indices):
    return values if indices is None else [values[i] for i in indices]


def _drop_unused_args(func):
    """Removes the entry block's unused arguments (and their names) from
    `func`; returns the indices of those kept."""
    from tcc.dialects.builtin import set_function_type
    from tcc.dialects.ir import attributes as A
    block = func.regions[0].blocks[0]
    keep = [i for i, a in enumerate(block.args) if a.uses]
    if len(keep) == len(block.args):
        return keep
    names = list(func.attributes["arg_attrs"].elements) if "arg_attrs" in func.attributes else None
    block.args[:] = [block.args[i] for i in keep]
    for k, a in enumerate(block.args):
        a.index = k
    if names is not None:
        func.attributes["arg_attrs"] = A.ArrayAttr([names[i] for i in keep])
    set_function_type(func)
    return keep


def _unranked(t):
    kinds, inner = unwrap(t)
    return wrap(kinds, TensorType(None, inner.element)) if inner is not None else t


class Optional(OpRun):  # the name onnx.reference keys overrides by
    """onnx.reference's Optional returns [x] for x (an optional holding a
    sequence of one sequence); an optional is its value or None."""
    op_domain = ""

    def _run(self, x=None, type=None):  # noqa: A002 (the attribute's name)
        return (x,)


def _op_model(op, module):
    """A one-node model computing op; its inputs i0.. are the op's operands,
    then the outer values its body regions capture (a Loop body reading a
    constant of the enclosing graph). Returns (model, those values)."""
    from tcc.dialects.onnx.exporter import single_node_model
    inside = set()
    for inner in op.walk():
        if inner is not op:
            inside.update(inner.results)
        for region in inner.regions:
            for b in region.blocks:
                inside.update(b.args)
    values = list(op.operands)
    for inner in op.walk():
        if inner is op:
            continue
        for v in inner.operands:
            if v.type is not NONE and v not in inside and v not in values:
                values.append(v)
    return single_node_model(op, None, module, values[len(op.operands):]), values


def _to_rank(a, rank):
    """onnx's reference Loop stacks a scalar scan output as [n, 1] where the
    op's type (and onnxruntime) says [n]: drop size-1 axes down to the rank."""
    if rank is None or a.ndim <= rank:
        return a
    shape = list(a.shape)
    while len(shape) > rank and 1 in shape[1:]:
        del shape[len(shape) - 1 - shape[::-1].index(1)]
    return a.reshape(shape) if len(shape) == rank else a


def index_of_value(block, v):
    """(op index, result index) of a value defined by a top-level op of block."""
    for i, op in enumerate(block.ops):
        for k, r in enumerate(op.results):
            if r is v:
                return i, k
    raise ValueError("value not defined at the top level of the block")


def value_at(block, loc):
    i, k = loc
    return list(block.ops)[i].results[k]


def _with_output(options, output):
    from dataclasses import replace
    return replace(options, output=output)


def drop_container_args(func):
    """Removes func's sequence and optional arguments (unused by its ops:
    every op taking one is a host step); returns the indices kept."""
    from tcc.dialects.ir import attributes as A
    block = func.regions[0].blocks[0]
    keep = [i for i, a in enumerate(block.args) if not is_container(a.type)]
    arg_attrs = list(func.attributes["arg_attrs"].elements) if "arg_attrs" in func.attributes else None
    block.args = [block.args[i] for i in keep]
    for n, a in enumerate(block.args):
        a.index = n
    if arg_attrs is not None:
        func.attributes["arg_attrs"] = A.ArrayAttr([arg_attrs[i] for i in keep])
    return keep


def passes_containers(module):
    """Whether @main_graph (cut at every host step already) still takes or
    returns a sequence or optional: then only passes it through."""
    block = module.lookup_function("main_graph").regions[0].blocks[0]
    return any(is_container(v.type) for v in list(block.args) + list(block.last.operands))


class ForwardRun:
    """The end of a staged chain: the sequences and optionals it returns are
    its own arguments (every op making one ran as a host step before), its
    tensor outputs are computed natively (`inner`, None when there are none)."""

    def __init__(self, inner, keep, routes, names):
        self.inner, self.keep, self.routes, self.names = inner, keep, routes, names

    @classmethod
    def build(cls, module, options, path, compile_fn, compiler=None):
        """Compiles the tensor part of `module` (its container arguments and
        results dropped) with compile_fn, like StagedRun.build."""
        from tcc.dialects.builtin import set_function_type
        from tcc.dialects.ir import attributes as A
        from tcc.dialects.ir.errors import TccError

        from .loader import load
        func = module.lookup_function("main_graph")
        block = func.regions[0].blocks[0]
        ret = block.last
        routes, native = [], []
        for v in ret.operands:
            if is_container(v.type) or v.type is NONE:
                if v not in block.args:
                    raise TccError(f"a {v.type} result that no host step makes cannot run natively")
                routes.append(("arg", block.args.index(v)))
            else:
                routes.append(("native", len(native)))
                native.append(v)
        inner = None
        names = [d["onnx.name"].value if "onnx.name" in d else f"output_{k}"
                 for k, d in enumerate(func.get_attr("res_attrs") or [{}] * len(routes))]
        keep = [i for i, a in enumerate(block.args) if not is_container(a.type)]  # drop_container_args's
        if native:
            for a in block.args:
                if is_container(a.type) and any(u is not ret for u, _ in a.uses):
                    raise TccError(f"argument #{a.index} ({a.type}) is used by an op that is not a host step")
            res_attrs = list(func.attributes["res_attrs"].elements) if "res_attrs" in func.attributes else None
            if res_attrs is not None:
                func.attributes["res_attrs"] = A.ArrayAttr(
                    [res_attrs[k] for k, (kind, _) in enumerate(routes) if kind == "native"])
            ret.set_operands(native)
            drop_container_args(func)
            set_function_type(func)
            opts = _with_output(options, path + ".suffix.tcc")
            compile_fn(module, None, opts, True)
            inner = load(opts.output, compiler)
        return cls(inner, keep, routes, names)

    def specializations(self):
        return [self.inner] if self.inner is not None else []

    def profile_steps(self, inputs, runs):
        return profile_rows(self.inner, [inputs[i] for i in self.keep], runs) if self.inner is not None else []

    def run(self, inputs, output_names=None, output_device=None):
        outs = self.inner.run([inputs[i] for i in self.keep], None, output_device) \
            if self.inner is not None else []
        outs = [inputs[w] if kind == "arg" else outs[w] for kind, w in self.routes]
        if output_names is not None:
            by_name = dict(zip(self.names, outs))
            outs = [by_name[n] for n in output_names]
        return outs


STAGE_OP, STAGE_PREFIX, STAGE_SUFFIX = "stage_op.onnx", "prefix.tcc", "suffix.tcc"


def is_staged(manifest):
    plan = manifest.get("plan", [])
    return len(plan) == 1 and isinstance(plan[0], dict) and plan[0].get("kind") == "staged"
