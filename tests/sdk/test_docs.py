from opbridge.sdk.docs import render_operators

from paths import ROOT

DOCS = ROOT / "docs" / "reference" / "operators.md"


def test_operator_docs_are_generated_from_the_specs():
    text = render_operators()
    assert "opbridge::RmsNorm" in text and "`eps` | float | default `1e-06`" in text
    assert DOCS.read_text() == text + "\n", (
        "docs/reference/operators.md is stale: "
        "run `opbridge docs --out docs/reference/operators.md`"
    )
