"""The preflight's parts that decide: shapes, the padded tokenizer, the workload, the FLOP formula,
the verdicts and the table, the CPU trainer settings, and a stage that cannot run."""

from __future__ import annotations

import json
import os

import pytest
import torch

from recipe.launch import format_overrides
from recipe.preflight import cli, measure, report, trainer_run
from recipe.preflight.environment import Environment, Package
from recipe.preflight.model import padded_vocab
from recipe.preflight.shapes import KNOWN, TINY, model_shape


def test_known_shapes_are_the_published_qwen25_configs() -> None:
    three = model_shape("Qwen/Qwen2.5-3B-Instruct")
    assert (three["hidden_size"], three["num_hidden_layers"], three["vocab_size"]) == (2048, 36, 151936)
    assert three["tie_word_embeddings"] is True and three["model_type"] == "qwen2"
    seven = model_shape("Qwen/Qwen2.5-7B-Instruct")
    assert (seven["num_key_value_heads"], seven["vocab_size"], seven["tie_word_embeddings"]) == (
        4,
        152064,
        False,
    )
    tiny = model_shape("Qwen/Qwen2.5-3B-Instruct", tiny=True)
    assert tiny["vocab_size"] == 151936 and tiny["num_hidden_layers"] == TINY["num_hidden_layers"]
    with pytest.raises(ValueError, match="no shape known for model 'org/unknown'.*Qwen/Qwen2.5-7B-Instruct"):
        model_shape("org/unknown")
    assert set(KNOWN) >= {"Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-7B-Instruct"}


def test_a_local_folder_gives_its_own_shape(tmp_path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "qwen2", "vocab_size": 300, "head_dim": 8})
    )
    assert model_shape(str(tmp_path))["vocab_size"] == 300
    assert "head_dim" not in model_shape(str(tmp_path), tiny=True)  # tiny sets its own widths


def test_padded_vocabulary_has_exactly_the_models_ids_and_decodes_any_of_them() -> None:
    from recipe.preflight.model import build_tokenizer

    vocab = padded_vocab(70_000)
    assert len(vocab) == 70_000 and sorted(vocab.values()) == list(range(70_000))
    tokenizer = build_tokenizer(70_000)
    assert len(tokenizer) == 70_000
    assert tokenizer.decode(tokenizer.encode("12+30=\n")) == "12+30=\n"
    assert isinstance(tokenizer.decode([69_999, 300, 5]), str)
    with pytest.raises(ValueError, match="below the 259"):
        padded_vocab(100)


def test_workload_of_a_paper_run_spans_the_issues_lengths() -> None:
    from omegaconf import OmegaConf

    from recipe.preflight.actor import Workload

    config = OmegaConf.create({"data": {"max_prompt_length": 1024, "max_response_length": 2048}})
    work = Workload.for_config(config, 32, tiny=False)
    assert (work.prompt_range, work.response_range) == ((256, 512), (256, 2048))
    lengths = work.lengths()
    assert len(lengths) == 32 and lengths == work.lengths()  # seeded
    assert all(256 <= p <= 512 and 256 <= r <= 2048 for p, r in lengths)


def test_flop_formula_counts_the_recomputed_forward() -> None:
    flops, formula = measure.update_flops(3_000_000_000, 1000, checkpointing=True)
    assert flops == 8 * 3e9 * 1000 and formula.startswith("8 x N x tokens")
    assert measure.update_flops(10, 2, checkpointing=False)[0] == 120


def test_gradient_difference_is_relative_per_tensor() -> None:
    a = {"w": torch.tensor([1.0, -2.0]), "b": torch.tensor([0.0, 0.0])}
    b = {"w": torch.tensor([1.0, -1.9]), "b": torch.tensor([0.0, 0.0])}
    assert measure.grad_difference(a, b) == pytest.approx(0.05)
    assert measure.grad_difference(a, a) == 0.0
    assert measure.Parity(noise=0.02, copo=0.029, loss_diff=0.0, bound=0.03).ok
    assert not measure.Parity(noise=0.0, copo=0.1, loss_diff=0.0, bound=measure.dtype_floor(torch.float32)).ok


def _result(ratio: float, mfu: float, loop: bool) -> dict:
    return {
        "model_dir": "/m",
        "model_s": 1.0,
        "params": 3e9,
        "matmul_params": 3e9,
        "build_s": 2.0,
        "sequences": 32,
        "tokens": 45900,
        "settings": {
            "engine": "FSDPEngineWithLMHead (fsdp2)",
            "attention": "sdpa on padded micro-batches",
            "fused_kernels": "True (torch)",
            "micro_batches": "dynamic",
            "compute_dtype": "bfloat16",
            "gradient_checkpointing": True,
        },
        "parity": {"noise": 0.02, "copo": 0.016, "loss_diff": 0.0, "bound": 0.03, "ok": True},
        "ops": {
            "calls": 45900 * 2 if loop else 900,
            "tokens": 45900,
            "micro_batches": 8,
            "per_token": 2.0 if loop else 0.02,
            "loop": loop,
        },
        "speed": {
            "update_s": {"copo": 2.0 * ratio, "vanilla": 2.0},
            "copo_over_vanilla": ratio,
            "tokens_per_s": 22950.0,
            "mfu": mfu,
            "peak_tflops": 790.0,
            "flop_formula": "8 x N x tokens",
            "fixed_s": 0.3,
            "log_prob_s": 0.5,
            "peak_memory_gib": 40.0,
            "micro_batches": 8,
        },
    }


def test_targets_are_judged_only_for_the_full_model_on_a_gpu_and_a_loop_fails() -> None:
    rows = {r.item: r for r in report.actor_rows(_result(1.01, 0.40, loop=False), judged=True)}
    assert rows["MFU"].verdict == "ok" and rows["update time COPO / vanilla"].verdict == "ok"
    rows = {r.item: r for r in report.actor_rows(_result(1.05, 0.10, loop=True), judged=True)}
    assert rows["MFU"].verdict == rows["update time COPO / vanilla"].verdict == "MISS"
    assert rows["log-softmax-family ops"].verdict == "FAIL"
    rows = report.actor_rows(_result(1.05, 0.10, loop=False), judged=False)
    assert not report.failed(rows) and not any(r.verdict == "MISS" for r in rows)
    assert "8 x N x tokens" in report.render(rows)


def _env(**missing: bool) -> Environment:
    from recipe.preflight.environment import PACKAGES

    packages = {
        m: Package(
            m,
            not missing.get(m, False),
            "1.0",
            needed,
            install,
            "ModuleNotFoundError" if missing.get(m) else "",
        )
        for m, _, needed, install in PACKAGES
    }
    return Environment("3.12.3", "2.11.0+cu130", "13.0", None, None, packages)


def test_a_machine_without_verl_gets_the_install_line_and_no_stage_runs(
    monkeypatch, tmp_path, capsys
) -> None:
    monkeypatch.setattr(cli, "probe", lambda: _env(verl=True, vllm=True, flash_attn=True))
    rc = cli.main(["--config-name", "copo_qwen2.5_3b", "--out", str(tmp_path)])
    table = capsys.readouterr().out
    assert rc == 1
    assert "verl" in table and 'pip install -e ".[gpu]"' in table
    rows = [line.split() for line in table.splitlines()]
    assert ["actor", "stage", "not", "run", "SKIP"] in rows and [
        "trainer",
        "stage",
        "not",
        "run",
        "SKIP",
    ] in rows
    assert (tmp_path / "table.txt").read_text().strip() == table.strip()


def test_bad_arguments_are_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.parse(["--config-name", "copo_qwen2.5_3b", "--sequences", "1"])
    assert "--sequences must be >= 2" in capsys.readouterr().err


def test_cpu_trainer_settings_come_from_copo_cpu_yaml() -> None:
    overrides = format_overrides(trainer_run.cpu_settings())
    assert overrides[0] == "trainer.device=cpu"
    assert "++ray_kwargs.ray_init.num_gpus=1" in overrides
    assert "++transfer_queue.backend.SimpleStorage.num_data_storage_units=1" in overrides
    assert "++data.dataloader_num_workers=0" in overrides


def test_a_package_outside_verls_requirement_is_a_warning_with_the_install_line() -> None:
    from recipe.preflight.environment import outside_verl_requirement

    wants = outside_verl_requirement("transformers", "5.17.0")  # the GPU image's, newer than verl allows
    assert wants.startswith("transformers") and "<5.11" in wants
    assert outside_verl_requirement("transformers", "5.10.4") == ""
    env = _env()
    env.packages["transformers"].verl_wants = wants
    row = next(r for r in report.environment_rows(env) if r.item == "transformers")
    assert row.verdict == "WARN" and f"pip install '{wants}'" in row.note


def test_a_folder_named_like_a_package_is_not_taken_for_it(tmp_path, monkeypatch) -> None:
    from recipe.preflight.environment import probe

    (tmp_path / "vllm").mkdir()  # e.g. a checkout's folder, or Ray's /tmp/ray next to the caller
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}")
    env = probe()
    assert not env.has("vllm") and "namespace package" in env.packages["vllm"].error
    assert env.has("torch") and env.has("verl") and env.device == "cpu"
