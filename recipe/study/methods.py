"""The methods the CPU studies compare, as Hydra overrides of one shared run (one place for both studies).

Every study run shares the model, data, seeds and budget; only these overrides differ.
"""

from __future__ import annotations

from recipe.copo.estimators import COPO, ESTIMATOR_KEY, GRPO

_COPO = COPO.overrides()  # algorithm.adv_estimator and its loss (recipe/copo/estimators.py)
_PAPER_7B = ["algorithm.copo.k=5", "algorithm.copo.b=1"]
_GRPO = GRPO.overrides()

BASELINE = "grpo"
# Method name -> Hydra overrides.
METHODS: dict[str, list[str]] = {
    "grpo": _GRPO,
    "copo_soft_with_zero": [*_COPO, *_PAPER_7B, "algorithm.copo.blend_mode=soft_with_zero"],
    "copo_soft": [*_COPO, *_PAPER_7B, "algorithm.copo.blend_mode=soft"],
    "copo_global_only": [*_COPO, *_PAPER_7B, "algorithm.copo.blend_mode=global_only"],
    # This project's opt-in variant (issue 37), not the paper's: soft_with_zero whose global advantage
    # of a reward-0 response is capped at 0, so a wrong answer is never pushed up (docs/SPEC.md).
    "copo_variant_nonpositive": [
        *_COPO,
        *_PAPER_7B,
        "algorithm.copo.blend_mode=soft_with_zero",
        "algorithm.copo.wrong_answer_global=nonpositive",
    ],
    # DAPO's dynamic sampling alone: verl drops groups whose `acc` is all equal and generates
    # more prompts until the batch is full. Loss, clip range and reward stay GRPO's, so the
    # comparison isolates what filtering does with the zero-variance groups.
    "dapo_filter": [
        *_GRPO,
        "algorithm.filter_groups.enable=true",
        "algorithm.filter_groups.metric=acc",
        "algorithm.filter_groups.max_inflight_gen_batches=2",
    ],
}


# The methods the SmolLM2 and v1 testbed studies ran: their command lines' default (a method added above
# for a later study, like this project's variant, does not change what reproducing them runs).
DEFAULT_METHODS: tuple[str, ...] = (
    "grpo",
    "copo_soft_with_zero",
    "copo_soft",
    "copo_global_only",
    "dapo_filter",
)


def method_estimator(method: str) -> str:
    """The ``algorithm.adv_estimator`` a method's overrides select (the last one wins, as in Hydra)."""
    values = [o.split("=", 1)[1] for o in METHODS[method] if o.startswith(f"{ESTIMATOR_KEY}=")]
    if not values:
        raise ValueError(f"method {method!r} selects no {ESTIMATOR_KEY}")
    return values[-1]


def parse_methods(text: str) -> list[str]:
    """A comma-separated method list, checked against :data:`METHODS`."""
    methods = [m for m in text.split(",") if m]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(f"unknown method(s) {unknown or text!r}; choose from {list(METHODS)}")
    return methods
