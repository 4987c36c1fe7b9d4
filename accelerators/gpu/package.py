"""The gpu payload inside a .tcc: a zip (never pickle) holding
  manifest.json   format, functions -> launch plan, source hash, kernel names
  kernels.cu      one CUDA C translation unit with every kernel
  weights.json    name -> {offset, shape, dtype} into weights.bin
  weights.bin     the weights, 256-byte aligned
  kernels.<arch>.cubin   optional ahead-of-time build (nvcc), used when the GPU matches
"""
from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tempfile
import os
import zipfile

import numpy as np

FORMAT = "tcc-gpu-1"


def pack(plans, source, cubin_arch=None):
    weights, index, off = [], {}, 0
    for p in plans:
        for name, arr in p.weights.items():
            b = np.ascontiguousarray(arr).tobytes()
            pad = (-off) % 256
            weights.append(b"\0" * pad)
            off += pad
            index[name] = {"offset": off, "nbytes": len(b), "shape": list(arr.shape), "dtype": arr.dtype.str}
            weights.append(b)
            off += len(b)
    manifest = {"format": FORMAT, "source_sha256": hashlib.sha256(source.encode()).hexdigest(),
                "functions": {p.name: p.to_json() for p in plans}}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("kernels.cu", source)
        z.writestr("weights.json", json.dumps(index))
        z.writestr("weights.bin", b"".join(weights), compress_type=zipfile.ZIP_STORED)
        if cubin_arch:
            cubin = nvcc_compile(source, cubin_arch, "cubin")
            if cubin is not None:
                z.writestr(f"kernels.{cubin_arch}.cubin", cubin, compress_type=zipfile.ZIP_STORED)
                manifest["cubin_arch"] = cubin_arch
        z.writestr("manifest.json", json.dumps(manifest, indent=1))
    return buf.getvalue()


def unpack(payload):
    with zipfile.ZipFile(io.BytesIO(payload)) as z:
        manifest = json.loads(z.read("manifest.json"))
        if manifest.get("format") != FORMAT:
            raise ValueError(f"gpu payload format {manifest.get('format')!r} is not {FORMAT!r}")
        source = z.read("kernels.cu").decode()
        index = json.loads(z.read("weights.json"))
        blob = z.read("weights.bin")
        cubin = None
        if manifest.get("cubin_arch"):
            cubin = (manifest["cubin_arch"], z.read(f"kernels.{manifest['cubin_arch']}.cubin"))
    weights = {}
    for name, e in index.items():
        dt = np.dtype(e["dtype"])
        weights[name] = np.frombuffer(blob, dt, e["nbytes"] // dt.itemsize, e["offset"]).reshape(e["shape"])
    return manifest, source, weights, cubin


def nvcc_compile(source, arch="sm_90", kind="ptx"):
    """`nvcc -<kind> -arch=<arch>` on `source`; bytes, or None without nvcc.
    Raises RuntimeError with nvcc's message when the source does not compile."""
    nvcc = shutil.which("nvcc") or (os.path.exists("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc")
    if not nvcc:
        return None
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.cu")
        out = os.path.join(d, f"k.{kind}")
        with open(src, "w") as f:
            f.write(source)
        r = subprocess.run([nvcc, f"-{kind}", f"-arch={arch}", "-std=c++17", "-o", out, src],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"nvcc failed:\n{r.stderr[-4000:]}")
        with open(out, "rb") as f:
            return f.read()
