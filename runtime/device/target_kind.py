"""Target kinds: a name, the device type it runs on, a typed attribute schema with
defaults, and an optional preprocessor (TVM's TVM_REGISTER_TARGET_KIND)."""
import threading
import typing

from .attrs import DeviceAttr
from .errors import TargetError

_SCALARS = (int, float, str, bool)
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


class AttrOption:
    """One attribute of a kind: name, scalar type, whether it is a list, default."""

    __slots__ = ("name", "type", "is_list", "default")

    def __init__(self, name, type_, default):
        self.is_list = typing.get_origin(type_) is list
        self.type = typing.get_args(type_)[0] if self.is_list else type_
        if self.type not in _SCALARS:
            raise TargetError(f"attribute {name!r}: type must be int, float, str, bool or a "
                              f"list of one, got {type_!r}")
        self.name = name
        self.default = None if default is None else self.coerce(default, "default")

    @property
    def type_name(self):
        return f"list[{self.type.__name__}]" if self.is_list else self.type.__name__

    def coerce(self, value, where, from_text=False):
        """`value` as this option's type; text values (from `kind -key=value`) are parsed."""
        if self.is_list:
            if from_text and isinstance(value, str):
                value = [v for v in value.split(",") if v]
            if not isinstance(value, (list, tuple)):
                raise self._wrong(value, where)
            return tuple(self._scalar(v, where, from_text) for v in value)
        return self._scalar(value, where, from_text)

    def _scalar(self, value, where, from_text):
        t = self.type
        if from_text and isinstance(value, str) and t is not str:
            text = value.strip().lower()
            try:
                if t is bool:
                    if text in _TRUE or text in _FALSE:
                        return text in _TRUE
                    raise ValueError
                return t(text)
            except ValueError:
                raise self._wrong(value, where) from None
        if t is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, t) and (t is bool or not isinstance(value, bool)):
            return value
        raise self._wrong(value, where)

    def _wrong(self, value, where):
        return TargetError(f"{where}: attribute {self.name!r} expects {self.type_name}, "
                           f"got {type(value).__name__} {value!r}")


class TargetKind:
    """A registered target kind; configure it by chaining add_attr_option and
    set_attrs_preprocessor on the object register_target_kind returns."""

    def __init__(self, name, device_type=None):
        self.name = name
        self.device_type = device_type or name
        self._options = {}
        self._preprocessor = None

    @property
    def attr_options(self):
        return dict(self._options)

    def add_attr_option(self, name, type_, default=None):
        if name == "kind" or name in self._options:
            raise TargetError(f"target kind {self.name!r}: attribute {name!r} is already defined")
        self._options[name] = AttrOption(name, type_, default)
        return self

    def set_attrs_preprocessor(self, fn):
        """`fn(attrs, device)` returns attrs completed from other attrs or from `device`
        (None when no device was given); explicit attrs must be kept."""
        self._preprocessor = fn
        return self

    def option(self, name):
        try:
            return self._options[name]
        except KeyError:
            known = ", ".join(sorted(self._options)) or "none"
            raise TargetError(f"target kind {self.name!r} has no attribute {name!r} "
                              f"(known: {known})") from None

    def normalize(self, attrs, from_text=False, device=None):
        """Checked, typed attrs with the preprocessor applied and defaults filled."""
        out = {k: self.option(k).coerce(v, f"target {self.name!r}", from_text)
               for k, v in attrs.items()}
        if self._preprocessor is not None:
            done = self._preprocessor(dict(out), device)
            out = {k: self.option(k).coerce(v, f"target {self.name!r} preprocessor")
                   for k, v in done.items() if v is not None}
        for name, option in self._options.items():
            if name not in out and option.default is not None:
                out[name] = option.default
        return out

    def __repr__(self):
        return f"<TargetKind {self.name} on {self.device_type}>"


_kinds = {}
_lock = threading.Lock()


def register_target_kind(name, device_type=None, replace=False):
    """Register and return a new TargetKind; an existing name needs replace=True."""
    with _lock:
        if name in _kinds and not replace:
            raise TargetError(f"target kind {name!r} is already registered")
        kind = _kinds[name] = TargetKind(name, device_type)
        return kind


def get_target_kind(name):
    with _lock:
        kind = _kinds.get(name)
        if kind is None:
            raise TargetError(f"unknown target kind {name!r} (known: {', '.join(sorted(_kinds))})")
        return kind


def target_kinds():
    with _lock:
        return tuple(sorted(_kinds))


def _fill(attrs, device, pairs):
    for name, kind in pairs:
        if name not in attrs and device is not None:
            value = device.get_attr(kind)
            if value is not None:
                attrs[name] = value
    return attrs


def _cpu_from_device(attrs, device):
    return _fill(attrs, device, (("num_cores", DeviceAttr.NUM_THREADS),
                                 ("vector_width", DeviceAttr.VECTOR_WIDTH)))


def _gpu_from_device(attrs, device):
    if "arch" not in attrs and device is not None:
        version = device.get_attr(DeviceAttr.COMPUTE_VERSION)
        if version:
            attrs["arch"] = "sm_" + version.replace(".", "")
    return _fill(attrs, device, (
        ("max_threads", DeviceAttr.MAX_THREADS_PER_BLOCK),
        ("warp_size", DeviceAttr.WARP_SIZE),
        ("max_shared_memory_per_block", DeviceAttr.MAX_SHARED_MEMORY_PER_BLOCK),
        ("multi_processor_count", DeviceAttr.MULTI_PROCESSOR_COUNT),
        ("l2_cache_size", DeviceAttr.L2_CACHE_SIZE)))


(register_target_kind("cpu")
    .add_attr_option("mtriple", str)
    .add_attr_option("mcpu", str, "generic")
    .add_attr_option("mattr", list[str], ())
    .add_attr_option("num_cores", int)
    .add_attr_option("vector_width", int, 16)
    .set_attrs_preprocessor(_cpu_from_device))

(register_target_kind("gpu")
    .add_attr_option("arch", str)
    .add_attr_option("max_threads", int, 1024)
    .add_attr_option("max_shared_memory_per_block", int, 48 * 1024)
    .add_attr_option("warp_size", int, 32)
    .add_attr_option("multi_processor_count", int)
    .add_attr_option("l2_cache_size", int)
    .add_attr_option("mattr", list[str], ())
    .set_attrs_preprocessor(_gpu_from_device))
