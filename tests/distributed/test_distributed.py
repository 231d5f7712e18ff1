"""Training on 2 processes (gloo, loopback): one ``torch.distributed.run``
launch runs every scenario of dist_scenarios.py in turn; each test here reads
one scenario's result. Losses and final parameters of 3 training steps must
equal a single process's within 1e-5."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from two_processes import torchrun

HERE = Path(__file__).resolve().parent
TOLERANCE = 1e-5
# The launch's limit: a hang fails the tests instead of blocking the run.
LAUNCH_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("distributed") / "results.json"
    command = torchrun(str(HERE / "dist_scenarios.py"), str(out))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DIST_TIMEOUT": "60"}
    try:
        run = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"the 2-process launch did not finish in {LAUNCH_TIMEOUT_S} s: {error}")
    if run.returncode != 0 or not out.is_file():
        pytest.fail(f"the 2-process launch failed ({run.returncode}):\n{run.stderr[-6000:]}")
    return json.loads(out.read_text())


def result(results, name: str) -> dict:
    found = results[name]
    assert "error" not in found, found["error"]
    return found


def assert_matches_one_process(found: dict) -> None:
    assert len(found["losses"]) == 3
    assert found["loss_diff"] <= TOLERANCE, found
    assert found["param_diff"] <= TOLERANCE, found


@pytest.mark.parametrize(
    "name", ["ddp", "fsdp2", "tensor_sequence_parallel", "activation_checkpointing"]
)
def test_training_matches_one_process(results, name):
    found = result(results, name)
    assert_matches_one_process(found)
    if name == "activation_checkpointing":
        assert found["block_forwards"] == found["expected_block_forwards"]


def test_compiled_ddp_matches_one_process_with_the_ops_in_the_graphs(results):
    found = result(results, "compiled_ddp")
    assert_matches_one_process(found)
    assert set(found["ops_in_graphs"]) == {
        "opbridge.rms_norm.default",
        "opbridge.add_rms_norm.default",
        "opbridge.rotary_embedding.default",
        "opbridge.bias_gelu.default",
    }


def test_norms_under_sequence_parallel_add_no_collective(results):
    found = result(results, "sequence_parallel_norms_communicate_nothing")
    assert found["rms_norm"] == {} and found["add_rms_norm"] == {}, found
    # Their weights' gradients are partial sums (reduced by the optimizer step).
    assert found["weight_grad_placements"] == ["(Partial(sum),)", "(Partial(sum),)"]
    # The step communicates (the projections): the counting sees collectives.
    assert sum(found["step"].values()) > 0, found


def test_every_op_matches_the_plain_op_under_every_layout(results):
    found = result(results, "op_layouts")
    import opbridge

    assert sorted(found) == sorted(opbridge.specs())
    for name, figures in found.items():
        assert figures["sharded"] > 0, (name, figures)
        for part in ("forward", "gradients", "out"):
            assert figures[part] <= TOLERANCE, (name, part, figures)


def test_patched_hugging_face_llama_under_fsdp2_matches_the_unpatched_model(results):
    found = result(results, "hf_llama_fsdp2")
    assert_matches_one_process(found)
    assert found["patched"], found
