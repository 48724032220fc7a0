"""GCPO embedders: the shipped MiniLM offline, the hashing embedder, and spec errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recipe.copo.embedders import Embedder, HashEmbedder, MeanPoolEmbedder, make_embedder, minilm_path


@pytest.fixture(scope="module")
def minilm() -> MeanPoolEmbedder:
    embedder = make_embedder("minilm", batch_size=2, device="cpu")
    assert isinstance(embedder, MeanPoolEmbedder)
    return embedder


def test_minilm_is_found_offline_in_site_packages():
    path = minilm_path()
    assert (path / "model.safetensors").is_file()
    assert "site-packages" in str(path) or "dist-packages" in str(path)


def test_minilm_paraphrases_closer_than_unrelated(minilm):
    texts = [
        "The answer is 12 because 3 times 4 equals 12.",
        "Multiplying 3 by 4 gives 12, so the result is 12.",
        "The capital of France is Paris.",
        "A recipe for chocolate cake needs flour, sugar and eggs.",
    ]
    emb = minilm.embed(texts)
    assert emb.shape == (4, 384) and emb.dtype == torch.float32
    assert torch.allclose(emb.norm(dim=-1), torch.ones(4), atol=1e-5)
    sim = emb @ emb.T
    assert sim[0, 1] > sim[0, 2] + 0.3
    assert sim[0, 1] > sim[0, 3] + 0.3
    assert sim[1, 0] > sim[1, 2] + 0.3


def test_minilm_matches_unbatched_manual_mean_pooling(minilm):
    """Length sorting + padding in batches must not change any embedding."""
    texts = ["short", "a somewhat longer sentence about algebra and numbers", "", "x = 2 + 2 = 4"]
    batched = minilm.embed(texts)
    with torch.inference_mode():
        for i, text in enumerate(texts):
            enc = minilm.tokenizer([text], return_tensors="pt", truncation=True, max_length=256)
            hidden = minilm.model(**enc).last_hidden_state[0]  # (T, 384), no padding
            manual = torch.nn.functional.normalize(hidden.mean(0), dim=0)
            assert torch.allclose(batched[i], manual, atol=1e-5), text


def test_minilm_truncates_to_sentence_transformers_length(minilm):
    assert minilm.max_length == 256
    long = "one two three " * 400
    assert minilm.embed([long]).shape == (1, 384)


def test_hash_embedder_is_deterministic_unit_and_similarity_aware():
    h = make_embedder("hash")
    assert isinstance(h, Embedder)
    texts = ["the answer is 4", "The answer is 4.", "completely different words here", ""]
    a = h.embed(texts)
    b = HashEmbedder(256).embed(texts)
    assert torch.equal(a, b)
    assert a.shape == (4, 256)
    assert torch.allclose(a.norm(dim=-1), torch.ones(4), atol=1e-6)
    assert a[0] @ a[1] > a[0] @ a[2]
    assert make_embedder("hash:64").embed(["x"]).shape == (1, 64)


def test_local_folder_spec_loads_the_same_model(tmp_path: Path):
    emb = make_embedder(str(minilm_path()), batch_size=4, device="cpu")
    assert isinstance(emb, MeanPoolEmbedder)
    assert emb.embed(["hello world"]).shape == (1, 384)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("policy_hidden", "neither 'minilm', 'hash' nor an existing local folder"),  # not offered
        ("/no/such/model/folder", "neither 'minilm', 'hash' nor an existing local folder"),
        ("", "non-empty"),
        ("hash:abc", "hash dimension"),
    ],
)
def test_bad_specs_raise_naming_the_key(spec, match):
    with pytest.raises(ValueError, match=match):
        make_embedder(spec)


def test_folder_without_config_is_rejected(tmp_path: Path):
    with pytest.raises(ValueError, match="algorithm.gcpo.embedder"):
        make_embedder(str(tmp_path))
