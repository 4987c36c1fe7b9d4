"""The compile cache: compiled artifacts keyed by everything that decides
their code, shared by `tcc`, `tcc.compile` and run-time specialization.

A key covers the model's bytes (and its external data), every option that
changes the output, tcc's own code and each selected plugin's code (a hash of
their source files, not `__version__`, which stays 0.1.0 across changes to
the code generator), the host CPU (triple, name, enabled features) and each
selected accelerator's device (name and compute version, where it has one).

Entries live under `$TCC_CACHE_DIR` (default `~/.cache/tcc`) in
`artifacts/`, one `<key>.tcc` each. Writes go to a temporary file in the same
folder and are renamed into place, and a per-key lock file (flock) makes a
second process compiling the same model wait for the first and reuse its
result, so two compiles at once never see a partial entry. The folder is kept
under `TCC_CACHE_SIZE` bytes (default 2 GiB; `K`/`M`/`G` suffixes) by
removing the least recently used entries (a hit refreshes the entry's mtime).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
import threading

DEFAULT_SIZE = 2 << 30
# Source files whose bytes decide generated code (C kernels are built from
# them, Python emits the IR); data files such as examples are not hashed.
_CODE_SUFFIXES = (".py", ".c", ".h", ".cu", ".json")


_pinned = threading.local()


def cache_root() -> str:
    pinned = getattr(_pinned, "root", None)
    if pinned is not None:
        return pinned
    d = os.environ.get("TCC_CACHE_DIR") or os.path.join("~", ".cache", "tcc")
    return os.path.abspath(os.path.expanduser(d))


@contextlib.contextmanager
def pinned_root(root):
    """On this thread, the cache is `root` whatever TCC_CACHE_DIR says by
    now: a background specialization writes where its caller's key was made."""
    old = getattr(_pinned, "root", None)
    _pinned.root = root
    try:
        yield
    finally:
        _pinned.root = old


def artifacts_dir() -> str:
    return os.path.join(cache_root(), "artifacts")


def size_limit() -> int:
    raw = os.environ.get("TCC_CACHE_SIZE", "").strip()
    if not raw:
        return DEFAULT_SIZE
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(raw[-1].lower(), 1)
    try:
        return int(float(raw[:-1] if mult > 1 else raw) * mult)
    except ValueError:
        from tcc.dialects.ir.errors import TccError
        raise TccError(f"TCC_CACHE_SIZE={raw!r}: expected a byte count such as 500M or 2G") from None


def tree_digest(roots) -> str:
    """sha256 over the relative paths and bytes of every code file under the
    folders `roots` (sorted walk; caches, build outputs and hidden folders
    skipped)."""
    h = hashlib.sha256()
    for root in roots:
        root = os.path.abspath(root)
        files = []
        for dirpath, dirnames, names in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")) and d != "build")
            files.extend(os.path.join(dirpath, n) for n in names if n.endswith(_CODE_SUFFIXES))
        for path in sorted(files):
            h.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def _package_dirs(name):
    import importlib.util
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return sorted(set(spec.submodule_search_locations))
    return [spec.origin] if spec.origin else []


@functools.lru_cache(maxsize=None)
def tcc_code_digest() -> str:
    """tcc's own code: every subpackage's folder (they map onto separate
    top-level folders in a source checkout)."""
    roots = []
    for sub in ("tcc", "tcc.driver", "tcc.dialects", "tcc.runtime", "tcc.accelerators"):
        roots.extend(_package_dirs(sub))
    return tree_digest(sorted(set(roots)))


def _module_digest(module_name):
    top = module_name.split(".")[0]
    locs = _package_dirs(top)
    files = [p for p in locs if os.path.isfile(p)]
    h = hashlib.sha256(tree_digest([p for p in locs if os.path.isdir(p)]).encode())
    for p in files:
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def plugins_cacheable(maccel) -> bool:
    """False when an accelerator is registered in-process (`register_plugin`,
    tests and embedding): its behaviour is an object's state, not code on
    disk, so nothing could key it."""
    from tcc.accelerators.manager import _EXTRA
    return not any(n in _EXTRA for n in maccel)


@functools.lru_cache(maxsize=None)
def plugin_digest(name: str) -> str:
    """A selected accelerator's code: the package its entry point comes from,
    plus its distribution's version."""
    from tcc.accelerators.manager import installed_entry_points
    ep = installed_entry_points().get(name)
    if ep is None:
        return f"{name} not installed"
    dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else ""
    return hashlib.sha256(f"{name} {ep.value} {dist} {_module_digest(ep.module)}".encode()).hexdigest()


@functools.lru_cache(maxsize=None)
def host_target() -> tuple:
    from tcc.dialects.conversions.loop_to_native import host_cpu
    triple, cpu, feats = host_cpu()
    return triple, cpu, tuple(feats)


def _device_identity(name):
    """Name and compute version of the accelerator's first device, when its
    device type is registered and answers (a GPU); empty otherwise."""
    try:
        from tcc.runtime.device import default_registry
        if name not in default_registry:
            return []
        dev = default_registry.get_device(name, 0)
        return [dev.get_attr("device_name"), dev.get_attr("compute_version")]
    except Exception:  # noqa: BLE001 - no device here: the key just has none
        return []


def environment(maccel=()) -> dict:
    """What decides the code besides the model and options."""
    return {"tcc": tcc_code_digest(), "target": list(host_target()),
            "plugins": {n: [plugin_digest(n), *_device_identity(n)] for n in maccel}}


def model_bytes(model) -> bytes:
    """The bytes a model key hashes: a path's file (and its external data
    files), or a ModelProto serialized deterministically."""
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        with open(path, "rb") as f:
            data = f.read()
        if b"location" not in data:  # no external data possible
            return data
        h = hashlib.sha256(data)
        for loc in _external_files(data):
            full = os.path.join(os.path.dirname(os.path.abspath(path)), loc)
            h.update(loc.encode() + b"\0")
            if os.path.isfile(full):
                with open(full, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 24), b""):
                        h.update(chunk)
        return h.digest()
    return model.SerializeToString(deterministic=True)


def _external_files(data):
    import onnx
    from onnx.external_data_helper import _get_all_tensors
    try:
        m = onnx.load_model_from_string(data)
    except Exception:  # noqa: BLE001 - the importer reports a bad model
        return []
    locs = set()
    for t in _get_all_tensors(m):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            locs.update(e.value for e in t.external_data if e.key == "location")
    return sorted(locs)


# TCC_* settings that only say where things go or how a run is timed; every
# other TCC_* variable (TCC_CPU_ISA picks a kernel build, TCC_GPU_CONFORMANCE
# forces placement, ...) can change what a compile produces, so it is keyed.
_KEY_IGNORES_ENV = {"TCC_CACHE_DIR", "TCC_CACHE_SIZE", "TCC_NUM_THREADS", "TCC_TEST_SEED", "TCC_HOOK_TIMEOUT"}


def compile_env() -> dict:
    """The TCC_* environment settings a compile can depend on."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("TCC_") and k not in _KEY_IGNORES_ENV}


def make_key(kind: str, payload: bytes, options: dict, maccel=()) -> str:
    """The cache key of compiling `payload` (model or IR bytes) with `options`
    (JSON-able) for the accelerators `maccel`."""
    h = hashlib.sha256(kind.encode() + b"\0")
    h.update(hashlib.sha256(payload).digest())
    h.update(json.dumps({"options": options, "env": environment(tuple(maccel)), "settings": compile_env()},
                        sort_keys=True,
                        default=str).encode())
    return h.hexdigest()


def entry_path(key: str) -> str:
    return os.path.join(artifacts_dir(), key + ".tcc")


def lookup(key: str):
    """The cached artifact's path, refreshed as recently used, or None."""
    path = entry_path(key)
    try:
        os.utime(path)
    except OSError:
        return None
    return path


@contextlib.contextmanager
def _locked(lock_file):
    import fcntl
    with lock_file as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


_warned, _warned_lock = set(), threading.Lock()


def private_dir(error):
    """Where the cache folder cannot be used (TCC_CACHE_DIR a file, a
    read-only home, a full disk): a private folder removed at exit, as with
    --no-cache; the first time in a process one line says why."""
    import atexit
    import shutil
    import sys
    root = cache_root()
    with _warned_lock:
        first = root not in _warned
        _warned.add(root)
    if first:
        sys.stderr.write(f"tcc: warning: the compile cache {root} cannot be used "
                         f"({getattr(error, 'strerror', None) or error}); compiling without it (TCC_CACHE_DIR)\n")
    d = tempfile.mkdtemp(prefix="tcc-uncached-")
    atexit.register(shutil.rmtree, d, True)
    return d


def _uncached(build, error):
    path = os.path.join(private_dir(error), "artifact.tcc")
    build(path)
    return path


def remove(key: str):
    """Drops an entry (one that failed to load)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(entry_path(key))


def get_or_build(key: str, build):
    """(path of the cached artifact for `key`, whether it was a hit). On a
    miss `build(tmp_path)` writes the artifact, which is renamed into place."""
    path = lookup(key)
    if path is not None:
        return path, True
    try:
        os.makedirs(artifacts_dir(), exist_ok=True)
        lock_file = open(os.path.join(artifacts_dir(), key + ".lock"), "a")
    except OSError as e:
        return _uncached(build, e), False
    with _locked(lock_file):
        path = lookup(key)  # another process may have built it while we waited
        if path is not None:
            return path, True
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".tcc", dir=artifacts_dir())
        except OSError as e:
            return _uncached(build, e), False
        os.close(fd)
        try:
            build(tmp)
            os.replace(tmp, entry_path(key))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    evict(keep=key)
    return entry_path(key), False


def evict(limit=None, keep=None):
    """Removes least recently used entries until the folder fits in `limit`
    bytes (never the entry `keep`, just written)."""
    limit = size_limit() if limit is None else limit
    d = artifacts_dir()
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return
    entries = []
    for n in names:
        if not n.endswith(".tcc") or n.startswith(".tmp-"):
            continue
        try:
            st = os.stat(os.path.join(d, n))
        except FileNotFoundError:
            continue
        entries.append((st.st_mtime, st.st_size, n))
    total = sum(e[1] for e in entries)
    for _, size, n in sorted(entries):
        if total <= limit:
            break
        if keep is not None and n == keep + ".tcc":
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(d, n))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(d, n[:-4] + ".lock"))
        total -= size
