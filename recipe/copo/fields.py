"""Names of the per-token fields COPO's step writes next to verl's ``advantages`` and its loss reads.

The driver-side step (``recipe.copo.step``) writes them once per step batch; the worker-side loss
(``recipe.copo.actor_loss``) reads them per micro-batch. Both import these names from here, so the
loss imports nothing of the driver side.
"""

from __future__ import annotations

LOCAL_ADV = "copo_local_adv"  # GRPO's (or GCPO's) within-group advantage A^L
GLOBAL_ADV = "copo_global_adv"  # the prompt's standardised mean reward across the batch A^G
LOCAL_WEIGHT = "copo_local_weight"  # w in w A^L + (1 - w) A^G, from the group's consistency entropy
COPO_FIELDS = (LOCAL_ADV, GLOBAL_ADV, LOCAL_WEIGHT)
