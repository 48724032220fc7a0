"""verl 0.9.1's trainer with its own vLLM rollout on CPU (.venv-vllm): two COPO steps whose weight sync
carries the update, and a SIGTERM that leaves nothing behind.

Proof that the sync carries step 1's update into vLLM: the actor recomputes the old log-probs
(``bypass_mode=false``) and verl logs ``training/rollout_probs_diff_max``, the largest
|p_vLLM - p_actor| over every sampled token of a step. At step 2 vLLM samples with what the sync sent
after step 1's update, and the actor scores those tokens with its updated weights: they agree within
``SYNC_TOL``. The update itself moved the model by far more than that: the initial model and the
step-1 checkpoint give a fixed sequence token probabilities further apart than ``MOVED_MIN`` (so
vLLM still holding the initial, or verl's dummy, weights would fail the first check by orders of
magnitude; the fixed sequence stands for step 2's samples, which the trainer does not dump as tokens).
"""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.cpu_run import read_jsonl
from tests.e2e.stopping import kill_tagged, leftovers_after, start_tagged, tagged_processes, wait_until
from tests.paths import REPO
from tests.vllm_cpu.trainer_run import (
    assert_shm_clean,
    job_env,
    segments_left,
    tiny_model,
    vllm_job_overrides,
    weight_segments,
)
from tests.vllm_cpu.venv import VLLM_PY, requires_vllm_venv, run_tree, tail

pytestmark = [pytest.mark.vllm_cpu, requires_vllm_venv]

RUN_TIMEOUT_S = 900
# Token probabilities (verl's metric is |p - p'|); the tiny random model spreads them near 1/vocab
# (~0.004). fp32 on both sides; vLLM's CPU kernels (oneDNN GEMMs, its own attention) differ from
# torch's in the last bits: measured 7.5e-9 and 6.5e-9 (steps 1, 2; 2026-11-29), and step 1 moved the
# fixed sequence's probabilities by 4.8e-3.
SYNC_TOL = 1e-6
MOVED_MIN = 100 * SYNC_TOL
FIXED_TEXT = "<|im_start|>user\n3+4=<|im_end|>\n<|im_start|>assistant\n7 is the answer"


def _steps(rows: list[dict]) -> dict[int, dict]:
    return {int(r["step"]): r for r in rows if "actor/pg_loss" in r}


def _token_probs(model_dir: Path, text: str) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        logp = torch.log_softmax(lm(ids).logits[0, :-1], dim=-1)
    return logp.gather(1, ids[0, 1:, None])[:, 0].exp().tolist()


@pytest.mark.timeout(RUN_TIMEOUT_S + 180)
def test_two_copo_steps_with_vllm_rollout_sync_carries_the_update(tmp_path: Path) -> None:
    out = tmp_path / "run"
    overrides = vllm_job_overrides(tmp_path, out, steps=2)
    overrides += [
        "algorithm.rollout_correction.bypass_mode=false",  # the actor recomputes: rollout_probs_diff_*
        "actor_rollout_ref.actor.optim.lr=1e-3",  # a step that visibly moves a tiny random model
        "trainer.save_freq=1",
    ]
    cmd = [str(VLLM_PY), "-m", "recipe.copo.main_copo", *overrides]
    shm_log = tmp_path / "shm.log"
    run = run_tree("vllm_trainer_two_steps", cmd, job_env(shm_log), out / "train.log", RUN_TIMEOUT_S)
    assert run.returncode == 0, tail(run)
    logged, left = segments_left(shm_log)
    assert logged and not left, f"vLLM ring buffers {logged}, left in /dev/shm: {left}"
    assert "rollout: vllm" in run.log or "vLLM" in run.log, "the run did not use vLLM"
    steps = _steps(read_jsonl(out / "metrics.jsonl"))
    assert sorted(steps) == [1, 2]
    # Step 1 samples from the random initial model: ~half of the responses have even length, so mixed
    # groups (both signs of advantage) and a non-zero gradient are near certain (16 groups all uniform:
    # ~8^-16). Step 2 samples from the model that lr=1e-3 moved; it may emit one length for a whole group
    # or batch (CI, 2026-11-29: step 2's advantages were all >= 0), so step 2 checks only what the sync
    # decides: the actor's and vLLM's probabilities of the tokens vLLM sampled.
    first = steps[1]
    assert math.isfinite(first["actor/grad_norm"]) and first["actor/grad_norm"] > 0, first
    assert first["critic/advantages/max"] > 0 > first["critic/advantages/min"], first
    for step, row in steps.items():
        assert math.isfinite(row["actor/grad_norm"]), (step, row)
        assert row["training/rollout_probs_diff_max"] < SYNC_TOL, (step, row["training/rollout_probs_diff_max"])
    print(f"[vllm_cpu] rollout_probs_diff_max by step: {[steps[s]['training/rollout_probs_diff_max'] for s in (1, 2)]}")

    from recipe.evaluation.checkpoints import discover_models, resolve_hf_path

    spec = next(s for s in discover_models([str(out / "ckpt")]) if "global_step_1" in str(s))
    after = _token_probs(Path(resolve_hf_path(spec, tmp_path / "merged", log=lambda m: None)), FIXED_TEXT)
    before = _token_probs(tiny_model(tmp_path), FIXED_TEXT)
    moved = max(abs(a - b) for a, b in zip(after, before, strict=True))
    print(f"[vllm_cpu] step 1 moved a fixed sequence's token probabilities by up to {moved:.3g}")
    assert moved > MOVED_MIN



@pytest.mark.timeout(RUN_TIMEOUT_S + 300)
def test_sigterm_to_the_group_mid_run_leaves_no_process_and_no_weight_segment(tmp_path: Path) -> None:
    out = tmp_path / "run"
    overrides = vllm_job_overrides(tmp_path, out, steps=50)
    before = weight_segments()
    log_path = out / "train.log"
    out.mkdir(parents=True)
    start = time.monotonic()
    shm_log = tmp_path / "shm.log"
    cmd = [str(VLLM_PY), "-m", "recipe.copo.main_copo", *overrides]
    proc, tag = start_tagged(cmd, job_env(shm_log), log_path, REPO)
    try:
        metrics = out / "metrics.jsonl"
        wait_until(
            lambda: metrics.is_file() and bool(_steps(read_jsonl(metrics))), proc, RUN_TIMEOUT_S, "step 1", log_path
        )
        running = tagged_processes(tag)
        assert any("raylet" in p for p in running), f"the detector must see the Ray cluster: {running}"
        import os

        os.killpg(proc.pid, signal.SIGTERM)  # the group: what a terminal's Ctrl-\ or a supervisor sends
        proc.wait(timeout=150)
        left = leftovers_after(tag)
        assert not left, "processes left after SIGTERM to the group:\n" + "\n".join(left)
    finally:
        kill_tagged(tag)
        if proc.poll() is None:
            proc.kill()
    print(f"[vllm_cpu] sigterm run: {time.monotonic() - start:.1f} s")
    assert_shm_clean(before, shm_log, "after SIGTERM")
