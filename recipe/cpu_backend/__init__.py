"""Run verl 0.9.1's real trainer on CPU (no accelerator), with nothing edited inside verl.

Importing this package, or any module in it but the two plugins (``plugin``, ``hf_plugin``), does no
work: no torch, no verl, no registration. The modules:

* ``activation``: ``activate(config)``, called by ``recipe.copo.main_copo`` before ``ray.init`` when
  ``trainer.device == "cpu"``, and ``install()``, which registers everything below in a process;
* ``plugin``: imported by verl/__init__.py in every process of a CPU job
  (``VERL_USE_EXTERNAL_MODULES``); it runs ``install()`` where ``VERL_PLATFORM=cpu``;
* ``settings``: the ``cpu_backend.*`` keys, dtype names and thread counts (standard library only);
* ``job_env``: the environment of a CPU job, for launchers and Ray workers (standard library only);
* ``checks``: the start-up checks of the CPU shortcuts in copo_cpu.yaml;
* ``platform``, ``patches``, ``attention``, ``engine``, ``logprob``: verl's platform, torch patches,
  the ``sdpa_gqa`` attention and the training engine on CPU;
* ``hf_server``, ``adapter``, ``sampling``, ``weight_wire``: the ``hf`` rollout, registered by
  ``rollout_registry`` (on a GPU run with ``rollout.name=hf``, ``hf_plugin`` registers it in every worker);
* ``roofline``: the machine's fp32 matmul speed at a model's shapes, printed beside every time.
"""
