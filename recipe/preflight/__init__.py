"""The GPU preflight: what a user runs first on a new machine.

It needs no data or model download: it builds random weights of the named run's model shape
(``shapes.py``, ``model.py``), builds the run's actor exactly as verl's actor worker builds it from
the composed run config (``run_config.py``, ``actor.py``) and measures it (``measure.py``).
"""
