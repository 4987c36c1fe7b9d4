"""`--maccel` for the CLIs: options are parsed in two phases (as
onnx-mlir-opt does): the `--maccel` values are found first, those plugins are
loaded, and their own options (`--<accel>-<name>`) join the command line."""
from __future__ import annotations

import click

from tcc.accelerators.manager import AcceleratorError, available_names, describe_installed, load_accelerators

from .io import CLIError


def scan_maccel(argv):
    """The --maccel values in argv, before click parses anything."""
    names, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            break
        if a.startswith("--maccel="):
            names.append(a.split("=", 1)[1])
        elif a == "--maccel" and i + 1 < len(argv):
            names.append(argv[i + 1])
            i += 1
        i += 1
    return names


HOST = "host"  # --maccel=host: the host lowering alone, no accelerator
DEFAULT_ACCEL = "cpu"


def default_accelerators():
    """What `tcc model.onnx` targets without --maccel: the in-tree cpu
    accelerator when it is installed and a C compiler is there to build its
    partitions. Its kernels (packed GEMM/conv tiles, Winograd, fused
    elementwise trees) ran the bench models 2-3x faster than the host
    lowering's loops (issue 22: MLP 5.36 vs 2.52 ORT's time, ResNet-18 5.24
    vs 1.80), so the fastest code is the default; --maccel=host keeps the
    host path alone."""
    from tcc.runtime.native import find_cc
    if DEFAULT_ACCEL not in available_names() or find_cc() is None:
        return []
    return [DEFAULT_ACCEL]


def resolve_maccel(names, default=False):
    """The accelerators to load for --maccel values `names`: `host` alone means
    none; no value means default_accelerators() where `default` is set (the
    CLI compiling an artifact), else none."""
    names = list(names)
    if HOST in names:
        if len(names) > 1:
            raise AcceleratorError(f"--maccel={HOST} (the host path alone) cannot be combined with other "
                                   f"accelerators ({', '.join(n for n in names if n != HOST)})")
        return []
    if not names and default:
        return default_accelerators()
    return names


def scan_emit(argv):
    """The --emit value in argv (default: tcc), before click parses anything."""
    emit, i = "tcc", 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            break
        if a.startswith("--emit="):
            emit = a.split("=", 1)[1]
        elif a == "--emit" and i + 1 < len(argv):
            emit = argv[i + 1]
            i += 1
        i += 1
    return emit


def plugin_click_options(accels):
    """click options for the selected accelerators' own CLI options."""
    out = []
    for acc in accels:
        for opt in (acc.call("tcc_cli_options") if acc.has("tcc_cli_options") else None) or []:
            flag = f"--{acc.name}-{opt.name}"
            dest = f"accel__{acc.name}__{opt.name}".replace("-", "_")
            if opt.type is bool:
                out.append(click.Option([flag, dest], is_flag=True, default=bool(opt.default), help=opt.help))
            else:
                out.append(click.Option([flag, dest], type=opt.type, default=opt.default, show_default=True,
                                        help=opt.help))
    return out


def plugin_option_values(accels, params: dict):
    """Pops the plugin options from click's params: {accel: {option: value}}."""
    per = {a.name: {} for a in accels}
    for key in [k for k in params if k.startswith("accel__")]:
        _, acc, opt = key.split("__", 2)
        value = params.pop(key)
        for a in accels:
            if a.name.replace("-", "_") == acc:
                per[a.name][opt.replace("_", "-")] = value
    return per


def configure(accels, given: dict):
    """Hands each accelerator the values of its own options
    (`tcc_configure_passes`), defaults filled in for those not `given`
    ({accel: {option: value}}); returns the full values, as the artifact
    records them."""
    per = {}
    stray = sorted(set(given or {}) - {a.name for a in accels})
    if stray:
        raise CLIError(f"options given for accelerator '{stray[0]}', which is not selected (--maccel)")
    for a in accels:
        mine = dict((given or {}).get(a.name, {}))
        declared = (a.call("tcc_cli_options") if a.has("tcc_cli_options") else None) or []
        names = {o.name for o in declared}
        unknown = sorted(set(mine) - names)
        if unknown:
            known = ", ".join(sorted(names)) or "none"
            raise CLIError(f"accelerator '{a.name}' has no option '{unknown[0]}' (options: {known})")
        for o in declared:
            mine.setdefault(o.name, o.default)
        per[a.name] = mine
        if a.has("tcc_configure_passes"):
            a.call("tcc_configure_passes", options=mine)
    return per


def setup_context(ctx, accels, opt_level=2):
    """Adds the accelerators' dialects, passes and host lowerings to a tool's context."""
    ctx.accelerators = list(accels)
    for a in accels:
        if a.has("tcc_register_dialects"):
            a.call("tcc_register_dialects", context=ctx)
        if a.has("tcc_register_passes"):
            a.call("tcc_register_passes", context=ctx, opt_level=opt_level)
        if a.has("tcc_register_lowerings"):
            a.call("tcc_register_lowerings", context=ctx)
    return ctx


def list_accelerators():
    rows = describe_installed()
    if not rows:
        click.echo("no accelerators installed (the host runs everything)")
        return
    click.echo(f"{'name':<10} {'version':<10} {'plugin API':<11} distribution")
    for name, version, dist, api, desc in rows:
        click.echo(f"{name:<10} {version:<10} {api:<11} {dist}" + (f"  -- {desc}" if desc else ""))


def load(argv, default=False):
    """The accelerators argv's --maccel values name; with `default` (tcc
    compiling an artifact) and none named, default_accelerators()."""
    return load_accelerators(resolve_maccel(scan_maccel(argv), default))


def parse_targets(texts, accels):
    """`--target` values (`cpu -isa=avx2`, `{"kind": "gpu", "arch": "sm_90"}`) ->
    {accelerator name: the target's short form}: each names the target kind of
    a selected accelerator, at most once."""
    from tcc.runtime.device import Target, TargetError
    names = [a.name for a in accels]
    out = {}
    for text in texts or ():
        try:
            t = Target.parse(text)
        except TargetError as e:
            raise CLIError(f"--target {text!r}: {e}") from None
        name = t.kind.name
        if name not in names:
            raise CLIError(f"--target {text!r}: accelerator '{name}' is not selected (add --maccel={name})")
        if name in out:
            raise CLIError(f"--target {text!r}: a target for '{name}' is given twice")
        out[name] = str(t)
    return out
