"""Ahead of time, for models that compile at run time: whether a model needs
run-time specialization (dynamic dims, or graph inputs that decide shapes:
Reshape's shape, Slice's starts, Reduce's axes...), and its specializing
artifact: the optimized onnx-dialect IR plus every compile option, which the
runtime's SpecializingSession specializes per input shape and hands to the
compiler it was given (`pipeline.compile_specialized`)."""
from __future__ import annotations

import os
import tempfile

from tcc.dialects.ir.errors import TccError
from tcc.runtime.artifact import TensorSpec
from tcc.runtime.specialize import IR_MEMBER, RES_MEMBER

# Operands whose VALUES decide result shapes (by schema input name): a graph
# input feeding one is specialized on its value, not only its shape.
SHAPE_OPERANDS = {"shape", "starts", "ends", "axes", "steps", "pads", "repeats", "k", "K", "split", "scales",
                  "sizes", "roi", "depth", "limit", "start", "delta", "num_outputs", "output_shape",
                  "axis", "reduction_axes", "image_shape", "block_shape", "size", "dft_length",
                  "frame_step", "frame_length", "M", "cond"}
# Ops whose results depend on their operand's shape only, never its values:
# a chain through them does not make a graph input shape-deciding (else every
# export that reads Shape(input_ids) was specialized on the ids' values: a
# recompile per new input, the whole model folded to constants).
VALUE_BLIND = {"onnx.Shape", "onnx.Size"}
# ConstantOfShape / EyeLike-style ops whose first input is a shape.
SHAPE_FIRST_INPUT = {"onnx.ConstantOfShape"}


def _decides_shape(user, idx):
    from tcc.dialects.onnx.dialect import schema_for, split_op_name
    if user.name in SHAPE_FIRST_INPUT and idx == 0:
        return True
    dom, short = split_op_name(user.name)
    if dom is None:
        return False
    s = schema_for(dom, short)
    return s is not None and idx < len(s.inputs) and s.inputs[idx].name in SHAPE_OPERANDS


def _shape_like(v):
    """A small integer (or float, or bool) tensor: what shape arithmetic
    (Gather, Concat, Add, Slice of a shape; a Range length computed as
    ceil((limit - start) / delta) in floats) passes along."""
    t = v.type
    el = str(getattr(t, "element", ""))
    shape = getattr(t, "shape", None)
    return el in ("i64", "i32", "i1", "f16", "bf16", "f32", "f64") and shape is not None and len(shape) <= 1 and \
        all(d is not None and d <= 16 for d in shape)


def shape_operand_args(module):
    """Indices of @main_graph arguments whose values decide shapes: used as
    a shape operand, directly or through shape arithmetic on small integer
    tensors (an expanded function computing a Range limit from `size`)."""
    func = module.lookup_function("main_graph")
    out = set()
    for i, a in enumerate(func.regions[0].blocks[0].args):
        todo, seen = [a], set()
        while todo and i not in out:
            v = todo.pop()
            for user, idx in v.uses:
                if _decides_shape(user, idx):
                    out.add(i)
                    break
                if user.name in VALUE_BLIND or user in seen or not user.results or \
                        not all(_shape_like(r) for r in user.results):
                    continue
                seen.add(user)
                todo.extend(user.results)
    return sorted(out)


def needs_specialization(module):
    func = module.lookup_function("main_graph")
    args = func.regions[0].blocks[0].args
    dynamic = any(not getattr(a.type, "has_static_shape", True) for a in args)
    from tcc.runtime.containers import is_container  # sequences, optionals: lists at run time, host steps
    rets = func.regions[0].blocks[0].last.operands
    dynamic = dynamic or any(is_container(v.type) for v in list(args) + list(rets))
    from tcc.runtime.staged import first_data_dependent  # static inputs, data-dependent shapes (NonZero...)
    return dynamic or bool(shape_operand_args(module)) or first_data_dependent(module) is not None


def write_specializing_artifact(path, module, options):
    """The optimized onnx-dialect IR, to be specialized and compiled at run time."""
    from tcc.dialects.ir import print_module
    from tcc.runtime.artifact import FORMAT, FORMAT_VERSION, write_zip

    from .pipeline import recorded_options
    func = module.lookup_function("main_graph")
    block = func.regions[0].blocks[0]

    def names(key, n, prefix):
        attrs = func.get_attr(key) or []
        return [(attrs[i]["onnx.name"].value if i < len(attrs) and "onnx.name" in attrs[i] else f"{prefix}{i}")
                for i in range(n)]

    def spec(name, t, bound=()):
        from tcc.dialects.ir.types import TensorType
        from tcc.runtime.containers import is_container, unwrap
        if is_container(t):
            kinds, inner = unwrap(t)
            if inner is None:
                raise TccError(f"'{name}' has type {t}: a sequence or optional needs its element type")
            shape = None if inner.shape is None else tuple(-1 if d is None else d for d in inner.shape)
            return TensorSpec(name, shape, str(inner.element), kinds).to_json()
        if not isinstance(t, TensorType) or t.shape is None:
            raise TccError(f"'{name}' has type {t}: only tensors of known rank can be specialized at run time")
        shape = [-1 if d is None else d for d in t.shape]
        return TensorSpec(name, tuple(shape), str(t.element), (), bound).to_json()

    from tcc.dialects.transforms.index_bounds import arg_index_bound
    ins = [spec(n, a.type, arg_index_bound(func, k) or ())
           for k, (n, a) in enumerate(zip(names("arg_attrs", len(block.args), "input_"), block.args))]
    rets = block.last.operands
    outs = [spec(n, v.type) for n, v in zip(names("res_attrs", len(rets), "output_"), rets)]
    with tempfile.TemporaryDirectory(prefix="tcc-art-") as d:
        ir_path = os.path.join(d, IR_MEMBER)
        print_module(module, path=ir_path)
        members = {IR_MEMBER: open(ir_path, "rb").read()}
        if os.path.exists(ir_path + ".resources"):
            members[RES_MEMBER] = open(ir_path + ".resources", "rb").read()
    import tcc
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION,
                "signature": {"inputs": ins, "outputs": outs}, "weights": [],
                "plan": [{"kind": "specialize", "ir": IR_MEMBER}],
                "specialize": {"shape_operand_inputs": shape_operand_args(module), "opt_level": options.opt_level},
                # Every option, accelerator options included: the run-time
                # compile of each input shape is this same compile.
                "compile": {"tcc": tcc.__version__, "target": {"features": []},
                            "options": recorded_options(options)}}
    return write_zip(path, manifest, members, b"")
