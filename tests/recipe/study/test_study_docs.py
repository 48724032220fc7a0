"""Numbers that cannot drift: every generated block of the docs equals what the analysis code derives
from the committed CSVs today.

docs/STUDY_CPU.md, docs/STUDY_PLAN.md and README.md hold the studies' figures between
``<!-- generated: NAME -->`` and ``<!-- end generated -->``. ``testbed/*`` blocks come from
``recipe.study.testbed.figures`` (the v1 study's docs/study_cpu/testbed/*.csv), ``testbed2/*`` from
``recipe.study.testbed2.report`` (docs/study_cpu/testbed2/*.csv), ``testbed3/*`` from
``recipe.study.testbed3.report`` (docs/study_cpu/testbed3/*.csv), ``smollm2/*`` from
``recipe.study.smollm2_summary.figures`` (docs/study_cpu/steps.csv).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from recipe.study.common import docs
from recipe.study.testbed import figures
from recipe.study.testbed2 import report
from tests.paths import REPO
from tests.recipe.study.doc_blocks import assert_blocks_derived, doc_blocks

STUDY_DOCS = REPO / "docs" / "study_cpu"


def _blocks() -> dict[tuple[str, str], str]:
    return doc_blocks()


def test_docs_include_the_v1_figures_and_each_equals_its_derivation() -> None:
    derived = figures.fragments(STUDY_DOCS / "testbed")
    blocks = {k: v for k, v in _blocks().items() if k[1].startswith("testbed/")}
    assert {name.split("/", 1)[1] for _, name in blocks} >= {
        "oneline",
        "budget",
        "results",
        "reading",
        "readme",
    }
    for (doc, name), body in blocks.items():
        key = name.split("/", 1)[1]
        if key == "provenance" and "provenance" not in derived:
            continue  # no git history here (e.g. an exported tree): test_provenance says so
        assert body == derived[key], f"{doc}: block {name} differs from recipe.study.testbed.figures"


def test_docs_include_the_smollm2_figures_and_each_equals_its_derivation() -> None:
    from recipe.study.smollm2_summary import figures as smollm2_figures

    derived = smollm2_figures(STUDY_DOCS)
    blocks = {k: v for k, v in _blocks().items() if k[1].startswith("smollm2/")}
    assert {name for _, name in blocks} == {"smollm2/results", "smollm2/readme", "smollm2/census"}
    for (doc, name), body in blocks.items():
        assert body == derived[name.split("/", 1)[1]], f"{doc}: block {name} differs from its derivation"
    assert (STUDY_DOCS / "summary.md").read_text() == derived["results"]


def test_v1_summary_md_is_the_results_block() -> None:
    results = figures.fragments(STUDY_DOCS / "testbed", commit="x")["results"]
    assert (STUDY_DOCS / "testbed" / "summary.md").read_text() == results


def test_the_issue_29_corrections() -> None:
    """DAPO's time ratios as the data give them, and the results commit that git records."""
    derived = figures.fragments(STUDY_DOCS / "testbed", commit="x")
    assert (
        "3.15x GRPO's training time" in derived["budget"]
        and "2.06x its wall time per run" in derived["budget"]
    )
    assert "3.3x" not in (REPO / "docs" / "STUDY_CPU.md").read_text()
    assert "7b1ea90" not in (REPO / "docs" / "STUDY_CPU.md").read_text()


def test_provenance() -> None:
    commit = figures.results_commit(STUDY_DOCS / "testbed")
    if commit is None:
        pytest.skip("no git history: the commit that added the v1 results cannot be read here")
    assert (
        f"added in commit {commit};"
        in docs.fragments_in((REPO / "docs" / "STUDY_CPU.md").read_text())["testbed/provenance"]
    )


def test_docs_include_the_testbed2_figures_and_each_equals_its_derivation() -> None:
    derived = report.report(STUDY_DOCS / "testbed2")
    blocks = {k: v for k, v in _blocks().items() if k[1].startswith("testbed2/")}
    # a phase not run yet (the plan's tuning and power blocks before the pilot): the block stays empty
    assert_blocks_derived(blocks, derived, "recipe.study.testbed2.report")
    summary = STUDY_DOCS / "testbed2" / "summary.md"
    if summary.is_file():
        assert summary.read_text() == report.summary_markdown(derived)


def test_docs_include_the_testbed3_figures_and_each_equals_its_derivation() -> None:
    from recipe.study.testbed3 import report as report3

    derived = report3.report(STUDY_DOCS / "testbed3")
    blocks = {k: v for k, v in _blocks().items() if k[1].startswith("testbed3/")}
    assert {name for _, name in blocks} >= {"testbed3/levels", "testbed3/tuning", "testbed3/pilot"}
    assert_blocks_derived(blocks, derived, "recipe.study.testbed3.report")
    summary = STUDY_DOCS / "testbed3" / "summary.md"
    if summary.is_file():
        assert summary.read_text() == report3.summary_markdown(derived)


@pytest.mark.parametrize("study", ["testbed2", "testbed3"])
def test_committed_study_data_stays_small(study: str) -> None:
    folder = STUDY_DOCS / study
    total = sum(p.stat().st_size for p in folder.glob("*") if p.is_file()) if folder.is_dir() else 0
    assert total < 4_000_000, (
        f"docs/study_cpu/{study} holds {total / 1e6:.1f} MB; aggregate before committing"
    )


def _assert_docs_regenerate(fragments: dict[str, str], prefix: str, tmp: Path) -> None:
    """Each doc, rewritten by ``update_docs`` from ``fragments`` (on a copy), equals the committed one."""
    copies = {}
    for doc in docs.DOCS:
        copies[doc] = tmp / doc.name
        copies[doc].write_bytes(doc.read_bytes())
    docs.update_docs(fragments, prefix=prefix, docs=tuple(copies.values()))
    for doc, copy in copies.items():
        assert copy.read_bytes() == doc.read_bytes(), f"{doc.name} differs when regenerated from the CSVs"


def test_v2_documents_regenerate_byte_for_byte_from_their_csvs(tmp_path: Path) -> None:
    """Every document the v2 study writes (the docs' blocks, summary.md, the exploration figure), from
    the committed CSVs alone, equals the committed file byte for byte."""
    from recipe.study.testbed2 import plots

    folder = STUDY_DOCS / "testbed2"
    fragments = report.report(folder)
    assert {"census", "tuning", "pilot", "exploration", "oneline", "readme", "budget"} <= set(fragments)
    _assert_docs_regenerate(fragments, "testbed2/", tmp_path)
    assert report.summary_markdown(fragments).encode() == (folder / "summary.md").read_bytes()
    plots.plot_exploration(folder / "exploration_validation.csv", tmp_path / "testbed2_exploration.png")
    assert (tmp_path / "testbed2_exploration.png").read_bytes() == (
        folder / "testbed2_exploration.png"
    ).read_bytes()


def test_v3_documents_regenerate_byte_for_byte_from_their_csvs(tmp_path: Path) -> None:
    """Every document the v3 study writes (the docs' blocks, summary.md, both figures), from the
    committed CSVs alone, equals the committed file byte for byte."""
    from recipe.study.common import plots as common_plots
    from recipe.study.testbed3 import report as report3
    from recipe.study.testbed3.plan import PLAN

    folder = STUDY_DOCS / "testbed3"
    fragments = report3.report(folder)
    assert {"levels", "tuning", "pilot", "criteria", "comparisons", "per_level", "budget"} <= set(fragments)
    _assert_docs_regenerate(fragments, "testbed3/", tmp_path)
    assert report3.summary_markdown(fragments).encode() == (folder / "summary.md").read_bytes()
    out = tmp_path / "figures"
    out.mkdir()
    for csv in ("validation.csv", "curves.csv"):
        (out / csv).write_bytes((folder / csv).read_bytes())
    common_plots.plot_all(PLAN, out)
    for png in ("testbed3_accuracy.png", "testbed3_regime.png"):
        assert (out / png).read_bytes() == (folder / png).read_bytes(), png
