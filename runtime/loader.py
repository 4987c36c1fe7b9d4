"""Loading an artifact: the session kind its manifest asks for."""
from __future__ import annotations

from .artifact import ArtifactError, read_artifact
from .executor import PlanSession
from .plan_artifact import is_plan
from .session import Session
from .signature import AllocationError
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
    try:
        if is_specializing(art.manifest):
            return SpecializingSession(art, compiler, load_static)
        return load_static(path, art)
    except AllocationError as e:  # a plan's value (runtime.executor), named
        raise ArtifactError(f"{art.path}: {e}") from None
    except MemoryError:
        raise ArtifactError(f"{art.path}: cannot allocate the memory the artifact asks for (workspace "
                            f"{art.manifest['compile'].get('workspace_bytes', '?')} bytes)") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as e:
        # read_artifact checks the manifest's common fields; what a session
        # kind reads beyond them (plan steps, specialization info) is checked
        # here: any of it malformed makes an invalid artifact, not a crash.
        raise ArtifactError(f"{art.path}: not a valid tcc artifact (malformed manifest: "
                            f"{type(e).__name__}: {e})") from None
