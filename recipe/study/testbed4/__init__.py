"""Testbed v4: the regime map (issue 37)."""
