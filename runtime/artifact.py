"""The compiled artifact, `model.tcc`: a zip (never pickle) holding

- `manifest.json`: format and version; the signature (input/output names,
  shapes, element types); compile info (tcc/onnx/llvmlite versions, options,
  target triple, CPU name and the CPU features the code requires, op
  statistics, workspace and peak bytes); the weights index; and a `plan`, the
  list of calls the executor makes (one host call today, so accelerators can
  add device steps later);
- `host.o`: the host object code (entry `tcc_main_graph`, see
  tcc.dialects.conversions.loop_to_native for the ABI);
- `weights.bin`: every weight's raw bytes, each at a 64-byte aligned offset,
  stored uncompressed so it can be memory-mapped in place.

Writing is atomic (a temp file beside the target, then rename). Reading checks
the manifest's shape and version, each member's size and hash, and that this
CPU has the features the code needs; members are only ever read by their
fixed names (nothing is extracted by a path taken from the archive). A
hostile file cannot hurt the loader: a member with an absolute or `..` name,
a duplicate, or one the manifest does not list is refused, and every
member's inflated size is bounded from the central directory and again while
it is read (MANIFEST_CAP, DEFLATED_CAP)."""
from __future__ import annotations

import hashlib
import json
import os
import zipfile
import zlib
from dataclasses import dataclass

import numpy as np

from tcc.dialects.ir.errors import TccError
from tcc.dialects.ir.files import atomic_open
from tcc.dialects.ir.types import parse_element_name, to_numpy_dtype

FORMAT = "tcc-artifact"
FORMAT_VERSION = 1
MANIFEST, HOST_OBJECT, WEIGHTS = "manifest.json", "host.o", "weights.bin"
ALIGN = 64
_PAD_ID = 0xD935  # zipalign's padding extra-field id


class ArtifactError(TccError):
    pass


@dataclass
class TensorSpec:
    name: str
    shape: tuple  # -1 for a dynamic dim; None (containers only) for an unknown rank
    element: str  # IR element type name: f32, bf16, i64, i1, ...
    # ("seq",), ("opt",), ("opt", "seq")...: a sequence (a list) or optional
    # (None or the value) around the tensor, outermost first (runtime/containers.py)
    container: tuple = ()
    # (n, "Gather node '...'"): an integer input whose values index a tensor
    # (an embedding's token ids) and must lie in [-n, n), ONNX's negative
    # indices included (dialects/transforms/index_bounds.py); () when none
    index_bound: tuple = ()

    @property
    def dtype(self) -> np.dtype:
        # cached: Session.run checks every input against it on every call
        dt = self.__dict__.get("_dtype")
        if dt is None:
            dt = self.__dict__["_dtype"] = np.dtype(to_numpy_dtype(parse_element_name(self.element)))
        return dt

    def to_json(self):
        d = {"name": self.name, "shape": None if self.shape is None else list(self.shape),
             "element": self.element, "dtype": str(self.dtype)}
        if self.container:
            d["container"] = list(self.container)
        if self.index_bound:
            d["index_bound"] = list(self.index_bound)
        return d

    @classmethod
    def from_json(cls, d):
        container = tuple(str(k) for k in d.get("container", ()))
        from .containers import valid_kind
        if not all(valid_kind(k) for k in container):
            raise ValueError(f"unknown container {list(container)} of '{d['name']}'")
        shape = None if d["shape"] is None and container else tuple(int(x) for x in d["shape"])
        bound = d.get("index_bound") or ()
        if bound:
            if not (isinstance(bound, list) and len(bound) == 2 and type(bound[0]) is int and bound[0] > 0
                    and isinstance(bound[1], str)):
                raise ValueError(f"'{d['name']}' has a malformed index_bound {bound!r}")
            bound = (bound[0], bound[1])
        return cls(str(d["name"]), shape, str(d["element"]), container, bound)


def _sha(data) -> str:
    return hashlib.sha256(data).hexdigest()


def pack_weights(weights):
    """[(name, array)] -> (bytes, index entries) with 64-byte aligned offsets."""
    chunks, index, off = [], [], 0
    for name, arr in weights:
        arr = np.ascontiguousarray(arr)
        pad = (-off) % ALIGN
        if pad:
            chunks.append(b"\0" * pad)
            off += pad
        data = arr.tobytes()
        index.append({"name": name, "offset": off, "nbytes": len(data), "shape": list(arr.shape),
                      "dtype": str(arr.dtype)})
        chunks.append(data)
        off += len(data)
    return b"".join(chunks), index


def write_artifact(path, *, inputs, outputs, host_object: bytes, weights, compile_info: dict):
    """Writes `path` atomically. `weights`: [(name, np.ndarray)] in the entry's order."""
    blob, index = pack_weights(weights)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "signature": {"inputs": [t.to_json() for t in inputs], "outputs": [t.to_json() for t in outputs]},
        "compile": compile_info,
        "weights": index,
        "plan": [{"kind": "call", "device": "host", "object": HOST_OBJECT, "entry": "tcc_main_graph",
                  "args": "inputs+outputs", "weights": "all", "workspace_bytes":
                      compile_info.get("workspace_bytes", 0)}],
    }
    return write_zip(path, manifest, {HOST_OBJECT: host_object}, blob)


STORE_ABOVE = 1 << 20  # bytes: members larger than this are stored, not deflated


def write_zip(path, manifest, members: dict, weights_blob: bytes):
    """The artifact file: manifest (with a size and hash per member), the
    members (deflated up to STORE_ABOVE bytes) and weights.bin (stored,
    64-byte aligned). Atomic."""
    manifest = dict(manifest)
    manifest["files"] = {n: {"size": len(b), "sha256": _sha(b)} for n, b in members.items()}
    manifest["files"][WEIGHTS] = {"size": len(weights_blob), "sha256": _sha(weights_blob)}
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise ArtifactError(f"{path}: directory {d} does not exist")
    with atomic_open(path) as f:
        with zipfile.ZipFile(f, "w") as z:
            z.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True), zipfile.ZIP_DEFLATED)
            for name, data in members.items():
                # large members are mostly packed float weights (an accelerator's
                # payload): deflate saves ~7 % of them and cost seconds per compile
                z.writestr(name, data, zipfile.ZIP_STORED if len(data) > STORE_ABOVE else zipfile.ZIP_DEFLATED)
            # Stored, not deflated, and 64-byte aligned in the file (padding in
            # the local header's extra field, as Android's zipalign does), so
            # the session maps the weights in place at their aligned offsets.
            zi = zipfile.ZipInfo(WEIGHTS, date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_STORED
            start = f.tell() + 30 + len(WEIGHTS) + 4
            zi.extra = _PAD_ID.to_bytes(2, "little") + ((-start) % ALIGN).to_bytes(2, "little") + \
                b"\0" * ((-start) % ALIGN)
            z.writestr(zi, weights_blob)
    return path


@dataclass
class Artifact:
    path: str
    manifest: dict
    host_object: bytes
    inputs: list
    outputs: list
    weights_offset: int    # file offset of weights.bin's bytes (stored member)
    weights_size: int
    members: dict = None   # every other member's bytes, verified against the manifest

    def weight_arrays(self):
        """The weights, memory-mapped read-only from the artifact, in entry order."""
        out = []
        if self.weights_size == 0:
            return [np.zeros(w["nbytes"], np.uint8) for w in self.manifest["weights"]]
        mm = np.memmap(self.path, dtype=np.uint8, mode="r", offset=self.weights_offset, shape=(self.weights_size,))
        for w in self.manifest["weights"]:
            out.append(mm[w["offset"]:w["offset"] + w["nbytes"]])
        return out


def _bad(path, why):
    return ArtifactError(f"{path}: not a valid tcc artifact ({why})")


def _check_manifest(path, m):
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise _bad(path, "manifest.json does not describe a tcc artifact")
    v = m.get("format_version")
    if v != FORMAT_VERSION:
        raise ArtifactError(f"{path}: artifact format version {v!r} is not supported by this tcc "
                            f"(expects {FORMAT_VERSION}); recompile the model")
    for key, typ in (("signature", dict), ("compile", dict), ("weights", list), ("plan", list), ("files", dict)):
        if key not in m:
            raise _bad(path, f"manifest.json has no '{key}'")
        if not isinstance(m[key], typ):
            raise _bad(path, f"manifest.json's '{key}' is not a{'n' if typ is list else ''} {typ.__name__}")
    target = m["compile"].get("target", {})
    if not isinstance(target, dict) or not isinstance(target.get("features", []), list) or \
            not all(isinstance(f, str) for f in target.get("features", [])):
        raise _bad(path, "manifest.json's compile target is malformed")
    try:
        ins = [TensorSpec.from_json(d) for d in m["signature"]["inputs"]]
        outs = [TensorSpec.from_json(d) for d in m["signature"]["outputs"]]
        for t in ins + outs:
            t.dtype  # noqa: B018 - validates the element name
        for w in m["weights"]:
            if not (isinstance(w["offset"], int) and isinstance(w["nbytes"], int) and w["offset"] >= 0
                    and w["nbytes"] >= 0):
                raise ValueError(f"weight {w.get('name')!r} has a bad offset or size")
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise _bad(path, f"malformed signature or weights index: {e}") from None
    return ins, outs


def check_cpu(path, manifest, host_features=None):
    """Refuses code built for CPU features this machine lacks."""
    need = manifest["compile"].get("target", {}).get("features", [])
    if host_features is None:
        from tcc.dialects.conversions.loop_to_native.target import host_features as hf
        host_features = hf()
    missing = sorted(set(need) - set(host_features))
    if missing:
        raise ArtifactError(f"{path}: compiled for CPU features this machine lacks: {', '.join(missing)} "
                            f"(built for {manifest['compile'].get('target', {}).get('cpu', '?')}); "
                            "recompile it here")


# Bounds on what a (possibly hostile) artifact can make the loader inflate into
# memory. The writer deflates only members up to STORE_ABOVE bytes (the rest
# are stored, so their size is bounded by the file's); the manifest of a model
# with 10,000 weights is ~1.5 MB.
MANIFEST_CAP = 16 << 20
DEFLATED_CAP = 64 << 20
MAX_MEMBERS = 4096


def _unsafe_name(name: str) -> bool:
    parts = name.replace("\\", "/").split("/")
    return (name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or ".." in parts
            or "\0" in name or name == "")


def _check_members(path, z, file_size):
    """Every member's name and sizes, from the central directory, before
    anything is inflated: no absolute or `..` names, no duplicates, no member
    inflating beyond its cap."""
    infos = z.infolist()
    if len(infos) > MAX_MEMBERS:
        raise _bad(path, f"{len(infos)} zip members (at most {MAX_MEMBERS})")
    seen = set()
    for i in infos:
        n = i.filename
        if _unsafe_name(n):
            raise _bad(path, f"member {n!r} has an absolute or '..' name")
        if n in seen:
            raise _bad(path, f"member {n!r} appears twice")
        seen.add(n)
        if i.compress_type == zipfile.ZIP_STORED:
            if i.file_size != i.compress_size or i.file_size > file_size:
                raise _bad(path, f"member {n!r}: stored size {i.file_size} does not fit the file")
        elif i.file_size > (MANIFEST_CAP if n == MANIFEST else DEFLATED_CAP):
            raise _bad(path, f"member {n!r} inflates to {i.file_size} bytes (at most "
                             f"{MANIFEST_CAP if n == MANIFEST else DEFLATED_CAP})")
    return seen


def _read_member(path, z, name, limit):
    """A member's bytes, read in chunks and stopped past `limit` (the central
    directory's size, already capped): a lying header cannot inflate more."""
    chunks, total = [], 0
    with z.open(name) as f:
        while True:
            c = f.read(min(1 << 20, limit + 1 - total))
            if not c:
                break
            chunks.append(c)
            total += len(c)
            if total > limit:
                raise _bad(path, f"member {name!r} inflates beyond its declared {limit} bytes")
    return b"".join(chunks)


def read_artifact(path, host_features=None) -> Artifact:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ArtifactError(f"{path}: no such file")
    try:
        with zipfile.ZipFile(path) as z:
            names = _check_members(path, z, os.path.getsize(path))
            for n in (MANIFEST, WEIGHTS):
                if n not in names:
                    raise _bad(path, f"missing {n}")
            try:
                m = json.loads(_read_member(path, z, MANIFEST, z.getinfo(MANIFEST).file_size).decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
                raise _bad(path, f"manifest.json is not JSON: {e}") from None
            ins, outs = _check_manifest(path, m)
            files = m["files"]
            if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
                raise _bad(path, "manifest.json's 'files' is not a table of members")
            unlisted = sorted(names - {MANIFEST} - set(files))
            if unlisted:
                raise _bad(path, f"member {unlisted[0]!r} is not listed in the manifest")
            members = {}
            for n, meta in files.items():
                if n == WEIGHTS:
                    continue
                if n not in names:
                    raise _bad(path, f"missing {n}")
                size = z.getinfo(n).file_size
                if size != meta.get("size"):
                    raise _bad(path, f"{n} is corrupt (size mismatch)")
                data = _read_member(path, z, n, size)
                if len(data) != meta.get("size") or _sha(data) != meta.get("sha256"):
                    raise _bad(path, f"{n} is corrupt (size or hash mismatch)")
                members[n] = data
            obj = members.get(HOST_OBJECT)
            info = z.getinfo(WEIGHTS)
            if info.file_size != files.get(WEIGHTS, {}).get("size"):
                raise _bad(path, f"{WEIGHTS} is corrupt (size mismatch)")
            if info.compress_type != zipfile.ZIP_STORED:
                raise _bad(path, f"{WEIGHTS} must be stored uncompressed")
            with z.open(WEIGHTS) as f:
                h = hashlib.sha256()
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    h.update(chunk)
            if h.hexdigest() != files[WEIGHTS].get("sha256"):
                raise _bad(path, f"{WEIGHTS} is corrupt (hash mismatch)")
            # The stored member's data starts after its local header.
            with open(path, "rb") as raw:
                raw.seek(info.header_offset)
                hdr = raw.read(30)
                if hdr[:4] != b"PK\x03\x04":
                    raise _bad(path, "bad zip local header")
                n, e = int.from_bytes(hdr[26:28], "little"), int.from_bytes(hdr[28:30], "little")
                data_off = info.header_offset + 30 + n + e
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, zlib.error) as e:
        raise _bad(path, f"bad zip: {e}") from None
    except OSError as e:
        raise ArtifactError(f"{path}: cannot read ({e.strerror or e})") from None
    for w in m["weights"]:
        if w["offset"] % ALIGN or w["offset"] + w["nbytes"] > info.file_size:
            raise _bad(path, f"weight {w.get('name')!r} lies outside weights.bin or is misaligned")
    check_cpu(path, m, host_features)
    return Artifact(path, m, obj, ins, outs, data_off, info.file_size, members)
