"""What each arm costs, planned from the knobs: search nodes, training generations, the frozen_matched budget.

    from harness.budget import planned_training_generations, matched_budgets, check_budgets
    planned_training_generations(cfg)     # {"trained": 20, "refine": 60, ...} operator generations spent training
    matched_budgets(cfg)                  # {"trained": 6, ...}: frozen's budget at each arm's compute
    check_budgets(cfg)                    # ConfigError in one line before any model loads

The equal-compute rule. Training spends generations: GRPO samples (steps x prompts x group),
and for the refine and self arms whole searches on train pages (harvests). The fair control
gives the frozen operator that many extra search nodes, spread over the held-out tasks:
frozen's budget + ceil(training generations / tasks). The count used is the PLAN, an upper
bound of what training really spends (a harvest's search may stop early at gold), so the
frozen control is never given less compute than the arm it is matched to; the ledger (harness.search_stats) reports what was really spent.

One long frozen search per task serves every matched budget: the search never looks at its
budget (Thompson sampling, the per-node seeds and the prompts depend only on the nodes so
far; the budget only says when to stop), so the first k+1 nodes of a search with a larger
budget are the search with budget k (tests/test_search.py checks this). Step 01 searches
frozen once with the largest matched budget and cuts the prefixes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from harness.arms import ARMS, BY_NAME, planned
from harness.config import ConfigError
from harness.hparams import for_config
from harness.prompts import MAX_FAILURES, build_refine_prompt, state_excerpt
from harness.rewards import Failure


def planned_arms(cfg: Any) -> list[str]:
    """The arms a run with these knobs compares, in the order of harness.arms's table (each row's `planned`)."""
    return [a.name for a in planned(cfg)]


def grpo_generations(cfg: Any) -> int:
    """GRPO samples of one training, at most: prompts x group; locally each step may sample up to
    W8_GRPO_DYNAMIC_TRIES more groups (harness.dynamic_sampling), counted here in full."""
    hp = for_config(cfg)
    if cfg.backend == "local":  # one prompt a step (harness.train_local.grpo_steps)
        steps = cfg.grpo_epochs * cfg.train_count
        steps = min(steps, cfg.grpo_max_steps) if cfg.grpo_max_steps else steps
        return steps * hp.group_size * (1 + cfg.grpo_dynamic_tries)
    prompts = cfg.train_count * cfg.grpo_epochs  # SkyRL: every train row of every epoch, n samples each
    return prompts * hp.group_size


def harvest_generations(cfg: Any) -> int:
    """Operator generations of one harvest at most: every train-page search runs its whole budget."""
    return cfg.harvest_tasks * (cfg.harvest_max_iterations + 1)


def planned_training_generations(cfg: Any, arms: list[str]) -> dict[str, int]:
    """Per post-training arm, the operator generations its training spends at most: its harvests' searches,
    its GRPO samples and any other sampling of its training or its start's (the arms table's `harvests`, `grpo`
    and `other_generations`: the repair warm-start's relabeling harvest)."""
    grpo, harvest = grpo_generations(cfg), harvest_generations(cfg)
    return {a.name: a.harvests(cfg) * harvest + (grpo if a.grpo else 0) + a.other_generations(cfg) for a in ARMS
            if a.name in arms and a.trained_by != "-"}


def matched_budget(budget: int, generations: int, n_tasks: int) -> int:
    """frozen's budget at an arm's compute: budget + ceil(training generations / held-out tasks)."""
    return budget + math.ceil(generations / max(1, n_tasks))


def matched_budgets(cfg: Any, arms: list[str]) -> dict[str, int]:
    """Per trained arm with training generations, the frozen budget that matches its compute."""
    return {arm: matched_budget(cfg.trace_max_iterations, gens, cfg.trace_tasks)
            for arm, gens in planned_training_generations(cfg, arms).items() if gens > 0}


def frozen_search_budget(cfg: Any, arms: list[str]) -> int:
    """The budget step 01 searches frozen with: the largest matched budget with frozen_matched planned, else the
    run's budget."""
    if "frozen_matched" not in arms:
        return cfg.trace_max_iterations
    return max([cfg.trace_max_iterations, *matched_budgets(cfg, arms).values()])


def check_budgets(cfg: Any, arms: list[str]) -> None:
    """Refuse, in one line, a frozen_matched budget over W8_MATCHED_MAX_ITERATIONS."""
    if "frozen_matched" not in arms:
        return
    budgets = matched_budgets(cfg, arms)
    over = {arm: b for arm, b in budgets.items() if b > cfg.matched_max_iterations}
    if over:
        arm, b = max(over.items(), key=lambda item: item[1])
        gens = planned_training_generations(cfg, arms)[arm]
        raise ConfigError(f"W8_MATCHED_MAX_ITERATIONS={cfg.matched_max_iterations}: the frozen search matched to "
                          f"the {arm} arm's compute needs a budget of {b} ({cfg.trace_max_iterations} + ceil({gens} "
                          f"training generations / {cfg.trace_tasks} tasks)); raise the cap, add tasks or train less")


def arm_plan(cfg: Any, arms: list[str]) -> dict[str, dict[str, Any]]:
    """Per arm: its search budget, the most search nodes it can take (tasks x seeds x (budget + 1)), and its
    planned training generations (what `make dry-run` lists)."""
    searches = cfg.trace_tasks * cfg.trace_seeds
    gens = planned_training_generations(cfg, arms)
    matched = matched_budgets(cfg, arms)
    plan = {}
    for arm in arms:
        budget = matched.get("trained", cfg.trace_max_iterations) if arm == "frozen_matched" else cfg.trace_max_iterations
        plan[arm] = {"budget": budget, "max_search_nodes": searches * (budget + 1),
                     "training_generations": gens.get(arm, 0),
                     "trained_by": BY_NAME[arm].trained_by if arm in BY_NAME else "-"}
        if arm in matched:
            plan[arm]["frozen_budget_at_equal_compute"] = matched[arm]
    return plan


# ---- does a refinement fit the model's context? ------------------------------------------------
# Checked from the knobs before any model loads, so it estimates tokens from characters: 3 characters a
# token is below what SmolLM2's and Qwen's tokenizers give on this Python and AXTree text (~3.5-4), so
# the estimate errs long. The context comes from the model's config.json when it is a local folder;
# the embedded model's GGUF says 8192 (llama.context_length); a hub id not cached here is not checked
# (the GPU node's SkyRL plan checks its prompt lengths against max_prompt_length with the real tokenizer).
CHARS_PER_TOKEN = 3.0
EMBEDDED_CONTEXT = {"smollm2-135m": 8192}


def model_context(model: str) -> int | None:
    """The model's context in tokens: the embedded table, a local folder's config.json, else None."""
    if model in EMBEDDED_CONTEXT:
        return EMBEDDED_CONTEXT[model]
    config = Path(model) / "config.json"
    if config.is_file():
        try:
            return int(json.loads(config.read_text()).get("max_position_embeddings") or 0) or None
        except (OSError, ValueError):
            return None
    return None


def worst_refine_prompt_tokens(tasks: list[Any], max_new_tokens: int) -> int:
    """Estimated tokens of the longest refinement prompt of these tasks: a parent program as long as the token
    budget allows and the five failures with the longest state excerpts."""
    parent = "#" * int(max_new_tokens * CHARS_PER_TOKEN)
    longest = 0
    for task in tasks:
        ranked = sorted(task.examples, key=lambda e: -len(state_excerpt(e.state, e.action)))[:MAX_FAILURES]
        failures = [Failure(i, e.state, e.action, e.legal, not e.legal, e.error, "", e.action_type, e.dom_changed)
                    for i, e in enumerate(ranked)]
        messages = build_refine_prompt(task, parent, failures, attempt=1)
        longest = max(longest, sum(len(m["content"]) for m in messages))
    return math.ceil(longest / CHARS_PER_TOKEN)


def check_refine_fits(cfg: Any, tasks: list[Any]) -> None:
    """Refuse, in one line, a token budget whose refinement prompt (parent + failures) and answer overflow the
    model's context: the parent's failures would be cut out of the prompt the search depends on."""
    if cfg.trace_max_iterations == 0 and not any(a.harvests(cfg) for a in planned(cfg)):
        return  # no refinement is ever asked (a harvest's searches refine)
    context = model_context(cfg.harness_model)
    if context is None:
        return
    prompt = worst_refine_prompt_tokens(tasks, cfg.operator_max_new_tokens)
    if prompt + cfg.operator_max_new_tokens > context:
        raise ConfigError(f"W8_OPERATOR_MAX_NEW_TOKENS={cfg.operator_max_new_tokens}: a refinement prompt (a parent "
                          f"program of up to that many tokens and its five failures, ~{prompt} tokens) plus the "
                          f"answer exceed the {context}-token context of {cfg.harness_model}; lower the budget")
