"""The resource table: large constants live here, by name, instead of inline in
the IR text. Beside a printed IR file `x.mlir` they are written to
`x.mlir.resources` in the safetensors layout (8-byte little-endian header
length, a JSON header, then the raw bytes), so the file is memory-mapped on read
and never goes through Python lists."""
from __future__ import annotations

import json
import os
import struct

import numpy as np

from .errors import IRError
from .files import atomic_open
from .types import parse_element_name, to_numpy_dtype

SUFFIX = ".resources"
_ALIGN = 64


class ResourceTable:
    def __init__(self):
        self._arrays = {}

    def __len__(self):
        return len(self._arrays)

    def __iter__(self):
        return iter(self._arrays)

    def has(self, name):
        return name in self._arrays

    def get(self, name) -> np.ndarray:
        return self._arrays[name]

    def add(self, name: str, array: np.ndarray) -> str:
        """Stores `array` under `name` (made unique) and returns the name used."""
        base, n = name, 0
        while name in self._arrays:
            n += 1
            name = f"{base}_{n}"
        self._arrays[name] = array
        return name

    def set(self, name, array):
        self._arrays[name] = array

    def remove(self, name):
        self._arrays.pop(name, None)

    def nbytes(self):
        return sum(a.nbytes for a in self._arrays.values())

    # -- sidecar file ------------------------------------------------------------
    def write(self, path: str, element_names: dict, keep=None):
        """Writes the arrays named in `element_names` (name -> MLIR element type)."""
        header, offset, order = {}, 0, []
        for name, el in element_names.items():
            if keep is not None and name not in keep:
                continue
            a = np.ascontiguousarray(self._arrays[name])
            header[name] = {"dtype": el, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
            order.append(a)
            offset += a.nbytes + (-a.nbytes) % _ALIGN
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * ((-len(blob) - 8) % _ALIGN)
        with atomic_open(path) as f:
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            for a in order:
                f.write(memoryview(a.reshape(-1).view(np.uint8)))
                f.write(b"\0" * ((-a.nbytes) % _ALIGN))

    def read(self, path: str):
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(n))
            data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n) if size > 8 + n else np.zeros(0, np.uint8)
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                begin, end = info["data_offsets"]
                dt = to_numpy_dtype(parse_element_name(info["dtype"]))
                self._arrays[name] = data[begin:end].view(dt).reshape(info["shape"])
        except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
            raise IRError(f"{path}: cannot read resources ({e})") from None
