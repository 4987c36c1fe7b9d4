"""Checks structure (SSA dominance within straight-line blocks, isolation,
terminators) and each op against its OpDef."""
from __future__ import annotations

from .errors import VerifyError
from .opdef import ISOLATED, TERMINATOR
from .types import Type


def verify(module, context):
    _Verifier(module, context).run()


class _Verifier:
    def __init__(self, module, context):
        self.module, self.ctx = module, context

    def run(self):
        self.op(self.module.op, set())

    def op(self, op, visible):
        for i, v in enumerate(op.operands):
            if v not in visible:
                raise VerifyError(f"operand #{i} does not dominate this use (defined later, "
                                  f"outside an isolated region, or erased)", op)
        for r in op.results:
            if not isinstance(r.type, Type):
                raise VerifyError(f"result has no type", op)
        d = self.ctx.lookup(op.name, self.module)
        if d is None:
            if op.name != "builtin.module" and not self.ctx.allow_unregistered:
                raise VerifyError("unknown operation (is its dialect or accelerator loaded?)", op)
        else:
            d.verify(op, self.ctx)
        if not op.regions:
            return
        isolated = op.name in ("builtin.module", "func.func") or (d is not None and d.has_trait(ISOLATED))
        for region in op.regions:
            for block in region.blocks:
                inner = set() if isolated else set(visible)
                inner.update(block.args)
                for child in block.ops:
                    if child.parent is not block:
                        raise VerifyError("op's parent link is broken", child)
                    self.op(child, inner)
                    inner.update(child.results)
                    if child is not block.last:
                        cd = self.ctx.lookup(child.name, self.module)
                        if cd is not None and cd.has_trait(TERMINATOR):
                            raise VerifyError("terminator is not the last op of its block", child)
