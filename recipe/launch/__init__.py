"""One way to launch a run: a typed run spec (its overrides are built here and nowhere else), the
tiny-run settings the tests and the preflight share, and ``main_copo`` started as a process group."""

from recipe.launch.process import MODULE, command, start
from recipe.launch.spec import RunSpec, format_overrides, hydra_value, parse_overrides
from recipe.launch.tiny import TINY_CPU, TINY_RUN, tiny_run

__all__ = [
    "MODULE",
    "TINY_CPU",
    "TINY_RUN",
    "RunSpec",
    "command",
    "format_overrides",
    "hydra_value",
    "parse_overrides",
    "start",
    "tiny_run",
]
