"""The time limit works inside Ray actors: async actors and threaded sync actors (where signal.alarm fails).

Starts a private local Ray instance (about 10-30 s on a loaded 2-core machine).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

REWARD_PY = str(Path(__file__).resolve().parents[3] / "recipe" / "reward" / "__init__.py")
# (response, gold, limit s, expected score, expected timeout); a generous limit for the legitimate
# symbolic case keeps the test meaningful on a saturated shared machine
CASES = [
    ("\\boxed{9^{9^{9^9}}}", "1", 1.0, 0.0, True),  # hangs sympy: killed at the limit
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0, 1.0, False),
    ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", 60.0, 1.0, False),
    ("\\boxed{7}", "8", 1.0, 0.0, False),
]


@pytest.fixture(scope="module")
def ray_local():
    # Ray gives its raylet a fixed 30 s to register; on a saturated shared machine that can pass, so retry
    for attempt in range(3):
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
    yield
    ray.shutdown()


def _score(sol: str, gold: str, limit: float) -> dict:
    from verl.utils.import_utils import load_extern_object  # as verl's reward loop loads it

    fn = load_extern_object(module_path=REWARD_PY, object_name="compute_score")
    return fn("m", sol, gold, timeout_s=limit, num_procs=2)


@ray.remote
class AsyncScorer:
    async def score(self, sol: str, gold: str, limit: float) -> dict:
        return _score(sol, gold, limit)  # called directly on the actor's event loop thread


@ray.remote(max_concurrency=4)
class ThreadedScorer:
    def score(self, sol: str, gold: str, limit: float) -> dict:
        return _score(sol, gold, limit)  # runs in one of the actor's worker threads


@pytest.mark.parametrize("actor_cls", [AsyncScorer, ThreadedScorer], ids=["async_actor", "threaded_actor"])
def test_limit_in_ray_actor(ray_local, actor_cls):
    actor = actor_cls.remote()
    outs = ray.get([actor.score.remote(sol, gold, limit) for sol, gold, limit, _, _ in CASES], timeout=300)
    assert [o["score"] for o in outs] == [c[3] for c in CASES]
    assert [o["timeout"] for o in outs] == [c[4] for c in CASES]
