"""The hf rollout's batched sampler against independent computations on the tiny model."""

from __future__ import annotations

import pytest
import torch

from recipe.cpu_backend.sampling import DecodeBatch, SamplingParams, _filter_logits, sample_batch
from recipe.models.tiny import build_tiny_qwen2

EOS = 258
PAD = 256


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    path = build_tiny_qwen2(tmp_path_factory.mktemp("tiny") / "model")
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()


PROMPTS = [[257, 117, 10, 49, 43, 50, 258, 10, 257, 97, 10], [257, 49, 10], [257, 55, 43, 56, 61, 10, 10]]


def _actor_log_probs(model: torch.nn.Module, prompt: list[int], response: list[int], temperature: float):
    """What verl's actor computes: one unpadded forward, logits / T, log_softmax, gather."""
    from verl.utils.torch_functional import logprobs_from_logits

    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return logprobs_from_logits(logits / temperature, torch.tensor(response))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_log_probs_match_actor_recomputation(model: torch.nn.Module, temperature: float) -> None:
    gen = torch.Generator().manual_seed(0)
    params = SamplingParams(temperature=temperature, top_p=0.9, top_k=50, ignore_eos=True)
    samples = sample_batch(
        model, PROMPTS, params, max_tokens=[12, 7, 12], eos_token_ids=[EOS], pad_token_id=PAD, generator=gen
    )
    assert [len(s.token_ids) for s in samples] == [12, 7, 12]
    for prompt, sample in zip(PROMPTS, samples, strict=True):
        expected = _actor_log_probs(model, prompt, sample.token_ids, temperature)
        torch.testing.assert_close(torch.tensor(sample.log_probs), expected, atol=1e-3, rtol=0)


def test_greedy_batch_equals_unbatched_argmax_loop(model: torch.nn.Module) -> None:
    """Left padding + KV cache must not change anything: compare to a no-cache argmax loop per prompt."""
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    samples = sample_batch(
        model, PROMPTS, params, max_tokens=[6, 6, 6], eos_token_ids=[EOS], pad_token_id=PAD
    )
    for prompt, sample in zip(PROMPTS, samples, strict=True):
        ids = list(prompt)
        for _ in range(6):
            with torch.no_grad():
                ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
        assert sample.token_ids == ids[len(prompt) :]


def test_stops_at_eos_and_keeps_it(model: torch.nn.Module) -> None:
    # Make the eos the greedy choice after the first generated token by picking it as "eos".
    params = SamplingParams(temperature=0.0)
    free = sample_batch(model, PROMPTS[:1], params, max_tokens=[5], eos_token_ids=[EOS], pad_token_id=PAD)[0]
    stop_token = free.token_ids[1]
    stopped = sample_batch(
        model, PROMPTS[:1], params, max_tokens=[5], eos_token_ids=[stop_token], pad_token_id=PAD
    )[0]
    first = free.token_ids.index(stop_token)
    assert stopped.token_ids == free.token_ids[: first + 1]
    assert stopped.finished_by_eos and stopped.token_ids[-1] == stop_token


def test_seeded_sampling_is_reproducible_and_top_k_1_is_greedy(model: torch.nn.Module) -> None:
    params = SamplingParams(temperature=1.0, ignore_eos=True)
    a = sample_batch(
        model,
        PROMPTS,
        params,
        max_tokens=[8] * 3,
        eos_token_ids=[EOS],
        pad_token_id=PAD,
        generator=torch.Generator().manual_seed(3),
    )
    b = sample_batch(
        model,
        PROMPTS,
        params,
        max_tokens=[8] * 3,
        eos_token_ids=[EOS],
        pad_token_id=PAD,
        generator=torch.Generator().manual_seed(3),
    )
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    greedy = sample_batch(
        model,
        PROMPTS,
        SamplingParams(temperature=0.0, ignore_eos=True),
        max_tokens=[8] * 3,
        eos_token_ids=[EOS],
        pad_token_id=PAD,
    )
    top1 = sample_batch(
        model,
        PROMPTS,
        SamplingParams(temperature=1.0, top_k=1, ignore_eos=True),
        max_tokens=[8] * 3,
        eos_token_ids=[EOS],
        pad_token_id=PAD,
        generator=torch.Generator().manual_seed(5),
    )
    assert [s.token_ids for s in top1] == [s.token_ids for s in greedy]


def test_filter_logits_against_sorted_reference() -> None:
    torch.manual_seed(0)
    logits = torch.randn(4, 30)
    for top_k, top_p in [(5, 1.0), (-1, 0.6), (10, 0.5), (0, 0.999)]:
        out = _filter_logits(logits, top_k, top_p)
        for row in range(4):
            order = logits[row].argsort(descending=True).tolist()
            keep = order[:top_k] if top_k > 0 else order
            probs = torch.softmax(logits[row, keep], dim=-1)
            mass, kept = 0.0, []
            for tok, p in zip(keep, probs.tolist(), strict=True):
                if mass >= top_p:
                    break
                kept.append(tok)
                mass += p
            assert sorted(torch.isfinite(out[row]).nonzero().flatten().tolist()) == sorted(kept)


def test_per_row_generators_make_rows_independent_of_batch_mates(model: torch.nn.Module) -> None:
    """A row's sample depends only on its own generator: alone or in a batch, same tokens."""
    params = SamplingParams(temperature=1.0, ignore_eos=True)
    seeds = [11, 12, 13]
    batched = sample_batch(
        model,
        PROMPTS,
        params,
        max_tokens=[9, 9, 9],
        eos_token_ids=[EOS],
        pad_token_id=PAD,
        generator=[torch.Generator().manual_seed(s) for s in seeds],
    )
    for prompt, seed, sample in zip(PROMPTS, seeds, batched, strict=True):
        alone = sample_batch(
            model,
            [prompt],
            params,
            max_tokens=[9],
            eos_token_ids=[EOS],
            pad_token_id=PAD,
            generator=[torch.Generator().manual_seed(seed)],
        )[0]
        assert alone.token_ids == sample.token_ids
        torch.testing.assert_close(
            torch.tensor(alone.log_probs), torch.tensor(sample.log_probs), atol=1e-4, rtol=0
        )


def _argmax_loop(model: torch.nn.Module, prompt: list[int], steps: int) -> list[int]:
    ids = list(prompt)
    for _ in range(steps):
        with torch.no_grad():
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


def test_rows_joining_a_running_batch_decode_as_if_alone(model: torch.nn.Module) -> None:
    """Continuous batching: rows added mid-decode (longer prompts, so the running cache is
    left-padded, then shorter ones, so theirs is) give the tokens of an unbatched no-cache loop."""
    decode = DecodeBatch(
        model, SamplingParams(temperature=0.0, ignore_eos=True), eos_token_ids=[EOS], pad_token_id=PAD
    )
    decode.add([PROMPTS[1]], [9], [None], ["short"])
    results = {}
    for _ in range(3):
        results.update(decode.step())
    decode.add([PROMPTS[0]], [4], [None], ["long"])  # 11 tokens > the running cache's 3 + 3
    results.update(decode.step())
    decode.add([PROMPTS[2][:2]], [6], [None], ["tiny"])  # 2 tokens < the running cache
    sizes = []
    while len(decode):
        sizes.append(len(decode))
        results.update(decode.step())
    assert results["short"].token_ids == _argmax_loop(model, PROMPTS[1], 9)
    assert results["long"].token_ids == _argmax_loop(model, PROMPTS[0], 4)
    assert results["tiny"].token_ids == _argmax_loop(model, PROMPTS[2][:2], 6)
    assert sizes[0] == 3 and sizes[-1] == 1  # finished rows left the batch
    # 10 steps in all (the last row, "tiny", joined before step 5 and needs 6): 3 prefills plus a
    # decode forward after every step but the last
    assert decode.forward_calls == 3 + 9


def test_finished_rows_leave_and_their_padding_columns_go(model: torch.nn.Module) -> None:
    decode = DecodeBatch(
        model, SamplingParams(temperature=0.0, ignore_eos=True), eos_token_ids=[EOS], pad_token_id=PAD
    )
    decode.add([PROMPTS[0], PROMPTS[1]], [2, 6], [None, None], ["long", "short"])
    assert decode.attention_mask.shape == (2, len(PROMPTS[0]))
    done = decode.step()
    assert done == []
    done = decode.step()  # the long prompt's row reaches its 2 tokens and leaves
    assert [h for h, _ in done] == ["long"] and len(decode) == 1
    # only the short row's prompt + the 2 tokens it has so far are left in the cache
    assert decode.attention_mask.shape == (1, len(PROMPTS[1]) + 2)
    assert bool(decode.attention_mask.all())
    assert all(layer.keys.shape[2] == len(PROMPTS[1]) + 2 for layer in decode.cache.layers)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_joined_rows_log_probs_match_actor_recomputation(model: torch.nn.Module, temperature: float) -> None:
    params = SamplingParams(temperature=temperature, top_k=50, ignore_eos=True)
    decode = DecodeBatch(model, params, eos_token_ids=[EOS], pad_token_id=PAD)
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    decode.add([PROMPTS[1]], [8], gens[:1], [1])
    results = dict(decode.step())
    decode.add([PROMPTS[0], PROMPTS[2]], [8, 5], gens[1:], [0, 2])
    while len(decode):
        results.update(decode.step())
    for row, prompt in enumerate(PROMPTS):
        sample = results[row]
        expected = _actor_log_probs(model, prompt, sample.token_ids, temperature)
        torch.testing.assert_close(torch.tensor(sample.log_probs), expected, atol=1e-3, rtol=0)


def test_draw_tokens_follows_the_distribution_and_never_draws_zero_mass() -> None:
    """Counts of 40k draws per row against the row's probabilities (chi-square, 1e-4 false alarm)."""
    from recipe.cpu_backend.sampling import draw_tokens

    probs = torch.tensor(
        [[0.5, 0.0, 0.25, 0.125, 0.125, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 3.0], [1.0, 2.0, 3.0, 0.0, 4.0, 5.0]]
    )
    gens = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    draws = torch.stack([draw_tokens(probs, gens) for _ in range(40_000)])  # (draws, rows)
    for row in range(probs.shape[0]):
        counts = torch.bincount(draws[:, row], minlength=probs.shape[1]).double()
        support = probs[row] > 0
        assert counts[~support].sum() == 0, f"row {row} drew a zero-probability token"
        expected = probs[row][support].double() / probs[row].sum() * counts.sum()
        stat = ((counts[support] - expected) ** 2 / expected).sum()
        dof = int(support.sum()) - 1
        if dof:  # chi-square survival function: regularised upper incomplete gamma
            p_value = torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), stat / 2)
            assert p_value > 1e-4, (row, counts.tolist(), float(p_value))


def test_draw_tokens_rows_read_only_their_own_generator() -> None:
    from recipe.cpu_backend.sampling import draw_tokens

    probs = torch.softmax(torch.randn(4, 50, generator=torch.Generator().manual_seed(0)), dim=-1)
    together = draw_tokens(probs, [torch.Generator().manual_seed(s) for s in range(4)])
    alone = [int(draw_tokens(probs[i : i + 1], [torch.Generator().manual_seed(i)])) for i in range(4)]
    assert together.tolist() == alone
    with pytest.raises(ValueError, match="generators"):
        draw_tokens(probs, [None])
