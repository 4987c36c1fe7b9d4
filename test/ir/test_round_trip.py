"""print -> parse -> print is the identity for every ONNX backend node-test
model of the pinned onnx, and for real models built with onnx.helper."""
import functools
import warnings

import pytest

from tcc import samples
from tcc.dialects.ir import print_module, verify
from tcc.dialects.init_all import default_context
from tcc.dialects.onnx.importer import import_model

from .helpers import round_trip


@functools.lru_cache(maxsize=None)
def node_cases():
    import onnx.backend.test.loader as loader
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: c for c in loader.load_model_tests(kind="node")}


def test_node_suite_is_the_pinned_one():
    # onnx 1.23.2 generates 1,884 node cases; a different count means the pin moved.
    assert len(node_cases()) == 1884


# Chunks keep the item count small while every model is still checked.
CHUNKS = 16


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_node_models_round_trip(chunk):
    names = sorted(node_cases())[chunk::CHUNKS]
    ctx = default_context()
    failures = []
    for name in names:
        module = import_model(node_cases()[name].model, where=name)
        try:
            verify(module, ctx)
            text, back = round_trip(module, ctx)
            again = print_module(back)
            if again != text:
                failures.append(f"{name}: second print differs")
        except Exception as e:  # collect all failures of the chunk
            failures.append(f"{name}: {type(e).__name__}: {e}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("build", [samples.mlp, samples.cnn, samples.transformer,
                                   lambda: samples.resnet18(size=64, width=16)])
def test_real_models_round_trip(build):
    module = import_model(build())
    text, back = round_trip(module)
    assert print_module(back) == text
    assert "dense_resource<" in text  # weights are referenced, not inlined


def test_resources_written_beside_and_read_back(tmp_path):
    from tcc.dialects.ir import parse_module
    import numpy as np
    module = import_model(samples.mlp())
    path = str(tmp_path / "m.mlir")
    text = print_module(module, path=path)
    assert (tmp_path / "m.mlir.resources").exists()
    assert len(text) < 20000  # 100k weights stay out of the text
    back = parse_module(open(path).read(), path, default_context())
    for a, b in zip(module.walk(), back.walk()):
        for k, attr in a.attributes.items():
            if hasattr(attr, "table"):
                np.testing.assert_array_equal(attr.value, b.attributes[k].value)


def test_model_with_external_data(tmp_path, rng):
    """Initializers stored outside the .onnx file are loaded from beside it."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    model = samples.mlp(seed=int(rng.integers(1 << 30)))
    want = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    reference = ort.InferenceSession(model.SerializeToString())
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="mlp.weights",
              size_threshold=1024)
    assert (tmp_path / "mlp.weights").stat().st_size > 100_000
    module = import_model(str(path))
    text, back = round_trip(module)
    weights = [a.value for op in module.walk() for a in op.attributes.values() if hasattr(a, "table")]
    assert any(w.shape == (128, 784) for w in weights)
    for w in weights:
        assert any(w.shape == v.shape and np.array_equal(w, v) for v in want.values())
    # and it compiles and runs like the original
    import tcc
    sess = tcc.load(tcc.compile(str(path), output=str(tmp_path / "mlp.tcc")))
    x = rng.standard_normal((1, 784)).astype(np.float32)
    np.testing.assert_allclose(sess.run({"x": x})[0], reference.run(None, {"x": x})[0], rtol=1e-4, atol=1e-6)


def test_ir_written_through_a_symlink_keeps_its_constants_beside_the_text(tmp_path):
    """The text goes to the link's target (the link stays), and so does its
    .resources file; reading through the link or the target finds them."""
    import numpy as np
    from tcc.dialects.ir import parse_module
    module = import_model(samples.mlp())
    (tmp_path / "real").mkdir()
    (tmp_path / "links").mkdir()
    target, link = tmp_path / "real" / "m.mlir", tmp_path / "links" / "m.mlir"
    target.write_text("")
    link.symlink_to(target)
    print_module(module, path=str(link))
    assert link.is_symlink() and (tmp_path / "real" / "m.mlir.resources").exists()
    assert not (tmp_path / "links" / "m.mlir.resources").exists()
    want = [a.value for op in module.walk() for a in op.attributes.values() if hasattr(a, "table")]
    for path in (target, link):
        back = parse_module(path.read_text(), str(path), default_context())
        got = [a.value for op in back.walk() for a in op.attributes.values() if hasattr(a, "table")]
        assert len(got) == len(want) > 0
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
