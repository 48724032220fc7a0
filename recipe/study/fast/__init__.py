"""A fast in-process trainer for the controlled CPU study, built from the recipe's own functions.

verl's real trainer (``recipe.copo.main_copo``) spends minutes of start-up and seconds of Ray,
TransferQueue and weight-sync traffic on every step of a 1M-parameter policy: the v1 study ran 40
runs of 50 steps in 129 minutes. This package runs the same step in one process, one thread:

* rollout: ``recipe.cpu_backend.sampling.sample_batch`` (the sampler behind the hf rollout server);
* reward: ``recipe.reward.compute_score`` (score, ``acc`` and the extracted ``pred``);
* advantages: verl's ``core_algos.compute_grpo_outcome_advantage`` for GRPO,
  ``recipe.copo.step.advantage_step`` for COPO;
* loss: verl's registered ``vanilla`` policy loss for GRPO, ``copo_core.copo_policy_loss`` for COPO,
  with the global normalisers verl's actor passes;
* optimizer: verl's ``build_optimizer`` and learning-rate schedule, verl's gradient clipping rule;
* DAPO filtering: the rule of verl's sync replay buffer (:mod:`recipe.study.fast.dapo`).

Every setting comes from the composed verl config (:mod:`recipe.study.fast.settings`), the one a
``main_copo`` run of the same overrides trains with. ``tests/recipe/study/test_fast_parity.py``
replays a batch captured from a real ``main_copo`` step through this trainer and compares
advantages, loss and gradients.

:mod:`recipe.study.fast.seeds` runs S seeds of one method in one process: their policies' weights stacked
(:mod:`recipe.study.fast.grouped`), generation and update batched across seeds
(:mod:`recipe.study.fast.grouped_step`), everything else each seed's own
(``tests/recipe/study/test_fast_seeds.py`` compares it with this trainer seed by seed).
"""
