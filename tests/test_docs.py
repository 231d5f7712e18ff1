from pathlib import Path

from opbridge.docs import render_operators

DOCS = Path(__file__).parents[1] / "docs" / "operators.md"


def test_operator_docs_are_generated_from_the_specs():
    text = render_operators()
    assert "opbridge::RmsNorm" in text and "`eps` | float | default `1e-06`" in text
    assert DOCS.read_text() == text + "\n", (
        "docs/operators.md is stale: run `opbridge docs --out docs/operators.md`"
    )
