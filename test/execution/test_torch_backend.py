"""torch.compile(model, backend="tcc") against eager PyTorch on fresh random
inputs: an MLP, a CNN and a transformer block; new input shapes through
tcc's run-time specialization (no Dynamo recompile per shape); a graph tcc
cannot take runs eagerly with a one-line warning."""
import logging

import pytest

torch = pytest.importorskip("torch", reason="the torch extra (pip install tcc[torch]) is not installed")
import torch.nn.functional as F  # noqa: E402

from tcc import torch_backend  # noqa: E402


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def graphs(monkeypatch):
    """The graphs tcc compiled (one per Dynamo compile that reached tcc)."""
    made = []
    real = torch_backend._TccGraph.__init__

    def spy(self, *a, **k):
        real(self, *a, **k)
        made.append(self)
    monkeypatch.setattr(torch_backend._TccGraph, "__init__", spy)
    return made


class Block(torch.nn.Module):
    """Pre-norm transformer encoder block: attention (4 heads) and a GELU MLP."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.n1, self.n2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.f1, self.f2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).split(d, dim=-1)
        q, k, v = [z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v)]
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1) @ v
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.f2(F.gelu(self.f1(self.n2(x))))


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


def cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, stride=2), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(16 * 3 * 3, 10))


def randomize(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
        for name, b in model.named_buffers():
            if "running_var" in name:
                b.copy_(torch.rand_like(b) + 0.5)
            elif "running_mean" in name:
                b.copy_(torch.randn_like(b))
    return model.eval()


@pytest.mark.parametrize("make, shape, maccel", [(mlp, (4, 64), []), (cnn, (2, 3, 16, 16), []),
                                                 (Block, (2, 10, 32), []), (cnn, (2, 3, 16, 16), ["cpu"]),
                                                 (Block, (2, 10, 32), ["cpu"])])
def test_matches_eager(make, shape, maccel, graphs, caplog):
    model = randomize(make())
    compiled = torch.compile(model, backend="tcc", options={"maccel": maccel})
    x = torch.randn(shape)
    with torch.no_grad(), caplog.at_level(logging.WARNING, "tcc.torch"):
        got, want = compiled(x), model(x)
    assert not caplog.records, caplog.text  # ran through tcc, not the eager fallback
    assert len(graphs) == 1
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_new_shapes_use_the_dynamic_path(graphs):
    model = randomize(Block())
    compiled = torch.compile(model, backend="tcc")
    counts = []
    with torch.no_grad():
        for b, t in [(2, 10), (2, 12), (3, 7), (4, 9), (5, 12), (3, 7)]:
            x = torch.randn(b, t, 32)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
            counts.append(len(graphs))
    # Dynamo compiles statically first and recompiles as it sees each dim
    # change (t, then b); once both are symbolic, every new shape is
    # specialized inside tcc's session, with no Dynamo recompile.
    assert counts[2:] == [counts[2]] * 4, counts
    last = graphs[-1].session
    assert type(last).__name__ == "SpecializingSession"
    assert len(last.specializations()) == 3, [s.input_signature for s in last.specializations()]


def test_changed_weights_compile_again(graphs):
    model = randomize(mlp())
    compiled = torch.compile(model, backend="tcc")
    x = torch.randn(4, 64)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        model[0].weight.mul_(-2.0)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def test_fallback_to_eager_with_one_line_warning(caplog):
    model = randomize(mlp())
    compiled = torch.compile(model, backend="tcc", options={"maccel": ["no-such-accelerator"]})
    x = torch.randn(4, 64)
    with torch.no_grad(), caplog.at_level(logging.WARNING, "tcc.torch"):
        torch.testing.assert_close(compiled(x), model(x))
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 1 and "eagerly" in msgs[0] and "no-such-accelerator" in msgs[0], msgs
    assert "\n" not in msgs[0]


def test_registered_by_entry_point():
    assert "tcc" in torch._dynamo.list_backends()


def test_unknown_option_is_refused():
    with pytest.raises(ValueError, match="unknown option"):
        torch_backend.tcc_backend(None, [], options={"mccael": ["cpu"]})
