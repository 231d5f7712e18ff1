"""The distributed scenarios, run by one ``torch.distributed.run`` launch of 2
processes (gloo, loopback): each trains the same tiny model 3 steps under a
way of parallelising it and compares the losses and final parameters with a
single process's (every rank computes that reference itself). Rank 0 writes
one JSON object, a result per scenario: ``error`` (a traceback) or the
figures, for tests/distributed/test_distributed.py to check.

    python -m torch.distributed.run --nproc-per-node 2 dist_scenarios.py OUT.json
"""

from __future__ import annotations

import copy
import json
import os
import sys
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

import llama_block as lb

import opbridge

STEPS = 3
LR = 0.05
SCENARIOS = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def rank() -> int:
    return dist.get_rank()


def world() -> int:
    return dist.get_world_size()


def mesh():
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (world(),))


def full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return (t.full_tensor() if isinstance(t, DTensor) else t).detach()


def train(model, batches, loss_fn, mean_over_ranks: bool):
    """3 SGD steps; the losses (averaged over the ranks when each saw its own
    share of the batch) and the final parameters, full."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for batch in batches:
        loss = loss_fn(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        value = loss.detach().clone()
        if mean_over_ranks:
            dist.all_reduce(value)
            value /= world()
        losses.append(value)
    params = {
        name.replace("_checkpoint_wrapped_module.", ""): full(p)
        for name, p in model.named_parameters()
    }
    return torch.stack(losses), params


def compare(got, want) -> dict:
    losses, params = got
    ref_losses, ref_params = want
    assert sorted(params) == sorted(ref_params), (sorted(params), sorted(ref_params))
    return {
        "loss_diff": (losses - ref_losses).abs().max().item(),
        "param_diff": max((params[n] - ref_params[n]).abs().max().item() for n in ref_params),
        "losses": losses.tolist(),
    }


def block_loss(model, x):
    return lb.loss_of(model(x))


_REFERENCE = {}


def reference(fused: bool = True):
    """The single process's run on the whole batches."""
    if fused not in _REFERENCE:
        _REFERENCE[fused] = train(lb.Model(fused), lb.inputs(STEPS), block_loss, False)
    return _REFERENCE[fused]


def my_share(batches):
    return [x.chunk(world())[rank()] for x in batches]


@scenario
def ddp():
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(lb.Model())
    got = train(model, my_share(lb.inputs(STEPS)), block_loss, True)
    got = (got[0], {n.removeprefix("module."): p for n, p in got[1].items()})
    return compare(got, reference())


@scenario
def fsdp2():
    from torch.distributed.fsdp import fully_shard

    model = lb.Model()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return compare(train(model, my_share(lb.inputs(STEPS)), block_loss, True), reference())


def tp_loss(model, x):
    from torch.distributed.tensor import Shard, distribute_tensor

    y = model(distribute_tensor(x, model.mesh, [Shard(1)]))
    return lb.loss_of(y.full_tensor())


@scenario
def tensor_sequence_parallel():
    device_mesh = mesh()
    model = lb.parallelize(lb.Model(), device_mesh)
    model.mesh = device_mesh
    return compare(train(model, lb.inputs(STEPS), tp_loss, False), reference())


@scenario
def activation_checkpointing():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        checkpoint_wrapper,
    )
    from torch.nn.parallel import DistributedDataParallel

    model = lb.Model()
    counts = {"forwards": 0}

    def count(module, args):
        del module, args
        counts["forwards"] += 1

    for k, block in enumerate(model.blocks):
        block.mlp_norm.register_forward_pre_hook(count)
        model.blocks[k] = checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    model = DistributedDataParallel(model)
    got = train(model, my_share(lb.inputs(STEPS)), block_loss, True)
    got = (got[0], {n.removeprefix("module."): p for n, p in got[1].items()})
    result = compare(got, reference())
    # Recomputed in backward: two forwards of each block per step.
    result["block_forwards"] = counts["forwards"]
    result["expected_block_forwards"] = 2 * lb.BLOCKS * STEPS
    return result


@scenario
def compiled_ddp():
    """torch.compile of the DDP model. AOT autograd traces forward and
    backward through the ops' fake kernels and autograd (the ``aot_eager``
    backend: inductor's code generation takes a minute on 2 cores; set
    DIST_COMPILE_BACKEND=inductor for it). The ops must be in the graphs."""
    from torch._dynamo.backends.registry import lookup_backend
    from torch.nn.parallel import DistributedDataParallel

    torch._dynamo.reset()
    inner = lookup_backend(os.environ.get("DIST_COMPILE_BACKEND", "aot_eager"))
    seen = set()

    def backend(gm, example_inputs):
        seen.update(str(node.target) for node in gm.graph.nodes if "opbridge" in str(node.target))
        return inner(gm, example_inputs)

    compiled = torch.compile(DistributedDataParallel(lb.Model()), backend=backend)
    got = train(compiled, my_share(lb.inputs(STEPS)), block_loss, True)
    params = {n.removeprefix("_orig_mod.").removeprefix("module."): p for n, p in got[1].items()}
    result = compare((got[0], params), reference())
    result["ops_in_graphs"] = sorted(seen)
    return result


def _collectives(fn) -> dict:
    from torch.distributed.tensor.debug import CommDebugMode

    mode = CommDebugMode()
    with mode:
        fn()
    return {str(k): v for k, v in mode.get_comm_counts().items()}


@scenario
def sequence_parallel_norms_communicate_nothing():
    """CommDebugMode around each norm under SP (forward and backward): no
    collective; the whole TP+SP step's counts for comparison."""
    from torch.distributed.tensor import Shard, distribute_tensor

    device_mesh = mesh()
    model = lb.parallelize(lb.Model(), device_mesh)
    model.mesh = device_mesh
    block = model.blocks[0]
    g = torch.Generator().manual_seed(3)

    def sharded():
        x = torch.randn(lb.BATCH, lb.SEQ, lb.DIM, generator=g)
        return distribute_tensor(x, device_mesh, [Shard(1)]).requires_grad_()

    x, residual, grad = sharded(), sharded(), sharded()

    def rms_norm():
        block.attention_norm(x).backward(grad)

    def add_rms_norm():
        out, summed = block.mlp_norm(x, residual)
        torch.autograd.backward([out, summed], [grad, grad])

    result = {"rms_norm": _collectives(rms_norm), "add_rms_norm": _collectives(add_rms_norm)}
    assert block.attention_norm.weight.grad is not None and block.mlp_norm.weight.grad is not None
    result["weight_grad_placements"] = [
        str(block.attention_norm.weight.grad.placements),
        str(block.mlp_norm.weight.grad.placements),
    ]

    def step():
        tp_loss(model, lb.inputs(1)[0]).backward()

    result["step"] = _collectives(step)
    return result


def _distribute(value, placement, device_mesh):
    from torch.distributed.tensor import distribute_tensor

    if placement is None or not isinstance(value, torch.Tensor):
        return value
    grad = value.requires_grad
    return distribute_tensor(value.detach(), device_mesh, [placement]).requires_grad_(grad)


@scenario
def op_layouts():
    """Every built-in op on its samples under every placement its strategies
    accept on a 2-rank mesh: the forward, the gradients (the backward op) and
    the out= form, each against the plain op; the largest difference per op."""
    from opbridge.ops import sharding

    device_mesh = mesh()
    g = torch.Generator().manual_seed(7)
    results = {}
    for card in opbridge.ops.cards().values():
        if card.namespace != "opbridge":
            continue
        packet = getattr(torch.ops.opbridge, card.name)
        schema = packet.default._schema
        tensor_positions = [
            k for k, a in enumerate(schema.arguments) if sharding._is_tensor(a) and not a.is_out
        ]
        out_names = [a.name for a in packet.out._schema.arguments if a.is_out]
        figures = {"layouts": 0, "forward": 0.0, "gradients": 0.0, "out": 0.0, "sharded": 0}
        for sample in card.samples(torch.float32, True, large=False, seed=0):
            args = list(sample.args)
            want = card.call(*args, **sample.kwargs)
            want = want if isinstance(want, tuple) else (want,)
            leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
            cotangents = [torch.randn(w.shape, generator=g) for w in want]
            want_grads = (
                torch.autograd.grad(want, leaves, cotangents, allow_unused=True) if leaves else ()
            )
            for outs, ins in sharding.shardings(packet.default, *args, **sample.kwargs):
                placements = iter(ins)
                dargs = [
                    _distribute(a, next(placements), device_mesh)
                    if k in tensor_positions and isinstance(a, torch.Tensor)
                    else a
                    for k, a in enumerate(args)
                ]
                got = card.call(*dargs, **sample.kwargs)
                got = got if isinstance(got, tuple) else (got,)
                figures["layouts"] += 1
                figures["sharded"] += any(
                    not p.is_replicate() for p in outs + [i for i in ins if i]
                )
                figures["forward"] = max(
                    figures["forward"],
                    max((full(a) - b).abs().max().item() for a, b in zip(got, want, strict=True)),
                )
                dleaves = [a for a in dargs if isinstance(a, torch.Tensor) and a.requires_grad]
                if dleaves:
                    dcot = [
                        _distribute(c, p, device_mesh)
                        for c, p in zip(cotangents, outs, strict=True)
                    ]
                    grads = torch.autograd.grad(got, dleaves, dcot, allow_unused=True)
                    for a, b in zip(grads, want_grads, strict=True):
                        if b is not None:
                            diff = (full(a) - b).abs().max().item()
                            figures["gradients"] = max(figures["gradients"], diff)
                outputs = {
                    n: _distribute(torch.empty_like(w.detach()), p, device_mesh)
                    for n, w, p in zip(out_names, want, outs, strict=True)
                }
                with torch.no_grad():
                    plain = [a.detach() if isinstance(a, torch.Tensor) else a for a in dargs]
                    packet.out(*plain, **sample.kwargs, **outputs)
                figures["out"] = max(
                    figures["out"],
                    max(
                        (full(o) - w).abs().max().item()
                        for o, w in zip(outputs.values(), want, strict=True)
                    ),
                )
        results[card.name] = figures
    return results


def _hf_batches():
    g = torch.Generator().manual_seed(5)
    return [
        (torch.randint(3, 96, (4, 8), generator=g), torch.randint(0, 96, (4, 8), generator=g))
        for _ in range(STEPS)
    ]


def hf_loss(model, batch):
    ids, targets = batch
    logits = model(input_ids=ids).logits
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


@scenario
def hf_llama_fsdp2():
    """opbridge.patch'ed Hugging Face Llama under FSDP2 vs the unpatched
    model in one process."""
    from torch.distributed.fsdp import fully_shard

    from opbridge.integrations import hf

    unpatched = hf.random_model("llama", hidden=32, layers=2, heads=4).train()
    patched = copy.deepcopy(unpatched)
    opbridge.patch(patched)
    summary = patched.opbridge_patch_summary.counts()
    want = train(unpatched, _hf_batches(), hf_loss, False)
    for layer in patched.model.layers:
        fully_shard(layer)
    fully_shard(patched)
    share = [(ids.chunk(world())[rank()], t.chunk(world())[rank()]) for ids, t in _hf_batches()]
    result = compare(train(patched, share, hf_loss, True), want)
    result["patched"] = {str(k): v for k, v in summary.items()}
    return result


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", timeout=timedelta(seconds=int(os.environ.get("DIST_TIMEOUT", 60)))
    )
    only = os.environ.get("DIST_SCENARIOS")
    names = only.split(",") if only else list(SCENARIOS)
    results = {}
    for name in names:
        try:
            results[name] = SCENARIOS[name]()
        except Exception:
            results[name] = {"error": traceback.format_exc()}
        dist.barrier()
    if rank() == 0:
        Path(sys.argv[1]).write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
