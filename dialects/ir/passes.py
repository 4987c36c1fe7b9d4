"""Passes and the pass manager: registered by name, typed options parsed from
`name{opt=v other=w}`, verification after every pass, optional timing and
IR printing after each pass."""
from __future__ import annotations

import re
import sys
import time

from .errors import PassError, TccError, VerifyError
from .verifier import verify


class Pass:
    """Subclass with `name`, `summary`, `options` = {name: (type, default,
    help)} or (type, default, help, least) for a number with a lower bound,
    and `run(module, context)`."""
    name = ""
    summary = ""
    options: dict = {}

    def __init__(self, **opts):
        for k, (typ, default, *_help) in self.options.items():
            setattr(self, k.replace("-", "_"), default)
        for k, v in opts.items():
            self.set_option(k, v)

    def set_option(self, key, value):
        if key not in self.options:
            known = ", ".join(sorted(self.options)) or "none"
            raise PassError(f"pass '{self.name}' has no option '{key}' (options: {known})")
        typ, _default, _help, *least = self.options[key]
        v = _convert(self.name, key, typ, value)
        if least and v < least[0]:  # fuse{max-ops=-3} would mean "fuse nothing", silently
            raise PassError(f"pass '{self.name}' option '{key}' must be at least {least[0]}, got {v}")
        setattr(self, key.replace("-", "_"), v)

    def run(self, module, context):
        raise NotImplementedError

    def describe(self):
        opts = " ".join(f"{k}={getattr(self, k.replace('-', '_'))}" for k in self.options)
        return self.name + (f"{{{opts}}}" if opts else "")


def _convert(pname, key, typ, value):
    if not isinstance(value, str):
        return typ(value)
    try:
        if typ is bool:
            if value.lower() in ("1", "true", "yes", "on", ""):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if typ is list:
            return [v for v in re.split(r"[;,]", value) if v]
        return typ(value)
    except ValueError:
        raise PassError(f"pass '{pname}' option '{key}' expects {typ.__name__}, got '{value}'") from None


_PIPE_ITEM = re.compile(r"\s*([\w.-]+)\s*(?:\{([^}]*)\})?\s*")


def parse_pipeline(text: str, context):
    """'canonicalize,fuse{max-ops=8},cse' -> pass instances."""
    out, pos = [], 0
    text = text.strip()
    if not text:
        return out
    while pos < len(text):
        m = _PIPE_ITEM.match(text, pos)
        if not m or not m.group(1):
            raise PassError(f"bad pass pipeline at column {pos + 1}: '{text[pos:pos + 20]}'")
        out.append(make_pass(m.group(1), m.group(2), context))
        pos = m.end()
        if pos < len(text):
            if text[pos] != ",":
                raise PassError(f"bad pass pipeline at column {pos + 1}: expected ','")
            pos += 1
    return out


def make_pass(name, option_text, context):
    cls = context.passes.get(name)
    if cls is None:
        known = ", ".join(sorted(context.passes))
        raise PassError(f"unknown pass '{name}' (known: {known})")
    p = cls()
    for item in re.split(r"[\s,]+", (option_text or "").strip()):
        if not item:
            continue
        k, _, v = item.partition("=")
        p.set_option(k, v)
    return p


class PassManager:
    def __init__(self, context, passes=(), verify_each=True, timing=False, print_after_all=None):
        self.ctx = context
        self.passes = list(passes)
        self.verify_each = verify_each
        self.timing = timing
        self.print_after_all = print_after_all  # a file object, or None
        self.times = []

    def add(self, p: Pass):
        self.passes.append(p)
        return self

    def run(self, module):
        from .printer import print_module
        for p in self.passes:
            t0 = time.perf_counter()
            try:
                p.run(module, self.ctx)
            except TccError:
                raise
            except Exception as e:  # a bug in a pass, reported by name
                raise PassError(f"pass '{p.name}' failed: {type(e).__name__}: {e}") from e
            t1 = time.perf_counter()
            if self.verify_each:
                try:
                    verify(module, self.ctx)
                except VerifyError as e:
                    raise VerifyError(f"after pass '{p.name}': {e}") from e
            self.times.append((p.describe(), t1 - t0, time.perf_counter() - t1))
            if self.print_after_all is not None:
                self.print_after_all.write(f"// -----// IR Dump After {p.describe()} //----- //\n")
                self.print_after_all.write(print_module(module))
        return module

    def timing_report(self, out=sys.stderr):
        total = sum(t + v for _, t, v in self.times) or 1e-12
        out.write("===" + "-" * 60 + "===\n")
        out.write("  Pass execution timing report\n")
        out.write("===" + "-" * 60 + "===\n")
        out.write(f"  Total: {total:.4f} s\n   Wall Time (s)   (%)   Name\n")
        for name, t, v in self.times:
            out.write(f"   {t:12.4f}  {100 * t / total:5.1f}%   {name}\n")
            if self.verify_each:
                out.write(f"   {v:12.4f}  {100 * v / total:5.1f}%     (verify)\n")
