"""NonMaxSuppression's host kernel (runtime/host_ops/detection.py, the
selection in runtime/native/nms.c) against onnxruntime on fresh random
boxes and scores: both box encodings, with and without a score threshold,
every batch / class / box count from 1, max_output_boxes_per_class from 0
past the box count, absent optional inputs; the selected indices must be
identical (continuous random scores: no ties). Through tcc.compile too,
between compiled stages (the boxes come out of a native stage)."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc
from tcc.runtime.host_ops import HostOpError, Node
from tcc.runtime.host_ops.detection import non_max_suppression

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _boxes(rng, nb, n, center):
    """Boxes clustered enough that many overlap (a uniform spread would rarely suppress)."""
    c = rng.uniform(0, 4, (nb, n, 2)).astype(np.float32)
    s = rng.uniform(0.2, 2.5, (nb, n, 2)).astype(np.float32)
    if center:
        return np.concatenate([c, s], axis=2)
    lo, hi = c - s / 2, c + s / 2
    b = np.stack([lo[..., 1], lo[..., 0], hi[..., 1], hi[..., 0]], axis=2)
    flip = rng.random((nb, n)) < 0.3  # either corner may come first
    b[flip] = b[flip][:, [2, 3, 0, 1]]
    return b.astype(np.float32)


def _model(n_inputs, center, dynamic=True):
    names = ["boxes", "scores", "max_out", "iou", "thr"][:n_inputs]
    dims = (["b", "n", 4], ["b", "c", "n"]) if dynamic else (None, None)
    ins = [helper.make_tensor_value_info("boxes", F, dims[0]), helper.make_tensor_value_info("scores", F, dims[1])]
    ins += [helper.make_tensor_value_info(n, I64 if n == "max_out" else F, [1]) for n in names[2:]]
    node = helper.make_node("NonMaxSuppression", names, ["sel"], center_point_box=center)
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("sel", I64, ["k", 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _feeds(rng, nb, nc, n, center, max_out, iou, thr, n_inputs=5):
    f = {"boxes": _boxes(rng, nb, n, center), "scores": rng.random((nb, nc, n)).astype(np.float32),
         "max_out": np.array([max_out], np.int64), "iou": np.array([iou], np.float32),
         "thr": np.array([thr], np.float32)}
    return {k: f[k] for k in list(f)[:n_inputs]}


CASES = [  # batches, classes, boxes, center_point_box, max_out, iou, score threshold, inputs given
    (1, 1, 1, 0, 5, 0.5, 0.0, 5), (1, 3, 64, 0, 5, 0.5, 0.3, 5), (2, 4, 100, 1, 10, 0.4, 0.2, 5),
    (3, 2, 37, 0, 100, 0.0, 0.5, 5), (1, 2, 50, 1, 3, 1.0, 0.1, 5), (2, 1, 200, 0, 1000, 0.6, 0.0, 4),
    (1, 5, 9, 1, 0, 0.5, 0.1, 5), (2, 2, 30, 0, 4, 0.5, 0.0, 2), (1, 1, 80, 0, 80, 0.3, 0.9, 5),
]


@pytest.mark.parametrize("nb,nc,n,center,max_out,iou,thr,n_inputs", CASES)
def test_kernel_matches_onnxruntime(rng, nb, nc, n, center, max_out, iou, thr, n_inputs):
    model = _model(n_inputs, center)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    node = Node(model.graph.node[0])
    for _ in range(3):
        feeds = _feeds(rng, nb, nc, n, center, max_out, iou, thr, n_inputs)
        want = ref.run(None, feeds)[0]
        got = non_max_suppression(node, [feeds.get(k) for k in ["boxes", "scores", "max_out", "iou", "thr"]])[0]
        assert got.dtype == np.int64 and got.shape == (len(want), 3)
        np.testing.assert_array_equal(got, want)


def test_suppression_happens(rng):
    """The cases above do exercise the IoU test: some boxes are dropped."""
    feeds = _feeds(rng, 1, 1, 64, 0, 64, 0.3, 0.0)
    node = Node(_model(5, 0).graph.node[0])
    got = non_max_suppression(node, list(feeds.values()))[0]
    assert 0 < len(got) < 64


@pytest.mark.parametrize("center", [0, 1])
def test_between_compiled_stages(rng, tmp_path, center):
    """Boxes and scores computed by a compiled stage, the selection and the
    kept boxes gathered by the next one (the shape of the detection corpus
    model), at two input shapes."""
    nodes = [helper.make_node("Mul", ["x", "scale"], ["boxes"]),
             helper.make_node("Sigmoid", ["logits"], ["scores"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"], ["sel"],
                              center_point_box=center),
             helper.make_node("Cast", ["sel"], ["self"], to=F),
             helper.make_node("Add", ["self", "self"], ["y"]),
             helper.make_node("Gather", ["sel", "cols"], ["bi"], axis=1),
             helper.make_node("GatherND", ["boxes", "bi"], ["kept"])]
    inits = [numpy_helper.from_array(np.array(1.5, np.float32), "scale"),
             numpy_helper.from_array(np.array([4], np.int64), "max_out"),
             numpy_helper.from_array(np.array([0.45], np.float32), "iou"),
             numpy_helper.from_array(np.array([0.25], np.float32), "thr"),
             numpy_helper.from_array(np.array([0, 2], np.int64), "cols")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["b", "n", 4]),
                                       helper.make_tensor_value_info("logits", F, ["b", "c", "n"])],
                          [helper.make_tensor_value_info("y", F, ["k", 3]),
                           helper.make_tensor_value_info("kept", F, ["k", 4])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    sess = tcc.load(tcc.compile(model, output=str(tmp_path / "nms.tcc")))
    for nb, nc, n in [(1, 3, 40), (2, 2, 25), (1, 3, 40)]:
        x = _boxes(rng, nb, n, center) / np.float32(1.5)
        feeds = {"x": x, "logits": rng.standard_normal((nb, nc, n)).astype(np.float32)}
        for got, want in zip(sess.run(feeds), ref.run(None, feeds)):
            np.testing.assert_array_equal(got, want)
    # the suffix takes the boxes the prefix computed rather than computing them again
    staged = sess.specializations()[0]
    names = staged.suffix.input_names
    assert any(n.startswith("stage_operand_") for n in names) and "x" not in names, names


def test_parameters_refilled_in_place_are_read_again(rng, tmp_path):
    """The kernel parses constant parameters once (read-only arrays a staged
    run holds); parameters the caller passes are read on every call, even
    when the same arrays are refilled in place between calls: directly and
    through a compiled model taking them as inputs."""
    model = _model(5, 0)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    sess = tcc.load(tcc.compile(model, output=str(tmp_path / "nms.tcc")))
    node = Node(model.graph.node[0])
    feeds = _feeds(rng, 1, 3, 60, 0, 5, 0.5, 0.2)
    counts = set()
    for max_out, iou, thr in [(5, 0.5, 0.2), (2, 0.5, 0.2), (9, 0.3, 0.6), (9, 0.7, 0.0), (5, 0.5, 0.2)]:
        feeds["max_out"][0], feeds["iou"][0], feeds["thr"][0] = max_out, iou, thr
        want = ref.run(None, feeds)[0]
        counts.add(len(want))
        got = non_max_suppression(node, [feeds[k] for k in ["boxes", "scores", "max_out", "iou", "thr"]])[0]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(sess.run(feeds)[0], want)
    assert len(counts) >= 3  # the parameters did change the selection


def test_bad_shapes_are_one_line_errors(rng):
    node = Node(_model(5, 0).graph.node[0])
    feeds = _feeds(rng, 1, 2, 10, 0, 3, 0.5, 0.1)
    with pytest.raises(HostOpError, match=r"^node '.*' \(NonMaxSuppression\): scores has shape \[1, 2, 9\]"):
        non_max_suppression(node, [feeds["boxes"], feeds["scores"][:, :, :9], feeds["max_out"], None, None])
    with pytest.raises(HostOpError, match=r"boxes has shape \[1, 10, 3\]"):
        non_max_suppression(node, [feeds["boxes"][:, :, :3], feeds["scores"], None, None, None])


@pytest.mark.parametrize("center", [0, 1])
def test_tied_scores_match_onnxruntime(rng, center):
    """Scores from a few values (and -0.0 beside 0.0, with a threshold below
    both): equal scores are taken lower box index first, as onnxruntime does
    (the kernel orders candidates by one integer made of score and index)."""
    model = _model(5, center)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    node = Node(model.graph.node[0])
    for i in range(6):
        feeds = _feeds(rng, 2, 3, 50, center, 7, 0.5, -1.0 if i % 2 else 0.2)
        feeds["scores"] = (rng.integers(0, 5, feeds["scores"].shape) / 4).astype(np.float32)
        feeds["scores"][rng.random(feeds["scores"].shape) < 0.2] = -0.0
        want = ref.run(None, feeds)[0]
        got = non_max_suppression(node, [feeds[k] for k in ["boxes", "scores", "max_out", "iou", "thr"]])[0]
        np.testing.assert_array_equal(got, want)


def test_repeated_calls_follow_every_change(rng):
    """With constant parameters (read-only arrays owning their memory, as a
    staged run holds them) a call reuses what the last one checked; a call
    whose boxes or scores differ in shape, dtype or layout still gets the
    full checks and a right answer."""
    model = _model(5, 0)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    node = Node(model.graph.node[0])
    consts = [np.array([4], np.int64), np.array([0.5], np.float32), np.array([0.2], np.float32)]
    for c in consts:
        c.flags.writeable = False

    def check(boxes, scores):
        want = ref.run(None, {"boxes": np.ascontiguousarray(boxes, np.float32),
                              "scores": np.ascontiguousarray(scores, np.float32), "max_out": consts[0],
                              "iou": consts[1], "thr": consts[2]})[0]
        np.testing.assert_array_equal(non_max_suppression(node, [boxes, scores, *consts])[0], want)

    f = _feeds(rng, 1, 3, 40, 0, 4, 0.5, 0.2)
    check(f["boxes"], f["scores"])
    check(f["boxes"], f["scores"])
    assert "fast" in node.cache  # the second call took the short path
    g = _feeds(rng, 2, 2, 30, 0, 4, 0.5, 0.2)
    check(g["boxes"], g["scores"])                                    # new shapes
    wide = _feeds(rng, 1, 3, 80, 0, 4, 0.5, 0.2)
    check(wide["boxes"][:, ::2], wide["scores"][:, :, ::2])           # strided views of the first shapes
    check(f["boxes"].astype(np.float64), f["scores"])                 # another dtype
    with pytest.raises(HostOpError, match=r"boxes has shape \[1, 40, 3\]"):
        non_max_suppression(node, [f["boxes"][:, :, :3], f["scores"], *consts])
