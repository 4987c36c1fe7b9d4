"""The accelerator contract: every hook an accelerator plugin may implement.

A plugin is any installed distribution with an entry point in the group
`tcc.accelerators` whose object (a module or class instance) implements some
of these hooks, marked with `tcc.accelerators.hookimpl`. Only plugins named
by `--maccel` are loaded. It follows onnx-mlir's Accelerator class (seeds/004)
and TVM's BYOC flow (seeds/002); the device runtime follows seeds/000 and 003.

Every hook is called for one accelerator at a time; plugins never see each
other. Only `tcc_accelerator_info` is required.
"""
import pluggy

hookspec = pluggy.HookspecMarker("tcc")


# ---- identity ------------------------------------------------------------------

@hookspec(firstresult=True)
def tcc_accelerator_info():
    """Return an `AcceleratorInfo(name, version, api_version)`. `api_version`
    is the `tcc.accelerators.API_VERSION` the plugin was written for; a
    different major version is refused with both versions named."""


# ---- dialects, passes, options (tcc and tcc-opt) ---------------------------------

@hookspec
def tcc_register_dialects(context):
    """Load the accelerator's dialects into `context` (`context.load(Dialect)`).
    Only called when the accelerator is selected, so its ops exist in tcc-opt
    only with `--maccel`."""


@hookspec
def tcc_register_passes(context, opt_level):
    """Register the accelerator's passes (`context.register_pass(PassClass)`),
    making them available by name to `tcc-opt --pass` and pipelines."""


@hookspec
def tcc_register_lowerings(context):
    """Add host graph-to-loop lowerings to `context.lowerings` (op name ->
    `fn(cx, op)`, see tcc.dialects.conversions.graph_to_loop.registry) for
    ops of the accelerator's dialect that its own lowering leaves for the
    default patterns. Only called when the accelerator is selected."""


@hookspec
def tcc_cli_options():
    """Return a list of `CliOption`: the accelerator's own command-line
    options, offered as `--<accel>-<name>` once `--maccel=<accel>` is seen
    (options are parsed in two phases, as onnx-mlir-opt does)."""


@hookspec
def tcc_configure_passes(options):
    """Receive the parsed values of the accelerator's own options (a dict,
    defaults filled in) before any pass runs."""


@hookspec
def tcc_add_passes(pipeline, emission_target):
    """Add stages to `pipeline` (a `PipelineStages`) at named points with
    `pipeline.add(point, "pass-name{opt=v}")`. Never replaces the pipeline."""


# ---- placement (BYOC) ------------------------------------------------------------

@hookspec(firstresult=True)
def tcc_supports_op(op, module):
    """Can the accelerator take this onnx-dialect op? Return a `Support`:
    `Support.yes()` or `Support.no("dtype f64 unsupported")`. `None` means
    no (op unsupported)."""


@hookspec
def tcc_composite_patterns():
    """Return a list of `CompositePattern` (e.g. conv+bias+relu) that the
    accelerator runs as one kernel; matched chains are placed together."""


@hookspec(firstresult=True)
def tcc_cost_hint(op, module):
    """Optional: the relative cost of running `op` on the accelerator
    (1.0 = as fast as the host; lower is better; None = no opinion).
    Placement leaves a region on the host when the copies around it cost
    more than it saves. An accelerator on the host's own memory (its
    `tcc_target_kind` has device_type "cpu") copies nothing: there a region
    whose every op has a hint goes back to the host when it saves less than
    the passes over memory it takes from the host's fusion (the elements it
    exchanges with elementwise host steps), and a kept region gives back
    the hinted elementwise ops on its edges beside such steps."""


# ---- graph-to-loop -----------------------------------------------------------------

@hookspec(firstresult=True)
def tcc_convert_tensor_type(tensor_type):
    """Tensor -> buffer type conversion for values the accelerator owns:
    return `(MemRefType, alignment_bytes)` or None for the default."""


@hookspec
def tcc_graph_to_loop(func, module, context):
    """Lower a partition function the accelerator owns (`func`, a func.func
    tagged `tcc.accelerator = "<name>"` over tensors) into its own dialect or
    into `loop`. It may leave ops it wants the default patterns to lower.
    Return the list of op names it leaves unlowered (empty when done)."""


# ---- loop-to-native -----------------------------------------------------------------

@hookspec(firstresult=True)
def tcc_loop_to_native(funcs, module, context, target):
    """Turn the accelerator's lowered partition functions into a
    `RuntimeModule` whose functions are reachable by name (one per partition,
    named like the partition function). `target` is the `Target` of the
    accelerator's target kind (`tcc_target_kind`): the user's `--target`
    with the kind's defaults filled in, or the defaults alone; None when no
    kind has the accelerator's name."""


# ---- runtime ---------------------------------------------------------------------------

@hookspec(firstresult=True)
def tcc_device_manager_factory():
    """Return the `DeviceManagerFactory` of the accelerator's device type
    (see tcc.runtime.device): registered in the device registry on load."""


@hookspec(firstresult=True)
def tcc_target_kind():
    """Return the accelerator's target kind as data: `{"name": "sim",
    "device_type": "sim", "attrs": {"lanes": (int, 4), "arch": (str, None)}}`
    (attribute name -> (type, default)); registered so `{"kind": "sim", ...}`
    and `sim -lanes=8` targets parse."""


@hookspec(firstresult=True)
def tcc_load_runtime_module(module, device):
    """Load a `RuntimeModule` (as stored in an artifact) for execution on
    `device`; return an object with `get_function(name)` whose functions take
    device buffers (inputs then outputs) and a stream. Optional, for a device
    whose buffers are host memory: a function may carry `host_entry =
    (cfunc, weights, workspace, lock)`, meaning that `cfunc(args, weights,
    workspace)` called under `lock`, `args` a ctypes array of the buffers'
    addresses, runs it synchronously; the executor then skips the streams and
    buffer objects on every run (the cpu accelerator's functions do)."""
