"""`tcc-run`: runs a compiled `.tcc` artifact on .npy inputs (or random
ones), prints its outputs or writes them as .npy files, and times it."""
from __future__ import annotations

import json
import os
import statistics
import time

import click
import numpy as np

from tcc.dialects.ir.files import atomic_open

from .cli_errors import run
from .io import CLIError


def _parse_inputs(pairs, signature):
    """NAME=FILE.npy for a tensor (or an optional holding one); for a
    sequence NAME=FILE.npz, its arrays in order (what np.savez(f, *arrays)
    writes) the elements. An optional input not given is empty (None)."""
    out = {}
    kinds = {s["name"]: s.get("container", []) for s in signature}
    for p in pairs:
        name, sep, path = p.partition("=")
        if not sep or not name or not path:
            raise CLIError(f"--input {p!r}: expected NAME=FILE.npy")
        if not os.path.exists(path):
            raise CLIError(f"--input {name}: {path}: no such file")
        seq = "seq" in kinds.get(name, [])
        try:
            if seq:
                z = np.load(path, allow_pickle=False)
                if not isinstance(z, np.lib.npyio.NpzFile):
                    raise ValueError("a sequence input takes an .npz of its elements")
                with z:
                    out[name] = [z[k] for k in z.files]
            else:
                a = np.load(path, allow_pickle=False)
                if isinstance(a, np.lib.npyio.NpzFile):  # an archive: which of its arrays is not ours to guess
                    a.close()
                    raise ValueError("an .npz archive; a tensor input takes one array in an .npy")
                out[name] = a
        except (ValueError, OSError) as e:
            kind = ".npz" if seq else ".npy"
            raise CLIError(f"--input {name}: {path}: not a {kind} file ({e})") from None
    for name, k in kinds.items():
        if k[:1] == ["opt"]:
            out.setdefault(name, None)
    return out


def _describe(a):
    """One output as printed: a tensor, a sequence's elements, or an empty optional."""
    if a is None:
        return "empty optional"
    if isinstance(a, list):
        if a and isinstance(a[0], dict):  # ZipMap's rows: label -> probability
            return f"sequence of {len(a)} maps of {len(a[0])} entries: first {a[0]}"
        return f"sequence of {len(a)}: " + ", ".join(f"{e.dtype}{list(e.shape)}" for e in a)
    return f"{a.dtype}{list(a.shape)}  {_summary(a)}"


def _random(spec, rng):
    dt = np.dtype(spec["dtype"])
    if any(d is None for d in spec["shape"]):
        want = ["?" if d is None else d for d in spec["shape"]]
        raise CLIError(f"--random-inputs: input '{spec['name']}' has dynamic dims {want}: "
                       f"give it with --input {spec['name']}=FILE.npy")
    shape = tuple(spec["shape"])
    if dt.kind == "f" or dt.name == "bfloat16":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    if dt.kind in "iu":
        return rng.integers(0, 10, shape).astype(dt)
    if dt == object:  # a string input: short random lowercase words
        words = ["".join(chr(97 + c) for c in rng.integers(0, 26, rng.integers(1, 8))) for _ in range(int(np.prod(shape)))]
        return np.array(words, dtype=object).reshape(shape)
    return np.zeros(shape, dt)


def _summary(a):
    if a.size == 0:
        return "empty"
    if a.dtype.kind in "fiub" or a.dtype.name == "bfloat16":
        f = a.astype(np.float64)
        return f"min {np.nanmin(f):.6g}  max {np.nanmax(f):.6g}  mean {np.nanmean(f):.6g}"
    if a.dtype == object:
        return " ".join(repr(s) for s in a.reshape(-1)[:4]) + (" ..." if a.size > 4 else "")
    return ""


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("artifact")
@click.option("--input", "inputs", multiple=True, metavar="NAME=FILE.npy",
              help="An input (repeatable); a sequence input takes FILE.npz, its elements in order.")
@click.option("--random-inputs", is_flag=True, help="Feed random inputs of the signature's shapes and dtypes.")
@click.option("--repeat", type=click.IntRange(1), default=1, show_default=True,
              help="Run N times and print the median latency.")
@click.option("--output-dir", default=None, help="Write each output to DIR/<name>.npy (a sequence: <name>.npz of its elements; "
              "a sequence of maps, ZipMap's: <name>.json).")
@click.option("--profile", is_flag=True, help="Then time each step of the plan (every partition, on its "
              "accelerator or the host, with the copies into it; a cpu partition per kernel call, its C "
              "rebuilt with the calls timed) over --repeat runs (at least 5) and print their medians as a table.")
@click.option("--debug", is_flag=True, help="Show Python tracebacks on errors.")
def cli(artifact, inputs, random_inputs, repeat, output_dir, profile, debug):
    from tcc.api import load  # with the run-time compiler, for models that specialize per shape
    sess = load(artifact)
    feeds = _parse_inputs(inputs, sess.input_signature)
    if random_inputs:
        rng = np.random.default_rng()
        for spec in sess.input_signature:
            if spec.get("container") and spec["name"] not in feeds:
                raise CLIError(f"--random-inputs: input '{spec['name']}' is a sequence or optional: give it "
                               f"with --input {spec['name']}=FILE.npz (a sequence's elements) or FILE.npy")
            feeds.setdefault(spec["name"], _random(spec, rng))
    outs = sess.run(feeds)
    times = []
    for _ in range(repeat - 1 if repeat > 1 else 0):
        t0 = time.perf_counter()
        sess.run(feeds)
        times.append(time.perf_counter() - t0)
    if output_dir:
        if os.path.exists(output_dir) and not os.path.isdir(output_dir):
            raise CLIError(f"--output-dir {output_dir}: exists and is not a directory")
        os.makedirs(output_dir, exist_ok=True)
        for name, a in zip(sess.output_names, outs):
            safe = name.replace(os.sep, "_").replace("/", "_") or "output"
            # each file whole or not at all, as every tcc output (atomic_open)
            if isinstance(a, list) and a and isinstance(a[0], dict):  # a sequence of maps: JSON, no pickle
                with atomic_open(os.path.join(output_dir, safe + ".json"), "w") as f:
                    json.dump([{str(k): float(v) for k, v in m.items()} for m in a], f)
            elif isinstance(a, list):  # a sequence: its elements in order
                with atomic_open(os.path.join(output_dir, safe + ".npz")) as f:
                    np.savez(f, *a)
            elif a is not None:  # an empty optional writes nothing
                # strings as a numpy str array: an object array's .npy needs pickle to load
                with atomic_open(os.path.join(output_dir, safe + ".npy")) as f:
                    np.save(f, a.astype(str) if a.dtype == object else a)
    for name, a in zip(sess.output_names, outs):
        click.echo(f"{name}: {_describe(a)}")
    if times:
        click.echo(f"median latency over {len(times)} runs: {statistics.median(times) * 1e3:.3f} ms")
    if profile:
        click.echo(_profile_table(sess, feeds, max(repeat, 5)))


def _profile_table(sess, feeds, runs):
    """Each step's median time over `runs` runs: the partitions of a placed
    model; a host-only model is one step."""
    from tcc.runtime.staged import profile_rows
    if hasattr(sess, "session_for"):  # the specialization these inputs run, fed as it is fed: in order
        rows = profile_rows(sess.session_for(feeds), sess._arrange(feeds), runs)
    else:
        rows = profile_rows(sess, feeds, runs)
    med = [(name, where, statistics.median(ts)) for name, where, ts in rows]
    total = sum(m for _, _, m in med) or 1e-12
    width = max([len("step")] + [len(n) for n, _, _ in med])
    lines = [f"profile: median of {runs} runs per step",
             f"{'step':<{width}}  {'runs on':<8}  {'ms':>9}  {'share':>6}"]
    for name, where, m in med:
        lines.append(f"{name:<{width}}  {where:<8}  {m * 1e3:9.3f}  {m / total:6.1%}")
    lines.append(f"{'total':<{width}}  {'':<8}  {total * 1e3:9.3f}")
    return "\n".join(lines)


def main():
    run(cli, "tcc-run")


if __name__ == "__main__":
    main()
