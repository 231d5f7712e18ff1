"""The anchor a Hugging Face user would pick instead of opbridge: transformers'
own ONNX exporter with ONNX Runtime's fusions (``OnnxConfig(ort_fusions="cpu")``:
GroupQueryAttention, SkipSimplifiedLayerNormalization, ...) against opbridge's
operators exported by the same exporter (patched model, by the custom and ort
routes, each without and with ``ort_fusions="cpu"``), and the unfused export,
timed side by side in one run in ONNX Runtime (float32, random init), for two
phases:

- prefill: the whole prompt (``--seq`` tokens) in one call, no past;
- decode: one new token after a past of ``--seq`` tokens, the KV cache
  (a ``DynamicCache`` filled by a torch prefill) passed in as
  ``past_key_values``, so each export takes the past keys and values as
  inputs and returns the present ones as outputs.

    .venv/bin/python benchmarks/hf_anchor.py [--phase prefill|decode|both]
        [--hidden 1024 --layers 4 --seq 256] [--runs 15] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx_ir
import onnxruntime
import torch

import opbridge

FUSIONS = "ort_fusions='cpu'"
ANCHOR = f"transformers, {FUSIONS}"
_PAST = re.compile(r"(?:input\.)?past_key_values\.layers\.(\d+)\.(keys|values)")


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


def _export(model, inputs: dict, folder: Path, name: str, **config) -> Path:
    """The model exported by transformers' OnnxExporter, saved; its path.
    ``inputs`` are forward kwargs; a cache in them is copied first, so the
    trace leaves the caller's untouched."""
    from transformers.exporters import OnnxConfig, OnnxExporter

    exported = OnnxExporter().export(model, copy.deepcopy(inputs), config=OnnxConfig(**config))
    path = folder / f"{name}.onnx"
    onnx_ir.save(exported.program, str(path), external_data=f"{name}.onnx.data")
    return path


def _op_counts(path: Path) -> dict[str, int]:
    """Nodes in the saved file (before ONNX Runtime's own optimizations), and
    of them GroupQueryAttention, MatMul and opbridge's own (domain ``opbridge``)."""
    graph = onnx_ir.load(str(path)).graph
    return {
        "nodes": len(graph),
        "GroupQueryAttention": sum(node.op_type == "GroupQueryAttention" for node in graph),
        "MatMul": sum(node.op_type == "MatMul" and not node.domain for node in graph),
        "opbridge": sum(node.domain == "opbridge" for node in graph),
    }


def _session(path: Path, threads: int, profile: str | None = None):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if profile:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return opbridge.runtimes.onnxruntime.InferenceSession(str(path), options)


def _profile(path: Path, feeds: dict, threads: int, calls: int) -> dict[str, float]:
    """Kernel time per call by ONNX Runtime op type (ms), from ORT's profiler
    over ``calls`` calls after one untimed call; the largest first."""
    session = _session(path, threads, profile=str(path.with_suffix("")))
    session.run(None, feeds)
    for _ in range(calls):
        session.run(None, feeds)
    events = json.loads(Path(session.end_profiling()).read_text())
    first = min((event for event in events if event["name"] == "model_run"), key=lambda e: e["ts"])
    totals: dict[str, float] = {}
    for event in events:  # the untimed first call left out
        if (
            event.get("cat") == "Node"
            and event["name"].endswith("_kernel_time")
            and event["ts"] > first["ts"] + first["dur"]
        ):
            op = event["args"]["op_name"]
            totals[op] = totals.get(op, 0.0) + event["dur"] / 1e3 / calls
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def _feeds(session, inputs: dict) -> dict[str, np.ndarray]:
    """``inputs`` by the session's input names: plain tensors by their own
    name, the cache's keys and values by ``[input.]past_key_values.layers.i.keys``."""
    feeds = {}
    for arg in session.get_inputs():
        match = _PAST.fullmatch(arg.name)
        if match:
            layer = inputs["past_key_values"].layers[int(match[1])]
            feeds[arg.name] = getattr(layer, match[2]).numpy()
        else:
            feeds[arg.name] = inputs[arg.name].numpy()
    return feeds


def _phase_inputs(phase: str, plain, args) -> dict:
    """Forward kwargs for one phase: the prompt for prefill; for decode one
    token, the cache of a torch prefill over the prompt, and the mask over both."""
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, args.vocab, (1, args.seq), generator=generator)
    if phase == "prefill":
        return {"input_ids": prompt}
    past = plain(input_ids=prompt, use_cache=True).past_key_values
    return {
        "input_ids": torch.randint(0, args.vocab, (1, 1), generator=generator),
        "past_key_values": past,
        "attention_mask": torch.ones(1, args.seq + 1, dtype=torch.int64),
    }


def _measure(phase: str, plain, patched, args, folder: Path) -> dict:
    inputs = _phase_inputs(phase, plain, args)
    want = plain(**copy.deepcopy(inputs)).logits.numpy()
    paths = {
        ANCHOR: _export(plain, inputs, folder, f"{phase}-fused", ort_fusions="cpu"),
        "transformers, unfused": _export(plain, inputs, folder, f"{phase}-unfused"),
        "opbridge custom route": _export(patched, inputs, folder, f"{phase}-custom"),
    }
    paths[f"opbridge custom route + {FUSIONS}"] = _export(
        patched, inputs, folder, f"{phase}-custom-fused", ort_fusions="cpu"
    )
    with opbridge.export.route("ort"):
        paths["opbridge ort route"] = _export(patched, inputs, folder, f"{phase}-ort")
        paths[f"opbridge ort route + {FUSIONS}"] = _export(
            patched, inputs, folder, f"{phase}-ort-fused", ort_fusions="cpu"
        )
    sessions = {name: _session(path, args.threads) for name, path in paths.items()}
    feeds = {name: _feeds(session, inputs) for name, session in sessions.items()}
    times: dict[str, list[float]] = {name: [] for name in sessions}
    errors = {}
    for name, session in sessions.items():  # one untimed call each
        errors[name] = float(np.abs(session.run(None, feeds[name])[0] - want).max())
    calls = args.decode_calls if phase == "decode" else 1
    for _ in range(args.runs):  # side by side: the same calls of each per round
        for name, session in sessions.items():
            start = time.perf_counter()
            for _ in range(calls):
                session.run(None, feeds[name])
            times[name].append((time.perf_counter() - start) * 1e3 / calls)
    graphs = {name: _op_counts(path) for name, path in paths.items()}
    anchor = statistics.median(times[ANCHOR])
    what = (
        f"prefill of {args.seq} tokens"
        if phase == "prefill"
        else f"decode of 1 token after {args.seq} (KV cache), mean of {calls} calls per round"
    )
    print(
        f"\nLlama hidden {args.hidden}, {args.layers} layers, {args.heads} heads "
        f"({args.kv_heads} kv), {what}, float32, {args.threads} threads, "
        f"onnxruntime {onnxruntime.__version__}, median of {args.runs}"
    )
    print("| export | nodes | GQA | MatMul | opbridge:: | ms | anchor / this | max abs err |")
    print("|---|---|---|---|---|---|---|---|")
    rows = {}
    for name in sessions:
        ms = statistics.median(times[name])
        ops = graphs[name]
        rows[name] = {"ms": ms, "ratio": anchor / ms, "err": errors[name], **ops}
        print(
            f"| {name} | {ops['nodes']} | {ops['GroupQueryAttention']} | {ops['MatMul']} "
            f"| {ops['opbridge']} | {ms:.2f} | {anchor / ms:.2f}x | {errors[name]:.2e} |"
        )
    if args.profile:
        print(f"\nKernel ms per {phase} call by op type (ORT profiler, {args.profile} calls):")
        for name, path in paths.items():
            ops = _profile(path, feeds[name], args.threads, args.profile)
            rows[name]["profile"] = ops
            top = ", ".join(f"{op} {ms:.2f}" for op, ms in list(ops.items())[:8])
            print(f"- {name}: total {sum(ops.values()):.2f}; {top}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=["prefill", "decode", "both"], default="both")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--seq", type=int, default=256, help="prompt, and decode's past, in tokens")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--decode-calls", type=int, default=10, help="decode calls of each export per round"
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="CALLS",
        help="after timing, profile CALLS calls of each export by op type",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    plain = _llama(args.hidden, args.layers, args.heads, args.kv_heads, args.vocab)
    patched = opbridge.patch(
        _llama(args.hidden, args.layers, args.heads, args.kv_heads, args.vocab)
    )
    phases = ["prefill", "decode"] if args.phase == "both" else [args.phase]
    results = {}
    with tempfile.TemporaryDirectory(prefix="opbridge-anchor-") as scratch:
        for phase in phases:
            results[phase] = _measure(phase, plain, patched, args, Path(scratch))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
