"""opbridge command line (``opbridge COMMAND`` or ``python -m opbridge COMMAND``):
see :mod:`opbridge.cli`."""

import sys

from opbridge.cli import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
