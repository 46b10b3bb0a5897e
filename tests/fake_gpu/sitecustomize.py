"""Loaded by every Python that starts with tests/fake_gpu on PYTHONPATH, i.e. the Ray workers of
tests/test_skyrl_paths.py::test_grpo_entrypoint_registers_the_env_inside_a_ray_worker_fake_gpu_trainer.

With W8_FAKE_GPU_TRAINER set, it replaces only what needs GPUs in SkyRL's BasePPOExp: building
the vLLM engines and FSDP workers and the training loop (`run`). The fake `run` asks the
experiment for its generator (our HarnessGenerator, through our get_generator override) with a
FakeInferenceClient, generates one real batch from the experiment's real PromptDataset, and
writes what happened in this worker process to the JSON file the env var names. The env must
therefore be registered in this process, by harness.skyrl_main's entrypoint.

The patch is applied when SkyRL's main_base module is first imported (an import hook), so
Ray's other worker processes start at normal speed.
"""

import importlib.abc
import importlib.util
import os
import sys

TARGET = "skyrl.train.entrypoints.main_base"


def _fake_run(self):
    import asyncio
    import json

    from skyrl.backends.skyrl_train.inference_servers.engine_utils import get_sampling_params_for_backend
    from skyrl.train.generators.utils import prepare_generator_input
    from skyrl_gym.envs.registration import registry

    from skyrl_fakes import ORACLE, FakeInferenceClient

    generator = self.get_generator(self.cfg, self.tokenizer, FakeInferenceClient(self.tokenizer, [ORACLE]))
    prompts = self.train_dataset.collate_fn([self.train_dataset[i] for i in range(len(self.train_dataset))])
    batch, _ = prepare_generator_input(
        prompts, self.cfg.generator.n_samples_per_prompt,
        get_sampling_params_for_backend("vllm", self.cfg.generator.sampling_params),
        self.cfg.environment.env_class, "train", 1)
    out = asyncio.run(generator.generate(batch, disable_tqdm=True))
    with open(os.environ["W8_FAKE_GPU_TRAINER"], "w") as f:
        json.dump({"pid": os.getpid(), "registered": "harness_legality" in registry,
                   "generator": type(generator).__name__, "rewards": [sum(r) for r in out["rewards"]],
                   "metrics": {k: v for k, v in out["rollout_metrics"].items() if k.startswith("harness/")}}, f)


class _PatchMainBase(importlib.abc.MetaPathFinder):
    """Finds main_base through the normal finders, then patches BasePPOExp.run once it has executed."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            module.BasePPOExp.run = _fake_run

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("W8_FAKE_GPU_TRAINER"):
    sys.meta_path.insert(0, _PatchMainBase())
