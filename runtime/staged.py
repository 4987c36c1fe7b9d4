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
not have."""
from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np

from tcc.dialects.ir.types import NONE, TensorType

from .device.tensor import Tensor
from .signature import target_device


def _static(t):
    """Not a tensor of unknown dims (sequences, optionals and NONE count as static)."""
    return not isinstance(t, TensorType) or t.has_static_shape


# Data-dependent ops with no loop-nest lowering: staged even where the
# model declares their result shapes (a model with static inputs, written
# for one input's values).
ALWAYS_STAGED = {"onnx.NonZero", "onnx.Compress", "onnx.NonMaxSuppression", "onnx.Unique"}


def first_data_dependent(module):
    """Index (in @main_graph's body) of the first op whose operands all have
    static shapes and whose results do not (or one of ALWAYS_STAGED, or an op
    the runtime computes in Python: runtime/host_ops), or None."""
    from .host_ops import is_host_op
    block = module.lookup_function("main_graph").regions[0].blocks[0]
    for i, op in enumerate(block.ops):
        if op.name.startswith("onnx.") and op.name not in ("onnx.Constant", "onnx.NoValue") and \
                all(_static(v.type) for v in op.operands) and \
                (op.name in ALWAYS_STAGED or is_host_op(op) or not all(_static(r.type) for r in op.results)):
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
        evaluator = HostOpRunner(model) if is_host_op(op) else ReferenceEvaluator(model)
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
                sources.append(("const", np.array(constant_value(v))))
            else:
                sources.append(("prefix", len(returned)))
                returned.append(index_of_value(block, v))
        ranks = [len(r.type.shape) if isinstance(r.type, TensorType) and r.type.shape is not None else None
                 for r in op.results if r.type is not NONE]

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
            a = sblock.add_arg(r.type)
            r.replace_all_uses_with(a)
            names.append(A.DictAttr({"onnx.name": A.StringAttr(f"stage_result_{index}_{k}")}))
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
        return cls(prefix, sources, evaluator, suffix, ranks, prefix_args, suffix_args, outmap, out_names)

    def specializations(self):
        """The sessions this run calls (for reports: where each stage was placed)."""
        return [s for s in (self.prefix, self.suffix) if s is not None]

    def run(self, inputs, output_names=None, output_device=None):
        pre = self.prefix.run(_pick(list(inputs), self.prefix_args)) if self.prefix is not None else []
        feeds = {}
        for i, src in enumerate(self.sources):
            if src is None:
                continue
            kind, where = src
            feeds[f"i{i}"] = inputs[where] if kind == "arg" else where if kind == "const" else np.asarray(pre[where])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = self.evaluator.run(None, feeds)
        outs = [_to_rank(np.asarray(o), r) for o, r in zip(outs, self.ranks)]
        values = list(inputs) + outs
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
