"""scripts/evaluate.py end to end: tiny random model on CPU, JSONL + summary contents, resume."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest

from recipe.evaluation.backends import Backend, Completion, SamplingConfig
from recipe.evaluation.datasets import load_problems, parse_k_overrides, resolve_k
from recipe.evaluation.runner import EvalConfig, pair_seed, run_evaluation
from recipe.models.tiny import build_tiny_qwen2
from recipe.reward import compute_score
from tests.paths import REPO

# (question, answer); prompts of different lengths so batches need left padding
PROBLEMS = [("1+0", "1"), ("1+2", "3"), ("2+3", "5"), ("3 + 4", "7"), ("four plus five", "9")]


def write_parquet(path: Path, problems: Sequence[tuple[str, str]], data_source: str, start: int = 0) -> Path:
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {q}? Put the final answer in \\boxed{{}}."}],
            "data_source": data_source,
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": a},
            "extra_info": {"split": "test", "index": start + i, "original_id": f"p{start + i}"},
        }
        for i, (q, a) in enumerate(problems)
    ]
    pd.DataFrame(rows).to_parquet(path)
    return path


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("model") / "tiny")


@pytest.fixture
def parquet(tmp_path) -> Path:
    return write_parquet(tmp_path / "toy.parquet", PROBLEMS, "gsm8k")


class ScriptedBackend(Backend):
    """Returns fixed responses per prompt; counts calls."""

    name = "scripted"

    def __init__(self, responses: dict[str, list[str]], fail_on: str | None = None):
        self.responses = responses
        self.fail_on = fail_on
        self.calls = 0

    def generate(self, prompts, n, sampling, on_progress=None):
        self.calls += 1
        out = []
        for messages in prompts:
            content = messages[-1]["content"]
            if self.fail_on and self.fail_on in content:
                raise RuntimeError("simulated crash in the middle of a pair")
            key = next(q for q in self.responses if f"What is {q}?" in content)
            out.append([Completion(text=t, num_tokens=len(t)) for t in self.responses[key][:n]])
        if on_progress:
            on_progress(len(prompts) * n)
        return out


def _factory(backend: Backend):
    def make(kind, model_path, **_):
        return backend

    return make


def _never(kind, model_path, **_):
    raise AssertionError("a completed pair must not load a model or generate")


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_cli_end_to_end_tiny_model(tiny_model: Path, parquet: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval"
    cmd = [sys.executable, str(REPO / "scripts" / "evaluate.py"), "--model", str(tiny_model)]
    cmd += ["--data", str(parquet), "--k", "2", "--max-tokens", "16", "--batch-size", "4", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "samples/s" in done.stderr or "sample/s" in done.stderr  # tqdm progress was shown

    samples = _read_jsonl(out / "samples.jsonl")
    assert len(samples) == 5 * 2
    assert {(s["problem_id"], s["sample_index"]) for s in samples} == {
        (str(i), j) for i in range(5) for j in (0, 1)
    }
    required = {"checkpoint", "dataset", "problem_id", "sample_index", "response", "pred", "score"}
    for s in samples:
        assert required <= set(s)
        assert s["checkpoint"] == "tiny" and s["dataset"] == "gsm8k" and s["step"] is None
        assert 1 <= s["response_tokens"] <= 16
        # stored verdicts are the reward function's own, recomputed here one by one
        verdict = compute_score("gsm8k", s["response"], s["ground_truth"])
        assert s["score"] == pytest.approx(float(verdict["score"]))
        assert s["pred"] == verdict["pred"]
        assert s["correct"] == float(bool(verdict["acc"]))
    assert [s["ground_truth"] for s in samples if s["sample_index"] == 0] == [a for _, a in PROBLEMS]

    rows = _read_csv(out / "summary.csv")
    assert len(rows) == 1
    row = rows[0]
    assert (row["checkpoint"], row["dataset"], row["n_problems"], row["k"]) == ("tiny", "gsm8k", "5", "2")
    assert (row["backend"], row["max_tokens"], row["temperature"]) == ("hf", "16", "1.0")
    by_problem: dict[str, list[dict]] = {}
    for s in samples:
        by_problem.setdefault(s["problem_id"], []).append(s)
    mean = sum(s["correct"] for s in samples) / len(samples)
    passed = sum(any(s["correct"] for s in group) for group in by_problem.values()) / 5
    assert float(row["mean@k"]) == pytest.approx(mean)
    assert float(row["pass@k"]) == pytest.approx(passed)
    assert float(row["mean_response_tokens"]) == pytest.approx(
        sum(s["response_tokens"] for s in samples) / 10
    )
    assert 0.0 <= float(row["maj@k"]) <= passed
    md = (out / "summary.md").read_text()
    assert "| tiny | gsm8k | 5 | 2 |" in md and "gsm8k mean@2 / maj@2" in md


def test_hf_backend_greedy_matches_unbatched_generate(tiny_model: Path, parquet: Path) -> None:
    """Batched, left-padded sampling gives what one-prompt-at-a-time transformers gives."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipe.evaluation.backends.hf_backend import HFBackend

    problems = load_problems([parquet])["gsm8k"]
    backend = HFBackend(str(tiny_model), batch_size=3)
    got = backend.generate([p.messages for p in problems], 2, SamplingConfig(temperature=0.0, max_tokens=12))
    backend.close()

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    for problem, samples in zip(problems, got, strict=True):
        text = tokenizer.apply_chat_template(problem.messages, add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            ref = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=tokenizer.eos_token_id)
        new = ref[0, ids.shape[1] :].tolist()
        if tokenizer.eos_token_id in new:
            new = new[: new.index(tokenizer.eos_token_id) + 1]
        expected = tokenizer.decode(new, skip_special_tokens=True)
        assert [s.text for s in samples] == [expected, expected]
        assert [s.num_tokens for s in samples] == [len(new), len(new)]


SCRIPT = {
    "1+0": ["\\boxed{1}", "\\boxed{1}"],  # both right: mean 1, maj 1, pass 1
    "1+2": ["\\boxed{3}", "\\boxed{9}"],  # tie, first (right) wins: mean .5, maj 1, pass 1
    "2+3": ["\\boxed{0}", "\\boxed{5}"],  # tie, first (wrong) wins: mean .5, maj 0, pass 1
    "3 + 4": ["no idea", "\\boxed{7}"],  # unparseable does not vote: mean .5, maj 1, pass 1
    "four plus five": ["\\boxed{8}", "\\boxed{10}"],  # all wrong
}


def test_scores_and_metrics_through_the_reward(tmp_path: Path, parquet: Path, tiny_model: Path) -> None:
    cfg = EvalConfig(models=[str(tiny_model)], data=[parquet], out=tmp_path / "eval", k=2)
    stats = run_evaluation(cfg, backend_factory=_factory(ScriptedBackend(SCRIPT)), log=lambda m: None)
    assert (stats.generated_pairs, stats.skipped_pairs, stats.generated_samples) == (1, 0, 10)
    row = _read_csv(tmp_path / "eval" / "summary.csv")[0]
    assert float(row["mean@k"]) == pytest.approx((1 + 0.5 + 0.5 + 0.5 + 0) / 5)
    assert float(row["maj@k"]) == pytest.approx((1 + 1 + 0 + 1 + 0) / 5)
    assert float(row["pass@k"]) == pytest.approx(4 / 5)
    samples = _read_jsonl(tmp_path / "eval" / "samples.jsonl")
    assert [s["score"] for s in samples] == [1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    assert samples[6]["pred"] == "" and samples[7]["pred"] == "7"


def test_resume_skips_completed_pairs_without_generating(
    tmp_path: Path, parquet: Path, tiny_model: Path
) -> None:
    out = tmp_path / "eval"
    cfg = EvalConfig(models=[str(tiny_model)], data=[parquet], out=out, k=2)
    run_evaluation(cfg, backend_factory=_factory(ScriptedBackend(SCRIPT)), log=lambda m: None)
    before = {p: p.read_bytes() for p in (out / "samples.jsonl", out / "summary.csv")}

    stats = run_evaluation(cfg, backend_factory=_never, log=lambda m: None)
    assert (stats.generated_pairs, stats.skipped_pairs, stats.loaded_models, stats.generated_samples) == (
        0,
        1,
        0,
        0,
    )
    assert {p: p.read_bytes() for p in before} == before

    # other sampling settings in the same --out: refused, naming the key; --overwrite redoes the pair
    changed = EvalConfig(
        models=[str(tiny_model)], data=[parquet], out=out, k=2, sampling=SamplingConfig(temperature=0.6)
    )
    with pytest.raises(ValueError, match="temperature"):
        run_evaluation(changed, backend_factory=_never, log=lambda m: None)
    changed.overwrite = True
    backend = ScriptedBackend(SCRIPT)
    stats = run_evaluation(changed, backend_factory=_factory(backend), log=lambda m: None)
    assert (stats.generated_pairs, backend.calls) == (1, 1)
    assert _read_csv(out / "summary.csv")[0]["temperature"] == "0.6"


def test_crash_loses_only_the_pair_in_flight(tmp_path: Path, tiny_model: Path) -> None:
    first = write_parquet(tmp_path / "a.parquet", PROBLEMS[:3], "gsm8k")
    second = write_parquet(tmp_path / "b.parquet", PROBLEMS[3:], "aime24", start=3)
    out = tmp_path / "eval"
    cfg = EvalConfig(models=[str(tiny_model)], data=[first, second], out=out, k=2)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_evaluation(
            cfg, backend_factory=_factory(ScriptedBackend(SCRIPT, fail_on="3 + 4")), log=lambda m: None
        )
    rows = _read_csv(out / "summary.csv")
    assert [(r["dataset"], r["n_problems"]) for r in rows] == [("gsm8k", "3")]
    kept = (out / "pairs").glob("*/*.samples.jsonl")
    assert len(list(kept)) == 1
    assert not list((out / "pairs").glob("*/.*.tmp"))  # no half-written files left behind

    backend = ScriptedBackend(SCRIPT)
    stats = run_evaluation(cfg, backend_factory=_factory(backend), log=lambda m: None)
    assert (stats.generated_pairs, stats.skipped_pairs, backend.calls) == (1, 1, 1)
    rows = _read_csv(out / "summary.csv")
    assert sorted((r["dataset"], r["n_problems"]) for r in rows) == [("aime24", "2"), ("gsm8k", "3")]
    assert len(_read_jsonl(out / "samples.jsonl")) == 5 * 2


class RecordingBackend(ScriptedBackend):
    def __init__(self, responses, seen: list):
        super().__init__(responses)
        self.seen = seen

    def generate(self, prompts, n, sampling, on_progress=None):
        self.seen.append((len(prompts), sampling.seed))
        return super().generate(prompts, n, sampling, on_progress)


def test_seed_per_dataset_same_for_every_checkpoint(tmp_path: Path, tiny_model: Path) -> None:
    first = write_parquet(tmp_path / "a.parquet", PROBLEMS[:3], "gsm8k")
    second = write_parquet(tmp_path / "b.parquet", PROBLEMS[3:], "aime24", start=3)
    other = tmp_path / "other_model"
    shutil.copytree(tiny_model, other)
    seen: list = []
    cfg = EvalConfig(
        models=[str(tiny_model), str(other)],
        data=[first, second],
        out=tmp_path / "eval",
        k=2,
        sampling=SamplingConfig(seed=5),
    )
    run_evaluation(cfg, backend_factory=lambda *a, **k: RecordingBackend(SCRIPT, seen), log=lambda m: None)
    gsm, aime = pair_seed(5, "gsm8k"), pair_seed(5, "aime24")
    assert gsm != aime and gsm != pair_seed(6, "gsm8k")
    assert seen == [(3, gsm), (2, aime), (3, gsm), (2, aime)]


def test_same_seed_same_samples_on_the_hf_backend(tmp_path: Path, parquet: Path, tiny_model: Path) -> None:
    def run(out: str, seed: int) -> list[str]:
        cfg = EvalConfig(
            models=[str(tiny_model)],
            data=[parquet],
            out=tmp_path / out,
            k=2,
            backend="hf",
            sampling=SamplingConfig(max_tokens=8, seed=seed),
        )
        run_evaluation(cfg, log=lambda m: None)
        return [s["response"] for s in _read_jsonl(tmp_path / out / "samples.jsonl")]

    first, again, other = run("a", 0), run("b", 0), run("c", 1)
    assert first == again
    assert first != other
    assert len(set(first)) > 1  # the two samples of a problem differ: sampling, not greedy


def test_k_per_dataset_defaults_and_overrides() -> None:
    assert resolve_k("HuggingFaceH4/MATH-500", None, {}) == 8
    assert resolve_k("gsm8k", None, {}) == 8
    assert resolve_k("aime24", None, {}) == 64
    assert resolve_k("aime25", None, {}) == 64
    assert resolve_k("reasoning_gym/chain_sum", None, {}) == 8
    assert resolve_k("aime24", 4, {}) == 4  # --k overrides the SPEC defaults
    overrides = parse_k_overrides(["MATH-500=16", "aime24=32"])
    assert resolve_k("HuggingFaceH4/MATH-500", 4, overrides) == 16  # by last path component
    assert resolve_k("aime24", 4, overrides) == 32
    assert resolve_k("gsm8k", 4, overrides) == 4
    with pytest.raises(ValueError, match="NAME=K"):
        parse_k_overrides(["aime24"])
    with pytest.raises(ValueError, match="NAME=K"):
        parse_k_overrides(["aime24=0"])


def test_unknown_k_override_is_an_error(tmp_path: Path, parquet: Path, tiny_model: Path) -> None:
    cfg = EvalConfig(models=[str(tiny_model)], data=[parquet], out=tmp_path, k_overrides={"aime42": 8})
    with pytest.raises(ValueError, match="aime42"):
        run_evaluation(cfg, backend_factory=_never, log=lambda m: None)


def test_load_problems_ids_and_schema_errors(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "a.parquet", PROBLEMS[:2], "gsm8k", start=10)
    problems = load_problems([path])["gsm8k"]
    assert [p.problem_id for p in problems] == ["10", "11"]
    assert problems[0].messages[0]["role"] == "user" and problems[1].ground_truth == "3"

    dup = write_parquet(tmp_path / "b.parquet", PROBLEMS[:2], "gsm8k", start=10)
    problems = load_problems([path, dup])["gsm8k"]  # repeated ids: numbered in reading order
    assert [p.problem_id for p in problems] == ["0", "1", "2", "3"]

    pd.DataFrame({"prompt": ["hi"], "data_source": ["x"]}).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="reward_model"):
        load_problems([tmp_path / "bad.parquet"])
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        load_problems([tmp_path / "missing.parquet"])
