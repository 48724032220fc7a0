"""The repository root, for tests that read or run files of the checkout."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
