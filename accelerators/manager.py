"""Finding and loading accelerator plugins. Each selected plugin gets its
own pluggy PluginManager, so accelerators never see (or break) each other;
a plugin that fails to import, raises in a hook, returns the wrong kind of
value from one, or hangs in one past TCC_HOOK_TIMEOUT seconds is reported by
name. Plugins not selected are never imported."""
from __future__ import annotations

import functools
import math
import numbers
import os
import signal
import threading
from importlib.metadata import entry_points

import pluggy

from tcc.dialects.ir.errors import TccError

from . import ENTRY_POINT_GROUP, hookspecs
from .api import API_VERSION, AcceleratorInfo, CliOption, CompositePattern, RuntimeModule, Support


class AcceleratorError(TccError):
    pass


def _one_line(e):
    return " ".join(f"{type(e).__name__}: {e}".split())


# A hook (or a plugin's import) running longer than this is stopped with an
# error naming the plugin. Generous by default: a real accelerator's
# loop-to-native may run a C or CUDA compiler for minutes.
TIMEOUT_ENV = "TCC_HOOK_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0


class _HookTimeout(BaseException):
    """Raised by the alarm inside a hook; a BaseException, so a plugin's own
    `except Exception` cannot swallow it."""


_armed = threading.local()


def hook_timeout() -> float:
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        t = float(raw)
    except ValueError:
        raise AcceleratorError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if not t > 0:
        raise AcceleratorError(f"{TIMEOUT_ENV}={raw!r} must be a positive number of seconds")
    return t


def _on_alarm(_signum, _frame):
    if getattr(_armed, "on", False):
        raise _HookTimeout()


def _arm(seconds) -> bool:
    """Starts the alarm for a hook: only on the main thread (where Python runs
    signal handlers), not nested, and not when the program installed its own
    SIGALRM handler. Our handler stays installed once set (it ignores alarms
    it did not arm): re-installing it per call cost ~60 us, against ~10 us for
    pluggy's own call, on tcc_supports_op that runs once per op."""
    global _installed
    if threading.current_thread() is not _MAIN or getattr(_armed, "on", False):
        return False
    if not _installed:
        if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN, None):
            return False
        signal.signal(signal.SIGALRM, _on_alarm)
        _installed = True
    _armed.on = True
    signal.setitimer(signal.ITIMER_REAL, seconds)
    return True


def _disarm():
    signal.setitimer(signal.ITIMER_REAL, 0)
    _armed.on = False


_MAIN = threading.main_thread()
_installed = False


def _guarded(who, fn, *args, failed="failed", hung="did not return", **kwargs):
    """fn(*args, **kwargs) on behalf of plugin code `who` names: an exception,
    a SystemExit or a hang past the timeout (a hang in C code is interrupted
    only when it returns to Python) becomes an AcceleratorError."""
    timeout = hook_timeout()
    armed = _arm(timeout)
    try:
        return fn(*args, **kwargs)
    except _HookTimeout:
        raise AcceleratorError(f"{who} {hung} within {timeout:g} s (hung? set {TIMEOUT_ENV} higher if it "
                               "needs longer)") from None
    except TccError:
        raise
    except (Exception, SystemExit) as e:
        raise AcceleratorError(f"{who} {failed}: {_one_line(e)}") from e
    finally:
        if armed:
            _disarm()


def _is_list_of(*types):
    return lambda r: r is None or (isinstance(r, (list, tuple)) and all(isinstance(x, types) for x in r))


def _is_number(r):
    return r is None or (isinstance(r, numbers.Real) and not isinstance(r, bool) and math.isfinite(r))


def _is_runtime_module(r):
    return (isinstance(r, RuntimeModule) and isinstance(r.payload, (bytes, bytearray))
            and isinstance(r.functions, (list, tuple)) and all(isinstance(f, str) for f in r.functions)
            and isinstance(r.metadata, dict))


def _is_type_conversion(r):
    return r is None or (isinstance(r, (list, tuple)) and len(r) == 2 and isinstance(r[1], numbers.Integral)
                         and r[1] > 0)


# hook -> (does the result fit the contract?, what it must be): garbage from a
# plugin is refused here, naming it, instead of failing later somewhere in tcc.
_RESULTS = {
    "tcc_accelerator_info": (lambda r: isinstance(r, AcceleratorInfo) and isinstance(r.api_version, str),
                             "an AcceleratorInfo"),
    "tcc_supports_op": (lambda r: r is None or isinstance(r, (Support, bool)), "a Support (or None)"),
    "tcc_composite_patterns": (_is_list_of(CompositePattern), "a list of CompositePattern"),
    "tcc_cost_hint": (_is_number, "a finite number (or None)"),
    "tcc_cli_options": (_is_list_of(CliOption), "a list of CliOption"),
    "tcc_convert_tensor_type": (_is_type_conversion, "(type, alignment) with a positive integer alignment"),
    "tcc_graph_to_loop": (_is_list_of(str), "a list of the op names it left unlowered (or None)"),
    "tcc_loop_to_native": (lambda r: r is None or _is_runtime_module(r),
                           "a RuntimeModule (bytes payload, a list of function names)"),
    "tcc_target_kind": (lambda r: r is None or (isinstance(r, dict) and isinstance(r.get("name"), str)),
                        "a dict with a 'name' (or None)"),
    "tcc_load_runtime_module": (lambda r: r is None or callable(getattr(r, "get_function", None)),
                                "an object with get_function(name) (or None)"),
}


class Accelerator:
    """One loaded accelerator: its identity and its hooks."""

    def __init__(self, name: str, plugin, dist=None):
        self.name, self.plugin, self.dist = name, plugin, dist
        self.pm = pluggy.PluginManager("tcc")
        self.pm.add_hookspecs(hookspecs)
        try:
            self.pm.register(plugin, name)
        except Exception as e:  # hookimpl validation: wrong argument names and the like
            raise AcceleratorError(f"accelerator '{name}': invalid plugin ({_one_line(e)})") from None
        info = self.call("tcc_accelerator_info")
        if info.api_version.split(".")[0] != API_VERSION.split(".")[0]:
            raise AcceleratorError(f"accelerator '{name}' was built for tcc plugin API {info.api_version}, "
                                   f"but this tcc implements {API_VERSION}")
        self.info = info

    def has(self, hook: str) -> bool:
        return bool(getattr(self.pm.hook, hook).get_hookimpls())

    def call(self, hook: str, **kwargs):
        """Calls a hook; the result of a firstresult hook, else the single
        plugin's return value (None when it does not implement the hook)."""
        caller = getattr(self.pm.hook, hook)
        result = _guarded(f"accelerator '{self.name}': hook {hook}", caller, **kwargs)
        if isinstance(result, list) and not getattr(caller.spec.opts, "get", lambda k: False)("firstresult"):
            result = result[0] if result else None
        check = _RESULTS.get(hook)
        if check is not None and not check[0](result):
            raise AcceleratorError(f"accelerator '{self.name}': hook {hook} returned {type(result).__name__} "
                                   f"{_short(result)}, not {check[1]}")
        return result

    @functools.cached_property
    def on_host_memory(self) -> bool:
        """Its buffers are the host's (its target kind's device_type is
        "cpu", as the in-tree cpu accelerator's): nothing is copied to run
        on it, and what the host runtime runs sits beside it for free."""
        kind = self.call("tcc_target_kind") if self.has("tcc_target_kind") else None
        return isinstance(kind, dict) and kind.get("device_type") == "cpu"

    def __repr__(self):
        return f"<accelerator {self.name} {self.info.version}>"


def _short(value):
    try:
        r = repr(value)
    except Exception:  # a garbage object whose repr raises too
        r = "<unprintable>"
    return r if len(r) <= 60 else r[:57] + "..."


def installed_entry_points():
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _load_entry_point(ep):
    who = f"accelerator '{ep.name}' (from {ep.value})"
    obj = _guarded(who, ep.load, failed="failed to load", hung="did not finish loading")
    return _guarded(who, obj, failed="failed to load", hung="did not finish loading") if isinstance(obj, type) else obj


_EXTRA = {}  # name -> plugin object: in-process registrations (tests, embedding)


def register_plugin(name, plugin):
    """Makes `plugin` selectable as --maccel=name without an entry point."""
    _EXTRA[name] = plugin


def unregister_plugin(name):
    _EXTRA.pop(name, None)


def available_names():
    return sorted(set(installed_entry_points()) | set(_EXTRA))


def load_accelerators(names) -> list:
    """Loads the named accelerators in priority order (the order given)."""
    eps = installed_entry_points()
    out, seen = [], set()
    for n in names:
        if n in seen:
            continue
        seen.add(n)
        if n in _EXTRA:
            out.append(Accelerator(n, _EXTRA[n]))
            continue
        ep = eps.get(n)
        if ep is None:
            listing = ", ".join(available_names()) or "none"
            raise AcceleratorError(f"unknown accelerator '{n}' for --maccel (installed: {listing})")
        acc = Accelerator(n, _load_entry_point(ep), ep.dist)
        out.append(acc)
    for acc in out:
        _register_runtime(acc)
    return out


def _register_runtime(acc):
    from tcc.runtime.device import default_registry, register_target_kind
    factory = acc.call("tcc_device_manager_factory") if acc.has("tcc_device_manager_factory") else None
    if factory is not None:
        try:
            default_registry.register(factory, replace=True)
        except Exception as e:
            raise AcceleratorError(f"accelerator '{acc.name}': cannot register its device: {_one_line(e)}") from None
    kind = acc.call("tcc_target_kind") if acc.has("tcc_target_kind") else None
    if kind is not None:
        from tcc.runtime.device import get_target_kind
        try:
            try:
                # An existing kind (the built-in cpu/gpu ones) is extended, never
                # replaced: its attributes and device preprocessor stay.
                k = get_target_kind(kind["name"])
            except Exception:
                k = register_target_kind(kind["name"], kind.get("device_type"))
            for attr, (typ, default) in kind.get("attrs", {}).items():
                if attr not in k.attr_options:
                    k.add_attr_option(attr, typ, default)
        except Exception as e:
            raise AcceleratorError(f"accelerator '{acc.name}': cannot register its target: {_one_line(e)}") from None


def describe_installed():
    """(name, distribution, version, plugin API version or the load error) for
    every installed accelerator: loads each one, isolating failures."""
    rows = []
    eps = installed_entry_points()
    for name in available_names():
        ep = eps.get(name)
        dist = f"{ep.dist.name} {ep.dist.version}" if ep is not None and ep.dist is not None else "(in-process)"
        try:
            acc = Accelerator(name, _EXTRA[name] if name in _EXTRA else _load_entry_point(ep))
            rows.append((name, acc.info.version, dist, acc.info.api_version, acc.info.description))
        except AcceleratorError as e:
            rows.append((name, "?", dist, "?", f"broken: {e}"))
    return rows
