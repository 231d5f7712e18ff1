"""The custom-op library on the oldest and the newest supported ONNX Runtime.

Run with the project's environment (``./dev test`` does):

    .venv/bin/python scripts/check_ort_range.py [--keep DIR]
    .venv/bin/python scripts/check_ort_range.py --prepare   # step 2 only

1. Checks that ort-range.txt pins the releases that csrc/opbridge/version.h
   names (the floor's minor is ORT_API_FLOOR, the newest is
   ORT_NEWEST_TESTED, "older" is the release below the floor).
2. Makes (once; cached under .ort-range/, stamped on the pins) a scratch
   Python environment per role holding only that onnxruntime and numpy.
3. Here, in the project's environment: exports the demo models by the custom
   route (dynamic batch) with PyTorch's outputs, and builds a single-node
   model for every operator, every dtype it takes and every sample of its
   card, with the outputs this environment's ONNX Runtime computes.
4. In the floor's and the newest's environments: the built library runs
   every model at every optimization level and must give those outputs
   (scripts/ort_range_runner.py). In the "older" environment, registering
   the library must fail with opbridge's message naming both versions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PINS = ROOT / "ort-range.txt"
ENVS = ROOT / ".ort-range"
STAMPS = ROOT / ".stamps"
RUNNER = ROOT / "scripts" / "ort_range_runner.py"
ROLES = ("floor", "newest", "older")
PYTHON = "python3.11"
# Single-node models: the IR version and opset the tests' models have.
IR_VERSION = 10
OPSET = 18


def log(message: str) -> None:
    print(f"[ort-range] {message}", file=sys.stderr, flush=True)


def read_pins(path: Path = PINS) -> dict[str, list[str]]:
    """role -> its exact requirements, from ort-range.txt."""
    pins: dict[str, list[str]] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        role, *packages = line.split()
        if role not in ROLES or role in pins:
            raise SystemExit(f"{path}:{number}: expected one line per role {ROLES}, got {role!r}")
        for package in packages:
            name, _, version = package.partition("==")
            if not name or not version:
                raise SystemExit(f"{path}:{number}: expected NAME==VERSION, got {package!r}")
        pins[role] = packages
    missing = [role for role in ROLES if role not in pins]
    if missing:
        raise SystemExit(f"{path}: no line for {missing}")
    return pins


def pinned_version(packages: list[str], name: str) -> str:
    for package in packages:
        if package.partition("==")[0] == name:
            return package.partition("==")[2]
    raise SystemExit(f"{PINS}: {name} is not pinned in {packages}")


def check_pins_match_constants(pins: dict[str, list[str]], floor: int, newest: str) -> list[str]:
    """Where ort-range.txt and version.h disagree (empty when they agree)."""
    problems = []
    found = {role: pinned_version(pins[role], "onnxruntime") for role in ROLES}
    minor = {role: found[role].split(".")[:2] for role in ROLES}
    if minor["floor"] != ["1", str(floor)]:
        problems.append(f"floor: version.h says 1.{floor}, ort-range.txt pins {found['floor']}")
    if found["newest"] != newest:
        problems.append(f"newest: version.h says {newest}, ort-range.txt pins {found['newest']}")
    if minor["older"] != ["1", str(floor - 1)]:
        problems.append(
            f"older: the release below the floor 1.{floor} is a 1.{floor - 1}, "
            f"ort-range.txt pins {found['older']}"
        )
    return problems


def scratch_python(role: str, packages: list[str]) -> Path:
    """The Python of the role's scratch environment, made when its pins changed."""
    env = ENVS / role
    python = env / "bin" / "python"
    stamp = STAMPS / f"ort-range-{role}"
    want = " ".join([PYTHON, *packages])
    if python.exists() and stamp.exists() and stamp.read_text().strip() == want:
        return python
    log(f"making the {role} environment: {' '.join(packages)}")
    shutil.rmtree(env, ignore_errors=True)
    subprocess.run([PYTHON, "-m", "venv", str(env)], check=True)
    # --no-compile: modules are compiled when first imported (as in ./dev).
    install = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*install, "--no-compile", *packages], check=True)
    STAMPS.mkdir(exist_ok=True)
    stamp.write_text(want + "\n")
    return python


def _attribute(kind: str, value):
    if kind == "float[]":
        return [float(v) for v in value]
    if kind == "str":
        return str(value)
    if kind in ("int", "bool"):
        return int(value)
    return float(value)


def export_cases(out: Path) -> dict:
    """Writes every model, its inputs and expected outputs to ``out``; returns
    the manifest."""
    import numpy as np
    import onnx
    import torch
    from onnx import helper

    import opbridge
    from opbridge.demo.models import DEMO_MODELS
    from opbridge.ops import card

    cases = []

    def save(name: str, model, inputs: dict, outputs: list, tolerance: float) -> None:
        onnx.save(model, out / f"{name}.onnx")
        arrays = {f"in_{k}": v for k, v in inputs.items()}
        arrays.update({f"out_{k}": np.asarray(v) for k, v in enumerate(outputs)})
        np.savez(out / f"{name}.npz", **arrays)
        cases.append(
            {
                "name": name,
                "model": f"{name}.onnx",
                "data": f"{name}.npz",
                "inputs": list(inputs),
                "atol": tolerance,
                "rtol": tolerance,
            }
        )

    # (a) Saved custom-route models, against PyTorch, at two batch sizes.
    for name, build in DEMO_MODELS.items():
        model, args = build(0)
        proto = opbridge.export.export(
            model,
            args,
            None,
            route="custom",
            dynamic_shapes=({0: torch.export.Dim("batch")},),
            verbose=False,
        )
        for batch in (args[0].shape[0], 3):
            x = torch.cat([args[0]] * 3)[:batch] if batch != args[0].shape[0] else args[0]
            with torch.no_grad():
                expected = model(x).numpy()
            save(
                f"{name}_custom_batch{batch}",
                proto,
                {proto.graph.input[0].name: x.numpy()},
                [expected],
                1e-4,
            )

    # (b) One single-node model per operator, dtype and sample, against this
    # environment's ONNX Runtime. float32 and float64 must run; float16 and
    # uint8 are kept where the operator takes them.
    onnx_types = {
        np.dtype(np.float32): onnx.TensorProto.FLOAT,
        np.dtype(np.float64): onnx.TensorProto.DOUBLE,
        np.dtype(np.float16): onnx.TensorProto.FLOAT16,
        np.dtype(np.uint8): onnx.TensorProto.UINT8,
    }
    tolerances = {torch.float32: 1e-6, torch.float64: 1e-12, torch.float16: 1e-3, torch.uint8: 1e-6}
    import onnxruntime

    for op, spec in opbridge.specs().items():
        op_card = card(op)
        for dtype, tolerance in tolerances.items():
            kept = 0
            for index, sample in enumerate(op_card.samples(dtype, large=False)):
                names = [p["name"] for p in spec["inputs"]] + [a["name"] for a in spec["attrs"]]
                values = dict(zip(names, sample.args, strict=False))
                values.update(sample.kwargs)
                feeds, value_infos, node_inputs = {}, [], []
                for param in spec["inputs"]:
                    value = values.get(param["name"])
                    if value is None:
                        node_inputs.append("")
                        continue
                    array = value.detach().contiguous().numpy()
                    feeds[param["name"]] = array
                    value_infos.append(
                        helper.make_tensor_value_info(
                            param["name"], onnx_types[array.dtype], list(array.shape)
                        )
                    )
                    node_inputs.append(param["name"])
                attrs = {
                    a["name"]: _attribute(a["type"], values[a["name"]])
                    for a in spec["attrs"]
                    if values.get(a["name"]) is not None
                }
                node = helper.make_node(
                    spec["onnx_type"],
                    node_inputs,
                    list(spec["outputs"]),
                    domain=spec["onnx_domain"],
                    name="node0",
                    **attrs,
                )
                graph = helper.make_graph(
                    [node],
                    "single_node",
                    value_infos,
                    [helper.ValueInfoProto(name=name) for name in spec["outputs"]],
                )
                model = helper.make_model(
                    graph,
                    opset_imports=[
                        helper.make_opsetid("", OPSET),
                        helper.make_opsetid(spec["onnx_domain"], 1),
                    ],
                    ir_version=IR_VERSION,
                )
                options = onnxruntime.SessionOptions()
                options.graph_optimization_level = (
                    onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
                )
                options.log_severity_level = 4  # a dtype the op refuses is expected below
                try:
                    session = opbridge.runtimes.onnxruntime.InferenceSession(
                        model, sess_options=options
                    )
                    outputs = session.run(None, feeds)
                except Exception:
                    if dtype in (torch.float32, torch.float64):
                        raise
                    break  # the operator does not take this dtype
                save(
                    f"{op}_{str(dtype).removeprefix('torch.')}_{index}",
                    model,
                    feeds,
                    outputs,
                    tolerance,
                )
                kept += 1
            if dtype in (torch.float32, torch.float64) and kept == 0:
                raise SystemExit(f"{op}: its card has no {dtype} sample")
    import opbridge._library

    floor = opbridge._library._C.ORT_API_FLOOR
    manifest = {"cases": cases, "refusal_must_name": [f"ONNX Runtime 1.{floor} or newer"]}
    (out / "cases.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="write the cases here and keep them")
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="only make the scratch environments (needs no build: ./dev test makes them "
        "while it compiles)",
    )
    args = parser.parse_args()
    started = time.monotonic()
    if args.prepare:
        for role, packages in read_pins().items():
            scratch_python(role, packages)
        return 0

    import opbridge
    from opbridge._library import _C

    pins = read_pins()
    problems = check_pins_match_constants(pins, _C.ORT_API_FLOOR, _C.ORT_NEWEST_TESTED)
    if problems:
        for problem in problems:
            log(f"ort-range.txt and csrc/opbridge/version.h disagree: {problem}")
        return 1
    pythons = {role: scratch_python(role, pins[role]) for role in ROLES}
    library = opbridge.runtimes.onnxruntime.get_library_path()

    with tempfile.TemporaryDirectory(prefix="ort-range-") as scratch:
        out = args.keep or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        manifest = export_cases(out)
        log(f"{len(manifest['cases'])} models exported to {out}")
        failed = []
        for role in ROLES:
            command = [str(pythons[role]), str(RUNNER), library, str(out)]
            if role == "older":
                command.append("--refused")
            result = subprocess.run(command, capture_output=True, text=True)
            for line in (result.stdout + result.stderr).splitlines():
                log(f"{role}: {line}")
            if result.returncode < 0:
                log(f"{role}: the runner died of signal {-result.returncode}")
            if result.returncode != 0:
                failed.append(role)
    log(f"done in {time.monotonic() - started:.0f} s")
    if failed:
        log(f"FAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
