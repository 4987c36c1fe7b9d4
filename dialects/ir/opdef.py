"""Declarative op definitions (operands, results, attributes, traits and
constraints), dialects that group them, and the Context saying which dialects
a tool has loaded. Operations themselves stay generic (one Operation class):
an OpDef is looked up by name when verifying, folding or lowering."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from .attributes import (ArrayAttr, Attribute, BoolAttr, DenseArrayAttr, DenseElementsAttr,
                         DenseResourceAttr, DictAttr, FloatAttr, IntegerAttr, StringAttr,
                         SymbolRefAttr, TypeAttr, UnitAttr)
from .errors import VerifyError

# Traits are plain strings, checked by name.
PURE = "Pure"                      # no side effects: DCE may erase it, CSE may merge it
TERMINATOR = "Terminator"
ISOLATED = "IsolatedFromAbove"     # regions may not use values defined outside
COMMUTATIVE = "Commutative"
CONSTANT_LIKE = "ConstantLike"
SAME_ELEMENT_TYPE = "SameOperandsAndResultElementType"
SYMBOL = "Symbol"

ATTR_KINDS = {
    "int": (IntegerAttr,), "float": (FloatAttr, IntegerAttr), "string": (StringAttr,),
    "bool": (BoolAttr, IntegerAttr), "ints": (DenseArrayAttr, ArrayAttr),
    "floats": (DenseArrayAttr, ArrayAttr), "strings": (ArrayAttr,),
    "tensor": (DenseElementsAttr, DenseResourceAttr), "tensors": (ArrayAttr,),
    "type": (TypeAttr,), "types": (ArrayAttr,), "symbol": (SymbolRefAttr, StringAttr),
    "dict": (DictAttr,), "array": (ArrayAttr, DenseArrayAttr), "unit": (UnitAttr,),
    "graph": (), "any": (Attribute,),
}


@dataclass
class OperandDef:
    name: str
    kind: str = "single"                 # single | optional | variadic
    constraint: Optional[Callable] = None  # type -> bool
    type_var: Optional[str] = None       # operands/results sharing it share an element type
    description: str = ""


@dataclass
class AttrDef:
    name: str
    kind: str = "any"
    required: bool = False
    default: object = None


@dataclass
class OpDef:
    name: str
    operands: list = field(default_factory=list)
    results: list = field(default_factory=list)
    attributes: dict = field(default_factory=dict)
    traits: frozenset = frozenset()
    num_regions: Optional[int] = 0     # None: any number
    verifier: Optional[Callable] = None  # (op, ctx) -> None, raises VerifyError
    folder: Optional[Callable] = None    # (op) -> list of Values/Attributes or None
    summary: str = ""
    allow_extra_attrs: bool = True       # discardable attributes (`tcc.*`) may ride along

    def has_trait(self, t):
        return t in self.traits

    def attr_default(self, name):
        a = self.attributes.get(name)
        return None if a is None else a.default

    # -- operand segments ------------------------------------------------------------
    def segments(self, op, defs=None, values=None):
        """Splits op operands (or results) into one list per def: fixed defs
        take one value each, the single variadic def takes the rest."""
        defs = self.operands if defs is None else defs
        values = op.operands if values is None else values
        nvar = sum(1 for d in defs if d.kind == "variadic")
        fixed = len(defs) - nvar
        if nvar == 0:
            if len(values) != len(defs) and not (len(values) < len(defs) and all(
                    d.kind == "optional" for d in defs[len(values):])):
                return None
            return [[v] if i < len(values) else [] for i, v in
                    enumerate(list(values) + [None] * (len(defs) - len(values)))]
        if len(values) < fixed:
            return None
        out, pos, extra = [], 0, len(values) - fixed
        for d in defs:
            if d.kind == "variadic":
                out.append(list(values[pos:pos + extra]))
                pos += extra
            else:
                out.append([values[pos]])
                pos += 1
        return out

    def verify(self, op, ctx):
        if self.num_regions is not None and len(op.regions) != self.num_regions:
            raise VerifyError(f"expects {self.num_regions} regions, has {len(op.regions)}", op)
        tvars = {}
        for what, defs, values in (("operand", self.operands, op.operands),
                                   ("result", self.results, op.results)):
            segs = self.segments(op, defs, values)
            if segs is None:
                want = len(defs)
                raise VerifyError(f"expects {want} {what}s ({', '.join(d.name for d in defs)}), "
                                  f"has {len(values)}", op)
            for d, seg in zip(defs, segs):
                for v in seg:
                    if v is None:
                        continue
                    t = v.type
                    if str(t) == "none":
                        if d.kind == "single" and what == "operand":
                            raise VerifyError(f"{what} '{d.name}' is required but absent", op)
                        continue
                    if d.constraint is not None and not d.constraint(t):
                        raise VerifyError(f"{what} '{d.name}' has type {t}, which the op does not accept", op)
                    if d.type_var is not None and str(t) != "!onnx.Unknown":
                        key = _element_key(t)
                        prev = tvars.setdefault(d.type_var, (key, d.name))
                        if prev[0] != key:
                            raise VerifyError(f"{what} '{d.name}' has element type {key} but "
                                              f"'{prev[1]}' has {prev[0]} (both are {d.type_var})", op)
        for name, ad in self.attributes.items():
            a = op.attributes.get(name)
            if a is None:
                if ad.required:
                    raise VerifyError(f"requires attribute '{name}'", op)
                continue
            kinds = ATTR_KINDS.get(ad.kind, (Attribute,))
            if kinds and not isinstance(a, kinds):
                raise VerifyError(f"attribute '{name}' should be {ad.kind}, got {a}", op)
        if self.verifier is not None:
            self.verifier(op, ctx)


def _element_key(t):
    el = getattr(t, "element", None)
    if el is not None:
        return str(el)
    if getattr(t, "params", None):
        return _element_key(t.params[0])
    return str(t)


class Dialect:
    """A named group of OpDefs. `lookup` may depend on the module (the onnx
    dialect picks an op's schema by the module's opset)."""

    def __init__(self, name: str, ops=(), description=""):
        self.name, self.description = name, description
        self.ops = {}
        for d in ops:
            self.add(d)

    def add(self, opdef: OpDef):
        self.ops[opdef.name] = opdef
        return opdef

    def lookup(self, op_name: str, module=None) -> Optional[OpDef]:
        return self.ops.get(op_name)

    def op_names(self):
        return sorted(self.ops)


class Context:
    """The dialects (and so the ops) a tool knows. Accelerator plugins add
    theirs only when selected."""

    def __init__(self, dialects=(), allow_unregistered=False, passes=None):
        self.dialects = {}
        self.passes = dict(passes or {})  # name -> Pass subclass
        self.lowerings = {}                # op name -> host graph-to-loop lowering fn(cx, op)
        self.accelerators = []             # selected accelerator plugins, in priority order
        self.allow_unregistered = allow_unregistered
        for d in dialects:
            self.load(d)

    def load(self, dialect: Dialect):
        self.dialects[dialect.name] = dialect
        return dialect

    def has_dialect(self, name):
        return name in self.dialects

    def lookup(self, op_name: str, module=None) -> Optional[OpDef]:
        d = self.dialects.get(op_name.split(".", 1)[0])
        return None if d is None else d.lookup(op_name, module)

    def knows_op(self, op_name, module=None):
        return self.lookup(op_name, module) is not None

    def register_pass(self, pass_cls):
        self.passes[pass_cls.name] = pass_cls
        return pass_cls

    def copy(self):
        c = Context(self.dialects.values(), self.allow_unregistered, self.passes)
        c.lowerings = dict(self.lowerings)
        c.accelerators = list(self.accelerators)
        return c
