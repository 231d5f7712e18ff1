"""The ONNX Runtime kernels, on hand-made single-node models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto

import opbridge

from op_cases import OPS, as_tuple, tolerances
from ort_helpers import LEVELS, ONNX_DTYPES, run, session, single_node_model

SPECS = opbridge.specs()


def _attr(attr: dict, value):
    if value is None:
        value = attr["default"]
    kind = attr["type"]
    if kind == "float[]":
        return [float(v) for v in value]
    if kind == "str":
        return str(value)
    if kind in ("int", "bool"):
        return int(value)
    return float(value)


def _node_for(name, sample, dtype):
    """Builds the single-node model of a sample and its numpy feeds."""
    spec = SPECS[name]
    n_inputs = len(spec["inputs"])
    values = list(sample.args) + [None] * (n_inputs + len(spec["attrs"]) - len(sample.args))
    for key, value in sample.kwargs.items():
        names = [p["name"] for p in spec["inputs"]] + [a["name"] for a in spec["attrs"]]
        values[names.index(key)] = value
    feeds, inputs, node_inputs = [], [], []
    for param, value in zip(spec["inputs"], values[:n_inputs], strict=True):
        if value is None:
            node_inputs.append("")
            continue
        array = value.detach().contiguous().numpy()
        feeds.append(array)
        inputs.append((param["name"], ONNX_DTYPES[array.dtype.type], list(array.shape)))
        node_inputs.append(param["name"])
    attrs = {
        attr["name"]: _attr(attr, value)
        for attr, value in zip(spec["attrs"], values[n_inputs:], strict=True)
    }
    model = single_node_model(
        spec["onnx_type"],
        inputs,
        attrs,
        node_inputs=node_inputs,
        outputs=[(out, ONNX_DTYPES[dtype]) for out in spec["outputs"]],
    )
    return model, feeds


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("level", list(LEVELS))
def test_single_node_matches_reference(name, dtype, level):
    case = OPS[name]
    torch_dtype = torch.float32 if dtype == np.float32 else torch.float64
    for sample in case.samples(torch_dtype):
        model, feeds = _node_for(name, sample, dtype)
        outputs = run(model, feeds, level)
        expected_outputs = as_tuple(case.reference(*sample.args, **sample.kwargs))
        assert len(outputs) == len(expected_outputs), sample.label
        for got, expected in zip(outputs, expected_outputs, strict=True):
            expected = expected.detach().numpy()
            assert got.dtype == dtype and got.shape == expected.shape, sample.label
            tol = tolerances(torch_dtype)
            # ONNX stores float attributes in float32; a float64 run sees eps,
            # the clamp bounds, mean and std rounded to float32.
            if dtype == np.float64:
                tol = {"atol": 1e-7, "rtol": 1e-7}
            np.testing.assert_allclose(got, expected, err_msg=sample.label, **tol)


def test_absent_optional_input_as_empty_name():
    x = np.random.randn(3, 8).astype(np.float32)
    w = np.random.randn(8).astype(np.float32)
    model = single_node_model(
        "RmsNorm",
        [("x", TensorProto.FLOAT, [3, 8]), ("w", TensorProto.FLOAT, [8])],
        {"eps": 1e-6},
        node_inputs=["x", "w", ""],
    )
    (got,) = run(model, [x, w])
    expected = OPS["rms_norm"].reference(torch.from_numpy(x), torch.from_numpy(w)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_output_shape_is_inferred_with_symbolic_batch():
    model = single_node_model(
        "ScaledClamp",
        [("x", TensorProto.FLOAT, ["batch", 8])],
        {"scale": 1.0, "min_val": 0.0, "max_val": 1.0},
    )
    out = session(model).get_outputs()[0]
    assert out.shape == ["batch", 8] and out.type == "tensor(float)"


def _load_error(model) -> str:
    with pytest.raises(Exception) as info:
        session(model)
    return str(info.value)


def test_missing_attribute_is_a_clear_error():
    message = _load_error(
        single_node_model(
            "ScaledClamp", [("x", TensorProto.FLOAT, [2, 3])], {"min_val": 0.0, "max_val": 6.0}
        )
    )
    assert "opbridge::ScaledClamp" in message
    assert "attribute 'scale' must be present with type FLOAT" in message
    assert "node0" in message


def test_mistyped_attribute_is_a_clear_error():
    message = _load_error(
        single_node_model(
            "RmsNorm", [("x", TensorProto.FLOAT, [2, 3]), ("w", TensorProto.FLOAT, [3])], {"eps": 1}
        )
    )
    assert (
        "opbridge::RmsNorm" in message
        and "attribute 'eps' must be present with type FLOAT" in message
    )


def test_wrong_number_of_inputs_is_a_clear_error():
    message = _load_error(
        single_node_model("RmsNorm", [("x", TensorProto.FLOAT, [2, 3])], {"eps": 1e-6})
    )
    assert "RmsNorm" in message and "input size 1 not in range [min=2, max=3]" in message
    message = _load_error(
        single_node_model(
            "ScaledClamp",
            [("x", TensorProto.FLOAT, [2, 3]), ("z", TensorProto.FLOAT, [2, 3])],
            {"scale": 1.0, "min_val": 0.0, "max_val": 6.0},
        )
    )
    assert "ScaledClamp" in message and "input size 2 not in range [min=1, max=1]" in message


def test_integer_input_is_a_clear_error():
    message = _load_error(
        single_node_model(
            "ScaledClamp",
            [("x", TensorProto.INT32, [2, 3])],
            {"scale": 1.0, "min_val": 0.0, "max_val": 6.0},
            output_type=TensorProto.INT32,
        )
    )
    expected = "argument 'x' must be float32, float64, float16 or bfloat16, got int32"
    assert f"scaled_clamp (ONNX opbridge::ScaledClamp): {expected}" in message


def test_weight_of_wrong_length_is_a_clear_error():
    # Known at load time: the session refuses the model.
    message = _load_error(
        single_node_model(
            "RmsNorm",
            [("x", TensorProto.FLOAT, [2, 8]), ("w", TensorProto.FLOAT, [7])],
            {"eps": 1e-6},
        )
    )
    assert "argument 'weight' must be 1-D with 8 elements" in message and "got shape [7]" in message
    # Known only at run time: the run fails, the process lives on.
    model = single_node_model(
        "RmsNorm",
        [("x", TensorProto.FLOAT, ["n", "d"]), ("w", TensorProto.FLOAT, ["k"])],
        {"eps": 1e-6},
    )
    with pytest.raises(
        Exception, match=r"argument 'weight' must be 1-D with 8 elements .*got shape \[7\]"
    ):
        run(model, [np.ones((2, 8), np.float32), np.ones(7, np.float32)])


def test_zero_dim_input_is_a_clear_error():
    model = single_node_model(
        "RmsNorm", [("x", TensorProto.FLOAT, None), ("w", TensorProto.FLOAT, None)], {"eps": 1e-6}
    )
    with pytest.raises(Exception, match=r"argument 'x' must have at least 1 dimension"):
        run(model, [np.array(1.0, np.float32), np.ones(1, np.float32)])


def test_nan_follows_the_reference():
    x = np.random.randn(3, 4).astype(np.float32)
    x[0, 0], x[1, 1] = np.nan, np.inf
    model = single_node_model(
        "ScaledClamp",
        [("x", TensorProto.FLOAT, [3, 4])],
        {"scale": 2.0, "min_val": 0.0, "max_val": 6.0},
    )
    (got,) = run(model, [x])
    expected = OPS["scaled_clamp"].reference(torch.from_numpy(x), 2.0).numpy()
    np.testing.assert_array_equal(got, expected)
    model = single_node_model(
        "RmsNorm", [("x", TensorProto.FLOAT, [3, 4]), ("w", TensorProto.FLOAT, [4])], {"eps": 1e-6}
    )
    (got,) = run(model, [x, np.ones(4, np.float32)])
    expected = OPS["rms_norm"].reference(torch.from_numpy(x), torch.ones(4)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert np.array_equal(np.isnan(got), np.isnan(expected))


def test_unknown_op_type_names_the_domain():
    message = _load_error(single_node_model("NoSuchOp", [("x", TensorProto.FLOAT, [2])], {}))
    assert "opbridge:NoSuchOp" in message


def test_library_path_is_absolute_and_exports_only_its_c_api():
    import os
    import subprocess

    path = opbridge.runtimes.onnxruntime.get_library_path()
    assert os.path.isabs(path) and os.path.isfile(path)
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True
    )
    names = [line.split()[-1] for line in symbols.stdout.splitlines() if line.strip()]
    # RegisterCustomOps, and what the library is (library_info.h).
    assert names == ["OpbridgeDomainVersion", "OpbridgeLibraryInfo", "RegisterCustomOps"]
    needed = subprocess.run(
        ["readelf", "-d", path], capture_output=True, text=True, check=True
    ).stdout
    assert "onnxruntime" not in needed


# ------------------------------------------------- newer operators, bad input

F = TensorProto.FLOAT


@pytest.mark.parametrize(
    ("op_type", "inputs", "attrs", "message"),
    [
        (
            "AddRmsNorm",
            [("x", F, [2, 8]), ("r", F, [2, 7]), ("w", F, [8])],
            {"eps": 1e-6},
            r"argument 'residual' must have the shape of x \[2, 8\], got shape \[2, 7\]",
        ),
        (
            "BiasGelu",
            [("x", F, [2, 8]), ("b", F, [8])],
            {"approximate": "fast"},
            r"argument 'approximate' must be 'none' or 'tanh', got 'fast'",
        ),
        (
            "BiasGelu",
            [("x", F, [2, 8]), ("b", F, [8])],
            {"approximate": 1},
            r"attribute 'approximate' must be present with type STRING",
        ),
        (
            "RotaryEmbedding",
            [("x", F, [2, 5, 8]), ("c", F, [5, 4]), ("s", F, [5, 4])],
            {"interleaved": 0},
            r"argument 'x' must be 4-D \[batch, seq, heads, head_dim\]",
        ),
        (
            "RotaryEmbedding",
            [("x", F, [2, 5, 3, 7]), ("c", F, [5, 3]), ("s", F, [5, 3])],
            {"interleaved": 0},
            r"argument 'x' must have an even head_dim",
        ),
        (
            "RotaryEmbedding",
            [("x", F, [2, 5, 3, 8]), ("c", F, [4, 4]), ("s", F, [4, 4])],
            {"interleaved": 0},
            r"argument 'cos' must have seq = 5 rows",
        ),
        (
            "RotaryEmbedding",
            [("x", F, [2, 5, 3, 8]), ("c", F, [5, 4]), ("s", F, [5, 2])],
            {"interleaved": 1},
            r"argument 'sin' must have the shape of cos \[5, 4\], got shape \[5, 2\]",
        ),
        (
            "RotaryEmbedding",
            [("x", F, [2, 5, 3, 8]), ("c", F, [3, 5, 4]), ("s", F, [3, 5, 4])],
            {"interleaved": 0},
            r"argument 'cos' must have batch = 2 \(dimension 0 of x \[2, 5, 3, 8\]\) or 1 when 3-D "
            r"\[batch, seq, rotary_dim / 2\], got shape \[3, 5, 4\]",
        ),
        (
            "RotaryEmbedding",
            [("x", F, [2, 5, 3, 8]), ("c", F, [2, 4, 4]), ("s", F, [2, 4, 4])],
            {"interleaved": 0},
            r"argument 'cos' must have seq = 5 rows \(dimension 1 of x \[2, 5, 3, 8\]\), got shape "
            r"\[2, 4, 4\]",
        ),
        (
            "RotaryEmbedding",
            [("x", F, [2, 5, 3, 8]), ("c", F, [2, 5, 4]), ("s", F, [5, 4])],
            {"interleaved": 1},
            r"argument 'sin' must have the shape of cos \[2, 5, 4\], got shape \[5, 4\]",
        ),
        (
            "RotaryEmbedding",
            [("x", F, [2, 5, 3, 8]), ("c", F, [1, 2, 5, 4]), ("s", F, [1, 2, 5, 4])],
            {"interleaved": 0},
            r"argument 'cos' must be 2-D \[seq, rotary_dim / 2\] or 3-D "
            r"\[batch, seq, rotary_dim / 2\], got 4-D",
        ),
        (
            "NormalizeImage",
            [("image", TensorProto.UINT8, [1, 4, 4, 3])],
            {"mean": [0.5, 0.5], "std": [0.5, 0.5], "channels_last_in": 1},
            r"argument 'mean' must have one value per channel \(3",
        ),
        (
            "NormalizeImage",
            [("image", TensorProto.UINT8, [1, 3, 4, 4])],
            {"mean": [0.5] * 3, "std": [0.5, 0.0, 0.5], "channels_last_in": 0},
            r"argument 'std' must be finite and non-zero",
        ),
        (
            "NormalizeImage",
            [("image", TensorProto.UINT8, [4, 4, 3])],
            {"mean": [0.5] * 3, "std": [0.5] * 3, "channels_last_in": 1},
            r"argument 'image' must be 4-D",
        ),
        (
            "NormalizeImage",
            [("image", TensorProto.UINT8, [1, 4, 4, 3])],
            {"std": [0.5] * 3, "channels_last_in": 1},
            r"attribute 'mean' must be present with type FLOATS",
        ),
    ],
)
def test_newer_ops_bad_model_fails_to_load_with_clear_error(op_type, inputs, attrs, message):
    import re

    spec = next(s for s in SPECS.values() if s["onnx_type"] == op_type)
    outputs = [(name, TensorProto.FLOAT) for name in spec["outputs"]]
    model = single_node_model(op_type, inputs, attrs, outputs=outputs)
    text = _load_error(model)
    assert f"opbridge::{op_type}" in text and "node0" in text, text
    assert re.search(message, text), text


def test_rotary_mismatch_known_only_at_run_time():
    model = single_node_model(
        "RotaryEmbedding",
        [("x", F, ["b", "s", "h", "d"]), ("c", F, ["s2", "k"]), ("s", F, ["s3", "k2"])],
        {"interleaved": 0},
    )
    x = np.ones((2, 5, 3, 8), np.float32)
    with pytest.raises(Exception, match=r"argument 'cos' must have seq = 5 rows"):
        run(model, [x, np.ones((6, 4), np.float32), np.ones((6, 4), np.float32)])
    (got,) = run(model, [x, np.ones((5, 4), np.float32), np.zeros((5, 4), np.float32)])
    np.testing.assert_array_equal(got, x)


def test_rotary_per_batch_tables_with_symbolic_dims():
    """3-D cos/sin [batch, seq, half] (positions per row of a left-padded
    batch): the output shape is inferred, each row equals the 2-D call on
    that row, a batch of 1 broadcasts, and a mismatch known only at run time
    is a clear error."""
    card = OPS["rotary_embedding"]
    model = single_node_model(
        "RotaryEmbedding",
        [("x", F, ["b", "s", 2, 8]), ("c", F, ["cb", "s", 4]), ("s", F, ["cb", "s", 4])],
        {"interleaved": 0},
    )
    out = session(model).get_outputs()[0]
    assert out.shape == ["b", "s", 2, 8] and out.type == "tensor(float)"
    module = opbridge.ops.builtin_module("rotary_embedding")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 6, 2, 8)).astype(np.float32)
    cos, sin = module.left_padded_tables((0, 2, 5), 6, 4)
    (got,) = run(model, [x, cos.numpy(), sin.numpy()])
    for row in range(3):
        (want,) = run(
            single_node_model(
                "RotaryEmbedding",
                [("x", F, [1, 6, 2, 8]), ("c", F, [6, 4]), ("s", F, [6, 4])],
                {"interleaved": 0},
            ),
            [x[row : row + 1], cos[row].numpy(), sin[row].numpy()],
        )
        np.testing.assert_array_equal(got[row : row + 1], want)
    expected = card.reference(torch.from_numpy(x), cos, sin).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # A batch of 1 broadcasts over x's batch.
    (got,) = run(model, [x, cos[:1].numpy(), sin[:1].numpy()])
    np.testing.assert_allclose(
        got, card.reference(torch.from_numpy(x), cos[:1], sin[:1]).numpy(), rtol=1e-5, atol=1e-5
    )
    with pytest.raises(
        Exception, match=r"argument 'cos' must have batch = 3 .* got shape \[2, 6, 4\]"
    ):
        run(model, [x, cos[:2].numpy(), sin[:2].numpy()])


def test_normalize_image_output_shape_is_inferred():
    model = single_node_model(
        "NormalizeImage",
        [("image", TensorProto.UINT8, ["batch", 8, 6, 3])],
        {"mean": [0.5] * 3, "std": [0.25] * 3, "channels_last_in": 1},
    )
    out = session(model).get_outputs()[0]
    # The batch dim is symbolic (a fresh name: the output does not copy an input's shape).
    assert isinstance(out.shape[0], str) and out.shape[1:] == [3, 8, 6]
    assert out.type == "tensor(float)"


def test_add_rms_norm_both_outputs_are_inferred():
    model = single_node_model(
        "AddRmsNorm",
        [("x", F, ["n", 8]), ("r", F, ["n", 8]), ("w", F, [8])],
        {"eps": 1e-6},
        outputs=[("out", F), ("residual_out", F)],
    )
    outs = session(model).get_outputs()
    assert [o.shape for o in outs] == [["n", 8], ["n", 8]]


def test_inputs_of_unknown_rank_are_checked_at_run_time():
    # The C API shows an unknown rank as 0-D; loading must not reject it.
    model = single_node_model(
        "RotaryEmbedding",
        [("x", F, None), ("c", F, None), ("s", F, None)],
        {"interleaved": 1},
    )
    x = np.random.randn(2, 3, 2, 4).astype(np.float32)
    (got,) = run(model, [x, np.ones((3, 2), np.float32), np.zeros((3, 2), np.float32)])
    np.testing.assert_array_equal(got, x)
    with pytest.raises(Exception, match=r"argument 'x' must be 4-D"):
        run(model, [x[0], np.ones((3, 2), np.float32), np.zeros((3, 2), np.float32)])


# ------------------------------------------------ attributes left at their default


F = TensorProto.FLOAT


def _eps_f32(eps):
    # ONNX FLOAT attributes (and their defaults) are float32.
    return float(np.float32(eps))


@pytest.mark.parametrize(
    ("op_type", "inputs", "attrs", "reference"),
    [
        (
            "RmsNorm",
            [("x", F, [3, 8]), ("w", F, [8])],
            {},
            lambda x, w: OPS["rms_norm"].reference(x, w, eps=_eps_f32(1e-6)),
        ),
        (
            "AddRmsNorm",
            [("x", F, [3, 8]), ("r", F, [3, 8]), ("w", F, [8])],
            {},
            lambda x, r, w: OPS["add_rms_norm"].reference(x, r, w, eps=_eps_f32(1e-6)),
        ),
        (
            "ScaledClamp",
            [("x", F, [3, 8])],
            {"scale": 4.0},  # min_val 0, max_val 6 by default
            lambda x: torch.clamp(x * 4.0, 0.0, 6.0),
        ),
        (
            "ScaledClamp",
            [("x", F, [3, 8])],
            {"scale": 4.0, "max_val": 1.0},
            lambda x: torch.clamp(x * 4.0, 0.0, 1.0),
        ),
        (
            "BiasGelu",
            [("x", F, [3, 8]), ("b", F, [8])],
            {},  # approximate 'none': the erf form
            lambda x, b: torch.nn.functional.gelu(x + b),
        ),
        (
            "RotaryEmbedding",
            [("x", F, [2, 3, 2, 8]), ("c", F, [3, 4]), ("s", F, [3, 4])],
            {},  # interleaved False
            lambda x, c, s: OPS["rotary_embedding"].reference(x, c, s, False),
        ),
        (
            "NormalizeImage",
            [("image", TensorProto.UINT8, [1, 4, 5, 3])],
            {"mean": [0.1, 0.2, 0.3], "std": [0.5, 0.25, 2.0]},  # channels_last_in True
            lambda image: OPS["normalize_image"].reference(
                image, [0.1, 0.2, 0.3], [0.5, 0.25, 2.0], True
            ),
        ),
    ],
)
def test_absent_attribute_takes_the_spec_default(op_type, inputs, attrs, reference):
    spec = next(s for s in SPECS.values() if s["onnx_type"] == op_type)
    outputs = [(name, F) for name in spec["outputs"]]
    model = single_node_model(op_type, inputs, attrs, outputs=outputs)
    rng = np.random.default_rng(0)
    feeds = []
    for _, kind, shape in inputs:
        if kind == TensorProto.UINT8:
            feeds.append(rng.integers(0, 256, shape, dtype=np.uint8))
        else:
            feeds.append(rng.standard_normal(shape).astype(np.float32))
    expected = as_tuple(reference(*[torch.from_numpy(f) for f in feeds]))
    for level in LEVELS:
        sess = session(model, level)
        # Shape inference knew the default too (NormalizeImage: NHWC -> NCHW).
        assert sess.get_outputs()[0].shape == list(expected[0].shape)
        got = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], feeds, strict=True)))
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e.numpy(), rtol=1e-5, atol=1e-5, err_msg=level)


def test_absent_required_attribute_says_it_has_no_default():
    message = _load_error(single_node_model("ScaledClamp", [("x", F, [2, 3])], {}))
    assert "attribute 'scale' must be present with type FLOAT (float): it has no default" in message
    message = _load_error(
        single_node_model(
            "NormalizeImage", [("image", TensorProto.UINT8, [1, 4, 4, 3])], {"mean": [0.5] * 3}
        )
    )
    assert (
        "attribute 'std' must be present with type FLOATS (float[]): it has no default" in message
    )
