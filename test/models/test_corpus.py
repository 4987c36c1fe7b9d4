"""The corpus of exporter-written models (test/models/corpus/, built by
build_corpus.py with torch, transformers and onnxscript; the tests need none
of them): each compiles once, with no flag and with --maccel=cpu, through the
user's path (tcc.compile + tcc.load), and matches onnxruntime at rtol 1e-3 /
atol 1e-4 on fresh random inputs at every input shape the manifest lists (two
or more for each dynamic model). Shapes an export cannot take are a one-line
error naming the node. One model also goes through the CLIs."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tcc
from tcc.model_report import CORPUS, compare, feeds, manifest, reference
from tcc.runtime.session import InputError

MODELS = sorted(manifest())


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))


def test_corpus_is_small_and_every_dynamic_model_runs_at_two_shapes():
    import onnx
    sizes = {n: os.path.getsize(os.path.join(CORPUS, n + ".onnx")) for n in MODELS}
    assert max(sizes.values()) < 4e6 and sum(sizes.values()) < 30e6, sizes
    for n, entry in manifest().items():
        m = onnx.load(os.path.join(CORPUS, n + ".onnx"))
        dynamic = any(not d.HasField("dim_value") for i in m.graph.input for d in i.type.tensor_type.shape.dim)
        shapes = {tuple(tuple(i["shapes"][k]) for i in entry["inputs"]) for k in range(len(entry["inputs"][0]["shapes"]))}
        assert len(shapes) >= (2 if dynamic else 1), n


@pytest.mark.parametrize("maccel", [(), ("cpu",)], ids=["host", "cpu"])
@pytest.mark.parametrize("name", MODELS)
def test_model_matches_onnxruntime(name, maccel, tmp_path, rng):
    entry = manifest()[name]
    path = os.path.join(CORPUS, name + ".onnx")
    sess = tcc.load(tcc.compile(path, maccel=list(maccel), output=str(tmp_path / "m.tcc")))
    ref = reference(path, entry)
    shapes = set()
    for k in range(len(entry["inputs"][0]["shapes"])):
        # The first run at a new shape runs the shape-generic path while the
        # specialization compiles in the background; after wait() the same
        # shape (new data: no new specialization) runs the specialized code.
        for step in ("first run", "specialized"):
            x = feeds(entry, k, rng, name=name)
            if step == "first run" and hasattr(sess, "run_generic"):
                # the generic path itself, whatever run() picked: every corpus
                # model has one (runtime/generic), roberta and the host-op and
                # two-phase ones included
                generic = sess.run_generic(x)
                assert generic is not None, f"{name}: no shape-generic path at {[v.shape for v in x.values()]}"
                ok, err = compare(generic, ref.run(None, x))
                assert ok, f"{name} generic at {[v.shape for v in x.values()]}: max abs error {err}"
            got, want = sess.run(x), ref.run(None, x)
            ok, err = compare(got, want)
            assert ok, f"{name} {step} at {[v.shape for v in x.values()]}: max abs error {err}"
            if hasattr(sess, "wait"):
                sess.wait()
        shapes.add(tuple(v.shape for v in x.values()))
    if hasattr(sess, "specializations"):
        assert len(sess.specializations()) == len(shapes)
    rejects = [i.get("rejects") for i in entry["inputs"]]
    if any(r is not None for r in rejects):
        bad = feeds(entry, 0, rng, [r if r is not None else i["shapes"][0]
                                   for r, i in zip(rejects, entry["inputs"])])
        with pytest.raises(Exception):
            ref.run(None, bad)  # the export itself cannot take it
        with pytest.raises(InputError, match=r"do not fit the model: node '[^']+'") as e:
            sess.run(bad)
        assert "\n" not in str(e.value)


def test_cli_compiles_and_runs_a_dynamic_export(tmp_path, rng):
    """tcc then tcc-run on the GPT-2 export, at a shape it was not traced at."""
    name = "gpt2_lm"
    entry = manifest()[name]
    bindir = os.path.dirname(sys.executable)
    out = tmp_path / "m.tcc"
    p = subprocess.run([os.path.join(bindir, "tcc"), "--maccel=cpu", os.path.join(CORPUS, name + ".onnx"),
                        "-o", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    x = feeds(entry, 1, rng)
    args = []
    for k, v in x.items():
        np.save(tmp_path / f"{k}.npy", v)
        args += ["--input", f"{k}={tmp_path / (k + '.npy')}"]
    p = subprocess.run([os.path.join(bindir, "tcc-run"), str(out), *args, "--output-dir", str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    files = sorted(os.listdir(tmp_path / "out"))
    want = reference(os.path.join(CORPUS, name + ".onnx")).run(None, x)
    assert len(files) == len(want)
    ok, err = compare([np.load(tmp_path / "out" / f) for f in files], want)
    assert ok, err
