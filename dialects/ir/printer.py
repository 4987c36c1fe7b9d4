"""Prints IR in MLIR's generic op syntax:

    %2 = "onnx.Add"(%0, %1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32> loc("n")

Values are numbered per isolated-from-above op (a function), block arguments
`%argN`, as mlir-opt does."""
from __future__ import annotations

from .attributes import DenseResourceAttr, format_attr_dict
from .core import Operation
from .types import FunctionType


def _results_type_text(results):
    if len(results) == 1 and not isinstance(results[0].type, FunctionType):
        return results[0].type._str
    return "(" + ", ".join(r.type._str for r in results) + ")"


class Printer:
    def __init__(self, print_locations=True):
        self.lines = []
        self.names = {}
        self.counters = [[0, 0]]  # stack of [next value, next arg] per isolated scope
        self.print_locations = print_locations
        self.resource_names = set()

    def name_of(self, v):
        n = self.names.get(v)
        if n is None:
            # A use before def (only in invalid IR) still prints something readable.
            n = f"%<<unknown {v.type}>>"
        return n

    def print_op(self, op: Operation, indent: str):
        c = self.counters[-1]
        head = indent
        if op.results:
            names = []
            for r in op.results:
                n = f"%{c[0]}"
                c[0] += 1
                self.names[r] = n
                names.append(n)
            head += ", ".join(names) + " = "
        names = self.names
        head += '"' + op.name + '"(' + ", ".join([names.get(v) or self.name_of(v) for v in op.operands]) + ")"
        attrs = op.attributes
        if attrs:
            for a in attrs.values():
                if isinstance(a, DenseResourceAttr):
                    self.resource_names.add(a.name)
        sig = (" : (" + ", ".join([v.type._str for v in op.operands]) + ") -> " +
               _results_type_text(op.results))
        tail = ((" " + format_attr_dict(attrs)) if attrs else "") + sig
        if self.print_locations and (op.loc.name is not None or op.loc.file is not None):
            tail += " " + str(op.loc)
        if not op.regions:
            self.lines.append(head + tail)
            return
        isolated = op.name == "func.func" or _is_isolated(op)
        if isolated:
            self.counters.append([0, 0])
        self.lines.append(head + " (")
        inner = indent + "  "
        for ri, region in enumerate(op.regions):
            self.lines[-1] += "{"
            for bi, block in enumerate(region.blocks):
                if block.args or len(region.blocks) > 1:
                    cc = self.counters[-1]
                    args = []
                    for a in block.args:
                        n = f"%arg{cc[1]}"
                        cc[1] += 1
                        self.names[a] = n
                        args.append(f"{n}: {a.type._str}")
                    self.lines.append(f"{indent}^bb{bi}" + (f"({', '.join(args)})" if args else "") + ":")
                for inner_op in block.ops:
                    self.print_op(inner_op, inner)
            self.lines.append(indent + "}" + (", " if ri + 1 < len(op.regions) else ""))
        self.lines[-1] += ")" + tail
        if isolated:
            self.counters.pop()


# The ops whose regions get fresh value numbers: the ones the parser opens a
# name scope for. The IR core knows no dialect, so this is by name; numbering
# inside another isolated op (graph.fused) continues its function's, which is
# what lets such a module parse back.
_SCOPE_OPS = frozenset({"builtin.module", "func.func"})


def _is_isolated(op):
    return op.name in _SCOPE_OPS


def print_op(op: Operation, print_locations=True) -> str:
    p = Printer(print_locations)
    p.print_op(op, "")
    return "\n".join(p.lines) + "\n"


def print_module(module, print_locations=True, path=None) -> str:
    """Returns the IR text; with `path`, also writes it there and the
    constants it refers to beside it (`path` + `.resources`)."""
    p = Printer(print_locations)
    p.print_op(module.op, "")
    text = "\n".join(p.lines) + "\n"
    if path is not None:
        write_module(module, path, text, p.resource_names)
    return text


def write_module(module, path, text, resource_names):
    import os
    from .files import atomic_open
    from .resources import SUFFIX
    # beside the text's real place: through a symbolic link the text goes to
    # the link's target (atomic_open), and so do its constants
    path = os.path.realpath(path)
    res_path = path + SUFFIX
    if resource_names:
        elements = {}
        for op in module.walk():
            for a in op.attributes.values():
                if isinstance(a, DenseResourceAttr) and module.resources.has(a.name):
                    elements[a.name] = str(a.type.element)
        module.resources.write(res_path, elements)
    elif os.path.exists(res_path):
        os.remove(res_path)
    with atomic_open(path, "w") as f:
        f.write(text)
