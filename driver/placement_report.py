"""What went where and why: the text report (`--placement-report`) and a
Graphviz picture of the partitioned graph (`--emit=placement-dot`)."""
from __future__ import annotations

from tcc.dialects.transforms.placement import FREE_OPS, REASON

_COLORS = ["#8dd3c7", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#bc80bd", "#ffed6f"]


def _loc(op):
    return op.loc.name or op.name


def placements(module):
    """(node, op, where, reason) for every placed op, in program order."""
    rows = []
    main = module.lookup_function("main_graph")
    funcs = {f.get_attr("sym_name"): f for f in module.functions()}
    for op in main.regions[0].blocks[0].ops:
        if op.name in FREE_OPS or op.name == "func.return":
            continue
        if op.name == "func.call" and op.get_attr("tcc.accelerator"):
            acc = op.get_attr("tcc.accelerator")
            callee = funcs[op.get_attr("callee")]
            for inner in callee.regions[0].blocks[0].ops:
                if inner.name in FREE_OPS or inner.name == "func.return":
                    continue
                comp = inner.get_attr("tcc.composite")
                rows.append((_loc(inner), inner.name, acc, f"composite {comp.split('#')[0]}" if comp else ""))
            continue
        rows.append((_loc(op), op.name, "host", op.get_attr(REASON) or "no accelerator selected"))
    return rows


def text_report(module) -> str:
    rows = placements(module)
    if not rows:
        return "placement: the graph has no ops\n"
    w = max(len(r[0]) for r in rows)
    o = max(len(r[1]) for r in rows)
    lines = ["placement report"]
    for node, op, where, why in rows:
        lines.append(f"  {node:<{w}}  {op:<{o}}  -> {where}" + (f"  ({why})" if why else ""))
    counts = {}
    for r in rows:
        counts[r[2]] = counts.get(r[2], 0) + 1
    lines.append("  total: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return "\n".join(lines) + "\n"


def host_fallbacks(module):
    return [r for r in placements(module) if r[2] == "host"]


def dot(module) -> str:
    """The main graph with each partition drawn as a coloured cluster."""
    main = module.lookup_function("main_graph")
    funcs = {f.get_attr("sym_name"): f for f in module.functions()}
    color, ids, lines = {}, {}, ["digraph tcc {", "  rankdir=TB; node [shape=box, style=filled, fontsize=10];"]

    def node_id(op):
        return ids.setdefault(op, f"n{len(ids)}")

    def col(acc):
        if acc == "host":
            return "#dddddd"
        return color.setdefault(acc, _COLORS[len(color) % len(_COLORS)])

    edges = []
    for i, a in enumerate(main.regions[0].blocks[0].args):
        lines.append(f'  in{i} [label="input {i}\\n{a.type}", shape=ellipse, fillcolor=white];')
    for op in main.regions[0].blocks[0].ops:
        if op.name in FREE_OPS:
            continue
        if op.name == "func.call" and op.get_attr("tcc.accelerator"):
            acc = op.get_attr("tcc.accelerator")
            callee = funcs[op.get_attr("callee")]
            lines.append(f'  subgraph cluster_{node_id(op)} {{ label="{op.get_attr("callee")} ({acc})"; '
                         f'style=filled; color="{col(acc)}";')
            lines.append(f'    {node_id(op)} [label="{acc}", shape=point];')
            for inner in callee.regions[0].blocks[0].ops:
                if inner.name not in FREE_OPS and inner.name != "func.return":
                    lines.append(f'    {node_id(inner)} [label="{_loc(inner)}\\n{inner.name}", fillcolor=white];')
            lines.append("  }")
        elif op.name == "func.return":
            lines.append(f'  {node_id(op)} [label="outputs", shape=ellipse, fillcolor=white];')
        else:
            lines.append(f'  {node_id(op)} [label="{_loc(op)}\\n{op.name}", fillcolor="{col("host")}"];')
        for v in op.operands:
            src = getattr(v, "op", None)
            if src is None:
                edges.append((f"in{v.index}", node_id(op)))
            elif src.name not in FREE_OPS:
                edges.append((node_id(src), node_id(op)))
    lines += [f"  {a} -> {b};" for a, b in edges]
    legend = " | ".join(f"{k}" for k in color) or "host only"
    lines.append(f'  label="accelerators: {legend}"; }}')
    return "\n".join(lines) + "\n"
