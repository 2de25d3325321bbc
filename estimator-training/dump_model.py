#!/usr/bin/env python3
"""Dump PyTorch models into carma's model-summary JSON (schema/model-summary.schema.json).

Models are built on the `meta` device: no weights are allocated and no GPU is needed, so a
ViT-L takes about a tenth of a second (a model that cannot run on `meta` is retried on the
CPU). Each architecture is built once and traced at batch sizes two and four, and the
per-sample figures are written once per batch size, so dumping five batch sizes costs the
same as dumping one.

What a summary records, per sample:
- every leaf module (one without children) in forward order, with its output shape and the
  parameters it owns (forward hooks);
- `saved_bytes_per_sample`: the bytes autograd keeps for the backward pass, found with
  `torch.autograd.graph.saved_tensors_hooks`. Unlike the leaf outputs it also counts what
  functional code saves (attention scores, residual additions, F.relu), each storage once,
  and never the parameters (nor views of them, such as a Linear's transposed weight);
- `saved_bytes_fixed`: bytes saved for backward whatever the batch size (weights that the
  forward pass standardises or re-parameterises, as NFNets and RepVGG do);
- `attention_bytes_per_sample`: the part of those bytes that are the attention probabilities
  of `F.scaled_dot_product_attention`, which its fused kernels on a GPU do not keep
  (attention written out by hand, with an explicit softmax, keeps them and is not counted);
- `input_shape`, and `architecture`: the Python module that defines the model (for timm,
  e.g. `timm.models.resnet`), which carma-train uses to group cross-validation folds by
  family.

Usage:
    dump_model.py --timm resnet50,vit_large_patch16_224 --batch-sizes 8,16,32,64,128 --out-dir DIR
    dump_model.py --timm-list names.txt --batch-sizes 8,16,32,64,128 --out-dir DIR
    dump_model.py --torchvision resnet50 --batch-sizes 32,64,128 --out-dir DIR
    dump_model.py --hf-config bert-base-uncased --seq-len 128 --batch-sizes 32 --out-dir DIR
    dump_model.py --module mypkg.models:build --input-shape 784 --batch-sizes 64 --out-dir DIR

Files are named `<model>_bs<batch>.json`. A model that fails to build or trace is skipped
with a one-line reason on stderr; the batch goes on, and the exit status is 1 only if
nothing at all was written.

`--hf-config` takes a Hugging Face model name or a local config.json. The names in
`OFFLINE_HF_CONFIGS` (the paper's BERT, XLNet and GPT-2 models) are built from their
published hyper-parameters, so they need no access to the hub; other names are fetched from it.

Install: `pip install torch torchvision timm transformers` (CPU wheels are enough; see the
README, "Memory estimates").
"""

import argparse
import importlib
import json
import math
import os
import sys
import time

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

SUMMARY_VERSION = 1

# Published hyper-parameters of the paper's language models, for machines without access to
# the Hugging Face hub. Keys are hub names; values are (config class, keyword arguments).
OFFLINE_HF_CONFIGS = {
    "bert-base-uncased": ("BertConfig", {}),
    "bert-large-uncased": (
        "BertConfig",
        {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096},
    ),
    "xlnet-base-cased": ("XLNetConfig", {"d_model": 768, "n_layer": 12, "n_head": 12, "d_inner": 3072}),
    "xlnet-large-cased": ("XLNetConfig", {"d_model": 1024, "n_layer": 24, "n_head": 16, "d_inner": 4096}),
    "gpt2": ("GPT2Config", {}),
    "gpt2-large": ("GPT2Config", {"n_embd": 1280, "n_layer": 36, "n_head": 20}),
}


class Skip(Exception):
    """A model that cannot be dumped; the message is the one-line reason."""


def family_of(model: nn.Module) -> str:
    kinds = {type(m).__name__.lower() for m in model.modules()}
    if any("attention" in k or "embedding" in k or k in ("layernorm", "multiheadattention") for k in kinds):
        # Vision transformers and hybrids with attention; convolutional stems still count
        # as transformers because attention dominates how their memory grows.
        if not any(k.startswith("conv") for k in kinds) or any("attention" in k for k in kinds):
            return "transformer"
    if any(k.startswith("conv") for k in kinds):
        return "cnn"
    dense = ("linear", "batchnorm", "dropout", "relu", "gelu", "tanh", "sigmoid", "softmax",
             "elu", "selu", "silu", "mish", "softplus", "leakyrelu", "prelu", "identity", "sequential")
    if all(any(k.startswith(d) for d in dense) for k in kinds if k != type(model).__name__.lower()):
        return "mlp"
    return "other"


def elements(output) -> int:
    """Output elements per sample of a module's output (tensor, tuple, list, dict, HF output)."""
    if isinstance(output, torch.Tensor):
        return math.prod(output.shape[1:]) if output.dim() > 0 else 0
    if isinstance(output, dict):
        return sum(elements(v) for v in output.values())
    if isinstance(output, (tuple, list)):
        return sum(elements(v) for v in output)
    if hasattr(output, "to_tuple"):
        return sum(elements(v) for v in output.to_tuple())
    return 0


# Each model is traced at two batch sizes: the difference is what every sample adds, the
# rest is saved whatever the batch (weights standardised in the forward pass, as NFNets do,
# or re-parameterised kernels). A batch of one is avoided: BatchNorm in training mode
# refuses it on 1x1 feature maps.
TRACE_BATCHES = (2, 4)


class Producers(TorchDispatchMode):
    """Remembers which aten operator produced each storage, to tell the attention
    probabilities of F.scaled_dot_product_attention from the rest: on a GPU its fused
    kernels do not keep them."""

    def __init__(self):
        super().__init__()
        self.producer = {}
        # Every meta output is kept alive for the trace (it owns no memory), so that no
        # storage's address is reused by a later one: storages are told apart by address,
        # and a reused address would inherit the first producer's name (which made dumps
        # differ from run to run). On the CPU fallback that would hold every activation (24 GB
        # for XLNet large at 512 tokens), so there only saved tensors, which autograd keeps
        # alive anyway, are told apart reliably.
        self.keep = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.producer.setdefault(t.untyped_storage()._cdata, func.overloadpacket.__name__)
                if t.device.type == "meta":
                    self.keep.append(t)
        return out

    def fused_attention(self, key) -> bool:
        # `_safe_softmax` is the softmax inside F.scaled_dot_product_attention's reference
        # path (what the meta device runs); on a GPU that call runs a fused kernel that keeps
        # no probabilities. An explicit `softmax` in model code shows as `_softmax` and is
        # kept on a GPU too, so it stays in the saved bytes only.
        return self.producer.get(key, "") == "_safe_softmax"


def trace(model: nn.Module, example) -> tuple[list, int, int]:
    """Leaf layers per sample, bytes saved for backward for the whole example, and the part
    of those bytes that are attention probabilities."""
    layers = []
    hooks = []

    def hook(module, _inputs, output):
        layer = {
            "type": type(module).__name__,
            "activations": int(elements(output)),
            "params": int(sum(p.numel() for p in module.parameters(recurse=False))),
        }
        if isinstance(output, torch.Tensor) and output.dim() > 0:
            layer["output_shape"] = [int(d) for d in output.shape[1:]]
        layers.append(layer)

    for module in model.modules():
        if next(module.children(), None) is None:
            hooks.append(module.register_forward_hook(hook))

    # Storages, not tensors: autograd often saves a view of a weight (`weight.t()` for a
    # Linear), which is a new tensor over the parameter's own memory.
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    params |= {b.untyped_storage()._cdata for b in model.buffers()}
    saved = {}

    def pack(tensor):
        key = tensor.untyped_storage()._cdata
        if key not in params:
            saved[key] = max(saved.get(key, 0), tensor.untyped_storage().nbytes())
        return tensor

    model.train()
    producers = Producers()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), producers:
            if isinstance(example, dict):
                model(**example)
            else:
                model(example)
    finally:
        for h in hooks:
            h.remove()
    # Parameters owned by non-leaf modules (a ViT's cls token, position embedding) are
    # added to the first layer so that the total is right.
    counted = sum(layer["params"] for layer in layers)
    total = sum(p.numel() for p in model.parameters())
    if layers and total > counted:
        layers[0]["params"] += int(total - counted)
    attention = sum(n for key, n in saved.items() if producers.fused_attention(key))
    return layers, sum(saved.values()), attention


def build_timm(name: str, device: str):
    import timm

    with torch.device(device):
        model = timm.create_model(name, pretrained=False)
    shape = tuple(model.pretrained_cfg.get("input_size") or (3, 224, 224))
    return model, lambda batch: torch.zeros((batch, *shape), device=device), list(shape), None


def build_torchvision(name: str, device: str):
    import torchvision.models as models

    with torch.device(device):
        kwargs = {"aux_logits": False, "init_weights": False} if name == "inception_v3" else {}
        model = getattr(models, name)(weights=None, **kwargs)
    side = 299 if name == "inception_v3" else 224
    shape = (3, side, side)
    return model, lambda batch: torch.zeros((batch, *shape), device=device), list(shape), None


def build_hf(name: str, seq_len: int, device: str):
    import transformers

    if os.path.isfile(name):
        config = transformers.AutoConfig.from_pretrained(os.path.dirname(os.path.abspath(name)))
    elif name in OFFLINE_HF_CONFIGS:
        cls, kwargs = OFFLINE_HF_CONFIGS[name]
        config = getattr(transformers, cls)(**kwargs)
    else:
        config = transformers.AutoConfig.from_pretrained(name)
    with torch.device(device):
        model = transformers.AutoModel.from_config(config)
    def example(batch):
        return {"input_ids": torch.zeros((batch, seq_len), dtype=torch.long, device=device)}

    return model, example, [seq_len], seq_len


def build_module(spec: str, input_shape, device: str):
    module_name, _, attr = spec.partition(":")
    if not attr or not input_shape:
        raise Skip("--module needs MODULE:CALLABLE and --input-shape")
    with torch.device(device):
        model = getattr(importlib.import_module(module_name), attr)()
    return model, lambda batch: torch.zeros((batch, *input_shape), device=device), list(input_shape), None


def build_and_trace(source: str, name: str, args, device: str):
    """The model, its input shape, sequence length, leaf layers, and per-sample saved bytes,
    batch-independent saved bytes and per-sample attention bytes."""
    if source == "timm":
        model, example, shape, seq = build_timm(name, device)
    elif source == "torchvision":
        model, example, shape, seq = build_torchvision(name, device)
    elif source == "hf":
        model, example, shape, seq = build_hf(name, args.seq_len, device)
    else:
        model, example, shape, seq = build_module(name, args.input_shape, device)
    small, large = TRACE_BATCHES
    layers, saved_small, attention_small = trace(model, example(small))
    _, saved_large, attention_large = trace(model, example(large))
    per_sample = max(0, saved_large - saved_small) // (large - small)
    fixed = max(0, saved_small - small * per_sample)
    attention = min(per_sample, max(0, attention_large - attention_small) // (large - small))
    return model, shape, seq, layers, per_sample, fixed, attention


def dump(source: str, name: str, args) -> list:
    """Builds and traces one model; returns its summaries, one per batch size.

    The meta device first; a model whose forward makes tensors on the CPU itself (XLNet's
    relative positions) cannot mix them with meta tensors, so it is traced again on the CPU
    with real (untrained) weights, which costs memory and seconds but gives the same sizes."""
    try:
        try:
            model, shape, seq, layers, saved, fixed, attention = build_and_trace(source, name, args, "meta")
        except RuntimeError as e:
            if "meta" not in str(e):
                raise
            model, shape, seq, layers, saved, fixed, attention = build_and_trace(source, name, args, "cpu")
    except Skip:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of a third-party model skips it
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise Skip(f"{type(e).__name__}: {first}") from None
    if not layers:
        raise Skip("no leaf modules ran in the forward pass")
    base = {
        "version": SUMMARY_VERSION,
        "name": f"{source}:{name}",
        "family": family_of(model),
        "architecture": type(model).__module__,
        "input_shape": shape,
        "saved_bytes_per_sample": int(saved),
        "saved_bytes_fixed": int(fixed),
        "attention_bytes_per_sample": int(attention),
        "optimizer": args.optimizer,
        "precision": "fp32",
    }
    if seq:
        base["sequence_length"] = seq
    out = []
    for batch in args.batch_sizes:
        summary = dict(base, batch_size=batch)
        summary["layers"] = layers
        out.append((batch, summary))
    return out


def file_stem(name: str) -> str:
    return name.replace("/", "__").replace(":", "_")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_argument_group("models (any mix, each repeatable)")
    what.add_argument("--timm", action="append", default=[], help="timm names, comma-separated")
    what.add_argument("--timm-list", action="append", default=[], help="file with one timm name per line")
    what.add_argument("--torchvision", action="append", default=[], help="torchvision names, comma-separated")
    what.add_argument("--hf-config", action="append", default=[], help="HF hub name or config.json path")
    what.add_argument("--module", action="append", default=[], help="MODULE:CALLABLE returning an nn.Module")
    parser.add_argument("--batch-sizes", required=True, help="comma-separated, e.g. 8,16,32,64,128")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per sample for --hf-config")
    parser.add_argument("--input-shape", help="per-sample input shape for --module, e.g. 3,224,224")
    parser.add_argument("--optimizer", default="adam", choices=["adam", "adamw", "sgd", "sgd-momentum"])
    args = parser.parse_args()
    try:
        args.batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b]
        if not args.batch_sizes or min(args.batch_sizes) < 1:
            raise ValueError
    except ValueError:
        parser.error("--batch-sizes must be positive integers separated by commas, e.g. 8,16,32")
    if args.input_shape:
        args.input_shape = [int(d) for d in args.input_shape.split(",")]

    jobs = [("timm", n) for spec in args.timm for n in spec.split(",") if n]
    for path in args.timm_list:
        with open(path) as f:
            jobs += [("timm", line.strip()) for line in f if line.strip() and not line.startswith("#")]
    jobs += [("torchvision", n) for spec in args.torchvision for n in spec.split(",") if n]
    jobs += [("hf", n) for n in args.hf_config]
    jobs += [("module", n) for n in args.module]
    if not jobs:
        parser.error("name at least one model (--timm, --timm-list, --torchvision, --hf-config, --module)")

    os.makedirs(args.out_dir, exist_ok=True)
    written = skipped = 0
    started = time.monotonic()
    for source, name in jobs:
        try:
            summaries = dump(source, name, args)
        except Skip as reason:
            print(f"skipped {source}:{name}: {reason}", file=sys.stderr)
            skipped += 1
            continue
        for batch, summary in summaries:
            path = os.path.join(args.out_dir, f"{file_stem(name)}_bs{batch}.json")
            with open(path + ".tmp", "w") as f:
                json.dump(summary, f, separators=(",", ":"))
                f.write("\n")
            os.replace(path + ".tmp", path)
            written += 1
    elapsed = time.monotonic() - started
    print(f"wrote {written} summaries for {len(jobs) - skipped} models, skipped {skipped}, in {elapsed:.1f} s",
          file=sys.stderr)
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
