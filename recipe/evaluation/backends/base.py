"""The generation interface shared by the transformers and vLLM backends."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Messages = list[dict[str, str]]
ProgressFn = Callable[[int], None]


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling parameters, identical across backends. ``temperature == 0`` means greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 2048
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"--temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"--max-tokens must be >= 1, got {self.max_tokens}")


@dataclass(frozen=True)
class Completion:
    """One sampled response: decoded text (special tokens removed) and its generated token count
    (up to and including the end-of-sequence token, padding excluded)."""

    text: str
    num_tokens: int


class Backend(ABC):
    """Loads one model and samples ``n`` responses per prompt."""

    name: str = "base"

    @abstractmethod
    def generate(
        self,
        prompts: Sequence[Messages],
        n: int,
        sampling: SamplingConfig,
        on_progress: ProgressFn | None = None,
    ) -> list[list[Completion]]:
        """Sample ``n`` responses for every chat prompt.

        Args:
            prompts: P chat conversations; the chat template with a generation prompt is applied.
            n: responses per prompt.
            sampling: temperature, top_p, max_tokens, seed.
            on_progress: called with the number of responses just finished.

        Returns:
            (P, n) completions, in prompt order then sample order.
        """

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op for backends holding nothing
        """Release the model (GPU memory) before the next checkpoint is loaded."""


def render_prompt(tokenizer, messages: Messages) -> str:
    """Chat template with the assistant generation prompt; plain concatenation for base models
    whose tokenizer has no template."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return "\n\n".join(m["content"] for m in messages) + "\n\n"
