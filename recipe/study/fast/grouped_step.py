"""S seeds' generation, log-probs and update through one :class:`GroupedQwen2`.

Each seed keeps its own random numbers and its own batch; only the model passes are shared:

* :func:`sample_seeds`: the forked sampler of :mod:`recipe.study.fast.rollout` for S seeds at once.
  Seed ``s``'s rows draw from seed ``s``'s generator, in row order, only while they are unfinished:
  the draws a single-seed :class:`~recipe.study.fast.rollout.ForkedDecode` makes. Finished rows leave
  the batch down to the most unfinished rows any seed has (a seed with fewer keeps finished rows, fed
  padding, drawing nothing), so all seeds stay one ``[S, rows]`` batch. The token draw is
  ``recipe.cpu_backend.sampling.next_tokens``, the single-seed sampler's own.
* :func:`seed_log_probs`: :func:`recipe.study.fast.update.response_log_probs` for S batches
  (shared-prompt forward included), padded to common widths.
* :func:`train_seeds`: :func:`recipe.study.fast.update.train_on_batch` for S batches: each seed's
  advantages and loss are the single-seed functions' (verl's GRPO advantage or the recipe's COPO
  step, verl's or ``copo_core``'s loss), the S losses are summed for one backward (seeds share no
  weight), then verl's clipping rule per seed and one step of the optimizer over the stacked weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from recipe.cpu_backend.sampling import Sample, SamplingParams, next_tokens
from recipe.study.fast.grouped import KV, GroupedQwen2
from recipe.study.fast.settings import FastSettings
from recipe.study.fast.update import UpdateBatch, compute_advantages, policy_loss
from recipe.tracking import names


@torch.no_grad()
def sample_seeds(
    model: GroupedQwen2,
    prompts: Sequence[Sequence[Sequence[int]]],
    n: int,
    params: SamplingParams,
    *,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    generators: Sequence[torch.Generator],
) -> list[list[list[Sample]]]:
    """``n`` samples of each seed's prompts: ``[seed][prompt][copy]`` (seeds may have different prompts)."""
    s = model.num_seeds
    if len(prompts) != s or len(generators) != s:
        raise ValueError(
            f"sample_seeds: {len(prompts)} prompt lists, {len(generators)} generators for {s} seeds"
        )
    counts = [len(p) for p in prompts]
    c = max(counts)
    width = max(len(x) for mine in prompts for x in mine)
    ids = torch.full((s, c, width), int(pad_token_id), dtype=torch.long)
    mask = torch.zeros((s, c, width), dtype=torch.long)
    for i, mine in enumerate(prompts):
        for j, prompt in enumerate(mine):
            ids[i, j, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            mask[i, j, width - len(prompt) :] = 1
        mask[i, len(mine) :, -1] = 1  # a seed with fewer prompts: rows of one pad token, never sampled
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    logits, past = model(ids, mask, position_ids, logits_at=slice(width - 1, width))
    past = [KV(kv.keys.repeat_interleave(n, dim=1), kv.values.repeat_interleave(n, dim=1)) for kv in past]
    mask = mask.repeat_interleave(n, dim=1)
    next_pos = position_ids[:, :, -1:].repeat_interleave(n, dim=1) + 1
    next_logits = logits[:, :, -1].float().repeat_interleave(n, dim=1)  # [S, R, V]
    rows = c * n
    active = torch.zeros((s, rows), dtype=torch.bool)
    for i, count in enumerate(counts):
        active[i, : count * n] = True
    tokens: list[list[list[int]]] = [[[] for _ in range(rows)] for _ in range(s)]
    logps: list[list[list[float]]] = [[[] for _ in range(rows)] for _ in range(s)]
    eos_flags = [[False] * rows for _ in range(s)]
    eos = torch.tensor(sorted(set(eos_token_ids)), dtype=torch.long)
    # slots: the batch's row positions per seed; slot_row maps them to the seed's rows (kept in row order)
    width = rows
    slot_row = torch.arange(rows).repeat(s, 1)
    seeds = torch.arange(s).unsqueeze(1)
    while bool(active.any()):
        flat = active.view(-1).nonzero().squeeze(-1)  # seed-major, each seed's slots in row order
        where = flat.tolist()
        token, logp = next_tokens(
            next_logits.reshape(s * width, -1)[flat], params, [generators[k // width] for k in where]
        )
        hit = torch.isin(token, eos) if not params.ignore_eos else torch.zeros_like(token, dtype=torch.bool)
        rows_of = slot_row.reshape(-1)[flat].tolist()
        done = []
        for k, r, t, lp, e in zip(where, rows_of, token.tolist(), logp.tolist(), hit.tolist(), strict=True):
            i = k // width
            tokens[i][r].append(t)
            logps[i][r].append(lp)
            if e or len(tokens[i][r]) >= params.max_tokens:
                eos_flags[i][r] = bool(e)
                done.append(k)
        if done:
            active.view(-1)[torch.tensor(done)] = False
        if not bool(active.any()):
            break
        feed = torch.full((s * width,), int(pad_token_id), dtype=torch.long)
        feed[flat] = token
        feed = feed.view(s, width)
        keep = int(active.sum(1).max())
        if keep < width:  # drop finished rows (as DecodeBatch does), to the most any seed still decodes
            order = torch.sort((~active).to(torch.int8), dim=1, stable=True).indices[:, :keep]
            past = [KV(kv.keys[seeds, order], kv.values[seeds, order]) for kv in past]
            feed, mask, next_pos = feed[seeds, order], mask[seeds, order], next_pos[seeds, order]
            active, slot_row = active[seeds, order], slot_row[seeds, order]
            width = keep
        step_mask = torch.ones((s, width, 1), dtype=torch.long)
        logits, past = model(feed.unsqueeze(-1), step_mask, next_pos, past=past, past_mask=mask)
        mask = torch.cat([mask, step_mask], dim=-1)
        next_logits = logits[:, :, -1].float()
        next_pos = next_pos + 1
    return [
        [
            [Sample(tokens[i][p * n + j], logps[i][p * n + j], eos_flags[i][p * n + j]) for j in range(n)]
            for p in range(counts[i])
        ]
        for i in range(s)
    ]


def _stack(batches: Sequence[UpdateBatch], pad_token_id: int) -> tuple[torch.Tensor, ...]:
    """The S batches at common prompt and response widths: (ids, mask, positions, responses, response mask)."""
    widths = [b.input_ids.shape[1] - b.response_width for b in batches]
    p, length = max(widths), max(b.response_width for b in batches)
    s, rows = len(batches), batches[0].input_ids.shape[0]
    if any(b.input_ids.shape[0] != rows for b in batches):
        raise ValueError("train_seeds: the seeds' batches have different numbers of rows")
    ids = torch.full((s, rows, p + length), int(pad_token_id), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (b, w) in enumerate(zip(batches, widths, strict=True)):
        ids[i, :, p - w : p + b.response_width] = b.input_ids
        mask[i, :, p - w : p + b.response_width] = b.attention_mask
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, position_ids, ids[:, :, p:], mask[:, :, p:].to(torch.float32)


def seed_log_probs(
    model: GroupedQwen2,
    batches: Sequence[UpdateBatch],
    temperature: float,
    pad_token_id: int,
    group_size: int = 1,
) -> list[torch.Tensor]:
    """Each seed's ``(N, L_s)`` response log-probs, as :func:`~recipe.study.fast.update.response_log_probs`."""
    ids, mask, pos, responses, response_mask = _stack(batches, pad_token_id)
    s, rows, total = ids.shape
    length = responses.shape[2]
    p = total - length
    g = group_size
    if g > 1:
        if rows % g:
            raise ValueError(f"shared-prompt forward: {rows} rows are not groups of {g}")
        prompts = ids[:, :, :p].view(s, rows // g, g, p)
        if not torch.equal(prompts, prompts[:, :, :1].expand(-1, -1, g, -1)):
            raise ValueError(f"shared-prompt forward: the rows do not come in groups of {g} with one prompt")
        first, past = model(ids[:, ::g, :p], mask[:, ::g, :p], pos[:, ::g, :p], logits_at=slice(p - 1, p))
        past = [KV(kv.keys.repeat_interleave(g, dim=1), kv.values.repeat_interleave(g, dim=1)) for kv in past]
        rest, _ = model(
            ids[:, :, p:],
            mask[:, :, p:],
            pos[:, :, p:],
            past=past,
            past_mask=mask[:, :, :p],
            logits_at=slice(0, length - 1),
        )
        logits = torch.cat([first.repeat_interleave(g, dim=1), rest], dim=2)
    else:
        logits, _ = model(ids, mask, pos, logits_at=slice(p - 1, total - 1))
    logits = logits.float() / temperature
    log_probs = torch.log_softmax(logits, dim=-1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)
    log_probs = log_probs * response_mask
    return [log_probs[i, :, : b.response_width] for i, b in enumerate(batches)]


def train_seeds(
    model: GroupedQwen2,
    optimizer: Any,
    scheduler: Any,
    batches: Sequence[UpdateBatch],
    settings: FastSettings,
    global_step: int,
    pad_token_id: int,
    group_size: int = 1,
) -> list[dict[str, Any]]:
    """:func:`~recipe.study.fast.update.train_on_batch` for each seed's batch; one metrics dict per seed.

    Raises:
        FloatingPointError: a seed's gradient norm is not finite. One model skips that step; the stacked
            optimizer would have to skip one seed's slice and keep the others' (not implemented).
    """
    fields = [compute_advantages(b, settings, global_step) for b in batches]
    model.train()
    log_probs = seed_log_probs(model, batches, settings.temperature, pad_token_id, group_size=group_size)
    losses, loss_metrics = [], []
    for b, lp, f in zip(batches, log_probs, fields, strict=True):
        loss, m = policy_loss(settings, b, lp, f)
        losses.append(loss)
        loss_metrics.append(m)
    torch.stack(losses).sum().backward()
    lr = float(optimizer.param_groups[0]["lr"])
    norms = model.clip_grad_norm_(float(settings.actor.optim.clip_grad))
    if not bool(torch.isfinite(norms).all()):
        raise FloatingPointError(f"train_seeds: non-finite gradient norm per seed {norms.tolist()}")
    optimizer.step()
    optimizer.zero_grad()
    scheduler.step()
    out = []
    for i, f in enumerate(fields):
        metrics: dict[str, Any] = {names.ACTOR_PREFIX + k: v for k, v in loss_metrics[i].items()}
        metrics.update(
            {
                names.ACTOR_PG_LOSS: float(losses[i].detach()),
                names.ACTOR_GRAD_NORM: float(norms[i]),
                names.ACTOR_LR: lr,
            }
        )
        metrics.update(f["metrics"])
        metrics["_advantages"] = f["advantages"]
        out.append(metrics)
    return out
