"""The documentation's code cannot rot: every ```python block of the guides
(docs/guides/*.md), the getting-started and benchmarks pages and the README
runs here, each page's blocks in order in one namespace, with a fresh
temporary directory as the working directory.

A block that must not run here (it needs a GPU, a download, another
environment, or a file of the reader's) is marked ```python {.no-run} and is
only compiled. Shell examples are ```bash blocks and are not run. A block of
another language with a title (```cpp title="softclip.cpp") is a file the
page's code uses: it is written, under that name, where the page runs, when
the page's blocks reach it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "getting-started.md",
    ROOT / "docs" / "benchmarks.md",
    *sorted((ROOT / "docs" / "guides").glob("*.md")),
]
# A fenced block: an opening ``` line (maybe indented, inside a list), its
# info string, and the body up to the closing fence at the same indent.
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<info>[^`\n]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
NO_RUN = "{.no-run}"
TITLE = re.compile(r'title="([^"]+)"')


@dataclass
class Block:
    line: int  # of the first line of code in the page
    info: str
    code: str

    @property
    def language(self) -> str:
        return self.info.split()[0] if self.info.split() else ""

    @property
    def runs(self) -> bool:
        return self.info.split()[1:] != [NO_RUN]

    @property
    def file(self) -> str | None:
        """The title of a block of another language than Python: a file."""
        found = TITLE.search(self.info)
        return found.group(1) if found and self.language != "python" else None


def blocks(text: str) -> list[Block]:
    found = []
    for match in FENCE.finditer(text):
        indent = match.group("indent")
        lines = match.group("body").splitlines()
        code = "\n".join(line.removeprefix(indent) for line in lines)
        line = text.count("\n", 0, match.start("body")) + 1
        found.append(Block(line, match.group("info").strip(), code + "\n"))
    return found


def python_blocks(page: Path) -> list[Block]:
    return [b for b in blocks(page.read_text()) if b.language == "python"]


def _id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def test_fences_are_recognized():
    text = (
        "# t\n\n```python\nx = 1\n```\n\n- item\n\n  ```python {.no-run}\n  y = x\n  ```\n"
        "\n```bash\nls\n```\n"
    )
    found = blocks(text)
    assert [(b.language, b.runs, b.line, b.code) for b in found] == [
        ("python", True, 4, "x = 1\n"),
        ("python", False, 10, "y = x\n"),
        ("bash", True, 14, "ls\n"),
    ]
    (titled,) = blocks('```cpp title="ops/softclip.cpp"\nint x;\n```\n')
    assert (titled.language, titled.file, titled.code) == ("cpp", "ops/softclip.cpp", "int x;\n")
    assert found[0].file is None and found[2].file is None


def test_every_page_is_there_and_shows_code():
    for page in PAGES:
        assert page.is_file(), page
    assert len(PAGES) >= 9
    assert all(python_blocks(page) for page in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_code_blocks_are_labelled(page):
    # A python block carries nothing but an optional {.no-run}: anything else
    # (a typo such as "python no-run") would neither run nor render as code.
    for block in blocks(page.read_text()):
        assert block.language, f"{_id(page)}:{block.line}: a code block without a language"
        if block.language == "python":
            assert block.info.split()[1:] in ([], [NO_RUN]), (
                f"{_id(page)}:{block.line}: python block info {block.info!r}; "
                f"use ```python or ```python {NO_RUN}"
            )


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_python_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for block in blocks(page.read_text()):
        if block.file:
            (tmp_path / block.file).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / block.file).write_text(block.code)
        if block.language != "python":
            continue
        # padded so that a traceback names the page's own line numbers
        code = compile("\n" * (block.line - 1) + block.code, _id(page), "exec")
        if block.runs:
            exec(code, namespace)
