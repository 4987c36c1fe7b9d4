"""A worklist-driven greedy pattern rewriter, after MLIR's: patterns (and op
fold hooks) are applied until nothing changes; ops that become dead along the
way are erased."""
from __future__ import annotations

from .core import Operation, Value
from .errors import IRError
from .opdef import PURE, TERMINATOR


class RewritePattern:
    """Subclass and set `op_name` (None: any op); `match_and_rewrite` returns
    True when it changed the IR, doing so only through the rewriter."""
    op_name = None
    benefit = 1

    def match_and_rewrite(self, op: Operation, rewriter: "Rewriter") -> bool:
        raise NotImplementedError


class Rewriter:
    def __init__(self, driver=None):
        self.driver = driver

    def _push(self, op):
        if self.driver is not None:
            self.driver.push(op)

    def create_before(self, anchor: Operation, name, operands=(), result_types=(), attributes=None,
                      regions=(), loc=None) -> Operation:
        op = Operation(name, operands, result_types, attributes, regions, loc or anchor.loc)
        anchor.parent.insert_before(anchor, op)
        self._push(op)
        return op

    def insert_before(self, anchor: Operation, op: Operation) -> Operation:
        anchor.parent.insert_before(anchor, op)
        self._push(op)
        return op

    def replace_all_uses(self, old: Value, new: Value):
        for user, _ in old.uses:
            self._push(user)
        old.replace_all_uses_with(new)

    def replace_op(self, op: Operation, new_values):
        new_values = list(new_values)
        if len(new_values) != len(op.results):
            raise IRError(f"replacing '{op.name}' ({len(op.results)} results) with {len(new_values)} values")
        for r, v in zip(op.results, new_values):
            if v is not None:
                self.replace_all_uses(r, v)
        self.erase_op(op)

    def erase_op(self, op: Operation):
        producers = [v.op for v in op.operands if hasattr(v, "op")]
        if self.driver is not None:
            for inner in op.walk():
                self.driver.erased.add(inner)
        op.erase()
        for p in producers:
            self._push(p)

    def modified(self, op: Operation):
        self._push(op)


class GreedyDriver:
    def __init__(self, context, module, patterns, fold=True, materialize=None):
        self.ctx, self.module = context, module
        self.by_name, self.any = {}, []
        for p in sorted(patterns, key=lambda p: -p.benefit):
            (self.by_name.setdefault(p.op_name, []) if p.op_name else self.any).append(p)
        self.fold = fold
        self.materialize = materialize
        self.worklist, self.queued, self.erased = [], set(), set()
        self.rewriter = Rewriter(self)

    def push(self, op):
        if op not in self.queued and op not in self.erased:
            self.queued.add(op)
            self.worklist.append(op)

    def is_trivially_dead(self, op, d):
        return (d is not None and d.has_trait(PURE) and not d.has_trait(TERMINATOR) and not op.regions and
                all(not r.uses for r in op.results))

    def run(self, root: Operation, max_rounds=16) -> bool:
        changed_any = False
        for _ in range(max_rounds):
            ops = [op for op in root.walk() if op is not root]
            # Reverse so pop() visits producers first, as MLIR's driver does.
            for op in reversed(ops):
                self.push(op)
            changed = False
            while self.worklist:
                op = self.worklist.pop()
                self.queued.discard(op)
                if op in self.erased or op.parent is None:
                    continue
                if self.step(op):
                    changed = True
            changed_any |= changed
            if not changed:
                return changed_any
        return changed_any

    def step(self, op) -> bool:
        d = self.ctx.lookup(op.name, self.module)
        if self.is_trivially_dead(op, d):
            self.rewriter.erase_op(op)
            return True
        if self.fold and d is not None and d.folder is not None:
            folded = d.folder(op)
            if folded is not None and self.materialize is not None:
                values = []
                for r, f in zip(op.results, folded):
                    if f is None or isinstance(f, Value):
                        if f is not None and f.type != r.type:
                            return False  # a fold must not change a use's type
                        values.append(f)
                    else:
                        c = self.materialize(self.rewriter, op, f, r.type)
                        if c is None:
                            return False
                        values.append(c)
                if any(v is not r for v, r in zip(values, op.results)):
                    self.rewriter.replace_op(op, [v if v is not None else r for v, r in zip(values, op.results)]
                                             if all(v is not None for v in values) else values)
                    return True
        for p in self.by_name.get(op.name, []) + self.any:
            if p.match_and_rewrite(op, self.rewriter):
                return True
        return False


def apply_patterns_greedily(context, module, patterns, root=None, fold=True, materialize=None) -> bool:
    return GreedyDriver(context, module, patterns, fold, materialize).run(root or module.op)
