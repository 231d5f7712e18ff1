"""Hugging Face families adopted by opbridge.patch: ONNX Runtime latency of
the patched model's custom-route export vs the unpatched model's standard
export, side by side in one run, and the largest difference from the
unpatched torch model.

    .venv/bin/python benchmarks/hf_families.py [--families llama bert] [--json out.json]
"""

from __future__ import annotations

import argparse
import json

import torch

from opbridge.integrations import hf
from opbridge.integrations.adoption import table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="*", default=sorted(hf.FAMILIES))
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    print(
        f"hidden {args.hidden}, {args.layers} layers, {args.heads} heads, batch {args.batch}, "
        f"seq {args.seq} (ViT: {args.seq} patches), torch threads {torch.get_num_threads()}"
    )
    header, rule = table([])
    print(header, rule, sep="\n")
    rows = []
    for family in args.families:
        found = hf.adoption(
            family,
            hidden=args.hidden,
            layers=args.layers,
            heads=args.heads,
            vocab=args.vocab,
            batch=args.batch,
            seq=args.seq,
            runs=args.runs,
        )
        rows += found
        print(table(found)[-1], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
