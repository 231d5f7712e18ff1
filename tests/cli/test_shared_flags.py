"""The flags several commands take are one definition (opbridge.cli.common):
the same spelling, meaning and help everywhere; export and verify take both
batch flags, each command keeping its own default."""

from __future__ import annotations

import pytest

from opbridge.cli import build_parser

MODEL = {
    "export": ["demo", "out.onnx", "--route", "custom"],
    "verify": ["demo", "--route", "custom"],
}
DYNAMIC_BY_DEFAULT = {"export": False, "verify": True}


@pytest.fixture(scope="module")
def parser():
    return build_parser()


@pytest.mark.parametrize("command", sorted(MODEL))
def test_both_batch_flags_with_the_command_default(parser, command):
    parse = parser.parse_args
    assert parse([command, *MODEL[command]]).dynamic_batch is DYNAMIC_BY_DEFAULT[command]
    assert parse([command, *MODEL[command], "--dynamic-batch"]).dynamic_batch is True
    assert parse([command, *MODEL[command], "--static-batch"]).dynamic_batch is False
    with pytest.raises(SystemExit):
        parse([command, *MODEL[command], "--dynamic-batch", "--static-batch"])


def _help(parser, command) -> dict[str, str]:
    subparsers = next(a for a in parser._actions if a.dest == "command")
    return {
        flag: action.help
        for action in subparsers.choices[command]._actions
        for flag in action.option_strings
    }


@pytest.mark.parametrize("command", sorted(MODEL))
def test_the_help_names_the_command_default(parser, command):
    default = "--dynamic-batch" if DYNAMIC_BY_DEFAULT[command] else "--static-batch"
    other = "--static-batch" if DYNAMIC_BY_DEFAULT[command] else "--dynamic-batch"
    flags = _help(parser, command)
    assert flags[default].endswith("(the default)")
    assert "default" not in flags[other]


def test_a_shared_flag_has_one_help(parser):
    helps = [_help(parser, command) for command in ("export", "verify")]
    for flag in ("--legacy", "--dynamic-batch", "--static-batch", "--runtime", "--import"):
        assert flag in helps[0] and flag in helps[1], flag
    assert helps[0]["--legacy"] == helps[1]["--legacy"]
    assert helps[0]["--runtime"] == helps[1]["--runtime"]
    assert helps[1]["--dynamic-sequence"].startswith(helps[0]["--dynamic-sequence"])
