"""The GPU preflight: one command a user runs first on a new machine (``scripts/gpu_check.py``).

It needs no data or model download: it builds random weights of the named run's model shape
(``shapes.py``, ``model.py``), builds the run's actor exactly as verl's actor worker builds it from
the composed run config (``actor.py``), and measures it (``measure.py``): COPO-against-vanilla
parity against the measured noise floor, update time, tokens/s and MFU, the log-prob pass, peak
memory and the log-softmax op calls per token. It then runs two full trainer steps on this one
device (``trainer_run.py``) and prints one table (``report.py``). ``cli.py`` ties the stages
together; a stage that cannot run says why and what to install (``environment.py``).
"""
