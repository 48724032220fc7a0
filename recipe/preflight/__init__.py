"""The GPU preflight: what a user runs first on a new machine (``scripts/gpu_check.py``, docs/GPU.md).

It needs no data or model download. ``cli`` runs the stages, each in a child process, and prints
one table (``report``):

* ``environment``: GPU, torch/CUDA, which packages import (and what to install when one does not);
* ``actor_stage``: random weights of the run's model shape (``shapes``, ``model``), the run's actor
  built exactly as verl's actor worker builds it from the composed run config (``run_config``,
  ``actor``), and what ``measure`` measures on it: COPO-vs-vanilla parity against the noise floor,
  update time, tokens/s, MFU, the log-prob pass, peak memory, log-softmax ops per token;
* ``trainer_run``: two full trainer steps of the run on this device, with a checkpoint.

``logprob_bench`` (``scripts/bench_logprob.py``) runs the actor stage with verl's plain log-prob path
and with the shipped fused one, side by side.
"""
