"""Compiling a placed (partitioned) module into a plan: after placement,
@main_graph holds host ops and `func.call`s of accelerator partitions. Host
ops are outlined into functions too (maximal runs between calls), so
@main_graph becomes a sequence of calls: the executor's plan. Each host
function goes through the host backend into its own native entry; each
accelerator lowers and packages its partitions through its hooks."""
from __future__ import annotations

import time

from tcc.accelerators import RuntimeModule
from tcc.dialects.ir import Module
from tcc.dialects.ir import attributes as A
from tcc.dialects.ir.core import Operation
from tcc.dialects.onnx.dialect import OPSET_ATTR
from tcc.dialects.transforms.ordering import topological_sort
from tcc.dialects.transforms.placement import FREE_OPS, PLACEMENT, REGION, PartitionPass

from .io import CLIError
from .progress import phase


def has_partitions(module):
    main = module.lookup_function("main_graph")
    return main is not None and any(op.name == "func.call" and op.get_attr("tcc.accelerator")
                                    for op in main.regions[0].blocks[0].ops)


def outline_host(module):
    """Every maximal run of host ops in @main_graph becomes @host_<n>."""
    block = module.lookup_function("main_graph").regions[0].blocks[0]
    ret = block.last
    # A graph output computed by no op (an input or a constant) gets an
    # Identity, so every output is produced by some step.
    for i, v in enumerate(list(ret.operands)):
        p = getattr(v, "op", None)
        if p is None or p.name in FREE_OPS:
            ident = Operation("onnx.Identity", [v], [v.type], loc=ret.loc)
            block.insert_before(ret, ident)
            ret.set_operand(i, ident.results[0])
    runs, cur = [], []
    for op in block.ops:
        if op is ret or op.name in FREE_OPS:
            continue
        if op.name == "func.call":
            if cur:
                runs.append(cur)
                cur = []
            continue
        cur.append(op)
    if cur:
        runs.append(cur)
    outliner = PartitionPass()
    for n, ops in enumerate(runs):
        for op in ops:
            op.attributes[PLACEMENT] = A.StringAttr("host")
            op.attributes[REGION] = A.IntegerAttr(n)
        outliner._outline(module, block, ops, n)
    topological_sort(block)
    for op in list(block.ops):  # constants now cloned into the partitions
        if op.name in FREE_OPS and all(not r.uses for r in op.results):
            op.erase()


def _detach(module, names):
    """A new module holding the named functions (moved), sharing constants."""
    sub = Module(resources=module.resources)
    opset = module.attributes.get(OPSET_ATTR)
    if opset is not None:
        sub.attributes[OPSET_ATTR] = opset
    for f in list(module.functions()):
        if f.get_attr("sym_name") in names:
            module.body.remove(f)
            sub.body.append(f)
    return sub


def _value_plan(main):
    """Names for every value crossing steps, and the steps in order."""
    block = main.regions[0].blocks[0]
    names = {}
    arg_names = [d.value["onnx.name"].value for d in main.attributes["arg_attrs"]]
    for a, n in zip(block.args, arg_names):
        names[a] = n
    res_names = [d.value["onnx.name"].value for d in main.attributes["res_attrs"]]
    for v, n in zip(block.last.operands, res_names):
        names.setdefault(v, n)
    steps = []
    for op in block.ops:
        if op.name != "func.call":
            continue
        for r in op.results:
            names.setdefault(r, f"t{len(names)}")
        steps.append((op.get_attr("tcc.accelerator"), op.get_attr("callee"),
                      [names[v] for v in op.operands], [names[r] for r in op.results]))
    values = {}
    for v, n in names.items():
        values[n] = {"shape": list(v.type.shape), "element": str(v.type.element)}
    from tcc.dialects.transforms.index_bounds import arg_index_bound
    for k, n in enumerate(arg_names):
        bound = arg_index_bound(main, k)
        if bound:
            values[n]["index_bound"] = list(bound)
    return steps, values, arg_names, [names[v] for v in block.last.operands]


def _buffer_alignment(acc, sub):
    """The accelerator's tensor -> buffer conversion (`tcc_convert_tensor_type`)
    for every tensor its partitions take or give: the largest alignment it
    asks for, which the executor honours when allocating on its device."""
    align = 64
    if not acc.has("tcc_convert_tensor_type"):
        return align
    for f in sub.functions():
        ft = f.get_attr("function_type")
        for t in list(ft.inputs) + list(ft.results):
            got = acc.call("tcc_convert_tensor_type", tensor_type=t)
            if got is not None:
                align = max(align, int(got[1]))
    return align


def compile_plan(module, pipeline):
    """-> the artifact path. Each host function goes through the host
    backend (`compile.compile_host`, as @main_graph of its own module); each
    accelerator's partitions through `pipeline.lower_partition` and its
    loop-to-native hook."""
    from .compile import compile_host
    ctx, options = pipeline.ctx, pipeline.options
    if options.emit not in ("tcc", "c"):
        raise CLIError(f"--emit={options.emit} is not available for a model placed on accelerators "
                       f"(use --emit=onnx-ir, placement-dot, c or tcc)")
    t0 = time.perf_counter()
    outline_host(module)
    main = module.lookup_function("main_graph")
    for v in list(main.regions[0].blocks[0].args) + list(main.regions[0].blocks[0].last.operands):
        if not getattr(v.type, "has_static_shape", False):
            raise CLIError(f"a model placed on accelerators needs static shapes; {v.type} is not")
    steps, values, inputs, outputs = _value_plan(main)
    accels = {a.name: a for a in ctx.accelerators}
    host_code, payloads = {}, {}
    by_accel = {}
    for acc, callee, _, _ in steps:
        by_accel.setdefault(acc, []).append(callee)
    for name in by_accel.pop("host", []):
        sub = _detach(module, {name})
        f = sub.functions()[0]
        f.attributes["sym_name"] = A.StringAttr("main_graph")
        f.attributes["arg_attrs"] = A.ArrayAttr([A.DictAttr({"onnx.name": A.StringAttr(f"in{i}")})
                                                 for i in range(len(f.regions[0].blocks[0].args))])
        f.attributes["res_attrs"] = A.ArrayAttr([A.DictAttr({"onnx.name": A.StringAttr(f"out{i}")})
                                                 for i in range(len(f.regions[0].blocks[0].last.operands))])
        host_code[name] = compile_host(sub, pipeline)
    for acc_name, funcs in by_accel.items():
        acc = accels[acc_name]
        sub = _detach(module, set(funcs))
        with phase("lowering", sub):
            pipeline.lower_partition(acc, sub)
        with phase("accelerator code (C compile)", sub):
            rm = acc.call("tcc_loop_to_native", funcs=sub.functions(), module=sub, context=ctx,
                          target=pipeline.target(acc_name))
        if not isinstance(rm, RuntimeModule):
            raise CLIError(f"accelerator '{acc_name}' returned no runtime module from tcc_loop_to_native")
        missing = set(funcs) - set(rm.functions)
        if missing:
            raise CLIError(f"accelerator '{acc_name}' did not provide {', '.join(sorted(missing))}")
        payloads[acc_name] = (acc, rm, _buffer_alignment(acc, sub))
    if options.emit == "c":
        return _emit_c(payloads, options)
    from tcc.runtime.plan_artifact import write_plan_artifact
    with phase("write"):
        return write_plan_artifact(options.output or "model.tcc", steps=steps, values=values, inputs=inputs,
                                   outputs=outputs, host_code=host_code, payloads=payloads,
                                   compile_seconds=time.perf_counter() - t0, options=options)


def _emit_c(payloads, options):
    """The C source accelerators generated (seeds/002's C-source path): a
    RuntimeModule whose metadata names `c_source` holds it in its payload zip."""
    import io
    import zipfile

    from .io import write_text
    parts = []
    for name, (_acc, rm, _align) in payloads.items():
        member = (rm.metadata or {}).get("c_source")
        if not member:
            continue
        with zipfile.ZipFile(io.BytesIO(rm.payload)) as z:
            parts.append(f"/* ---- accelerator {name}: {', '.join(rm.functions)} ---- */\n"
                         + z.read(member).decode("utf-8"))
    if not parts:
        raise CLIError("--emit=c: no selected accelerator generated C source for this model")
    write_text("\n".join(parts), options.output)
    return options.output
