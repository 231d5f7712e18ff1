"""The anchor a Hugging Face user would pick instead of opbridge: transformers'
own ONNX exporter with ONNX Runtime's fusions (``OnnxConfig(ort_fusions="cpu")``:
GroupQueryAttention, SkipSimplifiedLayerNormalization, ...) against opbridge's
operators exported by the same exporter (patched model, by the custom and ort
routes), and the unfused export, timed side by side in one run in ONNX
Runtime (prefill: the whole prompt in one call; float32, random init).

    .venv/bin/python benchmarks/hf_anchor.py [--hidden 1024 --layers 4 --seq 256] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx_ir
import onnxruntime
import torch

import opbridge


def _llama(hidden: int, layers: int, heads: int, kv_heads: int, vocab: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3 // 64 * 64,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _export(model, ids, folder: Path, name: str, **config) -> Path:
    """The model exported by transformers' OnnxExporter, saved; its path."""
    from transformers.exporters import OnnxConfig, OnnxExporter

    exported = OnnxExporter().export(model, {"input_ids": ids}, config=OnnxConfig(**config))
    path = folder / f"{name}.onnx"
    onnx_ir.save(exported.program, str(path), external_data=f"{name}.onnx.data")
    return path


def _session(path: Path, threads: int):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return opbridge.runtimes.onnxruntime.InferenceSession(str(path), options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ids = torch.randint(0, args.vocab, (1, args.seq))
    plain = _llama(args.hidden, args.layers, args.heads, args.kv_heads, args.vocab)
    want = plain(input_ids=ids).logits.detach().numpy()
    patched = opbridge.patch(
        _llama(args.hidden, args.layers, args.heads, args.kv_heads, args.vocab)
    )
    rows = {}
    with tempfile.TemporaryDirectory(prefix="opbridge-anchor-") as scratch:
        folder = Path(scratch)
        paths = {
            "transformers, ort_fusions='cpu'": _export(
                plain, ids, folder, "fused", ort_fusions="cpu"
            ),
            "transformers, unfused": _export(plain, ids, folder, "unfused"),
            "opbridge custom route": _export(patched, ids, folder, "custom"),
        }
        with opbridge.export.route("ort"):
            paths["opbridge ort route"] = _export(patched, ids, folder, "ort")
        sessions = {name: _session(path, args.threads) for name, path in paths.items()}
        feeds = {"input_ids": ids.numpy()}
        times: dict[str, list[float]] = {name: [] for name in sessions}
        errors = {}
        for name, session in sessions.items():  # one untimed call each
            errors[name] = float(np.abs(session.run(None, feeds)[0] - want).max())
        for _ in range(args.runs):  # side by side: one call of each per round
            for name, session in sessions.items():
                start = time.perf_counter()
                session.run(None, feeds)
                times[name].append((time.perf_counter() - start) * 1e3)
        nodes = {name: len(onnx_ir.load(str(path)).graph) for name, path in paths.items()}
    anchor = statistics.median(times["transformers, ort_fusions='cpu'"])
    print(
        f"Llama hidden {args.hidden}, {args.layers} layers, {args.heads} heads "
        f"({args.kv_heads} kv), seq {args.seq}, prefill, float32, {args.threads} threads, "
        f"onnxruntime {onnxruntime.__version__}, median of {args.runs}"
    )
    print("| export | nodes | ms | anchor / this | max abs err |")
    print("|---|---|---|---|---|")
    for name in sessions:
        ms = statistics.median(times[name])
        rows[name] = {"ms": ms, "ratio": anchor / ms, "nodes": nodes[name], "err": errors[name]}
        print(f"| {name} | {nodes[name]} | {ms:.2f} | {anchor / ms:.2f}x | {errors[name]:.2e} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
