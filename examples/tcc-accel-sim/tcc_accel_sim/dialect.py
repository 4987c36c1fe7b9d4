"""The sim dialect and its lowering from the onnx dialect.

    sim.matmul(a, b) -> c                 2-D or batched matmul (Gemm lowers here too)
    sim.conv(x, w, b?) {strides, pads, dilations, group}
    sim.fused_elementwise(inputs...) ({^bb0(args): onnx elementwise ops... sim.yield(r)})
"""
from tcc.dialects.ir import (ISOLATED, PURE, TERMINATOR, Block, Dialect, OpDef, OperandDef, Operation, Pass,
                             Region)

ELEMENTWISE = {"onnx.Add", "onnx.Sub", "onnx.Mul", "onnx.Div", "onnx.Relu", "onnx.Sigmoid", "onnx.Tanh",
               "onnx.Exp", "onnx.Neg", "onnx.Abs", "onnx.Sqrt"}


def dialect():
    return Dialect("sim", [
        OpDef("sim.matmul", [OperandDef("a"), OperandDef("b")], [OperandDef("c")], traits=frozenset({PURE})),
        OpDef("sim.conv", [OperandDef("x"), OperandDef("w"), OperandDef("b", "optional")], [OperandDef("y")],
              traits=frozenset({PURE})),
        OpDef("sim.fused_elementwise", [OperandDef("inputs", "variadic")], [OperandDef("result")],
              traits=frozenset({PURE, ISOLATED}), num_regions=1),
        OpDef("sim.yield", [OperandDef("values", "variadic")], traits=frozenset({TERMINATOR, PURE})),
    ], "the sim accelerator's ops")


def _elementwise_group(op, attrs):
    """One onnx elementwise op as a sim.fused_elementwise with that op as body."""
    body = Block([v.type for v in op.operands])
    inner = Operation(op.name, body.args, [r.type for r in op.results], attrs, loc=op.loc)
    body.append(inner)
    body.append(Operation("sim.yield", inner.results))
    return Operation("sim.fused_elementwise", op.operands, [op.results[0].type], {}, [Region([body])], op.loc)


def lower_function(func):
    """onnx ops of a sim partition -> sim ops; returns op names left over."""
    left = []
    block = func.regions[0].blocks[0]
    for op in list(block.ops):
        attrs = {k: v for k, v in op.attributes.items() if not k.startswith("tcc.")}
        if op.name == "onnx.MatMul":
            new = Operation("sim.matmul", op.operands, [op.results[0].type], loc=op.loc)
        elif op.name == "onnx.Conv":
            new = Operation("sim.conv", op.operands, [op.results[0].type], attrs, loc=op.loc)
        elif op.name in ELEMENTWISE:
            new = _elementwise_group(op, attrs)
        else:
            if op.name not in ("onnx.Constant", "onnx.NoValue", "func.return"):
                left.append(op.name)
            continue
        block.insert_before(op, new)
        op.results[0].replace_all_uses_with(new.results[0])
        op.erase()
    return left


class FuseElementwisePass(Pass):
    """sim's own pass: a fused_elementwise whose only user is another one
    is merged into it, so a chain runs as one kernel."""
    name = "sim-fuse-elementwise"
    summary = "merge chains of sim.fused_elementwise into one"

    def run(self, module, ctx):
        for op in list(module.walk()):
            if op.name != "sim.fused_elementwise" or op.parent is None:
                continue
            r = op.results[0]
            if len(r.uses) != 1 or r.uses[0][0].name != "sim.fused_elementwise":
                continue
            user, idx = r.uses[0]
            self._merge(op, user, idx)

    @staticmethod
    def _merge(producer, user, idx):
        pbody, ubody = producer.regions[0].blocks[0], user.regions[0].blocks[0]
        inputs = list(user.operands[:idx]) + list(user.operands[idx + 1:]) + list(producer.operands)
        body = Block([v.type for v in inputs])
        uargs = body.args[:len(user.operands) - 1]
        pargs = body.args[len(user.operands) - 1:]
        mapping = dict(zip(pbody.args, pargs))
        for o in pbody.ops:
            if o.name == "sim.yield":
                produced = mapping[o.operands[0]]
                continue
            c = Operation(o.name, [mapping[v] for v in o.operands], [t.type for t in o.results], dict(o.attributes),
                          loc=o.loc)
            body.append(c)
            mapping.update(zip(o.results, c.results))
        rest = iter(uargs)
        for i, a in enumerate(ubody.args):
            mapping[a] = produced if i == idx else next(rest)
        for o in ubody.ops:
            c = Operation(o.name, [mapping[v] for v in o.operands], [t.type for t in o.results], dict(o.attributes),
                          loc=o.loc)
            body.append(c)
            mapping.update(zip(o.results, c.results))
        fused = Operation("sim.fused_elementwise", inputs, [user.results[0].type], {}, [Region([body])], user.loc)
        user.parent.insert_before(user, fused)
        user.results[0].replace_all_uses_with(fused.results[0])
        user.erase()
        producer.erase()


