"""S copies of one Qwen2 policy with their weights stacked: one forward, backward and update for S seeds.

The study's policy is tiny (~1M parameters, width 128): one seed's step is dozens of small matmuls,
and a single thread runs them well below its peak. Stacking the S seeds' weights along a leading
axis turns every ``Linear`` into one batched matmul (``torch.bmm`` over ``[S, rows, width]``), so the
S seeds cost one pass of Python and kernel launches and the matmuls are S times larger.

:class:`GroupedQwen2` is Qwen2's forward written out over stacked weights (the maths of
``transformers``' ``Qwen2ForCausalLM``: RMSNorm in fp32, rotary embeddings, grouped-query attention
with the key-padding and causal masks, SiLU MLP, tied or untied head). Each parameter is one leaf
``[S, ...]``: seed ``s``'s gradient is the gradient of seed ``s``'s loss alone (the seeds share no
weights), so a sum of the S losses backpropagates each seed's own gradient, and elementwise
optimizers (verl's AdamW) update each seed as they would alone. What is not elementwise is handled
per seed: the global-norm gradient clipping (:meth:`GroupedQwen2.clip_grad_norm_`, verl's rule per
seed) and the check for a non-finite gradient.

Equality with the single-seed ``transformers`` model is up to fp32 reordering (matmul blocking,
softmax sums): ``tests/recipe/study/test_fast_seeds.py`` states the tolerances.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

# Qwen2ForCausalLM parameter names per decoder layer, in the model's own order.
LAYER_PARAMS = (
    "self_attn.q_proj.weight",
    "self_attn.q_proj.bias",
    "self_attn.k_proj.weight",
    "self_attn.k_proj.bias",
    "self_attn.v_proj.weight",
    "self_attn.v_proj.bias",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
)


@dataclass
class KV:
    """One layer's cached keys and values, ``[S, B, kv_heads, T, head_dim]`` each."""

    keys: torch.Tensor
    values: torch.Tensor


class GroupedQwen2(torch.nn.Module):
    """S ``Qwen2ForCausalLM`` policies of one config, weights stacked on a leading seed axis.

    Build with :meth:`from_models`; read a seed's weights back with :meth:`state_dict_of`.
    """

    def __init__(self, config: Any, stacked: dict[str, torch.Tensor]) -> None:
        super().__init__()
        if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", False):
            raise NotImplementedError("GroupedQwen2: sliding-window attention")
        rope = dict(getattr(config, "rope_parameters", None) or {"rope_type": "default"})
        if rope.get("rope_type", "default") != "default":
            raise NotImplementedError(f"GroupedQwen2: rope_type {rope.get('rope_type')!r}")
        self.config = config
        self.names = list(stacked)
        self.weights = torch.nn.ParameterList([torch.nn.Parameter(t) for t in stacked.values()])
        self.index = {name: i for i, name in enumerate(self.names)}
        self.num_seeds = int(next(iter(stacked.values())).shape[0])
        self.num_layers = int(config.num_hidden_layers)
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        self.eps = float(config.rms_norm_eps)
        self.tied = "lm_head.weight" not in stacked
        pad = getattr(config, "pad_token_id", None)
        self.padding_idx = None if pad is None else int(pad)
        theta = float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
        dim = self.head_dim
        # transformers' default rope: inv_freq = 1 / theta^(2i/dim), attention scaling 1
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @classmethod
    def from_models(cls, models: Sequence[torch.nn.Module]) -> GroupedQwen2:
        """Stack the weights of ``models`` (S ``Qwen2ForCausalLM`` of one config), copied."""
        config = models[0].config
        if config.model_type != "qwen2":
            raise NotImplementedError(f"GroupedQwen2 runs qwen2 models, not {config.model_type}")
        states = [dict(m.named_parameters()) for m in models]
        names = list(states[0])
        for state in states[1:]:
            if list(state) != names:
                raise ValueError("GroupedQwen2.from_models: the models' parameters differ")
        stacked = {n: torch.stack([s[n].detach() for s in states]).clone() for n in names}
        return cls(config, stacked)

    def w(self, name: str) -> torch.Tensor:
        return self.weights[self.index[name]]

    def state_dict_of(self, seed: int) -> dict[str, torch.Tensor]:
        """Seed ``seed``'s weights under ``Qwen2ForCausalLM``'s parameter names (copies)."""
        return {n: self.weights[i][seed].detach().clone() for i, n in enumerate(self.names)}

    # -- the forward ------------------------------------------------------------------------------
    def _rms(self, x: torch.Tensor, name: str) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        w = self.w(name)
        return w.view(w.shape[0], *([1] * (x.dim() - 2)), w.shape[1]) * (x * torch.rsqrt(var + self.eps))

    def _linear(self, x: torch.Tensor, name: str, bias: bool = False) -> torch.Tensor:
        """``x`` ``[S, ..., in]`` through seed-stacked ``weight`` ``[S, out, in]``."""
        s, inner = x.shape[0], x.shape[1:-1]
        flat = x.reshape(s, -1, x.shape[-1])
        w = self.w(name + ".weight")
        if bias:
            y = torch.baddbmm(self.w(name + ".bias").unsqueeze(1), flat, w.transpose(1, 2))
        else:
            y = torch.bmm(flat, w.transpose(1, 2))
        return y.view(s, *inner, w.shape[1])

    def _rotary(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids.to(torch.float32).unsqueeze(-1) * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past: list[KV] | None = None,
        past_mask: torch.Tensor | None = None,
        logits_at: torch.Tensor | slice | None = None,
    ) -> tuple[torch.Tensor, list[KV]]:
        """Logits and the layers' keys/values of ``input_ids`` ``[S, B, T]``.

        Args:
            input_ids, attention_mask, position_ids: ``[S, B, T]`` (mask 1 on real tokens).
            past: keys/values of earlier columns (``[S, B, kv, T0, d]``), with ``past_mask`` ``[S, B, T0]``.
            logits_at: the time positions whose logits are computed (default all).

        Returns:
            (logits ``[S, B, T', V]``, keys/values of past and new columns).
        """
        s, b, t = input_ids.shape
        embed = self.w("model.embed_tokens.weight")
        vocab = embed.shape[1]
        offsets = (torch.arange(s) * vocab).view(s, 1, 1)  # seed i's rows of the flattened tables
        hidden = F.embedding(input_ids + offsets, embed.reshape(s * vocab, -1))  # [S, B, T, H]
        if self.padding_idx is not None:  # nn.Embedding(padding_idx): the pad row takes no input gradient
            hidden = torch.where((input_ids == self.padding_idx).unsqueeze(-1), hidden.detach(), hidden)
        cos, sin = self._rotary(position_ids)  # [S, B, T, d]
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)  # heads axis
        t0 = 0 if past is None else past[0].keys.shape[3]
        keys_mask = attention_mask if past_mask is None else torch.cat([past_mask, attention_mask], dim=-1)
        # query i (column t0 + i) sees key j if j is a real token at or before it; a padding query also
        # sees itself, so no row is all -inf (its output is never read: it is masked as a key, and its
        # logits are not used)
        cols = torch.arange(t0 + t)
        causal = cols[None, :] <= (cols[t0:, None])  # [T, T0 + T]
        allowed = causal & keys_mask.bool()[:, :, None, :]
        allowed = allowed | (cols[None, :] == cols[t0:, None])
        mask = allowed.view(s * b, 1, t, t0 + t)
        new_past: list[KV] = []
        for layer in range(self.num_layers):
            p = f"model.layers.{layer}."
            residual = hidden
            x = self._rms(hidden, p + "input_layernorm.weight")
            q = self._linear(x, p + "self_attn.q_proj", bias=True).view(s, b, t, self.heads, self.head_dim)
            k = self._linear(x, p + "self_attn.k_proj", bias=True).view(s, b, t, self.kv_heads, self.head_dim)
            v = self._linear(x, p + "self_attn.v_proj", bias=True).view(s, b, t, self.kv_heads, self.head_dim)
            q, k, v = q.transpose(2, 3), k.transpose(2, 3), v.transpose(2, 3)  # [S, B, heads, T, d]
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            if past is not None:
                k = torch.cat([past[layer].keys, k], dim=3)
                v = torch.cat([past[layer].values, v], dim=3)
            new_past.append(KV(k, v))
            attn = F.scaled_dot_product_attention(
                q.reshape(s * b, self.heads, t, self.head_dim),
                k.reshape(s * b, self.kv_heads, t0 + t, self.head_dim),
                v.reshape(s * b, self.kv_heads, t0 + t, self.head_dim),
                attn_mask=mask,
                scale=self.head_dim**-0.5,
                enable_gqa=self.heads != self.kv_heads,
            )
            attn = attn.view(s, b, self.heads, t, self.head_dim).transpose(2, 3).reshape(s, b, t, -1)
            hidden = residual + self._linear(attn, p + "self_attn.o_proj")
            residual = hidden
            x = self._rms(hidden, p + "post_attention_layernorm.weight")
            gate = F.silu(self._linear(x, p + "mlp.gate_proj")) * self._linear(x, p + "mlp.up_proj")
            hidden = residual + self._linear(gate, p + "mlp.down_proj")
        if logits_at is not None:
            hidden = hidden[:, :, logits_at]
        hidden = self._rms(hidden, "model.norm.weight")
        head = embed if self.tied else self.w("lm_head.weight")
        s_, b_, t_, width = hidden.shape
        logits = torch.bmm(hidden.reshape(s, -1, width), head.transpose(1, 2)).view(s_, b_, t_, -1)
        return logits, new_past

    # -- the optimizer's per-seed rules -----------------------------------------------------------
    @torch.no_grad()
    def grad_norms(self) -> torch.Tensor:
        """``[S]`` each seed's global 2-norm of its gradient, as ``clip_grad_norm_`` computes one model's
        (the norm of the per-parameter norms)."""
        norms = [
            torch.linalg.vector_norm(p.grad.reshape(self.num_seeds, -1), dim=1)
            for p in self.weights
            if p.grad is not None
        ]
        return torch.linalg.vector_norm(torch.stack(norms, dim=1), dim=1)

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` per seed: each seed's gradient times
        ``min(1, max_norm / (norm + 1e-6))``; returns the ``[S]`` norms before clipping."""
        norms = self.grad_norms()
        coef = torch.clamp(max_norm / (norms + 1e-6), max=1.0)
        for p in self.weights:
            if p.grad is not None:
                p.grad.mul_(coef.view(-1, *([1] * (p.dim() - 1))))
        return norms


def load_seed_into(model: torch.nn.Module, grouped: GroupedQwen2, seed: int) -> None:
    """Copy seed ``seed``'s weights into a ``Qwen2ForCausalLM`` of the same config (for saving or checks)."""
    state = grouped.state_dict_of(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(state[name])
