"""Imported by verl/__init__.py in every process of a CPU job (``VERL_USE_EXTERNAL_MODULES``).

Where the CPU platform is selected (``VERL_PLATFORM=cpu``, set by ``activate`` for every Ray worker
and by the launchers for the driver), importing this module installs the CPU backend
(``activation.install``); elsewhere it does nothing. It and ``hf_plugin`` (the ``hf`` rollout on a GPU
run) are the package's only modules whose import does work; the others only define things.
"""

from recipe.cpu_backend.activation import install_if_selected

install_if_selected()
