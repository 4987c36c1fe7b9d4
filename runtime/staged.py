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


def _static(t):
    """Not a tensor of unknown dims (sequences, optionals and NONE count as static)."""
    return not isinstance(t, TensorType) or t.has_static_shape


# Data-dependent ops with no loop-nest lowering: staged even where the
# model declares their result shapes (a model with static inputs, written
# for one input's values).
ALWAYS_STAGED = {"onnx.NonZero", "onnx.Compress", "onnx.NonMaxSuppression", "onnx.Unique"}


def first_data_dependent(module):
    """Index (in @main_graph's body) of the first op whose operands all have
    static shapes and whose results do not (or one of ALWAYS_STAGED), or None."""
    block = module.lookup_function("main_graph").regions[0].blocks[0]
    for i, op in enumerate(block.ops):
        if op.name.startswith("onnx.") and op.name not in ("onnx.Constant", "onnx.NoValue") and \
                all(_static(v.type) for v in op.operands) and \
                (op.name in ALWAYS_STAGED or not all(_static(r.type) for r in op.results)):
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

    def __init__(self, prefix, sources, evaluator, suffix, ranks):
        self.prefix, self.sources, self.evaluator, self.suffix = prefix, sources, evaluator, suffix
        self.ranks = ranks

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

        def load(p):
            return _load(p, compiler)
        text, res = _print(module)
        func = module.lookup_function("main_graph")
        block = func.regions[0].blocks[0]
        op = list(block.ops)[index]
        model, values = _op_model(op, module)
        evaluator = ReferenceEvaluator(model)
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

        prefix = None
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
        sopts = _with_output(options, path + ".suffix.tcc")
        compile_fn(sm, sctx, sopts, False)
        suffix = load(sopts.output)
        return cls(prefix, sources, evaluator, suffix, ranks)

    def run(self, inputs, output_names=None, output_device=None):
        pre = self.prefix.run(list(inputs)) if self.prefix is not None else []
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
        return self.suffix.run(list(inputs) + outs, output_names, output_device)


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
