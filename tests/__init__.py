"""Test suite (a regular package: verl 0.9.1 and TransferQueue install a top-level `tests` package)."""
