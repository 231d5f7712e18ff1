"""opbridge.runtimes.onnxruntime.bind: inputs and preallocated outputs bound
once, run repeatedly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import opbridge
from opbridge.demo.models import build_llama_block
from opbridge.runtimes.onnxruntime import bind


@pytest.fixture(scope="module")
def session_and_model():
    model, args = build_llama_block()
    proto = opbridge.export.export(model, args, route="custom", dynamic_batch=True, verbose=False)
    return (
        opbridge.runtimes.onnxruntime.InferenceSession(proto),
        model,
        args,
        proto.graph.input[0].name,
    )


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_bound_runs_equal_plain_runs_and_read_inputs_in_place(session_and_model, kind):
    session, model, args, name = session_and_model
    x = args[0].clone() if kind == "torch" else args[0].numpy().copy()
    bound = bind(session, {name: x})
    (out_name,) = bound.outputs
    out = bound.outputs[out_name]
    pointer = out.data_ptr() if kind == "torch" else out.ctypes.data
    first = np.array(bound.run()[out_name])
    np.testing.assert_array_equal(first, session.run(None, {name: np.asarray(x)})[0])
    # New data written into the bound input is what the next run reads.
    with torch.no_grad():
        fresh = torch.randn(args[0].shape)
        expected = model(fresh).numpy()
    if kind == "torch":
        x.copy_(fresh)
    else:
        x[...] = fresh.numpy()
    result = bound.run()[out_name]
    assert (result.data_ptr() if kind == "torch" else result.ctypes.data) == pointer
    np.testing.assert_allclose(np.asarray(result), expected, rtol=1e-5, atol=1e-5)


def test_caller_outputs_are_written_in_place(session_and_model):
    session, _, args, name = session_and_model
    x = args[0].numpy().copy()
    out = np.full(tuple(args[0].shape), np.nan, dtype=np.float32)
    out_name = session.get_outputs()[0].name
    bind(session, {name: x}, {out_name: out}).run()
    np.testing.assert_array_equal(out, session.run(None, {name: x})[0])


def test_bad_bindings_are_refused_naming_the_input(session_and_model):
    session, _, args, name = session_and_model
    with pytest.raises(ValueError, match=r"missing \['" + name):
        bind(session, {})
    with pytest.raises(ValueError, match=f"input '{name}' is not contiguous"):
        bind(session, {name: args[0].transpose(0, 1)})
    with pytest.raises(TypeError, match="numpy array or a torch tensor, got list"):
        bind(session, {name: [1.0]})
