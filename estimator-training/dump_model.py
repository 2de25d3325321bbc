#!/usr/bin/env python3
"""Dump a PyTorch nn.Module into carma's model-summary JSON (schema/model-summary.schema.json).

UNTESTED: torch is not installed on the machine this was written on, so this script has
never been run. Read it before trusting it, and compare one output with torchsummary.

The model is built on the `meta` device, so no weights are allocated and no GPU is needed;
one forward pass with a batch of one records, for every leaf module (a module without
children), its output elements per sample and the parameters it owns.

Usage:
    python dump_model.py torchvision:resnet50 --input-shape 3,224,224 --batch-size 32 > resnet50.json
    python dump_model.py timm:efficientnet_b0 --input-shape 3,224,224 --batch-size 64
    python dump_model.py transformers:bert-base-uncased --seq-len 128 --batch-size 32
    python dump_model.py mymodule:build_model --input-shape 784      # any importable callable

Limits: activations of functional operations (F.relu, residual additions, attention
products computed outside modules) are not counted, because only modules have hooks; the
estimators' margins have to cover them.
"""

import argparse
import importlib
import json
import math
import sys

import torch
from torch import nn


def build(spec: str, seq_len: int):
    """Instantiates the model named `source:name` on the meta device."""
    source, _, name = spec.partition(":")
    with torch.device("meta"):
        if source == "torchvision":
            import torchvision.models as models

            return getattr(models, name)(weights=None), "image"
        if source == "timm":
            import timm

            return timm.create_model(name, pretrained=False), "image"
        if source == "transformers":
            from transformers import AutoConfig, AutoModel

            config = AutoConfig.from_pretrained(name)
            return AutoModel.from_config(config), "tokens"
        module = importlib.import_module(source)
        return getattr(module, name)(), "tensor"


def family_of(model: nn.Module) -> str:
    kinds = {type(m).__name__.lower() for m in model.modules()}
    if any(k.startswith("conv") for k in kinds):
        return "cnn"
    if any("attention" in k or "embedding" in k or k == "layernorm" for k in kinds):
        return "transformer"
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


def dump(model: nn.Module, example, name: str, batch_size: int, seq_len) -> dict:
    layers = []
    hooks = []

    def hook(module, _inputs, output):
        shape = list(output.shape[1:]) if isinstance(output, torch.Tensor) else None
        layer = {
            "type": type(module).__name__,
            "activations": int(elements(output)),
            "params": int(sum(p.numel() for p in module.parameters(recurse=False))),
        }
        if shape is not None:
            layer["output_shape"] = [int(d) for d in shape]
        layers.append(layer)

    for module in model.modules():
        if next(module.children(), None) is None:
            hooks.append(module.register_forward_hook(hook))
    model.train()
    with torch.no_grad():
        if isinstance(example, dict):
            model(**example)
        else:
            model(example)
    for h in hooks:
        h.remove()
    # Parameters owned by non-leaf modules (e.g. a ViT's cls token) would be missed: add them
    # to the first layer so that the total is right.
    counted = sum(layer["params"] for layer in layers)
    total = sum(p.numel() for p in model.parameters())
    if layers and total > counted:
        layers[0]["params"] += int(total - counted)
    summary = {
        "version": 1,
        "name": name,
        "family": family_of(model),
        "batch_size": batch_size,
        "optimizer": "adam",
        "precision": "fp32",
        "layers": layers,
    }
    if seq_len:
        summary["sequence_length"] = seq_len
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="torchvision:NAME, timm:NAME, transformers:NAME or module:callable")
    parser.add_argument("--input-shape", help="per-sample input shape, e.g. 3,224,224")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per sample (transformers)")
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--out", help="write here instead of stdout")
    args = parser.parse_args()

    model, kind = build(args.model, args.seq_len or 0)
    if kind == "tokens":
        seq = args.seq_len or 128
        ids = torch.zeros((1, seq), dtype=torch.long, device="meta")
        example = {"input_ids": ids, "attention_mask": torch.ones((1, seq), dtype=torch.long, device="meta")}
    else:
        if not args.input_shape:
            parser.error("--input-shape is required for this model")
        shape = [int(d) for d in args.input_shape.split(",")]
        example = torch.empty((1, *shape), device="meta")
    summary = dump(model, example, args.model, args.batch_size, args.seq_len)
    text = json.dumps(summary, indent=1) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
