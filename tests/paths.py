"""Where the checkout is, for tests that read its files (whatever folder they are in)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
