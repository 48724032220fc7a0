"""Hydra entry point for COPO / GCPO / any verl estimator on verl 0.9.1's v1 trainer.

    python -m recipe.copo.main_copo [hydra overrides]          # train
    python -m recipe.copo.main_copo --cfg job                   # print the composed config
    python -m recipe.copo.main_copo --help                      # Hydra's help

Same launcher as ``verl.trainer.main_ppo`` (Ray init, a remote TaskRunner, TransferQueue), but
the TaskRunner builds the COPO trainer (``recipe.copo.trainer``), which computes the COPO fields
on the driver and installs COPO's loss on the actor workers. Other estimators (grpo, ...) run
through the same trainer unchanged, so GRPO baselines share the launcher.
"""

from __future__ import annotations

import logging
import os
import sys
from pprint import pprint

import hydra
import ray
from omegaconf import DictConfig, OmegaConf

from recipe.copo.config_check import validate_copo_config, with_verl_searchpath
from recipe.copo.data_check import check_data
from recipe.copo.driver_signals import stop_once
from recipe.copo.failures import WorkerDiedError, worker_death_message
from recipe.copo.throughput import resolve_attention
from recipe.proc import restore_default_signals
from recipe.tracking.wandb_ready import check_wandb_ready
from recipe.verl_pin import check_verl_version

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "INFO"))


@ray.remote
class CopoTaskRunner:
    """verl's ``TaskRunnerV1`` with the COPO trainer class."""

    def __init__(self) -> None:
        self.config = None
        self.trainer = None
        self.agent_loop_manager = None

    def init_agent_loop_manager(self) -> None:
        from verl.trainer.ppo.v1 import AgentLoopManagerTQ
        from verl.utils.import_utils import load_class_from_fqn

        manager_class_fqn = self.config.actor_rollout_ref.rollout.get("agent", {}).get(
            "agent_loop_manager_class"
        )
        manager_cls = (
            load_class_from_fqn(manager_class_fqn, "AgentLoopManager")
            if manager_class_fqn
            else AgentLoopManagerTQ
        )
        self.agent_loop_manager = manager_cls.create(
            config=self.config,
            llm_client=self.trainer.get_llm_client(),
            teacher_client=self.trainer.get_teacher_client(),
            reward_loop_worker_handles=self.trainer.get_reward_handles(),
        )

    def run(self, config: DictConfig) -> None:
        import transfer_queue as tq
        from verl.utils.logging_utils import configure_verl_logging

        from recipe.copo.trainer import copo_trainer_cls

        configure_verl_logging()
        if config.trainer.device == "cpu":
            from recipe.cpu_backend.activation import activate

            activate(None)  # patches for this process; the config was prepared by the driver
        trainer_cls = copo_trainer_cls(config.trainer.v1.trainer_mode)
        config.transfer_queue.enable = True
        pprint(OmegaConf.to_container(config, resolve=True))
        OmegaConf.resolve(config)
        self.config = config
        tq.init(config.transfer_queue)
        succeeded = False
        try:
            self.trainer = trainer_cls(config=config)
            self.trainer.init()
            self.init_agent_loop_manager()
            self.trainer.fit(self.agent_loop_manager)
            succeeded = True
        finally:
            try:
                tracking = getattr(self.trainer, "logger", None)
                if tracking is not None:
                    tracking.finish(exit_code=0 if succeeded else 1)
            finally:
                tq.close()


def run_copo(config: DictConfig) -> None:
    """Validate, then launch training (Ray init + remote TaskRunner), as verl's main_ppo does."""
    check_verl_version()
    if config.get("fast") is not None:
        # the fast study trainer's own section (recipe/study/fast/settings.py), e.g. its budget in generated
        # samples: verl's trainer would ignore it and train a different budget than the config says
        raise ValueError(
            "fast.*: settings of the fast study trainer (python -m recipe.study.fast.run), not of main_copo; "
            "remove them (main_copo's budget is trainer.total_training_steps)"
        )
    # Before anything starts: verl's wandb.init only runs once every worker is up.
    check_wandb_ready(config.trainer.get("logger"))
    if config.trainer.device == "cpu":
        # CPU backend (recipe/cpu_backend) must patch verl and set Ray's env before ray.init, and
        # before auto_set_device: without the CPU platform verl detects 'cuda' and rewrites the key.
        # It must also precede importing verl.trainer.main_ppo, which resolves the platform at
        # import time (verl/trainer/constants_ppo.py) and fails if VERL_PLATFORM=cpu is set
        # before the CPU platform is registered.
        from recipe.cpu_backend.activation import activate
        from recipe.cpu_backend.checks import check_vllm_rollout

        check_vllm_rollout(config)  # the rollout starts here: vLLM importable, sleep mode off
        config = activate(config) or config
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    print(f"[copo] {resolve_attention(config)}", file=sys.stderr, flush=True)
    from recipe.cpu_backend.rollout_registry import use_hf_rollout

    if use_hf_rollout(config):  # the hf rollout on a GPU (on CPU, activate() registered it)
        print("[copo] rollout: hf (transformers) on the workers' GPUs", file=sys.stderr, flush=True)
    validate_copo_config(config)
    validate_config(
        config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )
    if not config.trainer.get("use_v1", True):
        raise ValueError("recipe.copo.main_copo runs verl's v1 trainer only: set trainer.use_v1=true")
    check_data(config)  # every row of the train and val files, before Ray or any worker starts
    try:
        with stop_once():  # a second Ctrl-C / SIGTERM cannot re-enter the clean-up
            run_ppo(config, task_runner_class=CopoTaskRunner)
    except Exception as exc:
        message = worker_death_message(exc, config)
        if message is None:
            raise
        logger.error(message)
        raise WorkerDiedError(message) from exc


@hydra.main(config_path="config", config_name="copo_trainer", version_base=None)
def _hydra_main(config: DictConfig) -> None:
    run_copo(config)


def main() -> None:
    """Entry point (``python -m recipe.copo.main_copo [--config-name X] [overrides] [--cfg job]``)."""
    restore_default_signals()  # started in the background, SIGINT would be ignored by Ray's processes too
    # Kept out of copo_trainer.yaml: Hydra rejects hydra.searchpath in a config another one composes.
    sys.argv = [sys.argv[0], *with_verl_searchpath(sys.argv[1:])]
    _hydra_main()


if __name__ == "__main__":
    main()
