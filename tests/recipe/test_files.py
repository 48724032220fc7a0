"""recipe.files.atomic_dir and recipe.cache.cache_root: a folder appears whole or not at all."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from recipe.cache import CACHE_ENV, cache_root
from recipe.files import atomic_dir


def test_atomic_dir_replaces_the_target_only_when_the_block_succeeds(tmp_path: Path) -> None:
    target = tmp_path / "models" / "m"
    with atomic_dir(target) as tmp:
        assert tmp.parent == target.parent and tmp.name.startswith(".m.tmp-")
        assert not target.exists()  # nothing at the final name while writing
        (tmp / "config.json").write_text("{}")
    assert (target / "config.json").read_text() == "{}"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755  # not mkdtemp's private 0o700
    # a failing rewrite leaves the old folder as it was, and no temporary folder behind
    with pytest.raises(RuntimeError, match="boom"), atomic_dir(target) as tmp:
        (tmp / "config.json").write_text("half")
        raise RuntimeError("boom")
    assert (target / "config.json").read_text() == "{}"
    assert [p.name for p in target.parent.iterdir()] == ["m"]
    # a successful rewrite replaces the whole folder (no file of the old one survives)
    (target / "stale.bin").write_text("x")
    with atomic_dir(target) as tmp:
        (tmp / "config.json").write_text('{"v": 2}')
    assert sorted(p.name for p in target.iterdir()) == ["config.json"]


def test_cache_root_reads_copo_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.setenv(CACHE_ENV, "")  # empty means unset, as in the shell launchers' ${COPO_CACHE:-...}
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "copo-verl"


@pytest.mark.parametrize("launcher", ["scripts/quickstart.sh", "scripts/study_cpu.sh"])
def test_the_shell_launchers_resolve_the_same_cache(
    launcher: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The launchers compute the cache folder in bash before any Python runs (for the data folder) and
    export it: their expression, evaluated by bash, gives what cache_root() gives, set and unset."""
    import re
    import subprocess

    from tests.paths import REPO

    line = next(s for s in (REPO / launcher).read_text().splitlines() if re.match(r"^CACHE=", s))
    home = tmp_path / "home"
    for value in (None, str(tmp_path / "c")):
        env = {"HOME": str(home), "PATH": "/usr/bin:/bin"} | ({CACHE_ENV: value} if value else {})
        got = subprocess.run(
            ["bash", "-c", f'{line}; echo "$CACHE"'], env=env, capture_output=True, text=True
        )
        monkeypatch.setenv("HOME", str(home))
        if value:
            monkeypatch.setenv(CACHE_ENV, value)
        else:
            monkeypatch.delenv(CACHE_ENV, raising=False)
        assert Path(got.stdout.strip()) == cache_root()
