"""Operator documentation generated from the specs (never written by hand)."""

from __future__ import annotations

import inspect

from opbridge._library import ONNX_DOMAIN, ONNX_DOMAIN_VERSION, specs
from opbridge.export import routes
from opbridge.ops import card


def _default(attr: dict) -> str:
    if attr["default"] is None:
        return "required"
    return f"default `{attr['default']!r}`"


def render_operators() -> str:
    """Markdown for every operator: schema, ONNX node, standard decomposition
    (from the spec and the operator's card)."""
    lines = [
        "# opbridge operators",
        "",
        "Generated from the C++ specs by `opbridge docs`; do not edit by hand.",
        f"Custom-route nodes live in ONNX domain `{ONNX_DOMAIN}`, version {ONNX_DOMAIN_VERSION}.",
        "",
        "A node may leave out an attribute that has a default: the ONNX Runtime library then",
        "uses the default below (a float default rounded to float32, as ONNX stores FLOAT",
        "attributes). A missing attribute without a default fails at load, naming it.",
        "",
        "ONNX FLOAT attributes are 32-bit. With float64 tensors the custom route computes with",
        "each float attribute rounded to float32 (`scaled_clamp(x, 1.0, 0.1, 0.7)` clamps at",
        "0.10000000149011612 in ONNX Runtime, at 0.1 in PyTorch); the standard route carries",
        "them as float64 constants, exactly.",
        "",
    ]
    for name, spec in specs().items():
        lines += [
            f"## `{name}`",
            "",
            spec["doc"],
            "",
            f"- PyTorch: `torch.ops.opbridge.{spec['torch_schema']}`",
            f"- backward: `torch.ops.opbridge.{spec['backward_schema']}`",
            f"- ONNX node: `{ONNX_DOMAIN}::{spec['onnx_type']}`",
            "",
            "| ONNX input | optional |",
            "|---|---|",
        ]
        lines += [f"| `{p['name']}` | {'yes' if p['optional'] else 'no'} |" for p in spec["inputs"]]
        lines += ["", "| attribute | type | |", "|---|---|---|"]
        lines += [f"| `{a['name']}` | {a['type']} | {_default(a)} |" for a in spec["attrs"]]
        lines += ["", "Outputs: " + ", ".join(f"`{o}`" for o in spec["outputs"]), ""]
        lines += _route_forms(card(name))
    return "\n".join(lines)


def _route_forms(found) -> list[str]:
    """One paragraph per route that builds the op from other ONNX operators:
    the form's docstring, or which form it falls back to."""
    lines = []
    for route in routes.routes().values():
        if route.library_node:
            continue
        if route.own_form(found):
            form = route.form(found) or found.standard
            text = "none" if form is None else " ".join((inspect.getdoc(form) or "").split())
        else:
            text = "the standard form."
        lines += [f"{route.label}: {text}", ""]
    return lines
