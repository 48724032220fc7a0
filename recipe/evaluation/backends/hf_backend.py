"""transformers ``generate`` backend: batched sampling on CPU (or one GPU when present)."""

from __future__ import annotations

from collections.abc import Sequence

from .base import Backend, Completion, Messages, ProgressFn, SamplingConfig, render_prompt


def generated_lengths(sequences, eos_ids: Sequence[int]) -> list[int]:
    """Token counts of generated continuations.

    Args:
        sequences: (B, T) generated ids only (prompt removed). ``generate`` pads a finished row
            after its eos; a row without eos ran the full T tokens.
        eos_ids: ids that end a response; the first one found counts toward the length.

    Returns:
        (B,) lengths: position of the first eos + 1, else T.
    """
    import torch

    is_eos = torch.zeros_like(sequences, dtype=torch.bool)
    for eos in eos_ids:
        is_eos |= sequences == eos
    first_eos = is_eos.int().argmax(dim=1) + 1
    lengths = torch.where(is_eos.any(dim=1), first_eos, torch.full_like(first_eos, sequences.shape[1]))
    return [int(x) for x in lengths]


class HFBackend(Backend):
    """Sampling with ``model.generate`` in batches of ``batch_size`` sequences.

    Samples of one prompt are contiguous in a batch (the prompt is repeated), so the result is
    deterministic for a given seed and batch size. The RNG is re-seeded per ``generate`` call.
    """

    name = "hf"

    def __init__(
        self, model_path: str, *, batch_size: int = 16, dtype: str = "auto", device: str | None = None
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if dtype == "auto":
            # bf16 matmuls are slow or missing on many CPUs; GPUs run the checkpoint's bf16.
            torch_dtype = torch.bfloat16 if self.device != "cpu" else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.tokenizer.padding_side = "left"  # decoder-only models continue from the right edge
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = (
            AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype).to(self.device).eval()
        )
        self.batch_size = batch_size
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_ids = [eos] if isinstance(eos, int) else list(eos)

    def generate(
        self,
        prompts: Sequence[Messages],
        n: int,
        sampling: SamplingConfig,
        on_progress: ProgressFn | None = None,
    ) -> list[list[Completion]]:
        import torch

        texts = [render_prompt(self.tokenizer, m) for m in prompts]
        flat = [(j, texts[j]) for j in range(len(texts)) for _ in range(n)]
        results: list[list[Completion]] = [[] for _ in texts]
        greedy = sampling.temperature == 0
        kwargs = (
            {"do_sample": False}
            if greedy
            else {
                "do_sample": True,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "top_k": 0,  # transformers defaults to top_k=50; vLLM and verl rollouts use no top-k
            }
        )
        torch.manual_seed(sampling.seed)
        for start in range(0, len(flat), self.batch_size):
            chunk = flat[start : start + self.batch_size]
            enc = self.tokenizer(
                [t for _, t in chunk], return_tensors="pt", padding=True, add_special_tokens=False
            ).to(self.device)
            with torch.inference_mode():
                out = self.model.generate(
                    **enc,
                    max_new_tokens=sampling.max_tokens,
                    eos_token_id=self.eos_ids,
                    pad_token_id=self.tokenizer.pad_token_id,
                    **kwargs,
                )
            new_tokens = out[:, enc["input_ids"].shape[1] :].cpu()
            lengths = generated_lengths(new_tokens, self.eos_ids)
            for (j, _), row, length in zip(chunk, new_tokens, lengths, strict=True):
                text = self.tokenizer.decode(row[:length], skip_special_tokens=True)
                results[j].append(Completion(text=text, num_tokens=length))
            if on_progress is not None:
                on_progress(len(chunk))
        return results

    def close(self) -> None:
        import gc

        import torch

        del self.model
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
