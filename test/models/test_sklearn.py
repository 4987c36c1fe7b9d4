"""scikit-learn models (random forest, gradient boosting, logistic
regression, SVMs, a ColumnTransformer pipeline) as users get them into ONNX (skl2onnx): trained on
seeded random data, converted to the ai.onnx.ml operators, run by tcc (the
ops run as host steps: runtime/host_ops/ml.py) and matched against
onnxruntime at two batch sizes: labels exactly, probabilities and
regression values to 1e-5 relative (float32 sums in another order)."""
import os

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="scikit-learn is in the test extra")
skl2onnx = pytest.importorskip("skl2onnx", reason="skl2onnx is in the test extra")
ort = pytest.importorskip("onnxruntime")

from skl2onnx.common.data_types import FloatTensorType  # noqa: E402
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, StandardScaler  # noqa: E402
from sklearn.svm import SVC, SVR  # noqa: E402

import tcc  # noqa: E402
from test.conftest import run_tool  # noqa: E402

FEATURES = 6
BATCHES = (1, 333)


def _data(rng, n, classes=3):
    x = rng.standard_normal((n, FEATURES)).astype(np.float32)
    x[:, -1] = rng.integers(0, 4, n)  # a categorical column (for the pipeline's one-hot encoder)
    y = (x[:, 0] + 0.5 * x[:, 1] * x[:, 2] + 0.3 * x[:, -1] > 0).astype(np.int64)
    if classes == 3:
        y += (x[:, 3] > 0.7).astype(np.int64)
    return x, y


def _onnx(model, options=None):
    return skl2onnx.to_onnx(model, initial_types=[("X", FloatTensorType([None, FEATURES]))],
                            options=options, target_opset={"": 17, "ai.onnx.ml": 3})


def _compare(onx, rng, tmp_path, classifier, atol=1e-6):
    path = str(tmp_path / "model.onnx")
    with open(path, "wb") as f:
        f.write(onx.SerializeToString())
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    sess = tcc.load(tcc.compile(path, output=str(tmp_path / "model.tcc")))
    for n in BATCHES:
        x, _ = _data(rng, n)
        want = ref.run(None, {"X": x})
        runs = [sess.run({"X": x})]
        if hasattr(sess, "run_generic") and not (classifier and isinstance(want[1], list)):
            # the shape-generic path (runtime/generic) runs the ml ops with the
            # same host kernels; a ZipMap's sequence of maps waits for its compile
            runs.append(sess.run_generic({"X": x}))
            assert runs[-1] is not None, "no shape-generic path"
        for got in runs:
            _check(got, want, classifier, atol)


def _check(got, want, classifier, atol):
    assert len(got) == len(want)
    if classifier:
        _assert_labels(got[0], want[0], want[1])
        if isinstance(want[1], list):  # ZipMap (skl2onnx's default): a dict per row, label -> probability
            assert isinstance(got[1], list) and len(got[1]) == len(want[1])
            for g, w in zip(got[1], want[1]):
                assert list(g) == list(w)  # the labels, in order
                np.testing.assert_allclose(list(g.values()), list(w.values()), rtol=1e-5, atol=atol)
        else:
            np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=atol)  # probabilities, scores
    else:
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def _assert_labels(got, want, want_proba):
    """Labels equal, except on a row whose two best classes tie in the
    reference's own probabilities (a forest's votes often do: 6 of 12 trees
    each; the sums' last bit then depends on the order of the additions, and
    either label is right)."""
    bad = np.flatnonzero(np.asarray(got) != np.asarray(want))
    if not len(bad):
        return
    proba = np.array([list(r.values()) for r in want_proba]) if isinstance(want_proba, list) else np.asarray(want_proba)
    if proba.ndim != 2 or proba.shape[1] < 2:
        np.testing.assert_array_equal(got, want)
    top2 = np.sort(proba[bad], axis=1)[:, -2:]
    ties = np.abs(top2[:, 1] - top2[:, 0]) <= 1e-6
    assert ties.all(), f"labels differ at rows {bad[~ties].tolist()}: {np.asarray(got)[bad[~ties]]} vs " \
                       f"{np.asarray(want)[bad[~ties]]}, not a tie of the reference's probabilities"


def test_random_forest_classifier(rng, tmp_path):
    x, y = _data(rng, 400)
    m = RandomForestClassifier(n_estimators=12, max_depth=7, random_state=int(rng.integers(1 << 30))).fit(x, y)
    _compare(_onnx(m, {id(m): {"zipmap": False}}), rng, tmp_path, True)


@pytest.mark.parametrize("labels", ["int", "str"])
def test_default_conversion_with_zipmap(labels, rng, tmp_path):
    """skl2onnx's default output: probabilities as a sequence of maps
    (ZipMap), integer or string class labels."""
    x, y = _data(rng, 400)
    if labels == "str":
        y = np.array(["cat", "dog", "emu"])[y]
    m = RandomForestClassifier(n_estimators=8, max_depth=6, random_state=int(rng.integers(1 << 30))).fit(x, y)
    _compare(_onnx(m), rng, tmp_path, True)
    # and through the CLI: the maps as JSON, label -> probability, like onnxruntime's
    xs, _ = _data(rng, 5)
    np.save(tmp_path / "x.npy", xs)
    proc = run_tool("tcc-run", str(tmp_path / "model.tcc"), "--input", f"X={tmp_path / 'x.npy'}",
                    "--output-dir", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    import json
    got = json.loads((tmp_path / "out" / "output_probability.json").read_text())
    want = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"X": xs})[1]
    assert [list(g) for g in got] == [[str(k) for k in w] for w in want]
    np.testing.assert_allclose([list(g.values()) for g in got], [list(w.values()) for w in want], rtol=1e-5, atol=1e-6)


def test_gradient_boosting_regressor(rng, tmp_path):
    x, _ = _data(rng, 400)
    y = x[:, 0] * 2 + np.sin(x[:, 1]) + 0.1 * rng.standard_normal(len(x))
    m = GradientBoostingRegressor(n_estimators=30, max_depth=3, random_state=int(rng.integers(1 << 30))).fit(x, y)
    _compare(_onnx(m), rng, tmp_path, False)


def test_logistic_regression(rng, tmp_path):
    x, y = _data(rng, 400)
    m = LogisticRegression(max_iter=500).fit(x, y)
    _compare(_onnx(m, {id(m): {"zipmap": False}}), rng, tmp_path, True)


def test_binary_logistic_regression(rng, tmp_path):
    x, y = _data(rng, 400, classes=2)
    m = LogisticRegression(max_iter=500).fit(x, y)
    _compare(_onnx(m, {id(m): {"zipmap": False}}), rng, tmp_path, True)


@pytest.mark.parametrize("kernel, classes", [("rbf", 3), ("linear", 3), ("rbf", 2)])
def test_svm_classifier(rng, tmp_path, kernel, classes):
    x, y = _data(rng, 300, classes)
    m = SVC(kernel=kernel).fit(x, y)
    # scores are decision values: sums over ~200 support vectors, which onnxruntime
    # accumulates in float32 (~1e-6 absolute off the exact sum; measured up to 1.5e-6)
    _compare(_onnx(m, {id(m): {"zipmap": False}}), rng, tmp_path, True, atol=1e-5)


def test_svm_regressor(rng, tmp_path):
    x, _ = _data(rng, 300)
    m = SVR(kernel="rbf").fit(x, x[:, 0] * 2 - x[:, 2])
    _compare(_onnx(m), rng, tmp_path, False)


def _pipeline(rng):
    x, y = _data(rng, 400)
    pre = ColumnTransformer([("num", StandardScaler(), list(range(FEATURES - 1))),
                             ("cat", OneHotEncoder(handle_unknown="ignore"), [FEATURES - 1])])
    clf = LogisticRegression(max_iter=500)
    return Pipeline([("pre", pre), ("clf", clf)]).fit(x, y), clf


def test_column_transformer_pipeline(rng, tmp_path):
    m, clf = _pipeline(rng)
    _compare(_onnx(m, {id(clf): {"zipmap": False}}), rng, tmp_path, True)


def test_pipeline_through_the_cli(rng, tmp_path):
    m, clf = _pipeline(rng)
    onx = _onnx(m, {id(clf): {"zipmap": False}})
    model = tmp_path / "pipe.onnx"
    model.write_bytes(onx.SerializeToString())
    x, _ = _data(rng, 57)
    np.save(tmp_path / "x.npy", x)
    r = run_tool("tcc", str(model), "-o", str(tmp_path / "pipe.tcc"))
    assert r.returncode == 0, r.stderr
    r = run_tool("tcc-run", str(tmp_path / "pipe.tcc"), "--input", f"X={tmp_path / 'x.npy'}",
                 "--output-dir", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    names = [o.name for o in onx.graph.output]
    want = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    np.testing.assert_array_equal(np.load(tmp_path / "out" / f"{names[0]}.npy"), want[0])
    np.testing.assert_allclose(np.load(tmp_path / "out" / f"{names[1]}.npy"), want[1], rtol=1e-5, atol=1e-6)
    assert os.path.getsize(tmp_path / "pipe.tcc") > 0
