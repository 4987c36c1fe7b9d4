"""Which accelerators are installed, and validating `--maccel`."""
from __future__ import annotations

from importlib.metadata import entry_points

from .io import CLIError

GROUP = "tcc.accelerators"


def installed():
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def check_maccel(names):
    have = installed()
    for n in names:
        if n not in have:
            listing = ", ".join(sorted(have)) or "none"
            raise CLIError(f"unknown accelerator '{n}' for --maccel (installed: {listing})")
    return list(names)
