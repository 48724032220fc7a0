"""The driver-side COPO step on real verl batches produces exactly copo_core's quantities."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.utils import tensordict_utils as tu

from copo_core import compute_copo_advantages, copo_batch_metrics
from copo_core.metrics import NONZERO_ADV_TOL
from recipe.copo.trainer import (
    MISSING_PRED_MESSAGE,
    CopoSettings,
    CopoTrainerMixin,
    compute_step_fields,
    session_rows,
)
from tests.recipe.copo.copo_batches import composed_config, make_step_batch

BLEND_MODES = ["soft", "soft_with_zero", "soft_with_forced", "zero", "forced", "global_only", "local_only"]


def _keys(batch) -> list[str]:
    return [f"{uid}_{i}_0" for i, uid in enumerate(batch.uids)]


def _reference(batch, settings: CopoSettings, with_answers: bool = True):
    return compute_copo_advantages(
        batch.scores,
        batch.uids,
        batch.preds if with_answers else None,
        k=settings.k,
        b=settings.b,
        blend_mode=settings.blend_mode,
        entropy_source=settings.entropy_source,
        entropy_penalty=settings.entropy_penalty,
        norm_adv_by_std=settings.norm_adv_by_std,
    )


def _per_response(token_field: torch.Tensor, batch) -> torch.Tensor:
    """(N,) value of a per-token field, checking it is constant on the response and 0 after it."""
    mask = batch.response_mask().bool()
    first = token_field[:, 0]
    assert torch.equal(token_field[mask], first[:, None].expand_as(token_field)[mask])
    assert torch.all(token_field[~mask] == 0)
    return first


@pytest.mark.parametrize("blend_mode", BLEND_MODES)
@pytest.mark.parametrize(
    ("entropy_source", "penalty"), [("answer", False), ("answer", True), ("reward", False)]
)
def test_step_fields_equal_copo_core(blend_mode: str, entropy_source: str, penalty: bool) -> None:
    batch = make_step_batch(seed=7)
    settings = CopoSettings(
        k=3.0, b=0.8, blend_mode=blend_mode, entropy_source=entropy_source, entropy_penalty=penalty
    )
    fields, metrics = compute_step_fields(
        batch.to_dataproto(), _keys(batch), [False] * batch.n, "copo", settings
    )
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
    expected = {f"copo/{k}": v for k, v in copo_batch_metrics(ref, batch.scores, batch.uids).items()}
    assert metrics == pytest.approx(expected, abs=1e-6)


def test_norm_adv_by_std_false_is_forwarded() -> None:
    batch = make_step_batch(seed=8)
    settings = CopoSettings(norm_adv_by_std=False)
    fields, _ = compute_step_fields(batch.to_dataproto(), _keys(batch), [False] * batch.n, "copo", settings)
    ref = _reference(batch, settings)
    torch.testing.assert_close(_per_response(fields["copo_local_adv"], batch), ref.local_adv, rtol=0, atol=0)
    torch.testing.assert_close(
        _per_response(fields["copo_global_adv"], batch), ref.global_adv, rtol=0, atol=0
    )


def test_padding_rows_and_multi_output_sessions() -> None:
    batch = make_step_batch(seed=9)
    data = batch.to_dataproto()
    keys = _keys(batch)
    # Row 0 becomes an earlier turn of row 1's session (same uid, same session id, index 0 < 1).
    same_uid = [i for i in range(1, batch.n) if batch.uids[i] == batch.uids[0]][0]
    keys[0] = f"{batch.uids[0]}_s_0"
    keys[same_uid] = f"{batch.uids[0]}_s_1"
    # Two synthetic padding rows appended by verl (their pred is a copy of row 0's, as in verl).
    pad = DataProto(
        batch=TensorDict(
            {
                "token_level_rewards": torch.zeros(2, data.batch["token_level_rewards"].shape[1]),
                "token_level_scores": torch.zeros(2, data.batch["token_level_rewards"].shape[1]),
                "response_mask": torch.zeros(2, data.batch["response_mask"].shape[1], dtype=torch.int64),
            },
            batch_size=2,
        ),
        non_tensor_batch={
            "uid": np.array(["padXYZ", "padXYZ"], dtype=object),
            "pred": np.array([batch.preds[0]] * 2, dtype=object),
            "acc": np.array([False, False], dtype=object),
        },
    )
    full = DataProto.concat([data, pad])
    settings = CopoSettings()
    fields, metrics = compute_step_fields(
        full, [*keys, "padXYZ_0_0", "padXYZ_1_0"], [False] * batch.n + [True, True], "copo", settings
    )
    for name in ("advantages", "copo_local_adv", "copo_global_adv", "copo_local_weight"):
        assert torch.all(fields[name][-2:] == 0)

    # Reference: copo_core on the final output of each session only (row 0 is not a response of its own).
    keep = [i for i in range(batch.n) if i != 0]
    ref = compute_copo_advantages(
        batch.scores[keep],
        [batch.uids[i] for i in keep],
        [batch.preds[i] for i in keep],
        blend_mode=settings.blend_mode,
    )
    mask = full.batch["response_mask"].bool()
    for name, want in (("copo_local_adv", ref.local_adv), ("copo_global_adv", ref.global_adv)):
        got = fields[name][:, 0]
        torch.testing.assert_close(got[keep], want, rtol=0, atol=0)
        # row 0 (earlier turn) carries its session's final values on all its tokens
        assert torch.all(fields[name][0][mask[0]] == got[same_uid])
    expected = copo_batch_metrics(ref, batch.scores[keep], [batch.uids[i] for i in keep])
    assert metrics == pytest.approx({f"copo/{k}": v for k, v in expected.items()}, abs=1e-6)


def test_session_rows_picks_final_output() -> None:
    rows, row_map = session_rows(
        ["a_0_0", "a_0_2", "a_1_0", "pad_0_0", "a_0_1"], [False, False, False, True, False]
    )
    assert rows == [1, 2]
    assert row_map.tolist() == [0, 0, 1, -1, 0]


def test_missing_pred_names_the_reward_contract() -> None:
    batch = make_step_batch(seed=1)
    with pytest.raises(ValueError, match="pred") as err:
        compute_step_fields(
            batch.to_dataproto(with_pred=False), _keys(batch), [False] * batch.n, "copo", CopoSettings()
        )
    assert "entropy_source=reward" in str(err.value)
    assert "custom_reward_function" in str(err.value)
    assert MISSING_PRED_MESSAGE.split("{")[0][:40] in str(err.value)
    # entropy over reward classes needs no answers
    fields, _ = compute_step_fields(
        batch.to_dataproto(with_pred=False),
        _keys(batch),
        [False] * batch.n,
        "copo",
        CopoSettings(entropy_source="reward"),
    )
    ref = _reference(batch, CopoSettings(entropy_source="reward"), with_answers=False)
    torch.testing.assert_close(
        _per_response(fields["copo_local_weight"], batch), ref.local_weight, rtol=0, atol=0
    )


def test_gcpo_estimator_and_gcpo_local_term() -> None:
    batch = make_step_batch(seed=4)
    seen = {}

    def fake_gcpo(sub: DataProto):
        seen["n"] = len(sub)
        adv = torch.arange(len(sub), dtype=torch.float32) - 3.0
        return adv, {"coverage_mean": 0.5}

    fields, metrics = compute_step_fields(
        batch.to_dataproto(), _keys(batch), [False] * batch.n, "gcpo", CopoSettings(), gcpo_fn=fake_gcpo
    )
    assert seen["n"] == batch.n
    assert set(fields) == {"advantages", "returns"}
    torch.testing.assert_close(
        _per_response(fields["advantages"], batch), torch.arange(batch.n, dtype=torch.float32) - 3.0
    )
    assert metrics == {"gcpo/coverage_mean": 0.5}

    settings = CopoSettings(local_estimator="gcpo")
    fields, metrics = compute_step_fields(
        batch.to_dataproto(), _keys(batch), [False] * batch.n, "copo", settings, gcpo_fn=fake_gcpo
    )
    ref = _reference(batch, settings)
    gcpo_adv = torch.arange(batch.n, dtype=torch.float32) - 3.0
    torch.testing.assert_close(_per_response(fields["copo_local_adv"], batch), gcpo_adv)
    torch.testing.assert_close(
        _per_response(fields["copo_global_adv"], batch), ref.global_adv, rtol=0, atol=0
    )
    torch.testing.assert_close(
        _per_response(fields["copo_local_weight"], batch), ref.local_weight, rtol=0, atol=0
    )
    torch.testing.assert_close(
        _per_response(fields["advantages"], batch),
        ref.local_weight * gcpo_adv + (1 - ref.local_weight) * ref.global_adv,
    )
    assert "gcpo/coverage_mean" in metrics and "copo/entropy_mean" in metrics


# ----------------------------------------------------------------------------------------------
# The trainer's _compute_advantage glue, against an in-memory stand-in for TransferQueue.


class _FakeTQ:
    """kv_batch_get / kv_batch_put over per-row dicts, returning TensorDicts like TransferQueue."""

    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}

    def kv_batch_get(self, keys, partition_id, select_fields):
        return tu.list_of_dict_to_tensordict([{f: self.rows[k][f] for f in select_fields} for k in keys])

    def kv_batch_put(self, keys, partition_id, fields):
        for i, key in enumerate(keys):
            for name in list(fields.keys()):  # iterating a TensorDict walks its batch dim
                self.rows[key][name] = fields[name][i]
        return "meta"


_SIGNAL_KEYS = (
    "signal/frac_nonzero_adv",
    "signal/frac_groups_all_correct",
    "signal/frac_groups_all_wrong",
    "signal/frac_groups_zero_variance",
    "signal/num_responses",
    "signal/num_groups",
)


def _signal_by_hand(adv: torch.Tensor, scores: torch.Tensor, uids, rows) -> dict[str, float]:
    """Loop reference for the trainer's signal/ metrics over the listed rows."""
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


class _Base:
    def _compute_advantage(self, batch, metrics):
        raise AssertionError("the COPO estimator must not fall through to verl's step")


class _Trainer(CopoTrainerMixin, _Base):
    pass


def test_trainer_compute_advantage_reads_tq_and_writes_nested_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    import transfer_queue
    from transfer_queue import KVBatchMeta

    batch = make_step_batch(seed=12)
    fake = _FakeTQ()
    keys = [f"{uid}_{i}_0" for i, uid in enumerate(batch.uids)]
    rewards = batch.token_level_rewards()
    for i, key in enumerate(keys):
        lr = batch.response_lens[i]
        fake.rows[key] = {
            "uid": batch.uids[i],
            "response_mask": torch.ones(lr, dtype=torch.int64),
            "rm_scores": rewards[i, :lr].clone(),
            "extra_fields": {"reward_extra_info": {"acc": bool(batch.scores[i] > 0), "pred": batch.preds[i]}},
        }
    monkeypatch.setattr(transfer_queue, "kv_batch_get", fake.kv_batch_get)
    monkeypatch.setattr(transfer_queue, "kv_batch_put", fake.kv_batch_put)

    trainer = object.__new__(_Trainer)
    trainer.config = composed_config("algorithm.copo.k=4.0", "algorithm.copo.blend_mode=soft")
    meta = KVBatchMeta(keys=keys, tags=[{} for _ in keys], partition_id="train")
    metrics: dict = {}
    assert trainer._compute_advantage(meta, metrics) == "meta"

    ref = compute_copo_advantages(batch.scores, batch.uids, batch.preds, k=4.0, blend_mode="soft")
    for i, key in enumerate(keys):
        row = fake.rows[key]
        lr = batch.response_lens[i]
        for name, want in (
            ("copo_local_adv", ref.local_adv[i]),
            ("copo_global_adv", ref.global_adv[i]),
            ("copo_local_weight", ref.local_weight[i]),
            ("advantages", ref.blended[i]),
        ):
            assert row[name].shape == (lr,)
            torch.testing.assert_close(row[name], want.expand(lr), rtol=1e-6, atol=1e-7)
    assert metrics["copo/entropy_mean"] == pytest.approx(
        copo_batch_metrics(ref, batch.scores, batch.uids)["entropy_mean"]
    )
    # signal/ metrics are read back from the rows the step wrote; padding rows are left out.
    assert _signal_by_hand(ref.blended, batch.scores, batch.uids, range(batch.n)) == pytest.approx(
        {k: metrics[k] for k in _SIGNAL_KEYS}
    )
    padded_tags = [{"is_padding": i == batch.n - 1} for i in range(batch.n)]
    padded_meta = KVBatchMeta(keys=keys, tags=padded_tags, partition_id="train")
    assert trainer._signal_budget(padded_meta) == pytest.approx(
        _signal_by_hand(ref.blended, batch.scores, batch.uids, range(batch.n - 1))
    )

    # Without a `pred` in the reward extra info the step fails with the reward-contract message.
    for key in keys:
        fake.rows[key]["extra_fields"] = {"reward_extra_info": {"acc": True}}
        for name in ("copo_local_adv", "copo_global_adv", "copo_local_weight", "advantages", "returns"):
            fake.rows[key].pop(name, None)
    with pytest.raises(ValueError, match="must return a dict"):
        trainer._compute_advantage(meta, {})
