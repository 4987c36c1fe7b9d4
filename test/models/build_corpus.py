"""Builds the corpus of exporter-written models in test/models/corpus/.

Each model is made the way a user makes it: a transformers config (tiny: two
layers, small hidden sizes) or a hand-written torch module, random weights from
a fixed seed, exported by the exporter users meet for that family (the dynamo
exporter, torch.onnx.export(..., dynamo=True), is torch's default; the
TorchScript one, dynamo=False, is what older recipes and most hubs' RoBERTa /
T5 exports use), with dynamic batch and sequence dims where the family has
them. The .onnx files are committed, so the tests need no torch; only this
script does. Versions it was run with (pin them to rebuild byte-for-byte):

    pip install torch==2.13.0 transformers==5.24.0 onnxscript==0.7.2

Run: python test/models/build_corpus.py [family ...]   (no argument: all)
Every model's inputs are listed in corpus/manifest.json: the shapes the test
runs at (two or more for dynamic models), the dtypes, and the value range of
integer inputs (token ids within the vocabulary).
"""
from __future__ import annotations

import json
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
SEED = 1234
BUILDERS = {}


def builder(fn):
    BUILDERS[fn.__name__] = fn
    return fn


def _torch():
    import torch
    torch.manual_seed(SEED)
    return torch


class _Logits:
    """Wraps a transformers model so the export returns plain tensors."""

    def __new__(cls, model, key="logits", n_args=1):
        import torch

        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def run(self, *args, **kw):
                if _takes_cache(model):
                    kw["use_cache"] = False
                out = self.m(*args, **kw)
                return out[key] if isinstance(key, str) else tuple(out[k] for k in key)

        class W1(W):
            def forward(self, a):
                return self.run(a)

        class W2(W):
            def forward(self, a, b):
                return self.run(a, attention_mask=b)
        return (W2 if n_args == 2 else W1)().eval()


def _takes_cache(model):
    import inspect
    return "use_cache" in inspect.signature(model.forward).parameters


def export(name, module, args, input_names, output_names, dynamic, shapes, dynamo=True, ranges=None, rejects=None):
    """dynamic: {input name: {axis: dim name}}; shapes: the input shapes the
    test runs at ({input name: [shape, shape, ...]}); rejects: shapes the
    export cannot take (onnxruntime fails there too), which must be a one-line
    error naming the node."""
    torch = _torch()
    path = os.path.join(CORPUS, name + ".onnx")
    module.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if dynamo:
            dyn = {n: {ax: torch.export.Dim.DYNAMIC for ax in axes} for n, axes in dynamic.items()}
            prog = torch.onnx.export(module, tuple(args), input_names=input_names, output_names=output_names,
                                     dynamic_shapes=tuple(dyn.get(n) for n in input_names), dynamo=True,
                                     optimize=True, verbose=False)
            prog.save(path, external_data=False)
        else:
            torch.onnx.export(module, tuple(args), path, input_names=input_names, output_names=output_names,
                              dynamic_axes={n: dict(axes) for n, axes in dynamic.items()}, dynamo=False,
                              opset_version=17)
    import onnx
    m = onnx.load(path)
    onnx.checker.check_model(m)
    ins = []
    for i, n in enumerate(input_names):
        a = args[i]
        ent = {"name": n, "dtype": str(a.dtype).replace("torch.", ""), "shapes": shapes[n]}
        if ranges and n in ranges:
            ent["range"] = ranges[n]
        if rejects and n in rejects:
            ent["rejects"] = rejects[n]
        ins.append(ent)
    _record(name, {"inputs": ins, "exporter": "dynamo" if dynamo else "torchscript"})
    print(f"{name}: {os.path.getsize(path) / 1e6:.2f} MB")


def _record(name, entry):
    """Sets (or, with entry None, removes) a model's manifest entry."""
    mpath = os.path.join(CORPUS, "manifest.json")
    man = json.load(open(mpath)) if os.path.exists(mpath) else {}
    man[name] = entry
    if entry is None:
        del man[name]
    with open(mpath, "w") as f:
        json.dump(dict(sorted(man.items())), f, indent=1)
        f.write("\n")


VOCAB = 512
SEQ_SHAPES = [[2, 16], [3, 7]]


def _ids(torch, shape=(2, 16)):
    return torch.randint(0, VOCAB, shape, dtype=torch.int64)


@builder
def gpt2_lm():
    """GPT-2 with an attention mask input: the causal mask is built at run
    time from Shape/Range/LessOrEqual/Where (dynamo)."""
    torch = _torch()
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4)
    m = _Logits(GPT2LMHeadModel(cfg), n_args=2)
    ids = _ids(torch)
    export("gpt2_lm", m, [ids, torch.ones_like(ids)], ["input_ids", "attention_mask"], ["logits"],
           {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}},
           {"input_ids": SEQ_SHAPES, "attention_mask": SEQ_SHAPES},
           ranges={"input_ids": [0, VOCAB], "attention_mask": [1, 2]})


def _causal_lm(name, config_cls, model_cls, **cfg):
    torch = _torch()
    config = config_cls(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=128, **cfg)
    export(name, _Logits(model_cls(config)), [_ids(torch)], ["input_ids"], ["logits"],
           {"input_ids": {0: "batch", 1: "seq"}}, {"input_ids": SEQ_SHAPES}, ranges={"input_ids": [0, VOCAB]})


@builder
def llama():
    """Llama-style decoder: RMSNorm, rotary embeddings, SiLU-gated MLP, causal mask (dynamo)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    _causal_lm("llama", LlamaConfig, LlamaForCausalLM, num_key_value_heads=4)


@builder
def qwen2():
    """Qwen2: grouped-query attention (4 query heads over 2 key/value heads), dynamo."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    _causal_lm("qwen2", Qwen2Config, Qwen2ForCausalLM, num_key_value_heads=2)


@builder
def roberta():
    """RoBERTa encoder through the TorchScript exporter, dynamic batch and sequence."""
    torch = _torch()
    from transformers import RobertaConfig, RobertaModel
    cfg = RobertaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=80)
    m = _Logits(RobertaModel(cfg), "last_hidden_state", n_args=2)
    ids = _ids(torch)
    export("roberta", m, [ids, torch.ones_like(ids)], ["input_ids", "attention_mask"], ["hidden"],
           {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}},
           {"input_ids": SEQ_SHAPES, "attention_mask": SEQ_SHAPES}, dynamo=False,
           ranges={"input_ids": [3, VOCAB], "attention_mask": [1, 2]})


@builder
def t5_encoder():
    """T5 encoder (TorchScript exporter): ConstantOfShape, relative-position buckets."""
    torch = _torch()
    from transformers import T5Config, T5EncoderModel
    cfg = T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)
    m = _Logits(T5EncoderModel(cfg), "last_hidden_state")
    export("t5_encoder", m, [_ids(torch)], ["input_ids"], ["hidden"], {"input_ids": {0: "batch", 1: "seq"}},
           {"input_ids": SEQ_SHAPES}, dynamo=False, ranges={"input_ids": [0, VOCAB]})


@builder
def bart():
    """BART: the encoder, and one decoder step over the encoder's states (dynamo)."""
    torch = _torch()
    from transformers import BartConfig, BartModel
    cfg = BartConfig(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                     max_position_embeddings=64)
    model = BartModel(cfg).eval()
    enc = _Logits(model.get_encoder(), "last_hidden_state")
    ids = _ids(torch)
    export("bart_encoder", enc, [ids], ["input_ids"], ["hidden"], {"input_ids": {0: "batch", 1: "seq"}},
           {"input_ids": SEQ_SHAPES}, ranges={"input_ids": [0, VOCAB]})

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dec = model.get_decoder()

        def forward(self, dec_ids, enc_states):
            return self.dec(input_ids=dec_ids, encoder_hidden_states=enc_states, use_cache=False).last_hidden_state
    states = torch.randn(2, 16, 64)
    export("bart_decoder_step", Step(), [_ids(torch, (2, 1)), states], ["decoder_input_ids", "encoder_states"],
           ["hidden"], {"decoder_input_ids": {0: "batch"}, "encoder_states": {0: "batch", 1: "seq"}},
           {"decoder_input_ids": [[2, 1], [3, 1]], "encoder_states": [[2, 16, 64], [3, 7, 64]]},
           ranges={"decoder_input_ids": [0, VOCAB]})


@builder
def clip():
    """CLIP: the text tower (dynamic batch and sequence) and the vision tower (dynamic batch)."""
    torch = _torch()
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPVisionConfig, CLIPVisionModel
    text = CLIPTextModel(CLIPTextConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, max_position_embeddings=32, eos_token_id=2))
    export("clip_text", _Logits(text, "pooler_output"), [_ids(torch)], ["input_ids"], ["pooled"],
           {"input_ids": {0: "batch", 1: "seq"}}, {"input_ids": SEQ_SHAPES}, ranges={"input_ids": [0, VOCAB]})
    vis = CLIPVisionModel(CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                           num_attention_heads=4, image_size=32, patch_size=8))
    export("clip_vision", _Logits(vis, "pooler_output"), [torch.randn(2, 3, 32, 32)], ["pixel_values"], ["pooled"],
           {"pixel_values": {0: "batch"}}, {"pixel_values": [[2, 3, 32, 32], [1, 3, 32, 32]]})


@builder
def deit():
    """DeiT image classifier (dynamic batch), dynamo."""
    torch = _torch()
    from transformers import DeiTConfig, DeiTForImageClassification
    cfg = DeiTConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     image_size=32, patch_size=8, num_labels=10)
    export("deit", _Logits(DeiTForImageClassification(cfg)), [torch.randn(2, 3, 32, 32)], ["pixel_values"],
           ["logits"], {"pixel_values": {0: "batch"}}, {"pixel_values": [[2, 3, 32, 32], [3, 3, 32, 32]]})


@builder
def wav2vec2():
    """Wav2Vec2: 1-D conv feature extractor + transformer, dynamic batch and audio length (dynamo)."""
    torch = _torch()
    from transformers import Wav2Vec2Config, Wav2Vec2Model
    cfg = Wav2Vec2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                         num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, do_stable_layer_norm=True,
                         feat_extract_norm="layer")
    m = _Logits(Wav2Vec2Model(cfg), "last_hidden_state")
    export("wav2vec2", m, [torch.randn(2, 800)], ["audio"], ["hidden"], {"audio": {0: "batch", 1: "samples"}},
           {"audio": [[2, 800], [1, 1200]]})


@builder
def efficientnet():
    """EfficientNet-style CNN: SiLU, squeeze-excite, depthwise convs (dynamo, dynamic batch)."""
    torch = _torch()
    nn = torch.nn

    class SE(nn.Module):
        def __init__(self, c, r=4):
            super().__init__()
            self.f = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, c // r, 1), nn.SiLU(),
                                   nn.Conv2d(c // r, c, 1), nn.Sigmoid())

        def forward(self, x):
            return x * self.f(x)

    class MBConv(nn.Module):
        def __init__(self, cin, cout, stride, expand=4):
            super().__init__()
            mid = cin * expand
            self.f = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU(),
                                   nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid),
                                   nn.SiLU(), SE(mid), nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.res = stride == 1 and cin == cout

        def forward(self, x):
            y = self.f(x)
            return x + y if self.res else y

    net = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.SiLU(), MBConv(16, 16, 1),
                        MBConv(16, 24, 2), MBConv(24, 24, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 10))
    _randomize_bn(net)
    export("efficientnet", net, [torch.randn(2, 3, 32, 32)], ["image"], ["logits"], {"image": {0: "batch"}},
           {"image": [[2, 3, 32, 32], [1, 3, 32, 32]]})


def _randomize_bn(net):
    import torch
    for mod in net.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 1.5)


@builder
def shufflenet():
    """ShuffleNet-style unit: grouped 1x1 convs, channel shuffle (Reshape/Transpose/Reshape), dynamo."""
    torch = _torch()
    nn = torch.nn

    class Unit(nn.Module):
        def __init__(self, c, g):
            super().__init__()
            self.g = g
            self.a = nn.Sequential(nn.Conv2d(c, c, 1, groups=g, bias=False), nn.BatchNorm2d(c), nn.ReLU())
            self.d = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, groups=c, bias=False), nn.BatchNorm2d(c))
            self.b = nn.Sequential(nn.Conv2d(c, c, 1, groups=g, bias=False), nn.BatchNorm2d(c))

        def forward(self, x):
            y = self.a(x)
            n, c, h, w = y.shape
            y = y.view(n, self.g, c // self.g, h, w).transpose(1, 2).reshape(n, c, h, w)
            return torch.relu(x + self.b(self.d(y)))

    net = nn.Sequential(nn.Conv2d(3, 24, 3, 2, 1), Unit(24, 3), Unit(24, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(24, 10))
    _randomize_bn(net)
    export("shufflenet", net, [torch.randn(2, 3, 32, 32)], ["image"], ["logits"],
           {"image": {0: "batch", 2: "h", 3: "w"}}, {"image": [[2, 3, 32, 32], [1, 3, 24, 40]]})


@builder
def rnn_tagger():
    """A BiLSTM + GRU tagger with a dynamic sequence, through both exporters."""
    torch = _torch()
    nn = torch.nn

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, 32)
            self.lstm = nn.LSTM(32, 24, batch_first=True, bidirectional=True)
            self.gru = nn.GRU(48, 24, batch_first=True)
            self.out = nn.Linear(24, 7)

        def forward(self, ids):
            h, _ = self.lstm(self.emb(ids))
            h, _ = self.gru(h)
            return self.out(h)

    net = Tagger()
    # torch.export traces the LSTM at length 12 and bakes that length into a
    # Reshape although it declares the sequence dynamic: that export takes
    # length 12 only, and other lengths must be a clean error.
    export("rnn_tagger_dynamo", net, [_ids(torch, (2, 12))], ["ids"], ["tags"], {"ids": {0: "batch", 1: "seq"}},
           {"ids": [[2, 12], [3, 12]]}, ranges={"ids": [0, VOCAB]}, rejects={"ids": [3, 5]})
    export("rnn_tagger_torchscript", net, [_ids(torch, (2, 12))], ["ids"], ["tags"],
           {"ids": {0: "batch", 1: "seq"}}, {"ids": [[2, 12], [3, 5]]}, dynamo=False, ranges={"ids": [0, VOCAB]})


@builder
def detection_nms():
    """A detection head: conv features -> boxes and per-class scores ->
    NonMaxSuppression -> the kept boxes gathered (the graph torchvision-style
    exports end in; built with onnx.helper around a dynamo-exported head,
    since torchvision's nms has no wheel here)."""
    torch = _torch()
    import onnx
    from onnx import helper, TensorProto
    nn = torch.nn

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 16, 3, 2, 1), nn.ReLU())
            self.box = nn.Conv2d(16, 4, 1)
            self.cls = nn.Conv2d(16, 3, 1)

        def forward(self, x):
            f = self.body(x)
            n = x.shape[0]
            boxes = self.box(f).flatten(2).transpose(1, 2)               # [n, anchors, 4]
            xy, wh = boxes[..., :2], boxes[..., 2:].exp()
            boxes = torch.cat([xy - wh / 2, xy + wh / 2], -1)
            scores = self.cls(f).flatten(2).sigmoid()                    # [n, classes, anchors]
            return boxes.reshape(n, -1, 4), scores
    export("_detection_head", Head(), [torch.randn(1, 3, 32, 32)], ["image"], ["boxes", "scores"],
           {"image": {0: "batch", 2: "h", 3: "w"}}, {"image": [[1, 3, 32, 32]]})
    path = os.path.join(CORPUS, "_detection_head.onnx")
    head = onnx.load(path)
    os.remove(path)
    g = head.graph
    g.node.extend([
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_thr"], ["selected"],
                         name="nms"),
        helper.make_node("Gather", ["selected", "two"], ["box_idx"], axis=1, name="box_index"),
        helper.make_node("Gather", ["selected", "zero"], ["batch_idx"], axis=1, name="batch_index"),
        helper.make_node("Squeeze", ["box_idx", "one"], ["box_idx1"], name="squeeze_box"),
        helper.make_node("Squeeze", ["batch_idx", "one"], ["batch_idx1"], name="squeeze_batch"),
        helper.make_node("Unsqueeze", ["batch_idx1", "one"], ["bi"], name="unsq_batch"),
        helper.make_node("Unsqueeze", ["box_idx1", "one"], ["bx"], name="unsq_box"),
        helper.make_node("Concat", ["bi", "bx"], ["nd_idx"], axis=1, name="nd_index"),
        helper.make_node("GatherND", ["boxes", "nd_idx"], ["kept_boxes"], name="kept"),
    ])
    g.initializer.extend([
        helper.make_tensor("max_out", TensorProto.INT64, [1], [5]),
        helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.5]),
        helper.make_tensor("score_thr", TensorProto.FLOAT, [1], [0.3]),
        helper.make_tensor("two", TensorProto.INT64, [1], [2]),
        helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
        helper.make_tensor("one", TensorProto.INT64, [1], [1]),
    ])
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info("selected", TensorProto.INT64, ["num_selected", 3]),
                     helper.make_tensor_value_info("kept_boxes", TensorProto.FLOAT, ["num_selected", 4])])
    onnx.checker.check_model(head, full_check=True)
    onnx.save(head, os.path.join(CORPUS, "detection_nms.onnx"))
    _record("_detection_head", None)
    _record("detection_nms", {"inputs": [{"name": "image", "dtype": "float32",
                                          "shapes": [[1, 3, 32, 32], [2, 3, 24, 40]]}], "exporter": "dynamo+helper",
                                "avoid_ties": {"boxes": "boxes", "scores": "scores", "iou_threshold": 0.5,
                                               "score_threshold": 0.3, "max_output_boxes": 5,
                                               "margin": 1e-6}})


@builder
def qdq_cnn():
    """A QDQ-quantized CNN: a dynamo-exported float CNN through
    onnxruntime.quantization.quantize_static (QuantizeLinear/DequantizeLinear
    around Conv and MatMul), calibrated on fixed random data."""
    torch = _torch()
    import numpy as np
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    nn = torch.nn
    net = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), nn.ReLU(), nn.Conv2d(16, 16, 3, 2, 1), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    export("_qdq_float", net, [torch.randn(1, 3, 16, 16)], ["image"], ["logits"], {}, {"image": [[1, 3, 16, 16]]})
    src = os.path.join(CORPUS, "_qdq_float.onnx")
    rng = np.random.default_rng(SEED)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.data = iter([{"image": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.data, None)
    quantize_static(src, os.path.join(CORPUS, "qdq_cnn.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, op_types_to_quantize=["Conv", "MatMul", "Gemm"])
    os.remove(src)
    _record("_qdq_float", None)
    # "unfused": the test's onnxruntime reference runs with its graph
    # optimizations off (see tcc.model_report.reference).
    _record("qdq_cnn", {"inputs": [{"name": "image", "dtype": "float32", "shapes": [[1, 3, 16, 16]]}],
                        "exporter": "dynamo+onnxruntime.quantization", "reference": "unfused"})


def main(argv):
    os.makedirs(CORPUS, exist_ok=True)
    names = argv or list(BUILDERS)
    for n in names:
        if n not in BUILDERS:
            sys.exit(f"build_corpus: unknown family '{n}' (known: {', '.join(BUILDERS)})")
    for n in names:
        BUILDERS[n]()


if __name__ == "__main__":
    main(sys.argv[1:])
