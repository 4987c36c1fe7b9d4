"""What went where and why: the text report (`--placement-report`, ending
with a summary: partitions per accelerator, copies and bytes moved per run,
host ops by reason) and a Graphviz picture of the partitioned graph
(`--emit=placement-dot`, or rendered by Graphviz's `dot` with
`--emit=placement-svg`): one colour per accelerator, partitions boxed,
copies drawn as bold edges labelled with their byte counts."""
from __future__ import annotations

from collections import Counter, defaultdict

from tcc.dialects.transforms.placement import FREE_OPS, REASON

from .io import CLIError

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


def _nbytes(t):
    from tcc.dialects.ir.types import to_numpy_dtype
    shape = getattr(t, "shape", None)
    if shape is None or any(d is None for d in shape):
        return None
    n = 1
    for d in shape:
        n *= d
    try:
        return n * to_numpy_dtype(t.element).itemsize
    except (TypeError, AttributeError):
        return None


def _place(op):
    """Where `op` of @main_graph runs: its accelerator, or host."""
    if op.name == "func.call" and op.get_attr("tcc.accelerator"):
        return op.get_attr("tcc.accelerator")
    return "host"


def copies(module, devices=None):
    """The values that cross a device boundary on each run: (from, to, bytes
    or None when dynamic), one per value and destination. `devices` maps an
    accelerator to its device type (an accelerator on the host's memory, such
    as cpu, copies nothing); constants are uploaded once, not per run."""
    devices = devices or {}

    def device(place):
        return "cpu" if place == "host" else devices.get(place, place)
    main = module.lookup_function("main_graph")
    seen, out = set(), []
    for op in main.regions[0].blocks[0].ops:
        if op.name in FREE_OPS:
            continue
        dst = _place(op)
        for v in op.operands:
            src_op = getattr(v, "op", None)
            if src_op is not None and src_op.name in FREE_OPS:
                continue
            src = "host" if src_op is None else _place(src_op)
            if device(src) == device(dst) or (v, dst) in seen:
                continue
            seen.add((v, dst))
            out.append((src, dst, _nbytes(v.type)))
    return out


def summary(module, devices=None) -> list:
    """The report's closing lines."""
    main = module.lookup_function("main_graph")
    parts = Counter(_place(op) for op in main.regions[0].blocks[0].ops if _place(op) != "host")
    lines = ["summary"]
    lines.append("  partitions: " + (", ".join(f"{a} {n}" for a, n in sorted(parts.items())) or "none"))
    cps = copies(module, devices)
    moved = sum(b for _, _, b in cps if b is not None)
    dynamic = sum(1 for _, _, b in cps if b is None)
    pairs = Counter(f"{a}->{b}" for a, b, _ in cps)
    lines.append(f"  copies per run: {len(cps)}" + (f" ({', '.join(f'{k} {n}' for k, n in sorted(pairs.items()))})"
                                                    if cps else "") + f", {moved:,} bytes"
                 + (f" (+{dynamic} of dynamic size)" if dynamic else ""))
    by_reason = defaultdict(Counter)
    for _, op, where, why in placements(module):
        if where == "host":
            by_reason[why][op.split(".", 1)[-1]] += 1
    total = sum(sum(c.values()) for c in by_reason.values())
    lines.append(f"  left on the host: {total} op" + ("s" if total != 1 else ""))
    for why, ops in sorted(by_reason.items(), key=lambda kv: -sum(kv[1].values())):
        lines.append(f"    {sum(ops.values())} x {why}: " + ", ".join(f"{o} {n}" for o, n in sorted(ops.items())))
    return lines


def text_report(module, devices=None) -> str:
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
    return "\n".join(lines + summary(module, devices)) + "\n"


def host_fallbacks(module):
    return [r for r in placements(module) if r[2] == "host"]


def dot(module, devices=None) -> str:
    """The main graph with each partition drawn as a coloured cluster of its
    ops, and every copy between devices as a bold edge with its bytes."""
    devices = devices or {}
    main = module.lookup_function("main_graph")
    funcs = {f.get_attr("sym_name"): f for f in module.functions()}
    color, ids = {}, {}
    lines = ["digraph tcc {", "  rankdir=TB; node [shape=box, style=filled, fontsize=10]; edge [fontsize=9];"]

    def node_id(op):
        return ids.setdefault(op, f"n{len(ids)}")

    def col(acc):
        if acc == "host":
            return "#dddddd"
        return color.setdefault(acc, _COLORS[len(color) % len(_COLORS)])

    def device(place):
        return "cpu" if place == "host" else devices.get(place, place)

    calls = {}  # partition call -> its callee's entry block

    def source(v):
        """(graph node, place) producing value `v` of @main_graph."""
        src = getattr(v, "op", None)
        if src is None:
            return f"in{v.index}", "host"
        if src in calls:
            inner = calls[src].last.operands[v.index]
            if getattr(inner, "op", None) is None:  # passed straight through the partition
                return source(src.operands[inner.index])
            return node_id(inner.op), _place(src)
        return node_id(src), "host"

    edges = []

    def edge(v, dst, dst_place):
        src, place = source(v)
        if device(place) != device(dst_place):
            n = _nbytes(v.type)
            label = f"{n:,} B" if n is not None else "dynamic"
            edges.append(f'  {src} -> {dst} [penwidth=2.5, color="#cc3333", fontcolor="#cc3333", '
                         f'label="copy {label}"];')
        else:
            edges.append(f"  {src} -> {dst};")

    for i, a in enumerate(main.regions[0].blocks[0].args):
        lines.append(f'  in{i} [label="input {i}\\n{a.type}", shape=ellipse, fillcolor=white];')
    for op in main.regions[0].blocks[0].ops:
        if op.name in FREE_OPS:
            continue
        if op.name == "func.call" and op.get_attr("tcc.accelerator"):
            acc = op.get_attr("tcc.accelerator")
            block = calls[op] = funcs[op.get_attr("callee")].regions[0].blocks[0]
            lines.append(f'  subgraph cluster_{node_id(op)} {{ label="{op.get_attr("callee")} ({acc})"; '
                         f'style="filled,rounded"; color="{col(acc)}";')
            for inner in block.ops:
                if inner.name in FREE_OPS or inner.name == "func.return":
                    continue
                lines.append(f'    {node_id(inner)} [label="{_loc(inner)}\\n{inner.name}", fillcolor=white];')
                for v in inner.operands:
                    p = getattr(v, "op", None)
                    if p is None:  # a partition argument: the value from outside
                        edge(op.operands[v.index], node_id(inner), acc)
                    elif p.name not in FREE_OPS:
                        edges.append(f"  {node_id(p)} -> {node_id(inner)};")
            lines.append("  }")
            continue
        if op.name == "func.return":
            lines.append(f'  {node_id(op)} [label="outputs", shape=ellipse, fillcolor=white];')
        else:
            lines.append(f'  {node_id(op)} [label="{_loc(op)}\\n{op.name}", fillcolor="{col("host")}"];')
        for v in op.operands:
            if getattr(v, "op", None) is None or v.op.name not in FREE_OPS:
                edge(v, node_id(op), "host")
    lines += edges
    legend = ", ".join(f"{k} ({v})" for k, v in color.items()) or "host only"
    lines.append(f'  label="accelerators: {legend}; host ops grey; bold red edges: copies per run"; }}')
    return "\n".join(lines) + "\n"


def svg(module, devices=None) -> bytes:
    """The picture rendered by Graphviz's `dot` (through the graphviz package)."""
    try:
        import graphviz
    except ImportError:
        raise CLIError("--emit=placement-svg needs the graphviz Python package: pip install graphviz "
                       "(or pip install 'tcc[svg]'), and Graphviz's dot program") from None
    try:
        return graphviz.Source(dot(module, devices)).pipe(format="svg")
    except graphviz.ExecutableNotFound:
        raise CLIError("--emit=placement-svg needs Graphviz's dot program on PATH: install the graphviz system "
                       "package (apt-get install graphviz, brew install graphviz or conda install graphviz)") from None
    except graphviz.CalledProcessError as e:
        raise CLIError(f"--emit=placement-svg: dot failed: {(e.stderr or b'').decode(errors='replace').strip()[:200]}") \
            from None


def accelerator_devices(accels) -> dict:
    """accelerator name -> its device type (accelerators on host memory: cpu)."""
    from tcc.accelerators.manager import AcceleratorError
    out = {}
    for a in accels:
        try:
            factory = a.call("tcc_device_manager_factory") if a.has("tcc_device_manager_factory") else None
        except AcceleratorError:  # its device cannot start here (gpu without cupy): still its own device
            factory = None
            out[a.name] = a.name
            continue
        out[a.name] = factory.device_type if factory is not None else "cpu"
    return out
