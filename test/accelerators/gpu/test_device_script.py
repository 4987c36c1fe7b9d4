"""scripts/gpu_device_run.sh, the one prepared run for the GPU machine, in its
dry-run mode here (every phase on the fake cupy, smaller sets), so its
plumbing cannot rot between the rare runs on a GPU."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("timeout") is None,
                    reason="needs g++ (the CUDA emulation) and timeout(1)")
def test_device_script_dry_run(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PY=sys.executable, TCC_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_device_run.sh"), "--dry-run"],
                       capture_output=True, text=True, env=env, timeout=600)
    lines = r.stdout.splitlines()
    assert r.returncode == 0, r.stdout + r.stderr
    assert 0 < len(lines) <= 40
    for phase in ("probe", "suite", "bench", "nodes"):
        assert any(l.startswith(f"[{phase}] ok") for l in lines), r.stdout
        assert (out / f"{phase}.log").stat().st_size > 0
    text = r.stdout
    assert "replays as a CUDA graph" in text and "matches onnxruntime" in text
    assert "1 passed" in text and "device conformance kit on gpu:0: " in text and " failed" not in text
    # node tests placed on the (fake) gpu: "unsupported" would mean they ran on the host
    assert "ran 2 of 2 cases: 2 passed, 0 unsupported, 0 wrong, 0 crashed" in text
    assert os.path.exists(out / "bench.json")
