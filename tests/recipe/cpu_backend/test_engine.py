"""copo_cpu.yaml's training-engine shortcuts leave COPO's loss, gradients and update unchanged.

Each engine runs one COPO step in its own process (``engine_probe.py``: verl's real engine, built as
the actor worker builds it, on one gloo rank, two micro-batches of sequences of unequal lengths):

* verl's FSDP2 engine, padded micro-batches (every ``cpu_backend`` key false): the reference;
* ``cpu_backend.unwrapped_single_rank``: the unwrapped module, the same numbers bit for bit;
* plus packed micro-batches (``use_remove_padding=true``, ``sdpa_gqa`` attending within each packed
  sequence): the same up to float rounding;
* plus ``cpu_backend.response_logits_only`` (copo_cpu.yaml's defaults): the LM head sees only the
  positions that predict response tokens; the same up to float rounding;
* the reference with the advantages negated: clearly different, so the comparisons can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

from recipe.cpu_backend.checks import CpuConfigError, check_cpu_config
from recipe.cpu_backend.settings import RESPONSE_LOGITS, UNWRAPPED
from recipe.models.tiny import build_tiny_qwen2
from tests.paths import REPO as REPO_ROOT
from tests.recipe.cpu_backend.cpu_config import cpu_config
from tests.recipe.cpu_backend.engine_probe import MICRO_BATCH, PROMPT_LENS, RESPONSE_LENS

VARIANTS = {
    "fsdp2": {"unwrapped": False, "remove_padding": False, "response_logits": False, "adv_sign": 1},
    "unwrapped": {"unwrapped": True, "remove_padding": False, "response_logits": False, "adv_sign": 1},
    "packed": {"unwrapped": True, "remove_padding": True, "response_logits": False, "adv_sign": 1},
    "defaults": {"unwrapped": True, "remove_padding": True, "response_logits": True, "adv_sign": 1},
    "fsdp2_negated": {"unwrapped": False, "remove_padding": False, "response_logits": False, "adv_sign": -1},
}


@pytest.fixture(scope="module")
def steps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("engine")
    model = build_tiny_qwen2(root / "tiny")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    out = {}
    for name, spec in VARIANTS.items():
        path = root / f"{name}.pt"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.recipe.cpu_backend.engine_probe",
                json.dumps({"model": str(model), **spec}),
                str(path),
            ],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[name] = torch.load(path)
    return out


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_engines_are_the_ones_the_worker_builds(steps: dict[str, dict]) -> None:
    assert {s["engine"] for s in steps.values()} == {"CPUEngineWithLMHead"}
    assert steps["fsdp2"]["fsdp_version"] == 2
    assert steps["unwrapped"]["fsdp_version"] == steps["packed"]["fsdp_version"] == 0
    assert len(steps["fsdp2"]["losses"]) == len(PROMPT_LENS) // MICRO_BATCH == 2


def test_lm_head_sees_only_what_each_setting_promises(steps: dict[str, dict]) -> None:
    lengths = [p + r for p, r in zip(PROMPT_LENS, RESPONSE_LENS, strict=True)]
    micro = [slice(i, i + MICRO_BATCH) for i in range(0, len(lengths), MICRO_BATCH)]
    padded = [MICRO_BATCH * max(lengths[m]) for m in micro]
    assert steps["unwrapped"]["lm_head_rows"] == padded
    assert steps["packed"]["lm_head_rows"] == [sum(lengths[m]) for m in micro]
    assert steps["defaults"]["lm_head_rows"] == [sum(RESPONSE_LENS[m]) for m in micro]


def test_unwrapped_engine_matches_fsdp2_bit_for_bit(steps: dict[str, dict]) -> None:
    ref, got = steps["fsdp2"], steps["unwrapped"]
    torch.testing.assert_close(got["losses"], ref["losses"], rtol=0, atol=0)
    assert got["grad_norm"] == ref["grad_norm"]
    assert _max_diff(got["grads"], ref["grads"]) == 0.0
    assert _max_diff(got["params"], ref["params"]) == 0.0
    assert _max_diff(got["infer"], ref["infer"]) == 0.0


@pytest.mark.parametrize("variant", ["packed", "defaults"])
def test_packed_and_response_only_match_padded_fsdp2(steps: dict[str, dict], variant: str) -> None:
    ref, got = steps["fsdp2"], steps[variant]
    torch.testing.assert_close(got["losses"], ref["losses"], rtol=1e-5, atol=1e-7)
    assert got["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-5)
    for name, grad in ref["grads"].items():
        torch.testing.assert_close(got["grads"][name], grad, rtol=1e-4, atol=1e-7)
    assert _max_diff(got["params"], ref["params"]) < 1e-6
    for key in ("log_probs", "entropy"):  # the log-prob pass, with the token entropy asked for
        torch.testing.assert_close(got["infer"][key], ref["infer"][key], rtol=1e-4, atol=1e-5)


def test_the_comparison_can_fail(steps: dict[str, dict]) -> None:
    ref, negated = steps["fsdp2"], steps["fsdp2_negated"]
    scale = max(g.abs().max().item() for g in ref["grads"].values())
    assert _max_diff(negated["grads"], ref["grads"]) > 0.1 * scale
    assert (negated["losses"] - ref["losses"]).abs().max() > 1e-3


def test_copo_cpu_defaults_train_unwrapped_packed_and_response_only() -> None:
    config = cpu_config()
    check_cpu_config(config)
    assert OmegaConf.select(config, UNWRAPPED) is True
    assert OmegaConf.select(config, RESPONSE_LOGITS) is True
    assert config.actor_rollout_ref.model.use_remove_padding is True
    assert config.actor_rollout_ref.model.override_config.attn_implementation == "sdpa_gqa"


@pytest.mark.parametrize(
    "key",
    [
        "actor_rollout_ref__actor__fsdp_config__mixed_precision__param_dtype",
        "actor_rollout_ref__actor__fsdp_config__model_dtype",
    ],
)
def test_checks_refuse_unwrapped_training_in_another_precision(key: str) -> None:
    recompute = {"algorithm__rollout_correction__bypass_mode": False}  # that check refuses bf16 too
    with pytest.raises(CpuConfigError, match=f"{UNWRAPPED}=true .* {key.replace('__', '.')}=bf16"):
        check_cpu_config(cpu_config(**recompute, **{key: "bf16"}))
    check_cpu_config(cpu_config(**recompute, **{key: "bf16", UNWRAPPED.replace(".", "__"): False}))


@pytest.mark.parametrize(
    ("updates", "message"),
    [
        ({"cpu_backend__unwraped_single_rank": True}, "cpu_backend.unwraped_single_rank: unknown key"),
        (
            {"cpu_backend__response_logits_only": "yes"},
            "cpu_backend.response_logits_only must be true or false",
        ),
    ],
)
def test_checks_refuse_unknown_or_non_boolean_cpu_backend_keys(updates: dict, message: str) -> None:
    with pytest.raises(CpuConfigError, match=message):
        check_cpu_config(cpu_config(**updates))


def test_engine_registration_waits_for_verls_engine_module() -> None:
    """install() adds no import: the engines register when verl's FSDP engine module is imported."""
    code = (
        "import os, sys; os.environ['VERL_PLATFORM'] = 'cpu'\n"
        "import recipe.cpu_backend.plugin\n"
        "from recipe.cpu_backend import engine\n"
        "assert 'verl.workers.engine.fsdp.transformer_impl' not in sys.modules\n"
        "assert not engine.ENGINES\n"
        "from verl.workers.engine import EngineRegistry\n"
        "os.environ['VERL_ENGINE_DEVICE'] = engine.ENGINE_DEVICE\n"
        "for t in ('language_model', 'value_model'):\n"
        "    assert EngineRegistry.get_engine_cls(t, 'fsdp2') is engine.ENGINES[t], t\n"
        "print('ok', sorted(c.__name__ for c in engine.ENGINES.values()))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok ['CPUEngineWithLMHead', 'CPUEngineWithValueHead']")


def test_checkpoint_config_names_an_attention_any_loader_knows(tmp_path) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM
    from verl.utils.model import update_model_config

    from recipe.cpu_backend.attention import ATTN_IMPLEMENTATION
    from recipe.cpu_backend.engine import make_config_portable

    model = build_tiny_qwen2(tmp_path / "tiny")
    config = AutoConfig.from_pretrained(model)
    # what copo_cpu.yaml's override_config does to the actor's config before verl saves it
    update_model_config(config, {"attn_implementation": ATTN_IMPLEMENTATION})
    config.save_pretrained(tmp_path / "saved")
    config_json = tmp_path / "saved" / "config.json"
    assert json.loads(config_json.read_text())["attn_implementation"] == ATTN_IMPLEMENTATION

    assert make_config_portable(config_json)
    loaded = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path / "saved"))
    assert loaded.config._attn_implementation == "sdpa"
    before = config_json.read_text()
    assert not make_config_portable(config_json)  # any other attention is left as it is
    assert config_json.read_text() == before
