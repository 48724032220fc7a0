"""The COPO/GCPO step (recipe.copo.step) on plain tensors equals copo_core's quantities, and the
trainer's verl adapter reads TransferQueue once, writes once, and logs the step's metrics."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from verl.utils import tensordict_utils as tu

from copo_core import CopoConfig, compute_copo_advantages, copo_batch_metrics, wrong_answer_metrics
from copo_core.metrics import NONZERO_ADV_TOL
from recipe.copo.step import (
    MISSING_PRED_MESSAGE,
    StepSettings,
    advantage_step,
    answers_from_extra_info,
    session_rows,
)
from recipe.copo.trainer import CopoTrainerMixin
from tests.recipe.copo.copo_batches import composed_config, make_step_batch

BLEND_MODES = ["soft", "soft_with_zero", "soft_with_forced", "zero", "forced", "global_only", "local_only"]


def _settings(estimator: str = "copo", norm_adv_by_std: bool = True, **copo) -> StepSettings:
    return StepSettings(estimator=estimator, copo=CopoConfig(**copo), norm_adv_by_std=norm_adv_by_std)


def _reference(batch, settings: StepSettings, with_answers: bool = True):
    copo = settings.copo
    return compute_copo_advantages(
        batch.scores,
        batch.uids,
        batch.preds if with_answers else None,
        k=copo.k,
        b=copo.b,
        blend_mode=copo.blend_mode,
        entropy_source=copo.entropy_source,
        entropy_penalty=copo.entropy_penalty,
        norm_adv_by_std=settings.norm_adv_by_std,
    )


def _per_response(token_field: torch.Tensor, batch) -> torch.Tensor:
    """(N,) value of a per-token field, checking it is constant on the response and 0 after it."""
    mask = batch.response_mask().bool()
    first = token_field[:, 0]
    assert torch.equal(token_field[mask], first[:, None].expand_as(token_field)[mask])
    assert torch.all(token_field[~mask] == 0)
    return first


_SIGNAL_KEYS = (
    "signal/frac_nonzero_adv",
    "signal/frac_groups_all_correct",
    "signal/frac_groups_all_wrong",
    "signal/frac_groups_zero_variance",
    "signal/num_responses",
    "signal/num_groups",
)


def _signal_by_hand(adv: torch.Tensor, scores: torch.Tensor, uids, rows) -> dict[str, float]:
    """Loop reference for the signal/ metrics over the listed rows."""
    groups: dict = {}
    live = 0
    for i in rows:
        groups.setdefault(uids[i], []).append(float(scores[i]))
        live += abs(float(adv[i])) > NONZERO_ADV_TOL
    n_rows = sum(len(v) for v in groups.values())
    return {
        "signal/frac_nonzero_adv": live / n_rows,
        "signal/frac_groups_all_correct": sum(min(v) > 0 for v in groups.values()) / len(groups),
        "signal/frac_groups_all_wrong": sum(max(v) <= 0 for v in groups.values()) / len(groups),
        "signal/frac_groups_zero_variance": sum(min(v) == max(v) for v in groups.values()) / len(groups),
        "signal/num_responses": float(n_rows),
        "signal/num_groups": float(len(groups)),
    }


@pytest.mark.parametrize("blend_mode", BLEND_MODES)
@pytest.mark.parametrize(
    ("entropy_source", "penalty"), [("answer", False), ("answer", True), ("reward", False)]
)
def test_step_fields_equal_copo_core(blend_mode: str, entropy_source: str, penalty: bool) -> None:
    batch = make_step_batch(seed=7)
    settings = _settings(
        k=3.0, b=0.8, blend_mode=blend_mode, entropy_source=entropy_source, entropy_penalty=penalty
    )
    result = advantage_step(batch.step_inputs(), settings)
    fields, metrics = result.fields, result.metrics
    ref = _reference(batch, settings, with_answers=entropy_source == "answer")
    torch.testing.assert_close(_per_response(fields["copo_local_adv"], batch), ref.local_adv, rtol=0, atol=0)
    torch.testing.assert_close(
        _per_response(fields["copo_global_adv"], batch), ref.global_adv, rtol=0, atol=0
    )
    torch.testing.assert_close(
        _per_response(fields["copo_local_weight"], batch), ref.local_weight, rtol=0, atol=0
    )
    torch.testing.assert_close(_per_response(fields["advantages"], batch), ref.blended, rtol=1e-6, atol=1e-7)
    assert torch.equal(fields["returns"], fields["advantages"])
    copo = {f"copo/{k}": v for k, v in copo_batch_metrics(ref, batch.uids).items()}
    assert {k: v for k, v in metrics.items() if k.startswith("copo/")} == pytest.approx(copo, abs=1e-6)
    # signal/ comes from the in-memory step, against a loop over the rows
    signal = _signal_by_hand(ref.blended, batch.scores, batch.uids, range(batch.n))
    assert {k: metrics[k] for k in _SIGNAL_KEYS} == pytest.approx(signal)
    # mechanism/ is copo_core's wrong_answer_metrics of the step's own advantages (its own loop test:
    # tests/copo_core/test_mechanism.py)
    wrong = wrong_answer_metrics(ref.blended[:, None], torch.ones(batch.n, 1), batch.scores, batch.uids)
    mechanism = {f"mechanism/{k}": v for k, v in wrong.items()}
    assert {k: metrics[k] for k in mechanism} == pytest.approx(mechanism, abs=1e-6, nan_ok=True)
    assert set(metrics) == set(copo) | set(_SIGNAL_KEYS) | set(mechanism)


def test_norm_adv_by_std_false_is_forwarded() -> None:
    batch = make_step_batch(seed=8)
    settings = _settings(norm_adv_by_std=False)
    fields = advantage_step(batch.step_inputs(), settings).fields
    ref = _reference(batch, settings)
    torch.testing.assert_close(_per_response(fields["copo_local_adv"], batch), ref.local_adv, rtol=0, atol=0)
    torch.testing.assert_close(
        _per_response(fields["copo_global_adv"], batch), ref.global_adv, rtol=0, atol=0
    )


def test_padding_rows_and_multi_output_sessions() -> None:
    batch = make_step_batch(seed=9)
    inputs = batch.step_inputs()
    keys = list(inputs.keys)
    # Row 0 becomes an earlier turn of row 1's session (same uid, same session id, index 0 < 1).
    same_uid = [i for i in range(1, batch.n) if batch.uids[i] == batch.uids[0]][0]
    keys[0] = f"{batch.uids[0]}_s_0"
    keys[same_uid] = f"{batch.uids[0]}_s_1"
    # Two synthetic padding rows appended by verl (their pred is a copy of row 0's, as in verl).
    width = inputs.response_mask.shape[1]
    full = dataclasses.replace(
        inputs,
        scores=torch.cat([inputs.scores, torch.zeros(2)]),
        uids=[*inputs.uids, "padXYZ", "padXYZ"],
        keys=[*keys, "padXYZ_0_0", "padXYZ_1_0"],
        is_padding=[False] * batch.n + [True, True],
        response_mask=torch.cat([inputs.response_mask, torch.zeros(2, width, dtype=torch.int64)]),
        preds=[*inputs.preds, batch.preds[0], batch.preds[0]],
    )
    result = advantage_step(full, _settings())
    fields, metrics = result.fields, result.metrics
    for name in ("advantages", "copo_local_adv", "copo_global_adv", "copo_local_weight"):
        assert torch.all(fields[name][-2:] == 0)

    # Reference: copo_core on the final output of each session only (row 0 is not a response of its own).
    keep = [i for i in range(batch.n) if i != 0]
    ref = compute_copo_advantages(
        batch.scores[keep], [batch.uids[i] for i in keep], [batch.preds[i] for i in keep]
    )
    mask = full.response_mask.bool()
    for name, want in (("copo_local_adv", ref.local_adv), ("copo_global_adv", ref.global_adv)):
        got = fields[name][:, 0]
        torch.testing.assert_close(got[keep], want, rtol=0, atol=0)
        # row 0 (earlier turn) carries its session's final values on all its tokens
        assert torch.all(fields[name][0][mask[0]] == got[same_uid])
    expected = copo_batch_metrics(ref, [batch.uids[i] for i in keep])
    assert {k: v for k, v in metrics.items() if k.startswith("copo/")} == pytest.approx(
        {f"copo/{k}": v for k, v in expected.items()}, abs=1e-6
    )
    # signal/ is over the real rows (earlier turns included), never the padding rows
    blended_rows = fields["advantages"][:, 0]
    assert {k: metrics[k] for k in _SIGNAL_KEYS} == pytest.approx(
        _signal_by_hand(blended_rows, full.scores, full.uids, range(batch.n))
    )


def test_session_rows_picks_final_output() -> None:
    rows, row_map = session_rows(
        ["a_0_0", "a_0_2", "a_1_0", "pad_0_0", "a_0_1"], [False, False, False, True, False]
    )
    assert rows == [1, 2]
    assert row_map.tolist() == [0, 0, 1, -1, 0]


def test_missing_pred_names_the_reward_contract() -> None:
    infos = [{"acc": True, "pred": "1"}, {"acc": False}, {"acc": False}]
    with pytest.raises(ValueError, match="pred") as err:
        answers_from_extra_info(infos, [False, False, True])
    assert "entropy_source=reward" in str(err.value)
    assert "custom_reward_function" in str(err.value)
    assert MISSING_PRED_MESSAGE.split("{")[0][:40] in str(err.value)
    assert "rows without 'pred': [1]" in str(err.value)  # the padding row 2 is not asked for one
    assert answers_from_extra_info(infos[:1] + [{"pred": None}, {}], [False, False, True]) == [
        "1",
        None,
        None,
    ]

    batch = make_step_batch(seed=1)
    with pytest.raises(ValueError, match="must return a dict"):
        advantage_step(batch.step_inputs(with_pred=False), _settings())
    # entropy over reward classes needs no answers
    settings = _settings(entropy_source="reward")
    fields = advantage_step(batch.step_inputs(with_pred=False), settings).fields
    ref = _reference(batch, settings, with_answers=False)
    torch.testing.assert_close(
        _per_response(fields["copo_local_weight"], batch), ref.local_weight, rtol=0, atol=0
    )


def test_gcpo_estimator_and_gcpo_local_term(monkeypatch: pytest.MonkeyPatch) -> None:
    import recipe.copo.gcpo_step as gcpo_step

    batch = make_step_batch(seed=4)
    texts = [f"text {i}" for i in range(batch.n)]
    seen = {}

    def fake_gcpo(texts_in, scores, index, config, *, norm_adv_by_std, global_step):
        seen.update(texts=list(texts_in), index=list(index), step=global_step, config=config)
        torch.testing.assert_close(scores, batch.scores)
        return torch.arange(len(texts_in), dtype=torch.float32) - 3.0, {"coverage_mean": 0.5}

    monkeypatch.setattr(gcpo_step, "gcpo_advantage", fake_gcpo)
    result = advantage_step(batch.step_inputs(texts=texts), _settings("gcpo"), global_step=7)
    fields, metrics = result.fields, result.metrics
    assert seen["texts"] == texts and seen["index"] == batch.uids and seen["step"] == 7
    assert set(fields) == {"advantages", "returns"}
    gcpo_adv = torch.arange(batch.n, dtype=torch.float32) - 3.0
    torch.testing.assert_close(_per_response(fields["advantages"], batch), gcpo_adv)
    assert metrics["gcpo/coverage_mean"] == 0.5
    assert not any(key.startswith("copo/") for key in metrics)
    assert {k: metrics[k] for k in _SIGNAL_KEYS} == pytest.approx(
        _signal_by_hand(gcpo_adv, batch.scores, batch.uids, range(batch.n))
    )

    settings = _settings(local_estimator="gcpo")
    result = advantage_step(batch.step_inputs(texts=texts), settings)
    fields, metrics = result.fields, result.metrics
    ref = _reference(batch, settings)
    blended = ref.local_weight * gcpo_adv + (1 - ref.local_weight) * ref.global_adv
    torch.testing.assert_close(_per_response(fields["copo_local_adv"], batch), gcpo_adv)
    torch.testing.assert_close(
        _per_response(fields["copo_global_adv"], batch), ref.global_adv, rtol=0, atol=0
    )
    torch.testing.assert_close(
        _per_response(fields["copo_local_weight"], batch), ref.local_weight, rtol=0, atol=0
    )
    torch.testing.assert_close(_per_response(fields["advantages"], batch), blended)
    assert "gcpo/coverage_mean" in metrics and "copo/entropy_mean" in metrics
    # copo/frac_nonzero_adv describes the advantage that trains (GCPO's local term blended in)
    assert metrics["copo/frac_nonzero_adv"] == pytest.approx(
        float((blended.abs() > NONZERO_ADV_TOL).float().mean())
    )

    with pytest.raises(ValueError, match="texts"):
        advantage_step(batch.step_inputs(), settings)


def test_settings_from_config_are_the_typed_sections() -> None:
    config = composed_config(
        "algorithm.copo.k=4", "algorithm.gcpo.beta=0.5", "algorithm.norm_adv_by_std_in_grpo=false"
    )
    settings = StepSettings.from_config(config)
    assert settings.copo == CopoConfig(k=4.0)
    assert settings.gcpo.beta == 0.5 and settings.norm_adv_by_std is False and settings.estimator == "copo"
    with pytest.raises(ValueError, match="copo or gcpo"):
        StepSettings(estimator="grpo")


# ----------------------------------------------------------------------------------------------
# The trainer's _compute_advantage glue, against an in-memory stand-in for TransferQueue.


class _FakeTQ:
    """kv_batch_get / kv_batch_put over per-row dicts, returning TensorDicts like TransferQueue."""

    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}
        self.calls: list[str] = []

    def kv_batch_get(self, keys, partition_id, select_fields):
        self.calls.append("get")
        return tu.list_of_dict_to_tensordict([{f: self.rows[k][f] for f in select_fields} for k in keys])

    def kv_batch_put(self, keys, partition_id, fields):
        self.calls.append("put")
        for i, key in enumerate(keys):
            for name in list(fields.keys()):  # iterating a TensorDict walks its batch dim
                self.rows[key][name] = fields[name][i]
        return "meta"


class _Base:
    def _compute_advantage(self, batch, metrics):
        raise AssertionError("the COPO estimator must not fall through to verl's step")


class _Trainer(CopoTrainerMixin, _Base):
    pass


def _fill_store(fake: _FakeTQ, batch, keys) -> None:
    rewards = batch.token_level_rewards()
    for i, key in enumerate(keys):
        lr = batch.response_lens[i]
        fake.rows[key] = {
            "uid": batch.uids[i],
            "response_mask": torch.ones(lr, dtype=torch.int64),
            "rm_scores": rewards[i, :lr].clone(),
            "extra_fields": {"reward_extra_info": {"acc": bool(batch.scores[i] > 0), "pred": batch.preds[i]}},
        }


def test_trainer_reads_once_writes_once_and_logs_the_step_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    import transfer_queue
    from transfer_queue import KVBatchMeta

    batch = make_step_batch(seed=12)
    fake = _FakeTQ()
    keys = batch.keys()
    _fill_store(fake, batch, keys)
    monkeypatch.setattr(transfer_queue, "kv_batch_get", fake.kv_batch_get)
    monkeypatch.setattr(transfer_queue, "kv_batch_put", fake.kv_batch_put)

    trainer = object.__new__(_Trainer)
    trainer.config = composed_config("algorithm.copo.k=4.0", "algorithm.copo.blend_mode=soft")
    meta = KVBatchMeta(keys=keys, tags=[{} for _ in keys], partition_id="train")
    metrics: dict = {}
    assert trainer._compute_advantage(meta, metrics) == "meta"
    assert fake.calls == ["get", "put"]

    ref = compute_copo_advantages(batch.scores, batch.uids, batch.preds, k=4.0, blend_mode="soft")
    for i, key in enumerate(keys):
        row = fake.rows[key]
        lr = batch.response_lens[i]
        for name, want in (
            ("copo_local_adv", ref.local_adv[i]),
            ("copo_global_adv", ref.global_adv[i]),
            ("copo_local_weight", ref.local_weight[i]),
            ("advantages", ref.blended[i]),
            ("returns", ref.blended[i]),
        ):
            assert row[name].shape == (lr,)
            torch.testing.assert_close(row[name], want.expand(lr), rtol=1e-6, atol=1e-7)
    assert metrics["copo/entropy_mean"] == pytest.approx(copo_batch_metrics(ref)["entropy_mean"])
    assert _signal_by_hand(ref.blended, batch.scores, batch.uids, range(batch.n)) == pytest.approx(
        {k: metrics[k] for k in _SIGNAL_KEYS}
    )

    # A padding row (verl's tag) takes no part in the statistics and gets zero fields.
    padded_tags = [{"is_padding": i == batch.n - 1} for i in range(batch.n)]
    metrics = {}
    trainer._compute_advantage(KVBatchMeta(keys=keys, tags=padded_tags, partition_id="train"), metrics)
    assert torch.all(fake.rows[keys[-1]]["advantages"] == 0)
    assert {k: metrics[k] for k in _SIGNAL_KEYS} == pytest.approx(
        _signal_by_hand(fake_first_token(fake, keys), batch.scores, batch.uids, range(batch.n - 1))
    )

    # Without a `pred` in the reward extra info the step fails with the reward-contract message.
    for key in keys:
        fake.rows[key]["extra_fields"] = {"reward_extra_info": {"acc": True}}
    with pytest.raises(ValueError, match="must return a dict"):
        trainer._compute_advantage(meta, {})


def fake_first_token(fake: _FakeTQ, keys) -> torch.Tensor:
    """(N,) advantage of each stored row (constant over its response)."""
    return torch.stack([fake.rows[key]["advantages"][0] for key in keys])


class _GrpoBase:
    """verl's own step for grpo: writes GRPO advantages (computed by verl) into the store."""

    fake: _FakeTQ
    batch: object

    def _compute_advantage(self, batch, metrics):
        from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

        rewards = self.batch.token_level_rewards()
        mask = self.batch.response_mask()
        adv, _ = compute_grpo_outcome_advantage(rewards, mask, np.array(self.batch.uids, dtype=object))
        for i, key in enumerate(batch.keys):
            self.fake.rows[key]["advantages"] = adv[i, : self.batch.response_lens[i]].clone()
        return "verl-meta"


class _GrpoTrainer(CopoTrainerMixin, _GrpoBase):
    pass


def test_verl_estimators_get_signal_metrics_read_back_from_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    import transfer_queue
    from transfer_queue import KVBatchMeta

    batch = make_step_batch(seed=13)
    fake = _FakeTQ()
    keys = batch.keys()
    _fill_store(fake, batch, keys)
    monkeypatch.setattr(transfer_queue, "kv_batch_get", fake.kv_batch_get)
    monkeypatch.setattr(transfer_queue, "kv_batch_put", fake.kv_batch_put)
    trainer = object.__new__(_GrpoTrainer)
    trainer.config = composed_config(
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"
    )
    trainer.fake, trainer.batch = fake, batch
    metrics: dict = {}
    tags = [{"is_padding": i == 0} for i in range(batch.n)]
    assert (
        trainer._compute_advantage(KVBatchMeta(keys=keys, tags=tags, partition_id="train"), metrics)
        == "verl-meta"
    )
    assert fake.calls == ["get"]  # one read, for the metrics only
    advantages = fake_first_token(fake, keys)
    signal = {k: v for k, v in metrics.items() if k.startswith("signal/")}
    assert signal == pytest.approx(_signal_by_hand(advantages, batch.scores, batch.uids, range(1, batch.n)))
    # mechanism/: the same rows (padding left out) through copo_core's wrong_answer_metrics
    real = list(range(1, batch.n))
    wrong = wrong_answer_metrics(
        advantages[real][:, None], torch.ones(len(real), 1), batch.scores[real], [batch.uids[i] for i in real]
    )
    mechanism = {f"mechanism/{k}": v for k, v in wrong.items()}
    assert set(metrics) == set(signal) | set(mechanism)
    assert {k: metrics[k] for k in mechanism} == pytest.approx(mechanism, abs=1e-6, nan_ok=True)
