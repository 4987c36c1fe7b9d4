"""When a gpu function runs eagerly, captures a CUDA graph, or replays one:
the policy alone (no GPU needed), with run/capture/replay recorded."""
import pytest

from tcc.accelerators.gpu import runtime as gpurt


class Buf:
    def __init__(self, ptr):
        self.ptr = ptr


class Recorder(gpurt.GpuFunction):
    def __init__(self, fail_capture=False):  # no module: only the policy runs
        self._graphs = gpurt.OrderedDict()
        self.calls, self.fail_capture = [], fail_capture

    def run(self, buffers, stream):
        self.calls.append(("run", tuple(b.ptr for b in buffers)))

    def capture(self, buffers, stream):
        self.calls.append(("capture", tuple(b.ptr for b in buffers)))
        if self.fail_capture:
            raise RuntimeError("operation not permitted when stream is capturing")
        return ("graph", tuple(b.ptr for b in buffers))

    def replay(self, graph, stream):
        self.calls.append(("replay", graph[1]))


@pytest.fixture(autouse=True)
def graphs_on(monkeypatch):
    monkeypatch.setattr(gpurt, "GRAPHS", True)


def test_eager_then_capture_then_replay():
    f, s, bufs = Recorder(), object(), [Buf(16), Buf(32)]
    for _ in range(4):
        f(bufs, s)
    # capturing records without running: the capturing call then replays
    assert [c[0] for c in f.calls] == ["run", "capture", "replay", "replay", "replay"]


def test_new_addresses_each_call_never_capture():
    f, s = Recorder(), object()
    for i in range(20):
        f([Buf(1000 + i), Buf(32)], s)
    assert {c[0] for c in f.calls} == {"run"}
    assert len(f._graphs) <= gpurt.GRAPH_CACHE


def test_a_refused_capture_stays_eager():
    f, s, bufs = Recorder(fail_capture=True), object(), [Buf(16)]
    for _ in range(4):
        f(bufs, s)
    assert [c[0] for c in f.calls] == ["run", "capture", "run", "run", "run"]


def test_graphs_off(monkeypatch):
    monkeypatch.setattr(gpurt, "GRAPHS", False)
    f, s, bufs = Recorder(), object(), [Buf(16)]
    for _ in range(3):
        f(bufs, s)
    assert {c[0] for c in f.calls} == {"run"}


def test_each_stream_has_its_own_graph():
    f, bufs = Recorder(), [Buf(16)]
    s1, s2 = object(), object()
    for s in (s1, s2, s1, s2, s1):
        f(bufs, s)
    assert [c[0] for c in f.calls] == ["run", "run", "capture", "replay", "capture", "replay", "replay"]
