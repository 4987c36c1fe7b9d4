"""Installs throwaway accelerator plugins for CLI tests: a folder with
modules and `*.dist-info/entry_points.txt`, put on PYTHONPATH, is found by
importlib.metadata exactly as a pip-installed distribution would be."""
import os
import textwrap

GOOD = '''
from tcc.accelerators import API_VERSION, AcceleratorInfo, CliOption, Support, hookimpl
from tcc.dialects.ir import Pass

TAKES = {takes!r}
STATE = {{}}


class MarkPass(Pass):
    name = "{name}-mark"
    summary = "tags every op with tcc.{name}"

    def run(self, module, ctx):
        from tcc.dialects.ir import UnitAttr
        for op in module.walk():
            op.attributes["tcc.{name}"] = UnitAttr()


@hookimpl
def tcc_accelerator_info():
    return AcceleratorInfo("{name}", "2.5", {api!r} or API_VERSION, "test accelerator")


@hookimpl
def tcc_register_passes(context, opt_level):
    context.register_pass(MarkPass)


@hookimpl
def tcc_cli_options():
    return [CliOption("threshold", int, 3, "a test option")]


@hookimpl
def tcc_configure_passes(options):
    STATE.update(options)


@hookimpl
def tcc_supports_op(op, module):
    if {raise_in_hook!r}:
        raise ValueError("boom in supports_op")
    if op.name in TAKES:
        return Support.yes()
    return Support.no("op unsupported")
'''


def make_plugin_dir(tmp_path, plugins):
    """plugins: name -> dict(takes=[...], api=None, raise_in_hook=False, broken=False)."""
    root = tmp_path / "site"
    root.mkdir(exist_ok=True)
    for name, spec in plugins.items():
        mod = f"tcc_test_accel_{name}"
        if spec.get("broken"):
            src = "raise ImportError('this plugin is broken on purpose')\n"
        else:
            src = textwrap.dedent(GOOD).format(name=name, takes=set(spec.get("takes", ())),
                                               api=spec.get("api"), raise_in_hook=spec.get("raise_in_hook", False))
        (root / f"{mod}.py").write_text(src)
        info = root / f"tcc_test_accel_{name}-1.0.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tcc-test-accel-{name}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[tcc.accelerators]\n{name} = {mod}\n")
    return root


def env_with(root):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    return env
