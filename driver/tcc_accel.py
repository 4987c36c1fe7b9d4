"""`tcc-accel`: the accelerator conformance kit.

    tcc-accel list               installed accelerators
    tcc-accel info sim           what sim declares (options, composites, report kinds...)
    tcc-accel check sim          the device conformance tests on sim's device,
                                 then the ONNX node tests with --maccel=sim, and
                                 a scoreboard per op (passed / unsupported /
                                 wrong / crashed)
    tcc-accel new npu [--dir D]  a plugin package to start from (passes check
                                 after `pip install -e D`)
"""
from __future__ import annotations

import os
import subprocess
import sys

import click

from . import accelerators as accel
from .cli_errors import run


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli():
    """The accelerator conformance kit."""


@cli.command("list")
def list_cmd():
    """List installed accelerators."""
    accel.list_accelerators()


@cli.command()
@click.argument("name")
def info(name):
    """What accelerator NAME declares: options, composites, report kinds."""
    from tcc.accelerators.manager import load_accelerators
    (acc,) = load_accelerators([name])

    def hook(h):
        return (acc.call(h) if acc.has(h) else None) or []
    click.echo(f"{name} {acc.info.version} (plugin API {acc.info.api_version}): {acc.info.description}")
    for o in hook("tcc_cli_options"):
        click.echo(f"  option      --{name}-{o.name} ({o.type.__name__}, default {o.default!r}): {o.help}")
    for c in hook("tcc_composite_patterns"):
        click.echo(f"  composite   {c.name}: {' -> '.join(c.ops)}")
    factory = acc.call("tcc_device_manager_factory") if acc.has("tcc_device_manager_factory") else None
    click.echo(f"  device      {factory.device_type if factory is not None else 'host (cpu)'}")


@cli.command()
@click.argument("name")
@click.option("-j", "--jobs", type=int, default=os.cpu_count() or 2, show_default=True)
@click.option("-k", "--filter", "name_filter", default="", help="Only node tests whose name contains this.")
@click.option("--skip-device", is_flag=True, help="Skip the device conformance tests.")
@click.option("--skip-node-tests", is_flag=True, help="Skip the ONNX node tests.")
@click.option("--failures", is_flag=True, help="List every node test that did not pass, with why.")
@click.option("--debug", is_flag=True)
def check(name, jobs, name_filter, skip_device, skip_node_tests, failures, debug):
    """Conformance of accelerator NAME: its device, then the ONNX node tests."""
    from tcc.accelerators.manager import load_accelerators
    (acc,) = load_accelerators([name])
    click.echo(f"accelerator {name} {acc.info.version} (plugin API {acc.info.api_version})")
    status = 0
    factory = acc.call("tcc_device_manager_factory") if acc.has("tcc_device_manager_factory") else None
    if skip_device:
        pass
    elif factory is None:
        click.echo(f"device: {name} runs on the host device (no device of its own to check)")
    else:
        click.echo(f"device conformance on {factory.device_type}:0")
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tcc.runtime.conformance",
                            f"--tcc-device={factory.device_type}:0", "--pyargs",
                            "tcc.runtime.device.conformance_suite"], capture_output=True, text=True)
        tail = [l for l in r.stdout.splitlines() if l.strip()][-1:] or ["(no output)"]
        click.echo(f"  {tail[0]}")
        status |= r.returncode != 0
    if not skip_node_tests:
        from tcc import node_report
        names = sorted(n for n in node_report.cases() if name_filter in n)
        results = node_report.run_all(names, (name,), jobs, require_placement=True)
        table, total = node_report.scoreboard(results)
        click.echo(table)
        if failures:
            for n in sorted(results):
                if results[n][0] in ("wrong", "crashed"):
                    click.echo(f"{results[n][0]:<10} {n}: {results[n][1]}")
        click.echo(f"node tests: {total['passed']} passed, {total['wrong']} wrong, {total['crashed']} crashed, "
                   f"{total['unsupported']} unsupported (of {len(results)})")
        status |= bool(total["wrong"] or total["crashed"])
    sys.exit(1 if status else 0)


@cli.command()
@click.argument("name")
@click.option("--dir", "directory", default=None, help="Where to write the package (default: ./tcc-accel-NAME; "
              "must not exist or be empty).")
def new(name, directory):
    """Write a plugin package for accelerator NAME: entry point, numpy device, one op (Relu) claimed,
    its lowering and runtime, a README and tests. Then: pip install -e DIR && tcc-accel check NAME."""
    from .accel_new import new_plugin
    out = new_plugin(name, directory)
    click.echo(f"wrote {out}/ (accelerator '{name}'); next: pip install -e {out} && tcc-accel check {name}")


def main():
    run(cli, "tcc-accel")


if __name__ == "__main__":
    main()
