"""dce: erases side-effect-free ops whose results are unused."""
from __future__ import annotations

from ..ir.opdef import PURE
from ..ir.passes import Pass


def erase_dead(module, ctx, root=None) -> int:
    erased = 0
    root = root or module.op
    for region in root.regions:
        for block in region.blocks:
            op = block.last
            while op is not None:
                prev = op.prev
                if op.regions:
                    erased += erase_dead(module, ctx, op)
                d = ctx.lookup(op.name, module)
                if (d is not None and d.has_trait(PURE) and not d.has_trait("Terminator")
                        and all(not r.uses for r in op.results)):
                    op.erase()
                    erased += 1
                op = prev
    return erased


class DCEPass(Pass):
    name = "dce"
    summary = "erase side-effect-free ops whose results are unused"

    def run(self, module, ctx):
        while erase_dead(module, ctx):
            pass
