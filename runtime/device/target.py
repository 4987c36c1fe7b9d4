"""Target: an immutable description of the device code will run on, read by passes
and code generators instead of querying the device (TVM's Target)."""
import json
import shlex
import types

from .errors import TargetError
from .target_kind import TargetKind, get_target_kind, target_kinds


class Target:
    """A target kind plus its typed attributes (defaults filled).

    Build one with `Target("gpu", max_threads=512)`, `Target.parse(text)` where text is
    JSON (`{"kind": "gpu", "max_threads": 1024}`) or short (`gpu -arch=sm_90`), or
    `Target.from_device(device)`. `str()` gives the short form and parses back equal.
    """

    __slots__ = ("_kind", "_attrs", "_hash")

    def __init__(self, kind, attrs=None, /, **kwargs):
        if isinstance(kind, str) and not attrs and not kwargs:
            parsed = Target.parse(kind)  # Target("gpu -arch=sm_90") as TVM allows
            kind, attrs = parsed._kind, dict(parsed._attrs)
        self._init(kind, {**(attrs or {}), **kwargs}, False, None)

    def _init(self, kind, attrs, from_text, device):
        kind = kind if isinstance(kind, TargetKind) else get_target_kind(kind)
        normalized = kind.normalize(attrs, from_text, device)
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_attrs", types.MappingProxyType(dict(sorted(normalized.items()))))
        object.__setattr__(self, "_hash", hash((kind.name, tuple(self._attrs.items()))))

    @classmethod
    def _make(cls, kind, attrs, from_text=False, device=None):
        target = cls.__new__(cls)
        target._init(kind, attrs, from_text, device)
        return target

    @classmethod
    def parse(cls, text):
        """A target from JSON or from `kind -key=value -flag ...`."""
        if not isinstance(text, str) or not text.strip():
            raise TargetError(f"target description must be a non-empty string, got {text!r}")
        if text.lstrip().startswith("{"):
            return cls.from_json(text)
        try:
            words = shlex.split(text)
        except ValueError as exc:
            raise TargetError(f"cannot parse target {text!r}: {exc}") from None
        kind, attrs = words[0], {}
        for word in words[1:]:
            if not word.startswith("-") or len(word) < 2:
                raise TargetError(f"target {text!r}: expected -key=value, got {word!r}")
            key, eq, value = word.lstrip("-").partition("=")
            if key in attrs:
                raise TargetError(f"target {text!r}: attribute {key!r} given twice")
            attrs[key] = value if eq else "true"
        return cls._make(kind, attrs, from_text=True)

    @classmethod
    def from_json(cls, text):
        """A target from a JSON object (text or dict) with a "kind" key."""
        try:
            data = json.loads(text) if isinstance(text, str) else dict(text)
        except (ValueError, TypeError) as exc:
            raise TargetError(f"target JSON is invalid: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            raise TargetError(f"target JSON needs an object with a string \"kind\", got {text!r}")
        data = dict(data)
        return cls._make(data.pop("kind"), data)

    @classmethod
    def from_device(cls, device, kind=None, **attrs):
        """A target for `device`, attributes not given filled by the kind's preprocessor
        from device queries; `kind` defaults to the kind named like the device type."""
        if kind is None:
            names = target_kinds()
            kind = device.type if device.type in names else next(
                (n for n in names if get_target_kind(n).device_type == device.type), None)
            if kind is None:
                raise TargetError(f"no target kind runs on device type {device.type!r}")
        return cls._make(kind, attrs, device=device)

    @property
    def kind(self):
        return self._kind

    @property
    def device_type(self):
        return self._kind.device_type

    @property
    def attrs(self):
        """All attributes, defaults included, as a read-only mapping."""
        return self._attrs

    def get(self, name, default=None):
        """Attribute `name` (which must be one of the kind's), or `default` when unset."""
        self._kind.option(name)
        return self._attrs.get(name, default)

    def __getitem__(self, name):
        self._kind.option(name)
        return self._attrs[name]

    def with_attrs(self, **changes):
        """A new target with `changes` applied."""
        return type(self)._make(self._kind, {**self._attrs, **changes})

    def to_dict(self):
        return {"kind": self._kind.name,
                **{k: list(v) if isinstance(v, tuple) else v for k, v in self._attrs.items()}}

    def to_json(self):
        return json.dumps(self.to_dict(), sort_keys=True)

    def __str__(self):
        words = [self._kind.name]
        for key, value in self._attrs.items():
            if value == self._kind.option(key).default:
                continue
            if isinstance(value, tuple):
                value = ",".join(str(v) for v in value)
            elif isinstance(value, bool):
                value = "true" if value else "false"
            words.append(shlex.quote(f"-{key}={value}"))
        return " ".join(words)

    def __repr__(self):
        return f"Target({str(self)!r})"

    def __eq__(self, other):
        return (isinstance(other, Target) and self._kind.name == other._kind.name
                and self._attrs == other._attrs)

    def __hash__(self):
        return self._hash

    def __setattr__(self, name, value):
        raise AttributeError("Target is immutable; use with_attrs()")

    def __delattr__(self, name):
        raise AttributeError("Target is immutable")
