"""What a verification runs: the optimization levels, and the input cases
(the example, random draws like it or the caller's own inputs, a sweep of
batch sizes when the batch dimension is dynamic, and of sequence lengths when
asked and dimension 1 is dynamic)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

from opbridge import runtimes

LARGE_BATCH_MIN = 16


@dataclass
class Case:
    """One set of inputs the model runs on, at every level."""

    label: str
    kind: str  # "draw", "batch", "sequence" or "file"
    batch: int | None
    args: tuple


def leaves(value: Any) -> list[torch.Tensor]:
    """The tensors in a (nested) value, in order."""
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A tensor as numpy (bfloat16, which numpy lacks, as float32)."""
    tensor = tensor.detach().cpu()
    if tensor.dtype in (torch.bfloat16,):
        tensor = tensor.float()
    return tensor.numpy()


def resolve_levels(
    levels: Sequence[str] | None, runtime: runtimes.Runtime | None = None
) -> tuple[list[str], str]:
    """The levels to run (the caller's, default all the runtime has, always
    with its base level), least to most, and the level whose results are
    reported as the final outputs (its default level)."""
    runtime = runtimes.get(runtime)
    base, default = runtime.base_level, runtime.default_level
    all_levels = runtime.levels()
    levels = list(levels) if levels is not None else all_levels
    unknown = [level for level in levels if level not in all_levels]
    if unknown:
        raise ValueError(
            f"opbridge.verify: unknown optimization level(s) {unknown}; expected some of "
            f"{all_levels}"
        )
    levels = sorted(set(levels) | {base}, key=all_levels.index)
    return levels, default if default in levels else levels[-1]


def build_cases(
    args: tuple,
    graph_inputs: list[dict],
    *,
    batch_sizes: Sequence[int] | None,
    draws: int,
    inputs: Any,
    seed: int,
    sequence: bool = False,
    sequence_lengths: Sequence[int] | None = None,
) -> tuple[list[Case], str, str]:
    """The input cases, and the batch and sequence sweeps' lines for the report.

    ``graph_inputs`` describes the ONNX model's inputs (``name`` and
    ``dynamic_dims`` of each, as in the report): a batch sweep runs only
    when the first input's dimension 0 is dynamic. A sequence sweep runs when
    asked (``sequence`` or ``sequence_lengths``) over the inputs of two or more
    dimensions whose dimension 1 is dynamic in the graph: each length of
    ``sequence_lengths`` (default the example's length and twice it) becomes
    dimension 1 of those inputs whose length is the first one's (the others
    keep theirs), at the export batch.
    """
    tensors = leaves(args)
    export_batch = tensors[0].shape[0] if tensors and tensors[0].dim() > 0 else None
    batched = [0 in info["dynamic_dims"] for info in graph_inputs]
    generator = torch.Generator().manual_seed(seed)
    cases = [Case("example", "draw", export_batch, args)]
    if inputs is not None:
        names = [info["name"] for info in graph_inputs]
        for label, user_args in load_inputs(inputs, names, args):
            first = leaves(user_args)
            cases.append(Case(label, "file", first[0].shape[0] if first else None, user_args))
    else:
        for index in range(1, max(draws, 1)):
            cases.append(Case(f"draw {index}", "draw", export_batch, _redraw(args, generator, {})))

    sequence_line = _sequence_cases(
        cases, args, graph_inputs, generator, export_batch, sequence, sequence_lengths
    )
    if export_batch is None:
        return cases, "not applicable: no input tensor has a batch dimension", sequence_line
    if not batched or not batched[0]:
        line = "not applicable: the model's first input has a static batch dimension"
        return cases, line, sequence_line
    if batch_sizes is None:
        batch_sizes = [1, export_batch, max(LARGE_BATCH_MIN, 4 * export_batch)]
    sizes = sorted(dict.fromkeys(int(b) for b in batch_sizes))
    for size in sizes:
        if size == export_batch:
            continue
        resized = {i: {0: size} for i, flag in enumerate(batched) if flag}
        cases.append(Case(f"batch {size}", "batch", size, _redraw(args, generator, resized)))
    return cases, "ran: " + ", ".join(str(s) for s in sizes), sequence_line


def _sequence_cases(
    cases: list[Case],
    args: tuple,
    graph_inputs: list[dict],
    generator,
    export_batch: int | None,
    asked: bool,
    lengths: Sequence[int] | None,
) -> str:
    """Appends the sequence sweep's cases to ``cases``; returns its line."""
    tensors = leaves(args)
    dynamic = [
        index
        for index, (tensor, info) in enumerate(zip(tensors, graph_inputs, strict=False))
        if tensor.dim() >= 2 and 1 in info["dynamic_dims"]
    ]
    if not dynamic:
        return "not applicable: no graph input has a dynamic dimension 1"
    if not asked and lengths is None:
        return (
            "not run: dimension 1 is dynamic in the graph; pass dynamic_sequence=True "
            "(--dynamic-sequence) or sequence_lengths= to vary it"
        )
    example = int(tensors[dynamic[0]].shape[1])
    if lengths is None:
        lengths = [example, 2 * example]
    lengths = sorted(dict.fromkeys(int(n) for n in lengths))
    same = [i for i in dynamic if int(tensors[i].shape[1]) == example]
    for length in lengths:
        if length == example:
            continue
        resized = {i: {1: length} for i in same}
        args_at_length = _redraw(args, generator, resized)
        cases.append(Case(f"sequence {length}", "sequence", export_batch, args_at_length))
    return "ran: " + ", ".join(str(n) for n in lengths)


def _random_like(tensor: torch.Tensor, shape: Sequence[int], generator) -> torch.Tensor:
    """A random tensor of ``shape`` resembling ``tensor`` (same dtype, range or spread)."""
    if tensor.dtype == torch.bool:
        return torch.randint(0, 2, tuple(shape), generator=generator).bool().to(tensor.device)
    if not tensor.dtype.is_floating_point and not tensor.dtype.is_complex:
        low = int(tensor.min()) if tensor.numel() else 0
        high = int(tensor.max()) if tensor.numel() else 1
        draw = torch.randint(low, high + 1, tuple(shape), generator=generator, dtype=tensor.dtype)
        return draw.to(tensor.device)
    reference = tensor.detach().double()
    mean = float(reference.mean()) if tensor.numel() else 0.0
    std = float(reference.std()) if tensor.numel() > 1 else 1.0
    if not math.isfinite(std) or std == 0.0:
        std = 1.0
    draw = torch.randn(tuple(shape), generator=generator, dtype=torch.float64)
    return (mean + std * draw).to(dtype=tensor.dtype, device=tensor.device)


def _redraw(args: tuple, generator, resized: dict[int, dict[int, int]]) -> tuple:
    """``args`` with every tensor redrawn; tensor ``i`` (in leaf order) with
    dimension ``d`` of size ``resized[i][d]``."""
    flat, spec = pytree.tree_flatten(args)
    out, index = [], 0
    for leaf in flat:
        if isinstance(leaf, torch.Tensor):
            shape = list(leaf.shape)
            for dim, size in resized.get(index, {}).items():
                shape[dim] = size
            out.append(_random_like(leaf, shape, generator))
            index += 1
        else:
            out.append(leaf)
    return pytree.tree_unflatten(out, spec)


def _with_tensors(args: tuple, tensors: list[torch.Tensor]) -> tuple:
    flat, spec = pytree.tree_flatten(args)
    it = iter(tensors)
    return pytree.tree_unflatten(
        [next(it) if isinstance(leaf, torch.Tensor) else leaf for leaf in flat], spec
    )


def load_inputs(source: Any, input_names: list[str], example: tuple) -> list[tuple[str, tuple]]:
    """The caller's input sets as ``(label, args)``: an ``.npz`` path (arrays
    keyed by ONNX input name, or ``arr_0``, ``arr_1``, ... in order), a dict
    of arrays, a sequence of arrays, or a list of any of these."""
    one_set = isinstance(source, Sequence) and all(
        isinstance(item, np.ndarray | torch.Tensor) for item in source
    )
    if isinstance(source, str | os.PathLike | dict) or one_set:
        source = [source]
    n = len(leaves(example))
    sets = []
    for index, item in enumerate(source):
        label = f"inputs {index}"
        if isinstance(item, str | os.PathLike):
            path = Path(item)
            if not path.is_file():
                raise FileNotFoundError(f"opbridge.verify: input file {path} does not exist")
            with np.load(path) as archive:
                item = {key: archive[key] for key in archive.files}
            label = path.name
        if isinstance(item, dict):
            if all(name in item for name in input_names) and input_names:
                arrays = [item[name] for name in input_names]
            elif len(item) == n:
                arrays = list(item.values())
            else:
                raise ValueError(
                    f"opbridge.verify: {label} holds arrays {sorted(item)}; expected the model's "
                    f"inputs {input_names} (or {n} arrays in order)"
                )
        else:
            arrays = list(item)
        if len(arrays) != n:
            raise ValueError(f"opbridge.verify: {label} has {len(arrays)} arrays, the model {n}")
        tensors = [torch.as_tensor(np.asarray(a)) for a in arrays]
        for tensor, want in zip(tensors, leaves(example), strict=True):
            if tensor.dtype != want.dtype:
                raise ValueError(
                    f"opbridge.verify: {label}: an input has dtype {tensor.dtype}, "
                    f"the example has {want.dtype}"
                )
        sets.append((label, _with_tensors(example, tensors)))
    return sets
