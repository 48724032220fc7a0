"""README and docs stay true: links resolve, README's commands are the ones the scripts document,
every script's --help states its defaults as values.

* Links: every relative link in README.md and docs/**/*.md points at a file or folder that exists, and a
  ``#anchor`` names a heading of the target markdown file (GitHub's heading slugs).
* Commands: every line of README's fenced ``bash`` blocks is checked against what it runs. A Python script's
  arguments go through the script's own argparse parser (the script runs in a subprocess up to its argument
  parsing: tests/argparse_probe.py); a shell script's
  ``--opt`` must appear in its ``--help``; a pytest target must exist. README's main_copo command runs as
  written in ``tests/e2e/test_readme_cpu_command.py``. A line this file does not know how to check fails.
* ``tests/test_docs.py`` itself is checked to fail on a broken link and on an unknown option
  (``test_the_checks_catch_...``).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.argparse_probe import undocumented_defaults
from tests.paths import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```[^\n]*\n.*?^```", re.S | re.M)
_BASH = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


# --- links --------------------------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(md: Path) -> set[str]:
    text = _FENCE.sub("", md.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} +(.+?) *$", text, re.M)}


def broken_links(md: Path, text: str | None = None) -> list[str]:
    """Every relative link of ``md`` (or of ``text``, read as if it were ``md``) that does not resolve."""
    text = _FENCE.sub("", md.read_text() if text is None else text)
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
    broken = []
    for m in _LINK.finditer(text):
        target = m.group(1) or m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (md.parent / path).resolve() if path else md
        if not resolved.exists():
            broken.append(f"{md.relative_to(REPO)}: {target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{md.relative_to(REPO)}: {target} (no heading with that anchor)")
    return broken


def count_links(md: Path) -> int:
    text = re.sub(r"`[^`\n]*`", "", _FENCE.sub("", md.read_text()))
    return sum(
        1 for m in _LINK.finditer(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", m.group(1) or m.group(2))
    )


def test_readme_is_a_five_minute_read() -> None:
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= 250, f"README.md has {lines} lines (at most 250: move detail to docs/ and link it)"


def test_every_relative_link_resolves() -> None:
    assert sum(count_links(md) for md in DOCS) > 50, "the link pattern found almost no links: is it broken?"
    broken = [b for md in DOCS for b in broken_links(md)]
    assert not broken, "broken links:\n" + "\n".join(broken)


# --- README's commands -----------------------------------------------------------------------------------


def probe(target: str, trials: list[list[str]] | None = None) -> dict:
    """Run ``target`` (a script path, or ``-m:module``) in a subprocess up to its argument parsing
    (tests/argparse_probe.py): its undocumented defaults and argparse's verdict on each of ``trials``."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.argparse_probe", target, json.dumps(trials or [])],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"probing {target} failed: {done.stderr[-1500:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


_HELP_CACHE: dict[str, str] = {}


def shell_help(script: str) -> str:
    if script not in _HELP_CACHE:
        done = subprocess.run(
            ["bash", script, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, f"bash {script} --help exited {done.returncode}: {done.stderr[-500:]}"
        _HELP_CACHE[script] = done.stdout + done.stderr
    return _HELP_CACHE[script]


def readme_commands(text: str) -> list[list[str]]:
    """Every command of the fenced bash blocks: continuations joined, comments and env assignments dropped."""
    commands = []
    for block in _BASH.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv and argv[0] == "export":
                continue
            while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):
                argv = argv[1:]
            if argv:
                commands.append(argv)
    return commands


def command_error(argv: list[str]) -> str | None:
    """Why ``argv`` is not a command its script documents, or None."""
    if argv[0] == "bash":
        script = argv[1]
        if not (REPO / script).is_file():
            return f"{script}: no such script"
        if script.startswith("recipe/copo/run_"):  # args are Hydra overrides: checked by the dry run below
            return None
        documented = set(re.findall(r"--[a-z][\w-]*", shell_help(script)))
        unknown = [
            a.split("=")[0] for a in argv[2:] if a.startswith("--") and a.split("=")[0] not in documented
        ]
        return f"{script}: options not in its --help: {unknown}" if unknown else None
    if argv[0] == "sbatch":
        script = argv[-1]
        return None if (REPO / script).is_file() else f"{script}: no such script"
    python = argv[0] in ("python", ".venv/bin/python")
    if python and argv[1:3] == ["-m", "pytest"]:
        missing = [a for a in argv[3:] if a.startswith("tests/") and not (REPO / a.split("::")[0]).exists()]
        return f"pytest targets missing: {missing}" if missing else None
    if python and argv[1:3] == ["-m", "recipe.copo.main_copo"]:
        return None  # runs as written: tests/e2e/test_readme_cpu_command.py
    if python and argv[1] == "-m":
        return probe("-m:" + argv[2], [argv[3:]])["errors"][0]
    if python and argv[1].startswith("scripts/"):
        return probe(argv[1], [argv[2:]])["errors"][0]
    return f"{argv[0]} ...: this test does not know how to check it (teach command_error)"


def test_every_readme_command_is_documented_by_its_script() -> None:
    commands = readme_commands((REPO / "README.md").read_text())
    assert len(commands) >= 20, f"only {len(commands)} commands found in README's bash blocks"
    errors = [f"{shlex.join(argv)}\n    -> {err}" for argv in commands if (err := command_error(argv))]
    assert not errors, "README commands that their scripts do not accept:\n" + "\n".join(errors)


def test_readme_run_script_commands_dry_run(tmp_path: Path) -> None:
    """The recipe run scripts take Hydra overrides: DRY_RUN=1 composes nothing but must accept the line."""
    runs = [
        a
        for a in readme_commands((REPO / "README.md").read_text())
        if a[:2] == ["bash", a[1]] and a[1].startswith("recipe/copo/run_")
    ]
    assert runs, "README shows no recipe/copo/run_*.sh command"
    env = {"PATH": "/usr/bin:/bin", "DATA_DIR": str(tmp_path), "CKPT_DIR": str(tmp_path), "DRY_RUN": "1"}
    for argv in runs:
        done = subprocess.run(
            argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, f"{shlex.join(argv)}: {done.stderr[-500:]}"
        assert "recipe.copo.main_copo" in done.stdout and all(a in done.stdout for a in argv[2:]), done.stdout


# --- --help states defaults ------------------------------------------------------------------------------


PY_SCRIPTS = [
    *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "scripts").rglob("*.py")),
    "-m:tests.flake_check",  # scripts/flake_check.sh's --help
    "-m:data_prep",  # README's python -m data_prep
]


@pytest.mark.parametrize("script", PY_SCRIPTS)
def test_python_script_help_states_its_defaults(script: str) -> None:
    missing = probe(script)["undocumented"]
    assert not missing, f"{script} --help does not state these defaults: {missing}"


SH_SCRIPTS = sorted(
    p.relative_to(REPO).as_posix()
    for p in [*(REPO / "scripts").glob("*.sh"), *(REPO / "scripts" / "cluster").glob("*.sh")]
)


@pytest.mark.parametrize("script", SH_SCRIPTS)
def test_shell_script_help_states_defaults_as_values(script: str) -> None:
    """A default given as another file's ("default: X's") sends the reader elsewhere for a value."""
    vague = re.findall(r"default[^\n]*?\b[\w./]+'s\)", shell_help(script))
    assert not vague, f"bash {script} --help names a default without its value: {vague}"


# --- the checks can fail -----------------------------------------------------------------------------------


def test_the_checks_catch_a_broken_link_and_a_bad_anchor() -> None:
    readme = REPO / "README.md"
    text = (
        "[a](docs/NO_SUCH_FILE.md) [b](docs/SPEC.md#no-such-heading) [c](docs/SPEC.md) [d](https://x.org/y)"
    )
    assert broken_links(readme, text) == [
        "README.md: docs/NO_SUCH_FILE.md (no such file)",
        "README.md: docs/SPEC.md#no-such-heading (no heading with that anchor)",
    ]


def test_the_checks_catch_unknown_options() -> None:
    text = "```bash\nbash scripts/quickstart.sh --stepz 3\npython scripts/evaluate.py --model m --data d --kk 3\n```\n"
    bad, good = readme_commands(text), readme_commands("```bash\nbash scripts/quickstart.sh --steps 3\n```\n")
    assert "--stepz" in (command_error(bad[0]) or "") and "--kk" in (command_error(bad[1]) or "")
    assert command_error(good[0]) is None


def test_the_checks_catch_a_default_the_help_does_not_state() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8, help="training steps (default: another file's)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default %(default)s)")
    assert undocumented_defaults(parser) == ["--steps (default 8)"]
