"""MkDocs hooks (``hooks:`` in mkdocs.yml): the pages generated at build time.

- ``reference/cli.md``: every ``opbridge`` command's usage, arguments and help,
  rendered from the argparse parser (``opbridge.__main__.build_parser``).
- ``benchmarks.md``: the tables under ``benchmarks/results/`` (``*.md``), the
  speed targets that ``benchmarks/targets.py`` checks on ``latest.json``, and the
  charts (``*.png``, published beside the page).

- ``reference/api/ops.md``: every built-in operator's call, one
  mkdocstrings block per name of ``opbridge.ops.catalog`` (the registry of
  the calls), so that a new operator's call is documented without an edit.

A page asks for a generated part with a marker line, ``<!-- generated: cli -->``,
``<!-- generated: benchmarks -->`` or ``<!-- generated: calls -->``; the rest of
the page is written by hand.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# Result tables on the benchmarks page, in this order, with their headings;
# other *.md files there follow under their own names.
RESULT_PAGES = {
    "latest": "Latest full run (float32)",
    "half": "float16 and bfloat16",
    "hf_families": "Hugging Face families",
    "timm_models": "timm models",
}
MARKER = re.compile(r"^<!-- generated: (\w+) -->$", re.MULTILINE)


def on_files(files, config):
    """Publishes the benchmark charts as ``benchmarks/<name>.png``."""
    for chart in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"benchmarks/{chart.name}", abs_src_path=str(chart)))
    return files


def on_page_markdown(markdown, page, config, files):
    def render(match: re.Match) -> str:
        name = match.group(1)
        if name == "cli":
            return cli_reference()
        if name == "benchmarks":
            return benchmark_results()
        if name == "calls":
            return operator_calls()
        raise ValueError(f"{page.file.src_uri}: unknown generated part {name!r}")

    return MARKER.sub(render, markdown)


# ---------------------------------------------------------------- operator calls


def operator_calls() -> str:
    """A mkdocstrings block for each built-in operator's call, in the
    catalog's order, documented where it is defined (its card module)."""
    from opbridge.ops import catalog

    blocks = []
    for name in catalog.__all__:
        call = getattr(catalog, name)
        blocks += [
            f"::: {call.__module__}.{call.__qualname__}",
            "    options:",
            "      show_root_full_path: false",
            "      heading_level: 3",
            "",
        ]
    return "\n".join(blocks)


# ---------------------------------------------------------------- command line


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if action.help is None:
        return ""
    # the help text as --help prints it (%(default)s and friends expanded)
    return parser._get_formatter()._expand_help(action)


def _invocation(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """``--flag VALUE [VALUE ...]``, ``-o, --out OUT`` or ``model``; choices
    are listed in the row's text, not in the invocation."""
    formatter = parser._get_formatter()
    plain = copy.copy(action)
    plain.choices = None
    if not action.option_strings:
        return formatter._format_args(plain, action.metavar or action.dest)
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return flags
    return f"{flags} {formatter._format_args(plain, action.metavar or action.dest.upper())}"


def _argument_row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    invocation = _invocation(parser, action)
    details = []
    if action.choices is not None and not isinstance(action.choices, dict):
        details.append("choices: " + ", ".join(f"`{c}`" for c in action.choices))
    if action.required and action.option_strings:
        details.append("required")
    takes_value = action.nargs != 0
    if takes_value and action.default not in (None, argparse.SUPPRESS, [], ""):
        default = action.default
        if isinstance(default, list | tuple):
            default = " ".join(map(str, default))
        details.append(f"default `{default}`")
    text = _help(parser, action)
    if details:
        text = f"{text} ({'; '.join(details)})" if text else "; ".join(details)
    return f"| `{_cell(invocation)}` | {_cell(text)} |"


def cli_reference() -> str:
    """Markdown for every ``opbridge`` command, from the argparse parser."""
    from opbridge.__main__ import build_parser

    parser = build_parser()
    lines = []
    helps = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
    for name, sub in _subcommands(parser).items():
        lines += [f"## `opbridge {name}`", ""]
        if helps.get(name):
            lines += [helps[name][0].upper() + helps[name][1:] + ".", ""]
        if sub.description:
            lines += [sub.description.strip(), ""]
        lines += ["```text", sub.format_usage().strip(), "```", ""]
        rows = [
            _argument_row(sub, action)
            for action in sub._actions
            if action.help is not argparse.SUPPRESS and not isinstance(action, argparse._HelpAction)
        ]
        if rows:
            lines += ["| argument | meaning |", "|---|---|", *rows, ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- benchmarks


def _is_table(line: str) -> bool:
    return line.startswith("|")


def _embed(text: str) -> str:
    """A results file as part of a page: its headings two levels down, and
    blank lines around tables (which Markdown needs, the files do not always
    have)."""
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            line = "##" + line
        if out and out[-1].strip() and _is_table(line) != _is_table(out[-1]):
            out.append("")
        out.append(line)
    return "\n".join(out).strip()


def _targets_table() -> str | None:
    """benchmarks/targets.py's table on latest.json, or None without one."""
    report_path = RESULTS / "latest.json"
    script = ROOT / "benchmarks" / "targets.py"
    if not report_path.is_file() or not script.is_file():
        return None
    spec = importlib.util.spec_from_file_location("opbridge_bench_targets", script)
    targets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(targets)
    report = json.loads(report_path.read_text())
    rows = targets.rows(report, 2)
    if not rows:
        return None
    met = sum(1 for *_, ok in rows if ok)
    return f"{targets.markdown(report, 2)}\n\n{met} of {len(rows)} targets met."


def benchmark_results() -> str:
    """Markdown for benchmarks/results/: the speed targets, then each table."""
    lines = []
    table = _targets_table()
    if table is not None:
        lines += [
            "## Speed targets (latest run)",
            "",
            "`benchmarks/targets.py benchmarks/results/latest.json` (float32, DRAM-sized, "
            "2 threads; a ratio is the alternative's time over opbridge's):",
            "",
            table,
            "",
        ]
    names = [n for n in RESULT_PAGES if (RESULTS / f"{n}.md").is_file()]
    names += sorted(p.stem for p in RESULTS.glob("*.md") if p.stem not in RESULT_PAGES)
    for name in names:
        lines += [f"## {RESULT_PAGES.get(name, name)}", ""]
        lines += [f"`benchmarks/results/{name}.md`:", ""]
        if (RESULTS / f"{name}.png").is_file():
            lines += [f"![{name}](benchmarks/{name}.png)", ""]
        lines += [_embed((RESULTS / f"{name}.md").read_text()), ""]
    return "\n".join(lines)
