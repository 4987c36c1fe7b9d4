"""On PYTHONPATH (scripts/gpu_device_run.sh --dry-run), every Python process,
children included, gets the fake cupy of test/accelerators/gpu/fake_cupy.py."""
import os
import sys

if os.environ.get("TCC_FAKE_CUPY") == "1":
    sys.path.insert(0, os.environ["TCC_FAKE_CUPY_ROOT"])
    from test.accelerators.gpu import fake_cupy

    fake_cupy.install()
