"""The builtin and func dialects: modules, functions, returns and calls."""
from __future__ import annotations

from .ir.attributes import ArrayAttr, DictAttr, StringAttr, SymbolRefAttr, TypeAttr
from .ir.core import Block, Operation, Region
from .ir.errors import VerifyError
from .ir.opdef import AttrDef, Dialect, ISOLATED, OpDef, OperandDef, PURE, SYMBOL, TERMINATOR
from .ir.types import FunctionType


def _verify_func(op, ctx):
    ft = op.get_attr("function_type")
    if not isinstance(ft, FunctionType):
        raise VerifyError("function_type must be a function type", op)
    if not op.regions[0].blocks:
        return  # a declaration
    entry = op.regions[0].blocks[0]
    if [a.type for a in entry.args] != list(ft.inputs):
        raise VerifyError(f"entry block arguments {[str(a.type) for a in entry.args]} do not match "
                          f"function_type {ft}", op)
    for block in op.regions[0].blocks:
        term = block.last
        if term is None or term.name != "func.return":
            raise VerifyError("function body must end with 'func.return'", op)
        if [v.type for v in term.operands] != list(ft.results):
            raise VerifyError(f"returns ({', '.join(str(v.type) for v in term.operands)}) but "
                              f"function_type says {ft}", term)


def _verify_call(op, ctx):
    if not isinstance(op.attributes.get("callee"), SymbolRefAttr):
        raise VerifyError("requires a 'callee' symbol", op)


DIALECT_OPS = [
    OpDef("func.func", attributes={"sym_name": AttrDef("sym_name", "string", True),
                                   "function_type": AttrDef("function_type", "type", True),
                                   "arg_attrs": AttrDef("arg_attrs", "array"),
                                   "res_attrs": AttrDef("res_attrs", "array")},
          traits=frozenset({ISOLATED, SYMBOL}), num_regions=1, verifier=_verify_func,
          summary="a function: one region whose entry block takes the arguments"),
    OpDef("func.return", operands=[OperandDef("operands", "variadic")], traits=frozenset({TERMINATOR, PURE}),
          summary="returns from a function"),
    OpDef("func.call", operands=[OperandDef("operands", "variadic")], results=[OperandDef("results", "variadic")],
          attributes={"callee": AttrDef("callee", "symbol", True)}, verifier=_verify_call,
          summary="calls a function by symbol"),
]


def dialect():
    return Dialect("func", DIALECT_OPS, "functions")


def builtin_dialect():
    return Dialect("builtin", [OpDef("builtin.module", num_regions=1, traits=frozenset({ISOLATED}))])



def make_function(name, arg_types, result_types, arg_attrs=None, res_attrs=None) -> Operation:
    """A func.func with an empty entry block whose arguments have `arg_types`."""
    attrs = {"sym_name": StringAttr(name),
             "function_type": TypeAttr(FunctionType(arg_types, result_types))}
    if arg_attrs is not None:
        attrs["arg_attrs"] = ArrayAttr([DictAttr(d) for d in arg_attrs])
    if res_attrs is not None:
        attrs["res_attrs"] = ArrayAttr([DictAttr(d) for d in res_attrs])
    return Operation("func.func", attributes=attrs, regions=[Region([Block(arg_types)])])


def entry_block(func: Operation) -> Block:
    return func.regions[0].blocks[0]


def set_function_type(func: Operation):
    """Re-derives function_type from the entry block and the return op."""
    entry = entry_block(func)
    ret = entry.last
    if ret is None:
        return
    func.attributes["function_type"] = TypeAttr(FunctionType([a.type for a in entry.args],
                                                             [v.type for v in ret.operands]))


def sync_function_types(module):
    """set_function_type for every function: a pass that replaces a returned
    value by one of a more precise type (a fold, once run-time specialization
    made the arguments static) keeps each signature what its body returns."""
    for func in module.functions():
        if func.regions and func.regions[0].blocks:
            set_function_type(func)
