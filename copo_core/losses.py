"""COPO policy loss (SPEC section 5): two PPO clipped surrogates sharing one token ratio.

loss_t = w_i * l(A^L_i)_t + (1 - w_i) * l(A^G_{g(i)})_t, where l is verl 0.9.1's vanilla
clipped surrogate (``compute_policy_loss_vanilla``: log-ratio clamp [-20, 20], asymmetric
clip, dual clip at ``clip_ratio_c`` for A < 0), aggregated with verl's ``agg_loss`` rules.

The surrogate is written as ``-A * g(ratio)`` with ``g = min(ratio, 1 + eps_high)`` for A >= 0
and ``g = min(max(ratio, 1 - eps_low), c)`` for A < 0. This equals verl's
``max(-A r, -A clip(r))`` / dual-clip ``min`` bit for bit (multiplication by one scalar is
monotone under rounding), and lets both terms share the two clamped ratios.
"""

from __future__ import annotations

import math

import torch

__all__ = ["LOSS_AGG_MODES", "agg_loss", "copo_policy_loss"]

# Every mode of verl 0.9.1's core_algos.agg_loss.
LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


_METRIC_KEYS = (
    "pg_loss",
    "pg_loss_local",
    "pg_loss_global",
    "pg_clipfrac_local",
    "pg_clipfrac_global",
    "pg_clipfrac_lower_local",
    "pg_clipfrac_lower_global",
    "ppo_kl",
)


def _masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # Same as verl_F.masked_sum: NaNs outside the mask must not leak into the sum.
    return (torch.where(mask.bool(), values, 0.0) * mask).sum()


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _masked_sum(values, mask) / (mask.sum() + 1e-8)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    *,
    dp_size: int = 1,
    batch_num_tokens: int | torch.Tensor | None = None,
    global_batch_size: int | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate a (N, L) token loss to a scalar exactly as verl 0.9.1's ``agg_loss``.

    Args:
        loss_mat: (N, L) token losses of this micro-batch.
        loss_mask: (N, L) 0/1 mask of response tokens.
        loss_agg_mode: one of ``LOSS_AGG_MODES``.
        dp_size: data-parallel size; with ``dp_size > 1`` the global normaliser below is required.
        batch_num_tokens: valid tokens in the global batch (``token-mean``); default: this mask's sum.
        global_batch_size: non-empty sequences in the global batch (``seq-mean-*``); default: local count.
        loss_scale_factor: divisor of ``seq-mean-token-sum-norm``; default: ``L`` (``loss_mask.shape[-1]``).

    Returns:
        scalar tensor.
    """
    return _aggregate(
        loss_mat,
        loss_mask,
        loss_agg_mode,
        premasked=False,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
        loss_scale_factor=loss_scale_factor,
    )


def _aggregate(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    *,
    premasked: bool,
    dp_size: int,
    batch_num_tokens: int | torch.Tensor | None,
    global_batch_size: int | torch.Tensor | None,
    loss_scale_factor: float | None,
) -> torch.Tensor:
    """``agg_loss``; ``premasked=True`` skips re-masking a loss that is already 0 outside the mask.

    Multiplying by a 0/1 mask changes no value but the sign of zeros, so both paths give
    the same sums as verl bit for bit.
    """
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            if dp_size > 1:
                raise ValueError("`batch_num_tokens` (global) is required when `dp_size` > 1")
            batch_num_tokens = loss_mask.sum()
        total = loss_mat.sum() if premasked else _masked_sum(loss_mat, loss_mask)
        return total / batch_num_tokens * dp_size
    if loss_agg_mode == "token-sum":
        total = loss_mat.sum() if premasked else _masked_sum(loss_mat, loss_mask)
        return total * dp_size
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean"):
        token_count = torch.sum(loss_mask, dim=-1)
        seq_losses = torch.sum(loss_mat if premasked else loss_mat * loss_mask, dim=-1)
        if loss_agg_mode == "seq-mean-token-mean":
            seq_losses = seq_losses / (token_count + 1e-8)
        seq_mask = (token_count > 0).float()  # fully masked sequences do not count
        if global_batch_size is None:
            if dp_size > 1:
                raise ValueError("`global_batch_size` is required when `dp_size` > 1")
            global_batch_size = seq_mask.sum()
        loss = _masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
        if loss_agg_mode == "seq-mean-token-sum-norm":
            loss = loss / (loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
        return loss
    raise ValueError(f"unknown `loss_agg_mode` {loss_agg_mode!r}; choose one of {list(LOSS_AGG_MODES)}")


def _as_token_tensor(x: torch.Tensor, name: str, shape: torch.Size) -> torch.Tensor:
    """(N,) or (N, L) -> float32 tensor broadcastable to (N, L)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"`{name}` must be a torch.Tensor of shape (N,) or (N, L), got {type(x).__name__}")
    if x.shape == shape:
        return x.to(torch.float32)
    if x.ndim == 1 and x.shape[0] == shape[0]:
        return x.to(torch.float32).unsqueeze(-1)
    raise ValueError(
        f"`{name}` has shape {tuple(x.shape)}; expected ({shape[0]},) or {tuple(shape)} to match `log_prob`"
    )


def _check_loss_args(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float,
    loss_agg_mode: str,
) -> None:
    for name, t in (("old_log_prob", old_log_prob), ("log_prob", log_prob), ("response_mask", response_mask)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"`{name}` must be a torch.Tensor, got {type(t).__name__}")
    if log_prob.ndim != 2:
        raise ValueError(f"`log_prob` must be (N, L), got shape {tuple(log_prob.shape)}")
    if log_prob.numel() == 0:
        raise ValueError("`log_prob` is empty (empty batch)")
    if old_log_prob.shape != log_prob.shape:
        raise ValueError(
            f"`old_log_prob` shape {tuple(old_log_prob.shape)} != `log_prob` shape {tuple(log_prob.shape)}"
        )
    if response_mask.shape != log_prob.shape:
        raise ValueError(
            f"`response_mask` shape {tuple(response_mask.shape)} != `log_prob` shape {tuple(log_prob.shape)}"
        )
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown `loss_agg_mode` {loss_agg_mode!r}; choose one of {list(LOSS_AGG_MODES)}")
    for name, v in (("clip_ratio_low", clip_ratio_low), ("clip_ratio_high", clip_ratio_high)):
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"`{name}` must be a finite number >= 0, got {v}")
    if not clip_ratio_c > 1.0:
        raise ValueError(f"`clip_ratio_c` (dual-clip bound) must be > 1.0, got {clip_ratio_c}")


class _SharedRatio:
    """Token quantities shared by the two surrogate terms, computed once per call.

    Shapes: every tensor attribute is (N, L) except the ``rows_*`` clip counts per row, (N,).
    ``g_pos``/``g_neg`` are already zeroed outside the mask, so a term's masked token loss is
    ``c * where(A < 0, g_neg, g_pos)`` for the per-token factor ``c = -A * w``.
    """

    def __init__(
        self,
        log_ratio: torch.Tensor,
        mask: torch.Tensor,
        clip_ratio_low: float,
        clip_ratio_high: float,
        clip_ratio_c: float,
    ) -> None:
        ratio = torch.exp(log_ratio)
        # "* mask" keeps every value of verl's masking (0/1 factors only flip signs of zeros);
        # like verl's seq-mean modes it needs finite log-probs at padded positions.
        self.g_pos = torch.clamp(ratio, max=1.0 + clip_ratio_high) * mask
        self.g_neg = torch.clamp(ratio, min=1.0 - clip_ratio_low, max=clip_ratio_c) * mask
        self.mask = mask
        self.clip_ratio_low, self.clip_ratio_high, self.clip_ratio_c = (
            clip_ratio_low,
            clip_ratio_high,
            clip_ratio_c,
        )
        with torch.no_grad():
            # Clip counts per row (float sums of 0/1 are exact below 2**24 tokens per row).
            self.rows_high = ((ratio > 1.0 + clip_ratio_high) * mask).sum(-1)
            self.rows_low = ((ratio < 1.0 - clip_ratio_low) * mask).sum(-1)
            self.rows_c = ((ratio > clip_ratio_c) * mask).sum(-1)
            self.num_tokens = mask.sum()
            self._ratio = ratio

    def masked_token_loss(self, adv: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """(N, L) weighted surrogate ``w * l(A)`` of one term, zero outside the mask."""
        return (-adv * weight) * torch.where(adv < 0, self.g_neg, self.g_pos)

    @torch.no_grad()
    def clip_fractions(self, adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """verl's ``pg_clipfrac`` and ``pg_clipfrac_lower`` for advantages ``adv`` ((N, 1) or (N, L)).

        A token is clipped when its ratio leaves the clip range on the side that the sign of
        A makes active; "lower" counts A < 0 tokens whose ratio exceeds ``clip_ratio_c``.
        """
        if adv.shape[-1] == 1:  # one advantage per row: select per-row counts, no (N, L) pass
            a = adv.squeeze(-1)
            clipped = torch.where(a < 0, self.rows_low, torch.where(a > 0, self.rows_high, 0.0)).sum()
            lower = torch.where(a < 0, self.rows_c, 0.0).sum()
        else:
            negative = adv < 0
            high = (self._ratio > 1.0 + self.clip_ratio_high) & (adv > 0)
            low = (self._ratio < 1.0 - self.clip_ratio_low) & negative
            clipped = ((high | low) * self.mask).sum()
            lower = (((self._ratio > self.clip_ratio_c) & negative) * self.mask).sum()
        denom = self.num_tokens + 1e-8
        return clipped / denom, lower / denom


def _agg_masked(
    masked_loss: torch.Tensor,
    shared: _SharedRatio,
    loss_agg_mode: str,
    agg_kwargs: dict[str, object],
) -> torch.Tensor:
    """``agg_loss`` for a loss already zeroed outside the mask (skips re-masking; same value)."""
    return _aggregate(masked_loss, shared.mask, loss_agg_mode, premasked=True, **agg_kwargs)


def copo_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    local_adv: torch.Tensor,
    global_adv: torch.Tensor,
    local_weight: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "seq-mean-token-mean",
    dp_size: int = 1,
    batch_num_tokens: int | torch.Tensor | None = None,
    global_batch_size: int | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """COPO's blended clipped policy loss.

    With ``local_weight == 1`` this is verl's ``compute_policy_loss_vanilla`` on ``local_adv``
    (same value bit for bit); with ``local_weight == 0`` it is vanilla on ``global_adv``.

    Args:
        old_log_prob, log_prob: (N, L) token log-probs (any float dtype; math in float32).
        local_adv, global_adv, local_weight: (N,) per response or (N, L) per token.
        response_mask: (N, L) 0/1 or bool mask. Log-probs at masked positions must be finite
            (verl's ``seq-mean-*`` modes need the same).
        clip_ratio_low, clip_ratio_high: clip range ``[1 - low, 1 + high]``.
        clip_ratio_c: dual-clip bound (> 1) applied to A < 0 tokens.
        loss_agg_mode: one of ``LOSS_AGG_MODES`` (verl's ``agg_loss``).
        dp_size, batch_num_tokens, global_batch_size, loss_scale_factor: passed to ``agg_loss``
            with verl 0.9.1's semantics. verl's ``ppo_loss`` fills ``config.global_batch_info``
            with exactly these four keys, so a verl adapter calls
            ``copo_policy_loss(..., **config.global_batch_info)`` and micro-batched
            data-parallel training normalises by the global batch as verl does. The defaults
            reproduce verl's single-process values.
        rollout_is_weights: optional (N, L) rollout-correction weights multiplying the token
            loss, as in verl's vanilla loss.

    Returns:
        ``(loss, metrics)``: float32 scalar with grad, and python floats ``pg_loss``,
        ``pg_loss_local``, ``pg_loss_global`` (the aggregated weighted parts; loss = local +
        global), ``pg_clipfrac_local``, ``pg_clipfrac_global``, ``pg_clipfrac_lower_local``,
        ``pg_clipfrac_lower_global``, ``ppo_kl``.
    """
    _check_loss_args(
        old_log_prob, log_prob, response_mask, clip_ratio_low, clip_ratio_high, clip_ratio_c, loss_agg_mode
    )
    shape = log_prob.shape
    a_local = _as_token_tensor(local_adv, "local_adv", shape)
    a_global = _as_token_tensor(global_adv, "global_adv", shape)
    w_local = _as_token_tensor(local_weight, "local_weight", shape)
    if rollout_is_weights is not None and rollout_is_weights.shape != shape:
        raise ValueError(
            f"`rollout_is_weights` shape {tuple(rollout_is_weights.shape)} != `log_prob` shape {tuple(shape)}"
        )
    mask = response_mask.to(torch.float32)

    negative_approx_kl = torch.clamp(log_prob.float() - old_log_prob.float(), min=-20.0, max=20.0)
    shared = _SharedRatio(negative_approx_kl, mask, clip_ratio_low, clip_ratio_high, clip_ratio_c)
    with torch.no_grad():
        ppo_kl = _masked_mean(-negative_approx_kl, mask)

    agg_kwargs: dict[str, object] = {
        "dp_size": dp_size,
        "batch_num_tokens": batch_num_tokens,
        "global_batch_size": global_batch_size,
        "loss_scale_factor": loss_scale_factor,
    }
    parts: list[torch.Tensor] = []
    fracs: list[tuple[torch.Tensor, torch.Tensor]] = []
    for adv, weight in ((a_local, w_local), (a_global, 1.0 - w_local)):
        token_loss = shared.masked_token_loss(adv, weight)
        if rollout_is_weights is not None:
            token_loss = token_loss * rollout_is_weights.float()
        parts.append(_agg_masked(token_loss, shared, loss_agg_mode, agg_kwargs))
        fracs.append(shared.clip_fractions(adv))

    loss = (parts[0] + parts[1]).float()  # float32 even if a normaliser came in as float64
    values = torch.stack([loss, *parts, fracs[0][0], fracs[1][0], fracs[0][1], fracs[1][1], ppo_kl]).detach()
    # One device sync for all metrics.
    return loss, dict(zip(_METRIC_KEYS, values.tolist(), strict=True))
