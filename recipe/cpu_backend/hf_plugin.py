"""Registers the ``hf`` rollout on import: what verl loads in each worker of a GPU run that uses it.

Listed in ``VERL_USE_EXTERNAL_MODULES`` by :func:`recipe.cpu_backend.rollout_registry.use_hf_rollout`.
"""

from .rollout_registry import register

register()
