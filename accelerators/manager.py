"""Finding and loading accelerator plugins. Each selected plugin gets its
own pluggy PluginManager, so accelerators never see (or break) each other;
a plugin that fails to import or raises in a hook is reported by name."""
from __future__ import annotations

from importlib.metadata import entry_points

import pluggy

from tcc.dialects.ir.errors import TccError

from . import ENTRY_POINT_GROUP, hookspecs
from .api import API_VERSION, AcceleratorInfo


class AcceleratorError(TccError):
    pass


def _one_line(e):
    return " ".join(f"{type(e).__name__}: {e}".split())


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
        if not isinstance(info, AcceleratorInfo):
            raise AcceleratorError(f"accelerator '{name}': tcc_accelerator_info must return an "
                                   f"AcceleratorInfo, got {type(info).__name__}")
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
        try:
            result = caller(**kwargs)
        except TccError:
            raise
        except Exception as e:
            raise AcceleratorError(f"accelerator '{self.name}': hook {hook} failed: {_one_line(e)}") from e
        if isinstance(result, list) and not getattr(caller.spec.opts, "get", lambda k: False)("firstresult"):
            return result[0] if result else None
        return result

    def __repr__(self):
        return f"<accelerator {self.name} {self.info.version}>"


def installed_entry_points():
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _load_entry_point(ep):
    try:
        obj = ep.load()
    except Exception as e:
        raise AcceleratorError(f"accelerator '{ep.name}' (from {ep.value}) failed to load: {_one_line(e)}") from None
    return obj() if isinstance(obj, type) else obj


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
