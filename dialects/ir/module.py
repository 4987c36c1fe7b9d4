"""A module: the `builtin.module` op plus the resource table its constants
refer to. Passes and printers work on this."""
from __future__ import annotations

from .core import Block, Operation, Region
from .resources import ResourceTable


class Module:
    __slots__ = ("op", "resources")

    def __init__(self, op: Operation = None, resources: ResourceTable = None):
        if op is None:
            op = Operation("builtin.module", regions=[Region([Block()])])
        self.op = op
        self.resources = resources if resources is not None else ResourceTable()

    @property
    def body(self) -> Block:
        return self.op.regions[0].blocks[0]

    @property
    def attributes(self):
        return self.op.attributes

    def walk(self):
        return self.op.walk()

    def functions(self):
        return [op for op in self.body.ops if op.name == "func.func"]

    def lookup_function(self, name):
        for op in self.body.ops:
            if op.name == "func.func" and op.get_attr("sym_name") == name:
                return op
        return None

    def __str__(self):
        from .printer import print_module
        return print_module(self)
