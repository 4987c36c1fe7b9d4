"""The IR's object model: values with use-lists, operations, blocks (a doubly
linked list of ops, so insertion and erasure are O(1)), regions, locations."""
from __future__ import annotations

from .attributes import Attribute, quote
from .errors import IRError


class Location:
    __slots__ = ("name", "file", "line", "col")

    def __init__(self, name=None, file=None, line=0, col=0):
        self.name, self.file, self.line, self.col = name, file, line, col

    def __str__(self):
        if self.name is not None:
            return f"loc({quote(self.name)})"
        if self.file is not None:
            return f"loc({quote(self.file)}:{self.line}:{self.col})"
        return "loc(unknown)"

    def describe(self):
        if self.name is not None:
            return f"node '{self.name}'"
        if self.file is not None:
            return f"{self.file}:{self.line}:{self.col}"
        return "unknown location"


UNKNOWN_LOC = Location()


class Value:
    __slots__ = ("type", "uses")

    def __init__(self, type):
        self.type = type
        self.uses = []  # (operation, operand index) pairs

    @property
    def users(self):
        return [op for op, _ in self.uses]

    def has_uses(self):
        return bool(self.uses)

    def replace_all_uses_with(self, new: "Value"):
        if new is self:
            return
        for op, idx in list(self.uses):
            op.operands[idx] = new
            new.uses.append((op, idx))
        self.uses.clear()

    @property
    def owner(self):
        raise NotImplementedError


class OpResult(Value):
    __slots__ = ("op", "index")

    def __init__(self, type, op, index):
        super().__init__(type)
        self.op, self.index = op, index

    @property
    def owner(self):
        return self.op

    def __repr__(self):
        return f"<result #{self.index} of {self.op.name}: {self.type}>"


class BlockArgument(Value):
    __slots__ = ("block", "index")

    def __init__(self, type, block, index):
        super().__init__(type)
        self.block, self.index = block, index

    @property
    def owner(self):
        return self.block

    def __repr__(self):
        return f"<block argument #{self.index}: {self.type}>"


class Operation:
    __slots__ = ("name", "operands", "results", "attributes", "regions", "loc", "parent",
                 "prev", "next", "__weakref__")

    def __init__(self, name: str, operands=(), result_types=(), attributes=None, regions=(),
                 loc: Location = UNKNOWN_LOC):
        self.name = name
        self.operands = list(operands)
        for i, v in enumerate(self.operands):
            v.uses.append((self, i))
        self.results = [OpResult(t, self, i) for i, t in enumerate(result_types)]
        self.attributes = dict(attributes) if attributes else {}
        self.regions = []
        for r in regions:
            self.add_region(r)
        self.loc = loc
        self.parent = None
        self.prev = self.next = None

    # -- structure ---------------------------------------------------------------
    @property
    def dialect(self):
        return self.name.split(".", 1)[0]

    @property
    def result(self):
        if len(self.results) != 1:
            raise IRError(f"'{self.name}' has {len(self.results)} results, not 1")
        return self.results[0]

    def add_region(self, region=None):
        region = region if region is not None else Region()
        region.parent = self
        self.regions.append(region)
        return region

    def set_operand(self, idx: int, value: Value):
        old = self.operands[idx]
        old.uses.remove((self, idx))
        self.operands[idx] = value
        value.uses.append((self, idx))

    def set_operands(self, values):
        self.drop_operand_uses()
        self.operands = list(values)
        for i, v in enumerate(self.operands):
            v.uses.append((self, i))

    def drop_operand_uses(self):
        for i, v in enumerate(self.operands):
            try:
                v.uses.remove((self, i))
            except ValueError:
                pass

    def get_attr(self, name, default=None):
        a = self.attributes.get(name)
        return default if a is None else a.value

    def set_attr(self, name, attr: Attribute):
        self.attributes[name] = attr

    @property
    def parent_op(self):
        if self.parent is None or self.parent.parent is None:
            return None
        return self.parent.parent.parent

    def walk(self):
        """Pre-order over this op and everything nested in it; safe to erase
        the op just yielded."""
        yield self
        for region in self.regions:
            for block in region.blocks:
                for op in block.ops:
                    yield from op.walk()

    def is_ancestor_of(self, other: "Operation") -> bool:
        while other is not None:
            if other is self:
                return True
            other = other.parent_op
        return False

    def erase(self):
        """Detach from the block and drop every use this op (and its nested
        ops) makes. The results must have no uses left."""
        for r in self.results:
            if r.uses:
                raise IRError(f"erasing '{self.name}' whose result still has {len(r.uses)} uses")
        self._drop_all_uses_inside()
        if self.parent is not None:
            self.parent.remove(self)

    def _drop_all_uses_inside(self):
        self.drop_operand_uses()
        for region in self.regions:
            for block in region.blocks:
                for op in block.ops:
                    op._drop_all_uses_inside()

    def __repr__(self):
        return f"<op {self.name} at {self.loc}>"


class Block:
    __slots__ = ("args", "first", "last", "parent", "_len")

    def __init__(self, arg_types=()):
        self.args = [BlockArgument(t, self, i) for i, t in enumerate(arg_types)]
        self.first = self.last = None
        self.parent = None
        self._len = 0

    def add_arg(self, type):
        a = BlockArgument(type, self, len(self.args))
        self.args.append(a)
        return a

    @property
    def ops(self):
        op = self.first
        while op is not None:
            nxt = op.next
            yield op
            op = nxt

    def __len__(self):
        return self._len

    @property
    def terminator(self):
        return self.last

    def append(self, op: Operation) -> Operation:
        return self._link(op, self.last, None)

    def insert_before(self, anchor: Operation, op: Operation) -> Operation:
        return self._link(op, anchor.prev, anchor)

    def insert_after(self, anchor: Operation, op: Operation) -> Operation:
        return self._link(op, anchor, anchor.next)

    def _link(self, op, prev, nxt):
        if op.parent is not None:
            raise IRError(f"'{op.name}' is already in a block")
        op.parent, op.prev, op.next = self, prev, nxt
        if prev is None:
            self.first = op
        else:
            prev.next = op
        if nxt is None:
            self.last = op
        else:
            nxt.prev = op
        self._len += 1
        return op

    def remove(self, op: Operation):
        if op.parent is not self:
            raise IRError(f"'{op.name}' is not in this block")
        if op.prev is None:
            self.first = op.next
        else:
            op.prev.next = op.next
        if op.next is None:
            self.last = op.prev
        else:
            op.next.prev = op.prev
        op.parent = op.prev = op.next = None
        self._len -= 1

    @property
    def parent_op(self):
        return None if self.parent is None else self.parent.parent


class Region:
    __slots__ = ("blocks", "parent")

    def __init__(self, blocks=()):
        self.blocks = []
        self.parent = None
        for b in blocks:
            self.add_block(b)

    def add_block(self, block=None) -> Block:
        block = block if block is not None else Block()
        block.parent = self
        self.blocks.append(block)
        return block

    @property
    def block(self) -> Block:
        return self.blocks[0]


def free_values(op: Operation):
    """Values used inside `op` (and its regions) but defined outside it, in
    first-use order: what an outlined body or kernel call must receive."""
    inside = set()
    ops = list(op.walk())
    for o in ops:
        inside.update(o.results)
        for reg in o.regions:
            for blk in reg.blocks:
                inside.update(blk.args)
    seen, order = set(), []
    for o in ops:
        for v in o.operands:
            if v not in inside and v not in seen:
                seen.add(v)
                order.append(v)
    return order


class Builder:
    """Creates ops at an insertion point: the end of a block, or before an op."""
    __slots__ = ("block", "before", "loc")

    def __init__(self, block: Block = None, before: Operation = None, loc: Location = UNKNOWN_LOC):
        self.block = before.parent if before is not None else block
        self.before = before
        self.loc = loc

    @classmethod
    def before_op(cls, op: Operation):
        return cls(before=op, loc=op.loc)

    def insert(self, op: Operation) -> Operation:
        if self.before is not None:
            return self.block.insert_before(self.before, op)
        return self.block.append(op)

    def create(self, name, operands=(), result_types=(), attributes=None, regions=(), loc=None):
        return self.insert(Operation(name, operands, result_types, attributes, regions,
                                     loc if loc is not None else self.loc))
