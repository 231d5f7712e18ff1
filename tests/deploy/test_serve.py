"""opbridge.deploy.serve on a local Ray cluster (loopback only): two replicas,
concurrent requests, answers equal to PyTorch."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import opbridge
from opbridge.demo.models import build_llama_block

REQUESTS = 12
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        configure_logging=False,
    )
    yield ray
    from ray import serve

    serve.shutdown()
    ray.shutdown()


def replica_infos(handle, replicas=2, rounds=10, per_round=16):
    """Info from the replicas, asked concurrently round after round until
    `replicas` processes have answered or the rounds run out. The router may
    send a short run of requests all to one replica, so one round proves
    nothing either way."""
    infos = []
    for _ in range(rounds):
        futures = [handle.info.remote() for _ in range(per_round)]
        infos += [f.result(timeout_s=TIMEOUT_S) for f in futures]
        if len({info["pid"] for info in infos}) >= replicas:
            break
    return infos


def test_two_replicas_answer_concurrent_requests_like_pytorch(ray_cluster, tmp_path):
    from ray import serve

    from opbridge.deploy.serve import deployment

    model, args = build_llama_block()
    path = tmp_path / "llama.onnx"
    opbridge.export.export(model, args, path, route="custom", dynamic_batch=True, verbose=False)
    start = time.monotonic()
    handle = serve.run(deployment(path, num_replicas=2, cpus_per_replica=1), name="opbridge_test")
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(b, 32, 64, generator=generator) for b in (1, 2, 3) * (REQUESTS // 3)]
    futures = [handle.remote(x.numpy()) for x in inputs]
    answers = [f.result(timeout_s=TIMEOUT_S) for f in futures]
    infos = replica_infos(handle)
    elapsed = time.monotonic() - start
    with torch.no_grad():
        for x, answer in zip(inputs, answers, strict=True):
            (output,) = answer.values()
            np.testing.assert_allclose(output, model(x).numpy(), rtol=1e-5, atol=1e-5)
    assert {info["threads"] for info in infos} == {1}
    assert len({info["pid"] for info in infos}) == 2, "both replicas should answer"
    assert elapsed < 2 * TIMEOUT_S
    print(f"{REQUESTS} requests over 2 replicas answered in {elapsed:.1f} s (incl. start-up)")


def test_bad_requests_and_arguments(ray_cluster, tmp_path):
    from opbridge.deploy.serve import OpbridgeModel, deployment

    with pytest.raises(FileNotFoundError, match="no ONNX model"):
        deployment(tmp_path / "missing.onnx")
    with pytest.raises(ValueError, match="must be >= 1"):
        deployment(tmp_path / "missing.onnx", cpus_per_replica=0)
    model, args = build_llama_block()
    proto = opbridge.export.export(model, args, route="custom", verbose=False)
    replica = OpbridgeModel(proto.SerializeToString(), threads=1)
    with pytest.raises(ValueError, match=r"request lacks inputs \['x'\]"):
        replica({"y": args[0].numpy()})
