"""timm models adopted by opbridge.patch (and ImageModel's fused input
normalization): ONNX Runtime latency of the patched model's custom-route
export vs the unpatched model's standard export, side by side in one run.
Needs timm: run it in the timm environment (./dev timm sets it up).

    .venv-timm/bin/python benchmarks/timm_models.py [--models vit_small_patch16_224 resnet50]
"""

from __future__ import annotations

import argparse
import json

import timm
import torch

from opbridge.integrations.adoption import compare_exports, table

MODELS = ("vit_small_patch16_224", "deit_small_patch16_224", "convnext_tiny", "resnet50")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    print(
        f"batch {args.batch}, {args.size}x{args.size} float32 input (random init), "
        f"torch {torch.__version__}, threads {torch.get_num_threads()}"
    )
    header, rule = table([])
    print(header, rule, sep="\n")
    rows = []
    for name in args.models:
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False).eval()
        example = (torch.randn(args.batch, 3, args.size, args.size),)
        batch = torch.export.Dim("batch", min=1)
        found = compare_exports(
            model, example, name=name, dynamic_shapes=({0: batch},), runs=args.runs
        )
        rows += found
        print(table(found)[-1], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
