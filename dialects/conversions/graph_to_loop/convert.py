"""The `convert-onnx-to-loop` pass: rewrites `func.func @main_graph` from
tensors to buffers. New signature: input memrefs, then output memrefs
(`tcc.num_outputs`), an empty `func.return`; every onnx op (or graph.fused
group) becomes loop nests through the op's registered lowering."""
from __future__ import annotations

from ...ir.attributes import IntegerAttr, TypeAttr, ArrayAttr, DictAttr
from ...ir.core import Block, Operation
from ...ir.errors import PassError
from ...ir.passes import Pass
from ...ir.types import NONE, FunctionType, MemRefType, TensorType, i64
from .common import LoopBuilder

# Ops whose results are other buffers seen differently (no data written).
ALIASING = {"onnx.Reshape", "onnx.Flatten", "onnx.Squeeze", "onnx.Unsqueeze", "onnx.Identity",
            "onnx.Constant", "onnx.Dropout"}


class LoweringError(PassError):
    pass


class UnsupportedError(LoweringError, NotImplementedError):
    """An op or type the host lowering does not take: also a
    NotImplementedError, so onnx backend harnesses (tcc.backend) count the
    model as unsupported rather than as a crash."""


def memref_of(t, where):
    if not isinstance(t, TensorType) or not t.has_static_shape:
        raise LoweringError(f"{where}")
    return MemRefType(t.shape, t.element)


class Lowerer:
    """State of one function's conversion; `cx` in every lowering."""

    def __init__(self, module, ctx, func):
        self.module, self.ctx, self.func = module, ctx, func
        self.bufs = {}      # onnx Value -> memref Value
        self.owned = set()  # buffers this conversion allocated
        self.out_slot = {}  # onnx Value -> output memref it is computed into
        self.L = None

    # -- used by lowerings ----------------------------------------------------
    def buf(self, v):
        b = self.bufs[v]
        if callable(b):  # a constant, materialised on first use
            b = self.bufs[v] = b()
        return b

    def out(self, r):
        slot = self.out_slot.get(r)
        if slot is not None:
            self.bufs[r] = slot = self.L.view(slot, r.type.shape)
            return slot
        b = self.L.alloc(r.type.shape, r.type.element)
        self.bufs[r] = b
        return b

    def lower_ops(self, block, where=""):
        """Lowers `block`'s ops, up to its terminator, where the builder
        stands (the graph's body, or a Scan/Loop body inside its loop);
        returns the terminator."""
        end = block.last
        for op in list(block.ops):
            if op is end:
                break
            if op.name == "onnx.NoValue":
                continue
            fn = self.ctx.lowerings.get(op.name)
            if fn is None:
                raise UnsupportedError(f"{op.loc.describe()}: no host lowering for {op.name}{where}")
            self.L.loc = op.loc
            fn(self, op)
        return end

    def alias(self, r, memref):
        if r in self.out_slot:  # a result the caller wants in an output buffer
            self.L.op("loop.copy", [memref() if callable(memref) else memref, self.out(r)])
            return
        self.bufs[r] = memref

    def attr(self, op, name):
        a = op.attributes.get(name)
        if a is not None:
            return a.value
        d = self.ctx.lookup(op.name, self.module)
        return None if d is None else d.attr_default(name)

    def opset(self, domain=""):
        imp = self.module.op.attributes.get("onnx.opset_import")
        v = None if imp is None else imp.value.get(domain)
        return 1 if v is None else v.value

    def const(self, v):
        """The numpy value of `v` when an onnx.Constant makes it, else None."""
        from .tensor.data_movement import constant_value
        return constant_value(self, v)

    def fail(self, op, msg):
        raise LoweringError(f"{op.loc.describe()}: {msg}")

    # -- driver -------------------------------------------------------------------
    def run(self):
        func = self.func
        old = func.regions[0].blocks[0]
        ret = old.last
        _check_static(old)
        ins = [memref_of(a.type, f"graph input #{i} has type {a.type}: not a static tensor")
               for i, a in enumerate(old.args)]
        outs = [memref_of(v.type, f"graph output #{i} has type {v.type}: not a static tensor")
                for i, v in enumerate(ret.operands)]
        new = Block(ins + outs)
        self.L = LoopBuilder(new)
        for a, na in zip(old.args, new.args):
            self.bufs[a] = na
        out_args = new.args[len(ins):]
        copies = []
        for k, v in enumerate(ret.operands):
            root = _view_root(v)
            if root is not None and root not in self.out_slot:
                self.out_slot[root] = out_args[k]
            else:
                copies.append(k)
        self.lower_ops(old)
        self.L.loc = ret.loc
        for k in copies:
            self.L.op("loop.copy", [self.buf(ret.operands[k]), out_args[k]])
        self.L.op("func.return")
        insert_deallocs(new)
        # Swap bodies: the old ops go away with their region.
        region = func.regions[0]
        for op in list(old.ops):
            op._drop_all_uses_inside()
        region.blocks = []
        region.add_block(new)
        attrs = func.attributes
        attrs["function_type"] = TypeAttr(FunctionType(ins + outs, []))
        attrs["tcc.num_outputs"] = IntegerAttr(len(outs), i64)
        res_attrs = attrs.pop("res_attrs", None)
        if res_attrs is not None:
            arg_attrs = attrs.get("arg_attrs")
            merged = list(arg_attrs) if arg_attrs is not None else [DictAttr({}) for _ in ins]
            attrs["arg_attrs"] = ArrayAttr(merged + list(res_attrs))


def _view_root(v):
    """The value whose producer can write straight into the output buffer
    that `v` is returned in: `v` itself, or what a chain of single-use views
    (Reshape & co.) starts from."""
    while True:
        prod = getattr(v, "op", None)
        if prod is None or prod.name == "onnx.Constant":
            return None
        if prod.name == "onnx.Dropout":
            return None
        if prod.name not in ALIASING:
            return v
        src = prod.operands[0]
        if len(src.uses) != 1:
            return None
        v = src


_ELEMENTS = {"f16", "bf16", "f32", "f64", "i1", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64",
             "f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ", "f8E8M0FNU", "f4E2M1FN", "i4", "ui4", "i2", "ui2"}


def _check_static(block):
    for i, a in enumerate(block.args):
        el = getattr(a.type, "element", None)
        if el is not None and str(el) not in _ELEMENTS:
            raise UnsupportedError(f"graph input #{i} has element type {el}, which the host lowering does not support")
    for op in block.ops:
        for i, r in enumerate(op.results):
            el = getattr(r.type, "element", None)
            if el is not None and str(el) not in _ELEMENTS:
                raise UnsupportedError(f"{op.loc.describe()}: result #{i} of {op.name} has element type {el}, "
                                    "which the host lowering does not support")
        for i, r in enumerate(op.results):
            t = r.type
            if t is NONE or op.name == "onnx.NoValue":
                continue
            if not isinstance(t, TensorType):
                raise UnsupportedError(f"{op.loc.describe()}: result #{i} of {op.name} has type {t}, "
                                    "which the host lowering does not support")
            if t.shape is None:
                raise LoweringError(f"{op.loc.describe()}: result #{i} of {op.name} has unknown rank ({t})")
            if None in t.shape:
                raise LoweringError(f"{op.loc.describe()}: result #{i} of {op.name} has dynamic dim "
                                    f"{t.shape.index(None)} ({t})")


def _top(op, block):
    while op.parent is not block:
        op = op.parent_op
    return op


def insert_deallocs(block):
    """Frees every buffer allocated at the top level right after its last
    use (or a use of a view of it)."""
    order = {o: k for k, o in enumerate(block.ops)}  # inserting deallocs keeps relative order
    for op in list(block.ops):
        if op.name != "loop.alloc" or any(u.name == "loop.dealloc" for u, _ in op.results[0].uses):
            continue
        aliases, last = [op.results[0]], op
        for a in aliases:
            for user, _ in a.uses:
                if user.name == "loop.view":
                    aliases.append(user.results[0])
                top = _top(user, block)
                if order[top] > order[last]:
                    last = top
        block.insert_after(last, Operation("loop.dealloc", [op.results[0]], [], None, loc=op.loc))


class ConvertOnnxToLoopPass(Pass):
    name = "convert-onnx-to-loop"
    summary = "lowers onnx ops (and graph.fused groups) in @main_graph to loop nests over buffers"
    options = {}

    def run(self, module, ctx):
        func = module.lookup_function("main_graph")
        if func is None:
            raise LoweringError("no func.func @main_graph to lower")
        if func.get_attr("tcc.num_outputs") is not None:
            return  # already lowered
        Lowerer(module, ctx, func).run()
