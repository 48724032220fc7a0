"""recipe.files (atomic_file, atomic_write_text, atomic_dir, REPO_ROOT) and recipe.cache.cache_root:
a file or folder appears whole or not at all."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from recipe import files
from recipe.cache import CACHE_ENV, cache_root
from recipe.files import REPO_ROOT, atomic_dir, atomic_file, atomic_write_text


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


def test_atomic_file_replaces_the_target_only_when_the_block_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "sub" / "summary.json"
    synced: list[int] = []
    real_fsync = os.fsync

    def record(fd: int) -> None:
        synced.append(stat.S_IFMT(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(files.os, "fsync", record)
    atomic_write_text(target, "old\n")  # parents are created
    assert target.read_text() == "old\n"
    assert synced == [stat.S_IFREG, stat.S_IFDIR]  # the file, then the folder holding the new name
    plain = tmp_path / "plain"
    plain.write_text("")
    assert stat.S_IMODE(target.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)  # umask, not 0o600
    with pytest.raises(RuntimeError, match="boom"), atomic_file(target) as f:
        f.write("half")
        raise RuntimeError("boom")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["summary.json"]  # no temporary file left
    with atomic_file(target, "wb") as f:
        f.write("é".encode())
    assert target.read_bytes() == "é".encode()
    with atomic_file(target, newline="") as f:  # text mode passes newline through (csv needs "")
        f.write("a\r\nb")
    assert target.read_bytes() == b"a\r\nb"
    with pytest.raises(ValueError, match="mode"), atomic_file(target, "a"):
        pass


def test_repo_root_is_the_checkout() -> None:
    assert (REPO_ROOT / "setup.py").is_file() and (REPO_ROOT / "recipe" / "files.py").is_file()


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
