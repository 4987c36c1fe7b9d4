"""Loading an artifact: the session kind its manifest asks for."""
from __future__ import annotations

from .artifact import read_artifact
from .executor import PlanSession
from .plan_artifact import is_plan
from .session import Session
from .specialize import SpecializingSession, is_specializing


def load_static(path, artifact=None):
    """A Session for a host-only artifact, a PlanSession for a model placed
    on accelerators."""
    art = artifact if artifact is not None else read_artifact(path)
    if is_plan(art.manifest):
        return PlanSession(art)
    return Session(path, art)


def load(path, compiler=None):
    """A Session for a host-only artifact; a PlanSession (runtime.executor)
    for a model placed on accelerators; a SpecializingSession for a model
    that compiles per input shape, with `compiler` (see runtime.specialize)."""
    art = read_artifact(path)
    if is_specializing(art.manifest):
        return SpecializingSession(art, compiler, load_static)
    return load_static(path, art)
