"""`tcc.backend`: tcc as an `onnx.backend.base.Backend`, so the official ONNX
backend node tests (and any onnx backend harness) run against every
accelerator: `TccBackend.prepare(model, maccel=["sim"])`, or a backend bound
to accelerators with `backend_for("sim")`."""
from __future__ import annotations

import os
import shutil
import tempfile
import weakref

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep


class TccBackendRep(BackendRep):
    def __init__(self, session, workdir):
        self.session = session
        # The artifact lives in `workdir` as long as this rep does.
        self._cleanup = weakref.finalize(self, shutil.rmtree, workdir, True)

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            return tuple(self.session.run(inputs))
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        return tuple(self.session.run(list(inputs)))


class TccBackend(Backend):
    maccel: tuple = ()
    opt_level: int = 2

    @classmethod
    def is_compatible(cls, model, device="CPU", **kwargs):
        # an op tcc does not lower fails prepare() with NotImplementedError (a
        # one-line TccError too), which harnesses count as unsupported
        return True

    @classmethod
    def prepare(cls, model, device="CPU", maccel=None, opt_level=None, **kwargs):
        if isinstance(model, (str, bytes, os.PathLike)) and not isinstance(model, bytes):
            model = onnx.load(model)
        elif isinstance(model, bytes):
            model = onnx.load_from_string(model)
        super().prepare(model, device, **kwargs)
        from tcc import api
        workdir = tempfile.mkdtemp(prefix="tcc-backend-")
        try:
            path = api.compile(model, maccel=maccel if maccel is not None else cls.maccel,
                               opt_level=cls.opt_level if opt_level is None else opt_level,
                               output=os.path.join(workdir, "model.tcc"))
            return TccBackendRep(api.load(path), workdir)
        except BaseException:
            shutil.rmtree(workdir, True)
            raise

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        dev = str(device).upper()
        if dev.startswith("CPU"):
            return True
        if dev.startswith("CUDA") or dev.startswith("GPU"):
            return "gpu" in cls.maccel
        return False


def backend_for(*maccel, opt_level=2):
    """A TccBackend subclass compiling with these accelerators."""
    return type(f"TccBackend_{'_'.join(maccel) or 'host'}", (TccBackend,),
                {"maccel": tuple(maccel), "opt_level": opt_level})


prepare = TccBackend.prepare
run_model = TccBackend.run_model
supports_device = TccBackend.supports_device
