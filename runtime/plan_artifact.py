"""Artifacts of models placed on accelerators: the manifest's `plan` is the
list of steps the executor runs (host native entries and accelerator
functions) over named values; members are one object file per host step
(`host/<fn>.o`) and one payload per accelerator (`accel/<name>.bin`); host
weights share weights.bin, each step indexing its own."""
from __future__ import annotations

import dataclasses

from .artifact import FORMAT, FORMAT_VERSION, TensorSpec, pack_weights, write_zip


def write_plan_artifact(path, *, steps, values, inputs, outputs, host_code, payloads, compile_seconds, options):
    import llvmlite
    import onnx

    import tcc
    from tcc.dialects.conversions.loop_to_native import host_cpu
    members, weights, plan = {}, [], []
    workspace = 0
    for acc, fn, ins, outs in steps:
        if acc == "host":
            hc = host_code[fn]
            member = f"host/{fn}.o"
            members[member] = hc.obj
            first = len(weights)
            weights += [(f"{fn}/{w.name}", w.array) for w in hc.low.weights]
            plan.append({"kind": "host", "function": fn, "object": member, "entry": "tcc_main_graph",
                         "weights": list(range(first, len(weights))),
                         "workspace_bytes": hc.low.workspace_bytes, "inputs": ins, "outputs": outs})
            workspace = max(workspace, hc.low.workspace_bytes)
        else:
            plan.append({"kind": "accelerator", "accelerator": acc, "function": fn, "inputs": ins,
                         "outputs": outs})
    accels = {}
    for name, (acc, rm, align) in payloads.items():
        member = f"accel/{name}.bin"
        members[member] = rm.payload
        accels[name] = {"version": acc.info.version, "api_version": acc.info.api_version, "format": rm.format,
                        "functions": list(rm.functions), "member": member, "metadata": rm.metadata,
                        "buffer_alignment": align}
    blob, index = pack_weights(weights)
    triple, cpu, feats = host_cpu()
    spec = lambda n: TensorSpec(n, tuple(values[n]["shape"]), values[n]["element"], (),  # noqa: E731
                                tuple(values[n].get("index_bound", ()))).to_json()
    opts = {k: v for k, v in dataclasses.asdict(options).items() if k != "output"}
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "signature": {"inputs": [spec(n) for n in inputs], "outputs": [spec(n) for n in outputs]},
        "values": values, "plan": plan, "accelerators": accels, "weights": index,
        "compile": {"tcc": tcc.__version__, "onnx": onnx.__version__, "llvmlite": llvmlite.__version__,
                    "options": opts, "target": {"triple": triple, "cpu": cpu, "features": feats},
                    "workspace_bytes": workspace, "weights_bytes": len(blob),
                    "placement": {s["function"]: s.get("accelerator", "host") for s in plan},
                    "compile_seconds": round(compile_seconds, 4)},
    }
    return write_zip(path, manifest, members, blob)


def is_plan(manifest):
    return any(step.get("kind") in ("host", "accelerator") for step in manifest.get("plan", []))
