"""Step 05: the strict compare of the run's arms over held-out tasks, the curves, and summary.md.

    python scripts/05_compare.py                      # needs two arms' <arm>_trace.json in the run folder
    W8_RUN_ID=demo python scripts/05_compare.py
    python scripts/05_compare.py --results results/study-b4-self-20261206   # redo a results folder's compare

Writes <run>/trace_compare.json and <run>/trace.png (harness.compare: every arm on the same
(task, seed) pairs with the same knobs and decoding, or refused, as is a trace whose sandbox record
is empty while its programs ran; gold recomputed; not reached
= max_iterations + 1; the unit of analysis is the held-out task, seeds averaged inside it;
per pair of arms four measures (steps, solved within budget, node-0 gold rate, node-0 reward)
with the exact sign test, the exact Wilcoxon test and the interval of the shifts it does not
reject (so interval and verdict agree), and the smallest detectable effect; shrunk only if
strictly fewer), budget_curves.png and budget_curves_tokens.png (harness.plots: solved by node
and by generated tokens) and <run>/summary.md: what ran, the per-arm table, the headline
(trained vs frozen beside trained vs sft, what GRPO added, what equal compute matches), every
comparison, every task and search, the compute ledger with the warm-start (harness.ledger), the
GRPO groups' zero-variance share per step, the programs, the training metrics, the sandbox, wall
times, and last the exact command that reproduces the run (its git commit, its preset and the knobs
that differ from it). Shrunk is printed with its test beside it (Wilcoxon p over tasks; a p below
1e-6 as "p < 1e-6"). The arms and their comparisons come from harness/arms.py's table. Any two arms
compare: a run without the frozen arm still gets its summary. Ends with one line: the headline pairs
and shrunk yes/no with its p. With --results DIR it redoes a results folder's compare from the files
committed there, in place.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.arms import ARMS as ARM_TABLE, SEARCHED, comparison_name, comparisons  # noqa: E402
from harness.budget import matched_budgets, planned_arms, planned_training_generations  # noqa: E402
from harness.compare import MEASURES, CompareError, compare_arms, pair_key, plot_arms, steps_or_budget  # noqa: E402
from harness.files import atomic_write_json, atomic_write_text  # noqa: E402
from harness.ledger import GRPO_METRICS, equal_compute_line, ledger, ledger_lines, warm_start  # noqa: E402
from harness.oracle import sft_target_source  # noqa: E402
from harness.config import KNOBS, ConfigError, load_config  # noqa: E402
from harness.pipeline import (STEPS, StepError, StepResult, config_of_run, load_run_config, read_marker,  # noqa: E402
                              run_step, step_parser)
from harness.plots import plot_budget_curves, plot_token_curves  # noqa: E402
from harness.repair import excluded_attributes  # noqa: E402
from harness.repair_eval import CEILING, summary_line  # noqa: E402
from harness.rewards import RewardKnobs  # noqa: E402
from harness.rule_split import Design  # noqa: E402
from harness.search_stats import curve_table, mention_stats, refinement_programs  # noqa: E402
from harness.split_check import rule_operator_programs  # noqa: E402
from harness.stats import ALPHA, p_text, tasks_for_effect  # noqa: E402
from harness.traces import ARMS, FROZEN_LONG, arm_file, load_traces, prefix_trace, sandbox_problem, trace_tasks  # noqa: E402
from harness.training_data import sft_target_for, sft_target_of_config  # noqa: E402

STEP = "05_compare"
METRICS = ("sft_metrics.json", *(a.metrics for a in ARM_TABLE if a.metrics))
METRIC_KEYS = ("loss", "reward_mean", "reward_std", "valid_rate", "zero_variance_groups", "step_time_s")
HEADLINE = tuple(c.pair for c in comparisons() if c.headline)  # harness/arms.py's table
pair_name = comparison_name  # 'trained vs repair_sft (what repair GRPO added)'; frozen@<k>: frozen at the arm's own compute


def _num(value, fmt: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, fmt)


def arm_table(result: dict) -> list[str]:
    budget = result["max_iterations"]
    lines = [f"Each figure is a mean over tasks (n = {result['n_tasks']} held-out tasks, each the mean of its "
             f"{result['n_searches'] // max(1, result['n_tasks'])} search seed(s)).", "",
             "| arm | budget | n tasks | mean steps to gold | solved within budget | golds at node 0 / from a "
             "refinement (searches) | node-0 gold rate (tasks all gold) | node-0 reward | node-0 valid | node-0 similarity "
             "to SFT target | gold harnesses: held-out accuracy |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm, a in result["arms"].items():
        lines.append(f"| {arm} | {a['budget']} | {a['n_tasks']} | {a['mean_steps']:.2f} | {a['solved_share']:.0%} | "
                     f"{a.get('golds_at_node0', '-')} / {a.get('golds_from_refinements', '-')} | {a['node0_gold_rate']:.0%} ({a['node0_gold_tasks']}) | {a['node0_reward_mean']:.3f} | "
                     f"{_num(a['node0_valid_share'], '.0%')} | {_num(a['node0_similarity_to_sft_target_mean'], '.3f')}"
                     f" | {_num(a['gold_heldout_accuracy_mean'], '.3f')} |")
    return lines + ["", f"Not reached counts the arm's budget + 1 ({budget + 1} for the budget of {budget} "
                        "refinements); fewer is better. Mean steps depend on that cap; the solved and node-0 columns "
                        "do not."]


def measure_line(name: str, m: dict) -> str:
    spread = m["in_words"]
    mde = "" if m["mde80"] is None else f"; smallest difference detectable with power 0.8: {m['mde80']:.3g}"
    return (f"  - {name}: {m['mean_a']:.3g} vs {m['mean_b']:.3g}, difference {m['mean_diff']:+.3g} ({spread}); "
            f"better / tied / worse on {m['better_tasks']} / {m['tied_tasks']} / {m['worse_tasks']} tasks; "
            f"sign test {p_text(m['sign_test_p'])}, Wilcoxon {p_text(m['wilcoxon_p'])} ({m['wilcoxon_method']}){mde}")


def comparison_lines(result: dict) -> list[str]:
    lines = []
    for c in result["comparisons"]:
        differ = c["programs_differ_at_node0"]
        both = c.get("first_gold_where_both_solved")
        both_line = (f"  - first gold node on the {both['n_tasks']} task(s) both solved: {both['mean_a']:.3g} vs "
                     f"{both['mean_b']:.3g} (Wilcoxon {p_text(both['wilcoxon_p'])})" if both else
                     "  - first gold node where both solved: no task solved by both")
        budgets = "" if c["budget_a"] == c["budget_b"] else \
            f" Budgets differ ({c['budget_a']} vs {c['budget_b']} refinements): budget-free measures only."
        lines += [f"- **{pair_name(c['a'], c['b'])}**, n = {c['n_tasks']} tasks ({c['n_searches']} searches): "
                  f"{c['verdict']}.{budgets} Shrunk (mean steps strictly fewer): {shrunk_text(c)}. "
                  f"Node-0 programs differ on {differ['tasks']}/{differ['of_tasks']} tasks "
                  f"({differ['searches']}/{differ['of_searches']} searches).",
                  *(measure_line(name, c["measures"][name]) for name in MEASURES if name in c["measures"]), both_line]
    return lines


def shrunk_detail(c: dict) -> str:
    """The means and the test beside a comparison's shrunk yes/no: a yes from one task of 32 reads as what it is."""
    steps = c["measures"].get("steps")
    if steps is None:
        return "budgets differ: mean steps not compared"
    sig = "significant" if steps["wilcoxon_p"] < ALPHA else "not significant"
    return (f"mean steps {steps['mean_a']:.3g} vs {steps['mean_b']:.3g}; Wilcoxon signed-rank test over "
            f"{steps['n_tasks']} tasks {p_text(steps['wilcoxon_p'])}, {sig} at {ALPHA}; better / tied / worse on "
            f"{steps['better_tasks']} / {steps['tied_tasks']} / {steps['worse_tasks']} tasks")


def shrunk_text(c: dict) -> str:
    return f"{'yes' if c['shrunk'] else 'no'} ({shrunk_detail(c)})"


def shrunk_headline(result: dict) -> str:
    """The bold shrunk line under the headline: trained vs frozen, with its test and p beside it."""
    c = next((c for c in result["comparisons"] if (c["a"], c["b"]) == ("trained", "frozen")), None)
    if c is None:
        return "**shrunk: no** (no trained vs frozen comparison in this run)"
    return (f"**shrunk: {'yes' if c['shrunk'] else 'no'}** (trained vs frozen: {shrunk_detail(c)}; shrunk = mean "
            "steps strictly fewer, equal is not success)")


def headline_lines(result: dict) -> list[str]:
    by = {(c["a"], c["b"]): c for c in result["comparisons"]}
    lines = [f"- **{pair_name(*pair)}** (n = {by[pair]['n_tasks']} tasks): {by[pair]['verdict']}"
             for pair in HEADLINE if pair in by]
    if matches := equal_compute_line(result, result["ledger"], result["warm_start"]):
        lines.append(matches)
    lines += [f"- **{pair_name(a, b)}** (n = {c['n_tasks']} tasks): {c['verdict']}"
              for (a, b), c in by.items() if b.startswith("frozen@")]
    lines += [f"- **no GRPO effect is reported**: {w}" for w in result["warnings"]]
    return lines or ["- no trained arm in this run"]


# ---- the search's own numbers: curves, refinements, compute -------------------------------------

def curve_lines(result: dict) -> list[str]:
    curves = result["budget_curves"]
    return [f"Share of the {result['n_tasks']} held-out tasks solved by node k (95% band: tasks resampled "
            f"{next(iter(curves.values()))['resamples']} times); `budget_curves.png` draws it.", "",
            *curve_table(curves)]


def refinement_lines(result: dict) -> list[str]:
    lines = ["| arm | refinements asked | valid | better than the parent | mean reward change | identical to the "
             "parent | searches that refined |", "|---|---|---|---|---|---|---|"]
    for arm, a in result["arms"].items():
        r = a["refinements"]
        lines.append(f"| {arm} | {r['refinements']} | {_num(r['valid_share'], '.0%')} | {_num(r['better_share'], '.0%')} "
                     f"| {_num(r['mean_reward_change'], '+.3f')} | {_num(r['identical_share'], '.0%')} | "
                     f"{r['searches_refined']}/{r['searches']} |")
    return lines + ["", "A refinement is a node with a parent; better = the child's reward strictly above its "
                        "parent's; identical = the parent's program unchanged (comments and spacing aside)."]


def missing_lines(run_dir: Path, planned: list[str], present: list[str]) -> list[str]:
    """The planned arms with no finished trace, each with why (a curve is never drawn from a partial arm)."""
    lines = []
    for arm in planned:
        if arm in present:
            continue
        data = json.loads((run_dir / "self_data.json").read_text()) if arm == "self" and \
            (run_dir / "self_data.json").is_file() else {}
        rule = data.get("rule") or "above the base model's median reward, better than a constant answer"
        why = (f"{data['status']}: the harvests kept no program (base model's median reward "
               f"{data.get('base_median_reward')}; the rule the run applied: {rule})"
               if data.get("status") == "no training data" else
               "no finished trace file (its searches are incomplete or its training has no export): resume the run")
        lines.append(f"- `{arm}`: {why}")
    return lines or ["- none: every planned arm has a finished trace"]


def searches_table(arms: dict[str, list[dict]]) -> list[str]:
    """Steps to gold of every (task, seed) pair, each arm's search found by its key (never by position)."""
    names = list(arms)
    by_key = {name: {pair_key(t): t for t in traces} for name, traces in arms.items()}
    lines = ["| task | seed | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for trace in next(iter(arms.values())):
        key = pair_key(trace)
        cells = [str(steps_or_budget(by_key[name][key])) for name in names]
        lines.append(f"| `{key[0]}` | {key[2]} | " + " | ".join(cells) + " |")
    return lines


def grpo_zero_variance(run_dir: Path) -> dict[str, dict]:
    """Per GRPO training: the zero-variance share of its groups at each step, and over all steps."""
    out = {}
    grpo = {a.name for a in ARM_TABLE if a.grpo}  # repair_sft's metrics file is a fine-tune's
    for arm, name in GRPO_METRICS.items():
        path = run_dir / name
        if arm not in grpo or not path.is_file():
            continue
        metrics = json.loads(path.read_text())
        steps = metrics.get("steps") or []
        # the dynamic-sampling record (every group sampled; flat = max - min <= 1e-9) where a step has it: TRL's
        # frac_reward_zero_std tests std against 0 with isclose's 1e-8, and float noise (std 1e-7 in a group of
        # eight equal rewards) reads as variance
        shares = [s["zero_variance_share_sampled"] if s.get("zero_variance_share_sampled") is not None
                  else s.get("zero_variance_groups") for s in steps]
        shares = [x for x in shares if x is not None]
        kinds = [(s.get("prompts_zero_shot"), s.get("prompts_refine")) for s in steps]
        out[arm] = {"per_step": shares, "share": round(sum(shares) / len(shares), 4) if shares else None,
                    "steps": len(steps),
                    "prompt_kinds": kinds if all(None not in k for k in kinds) and kinds else None,
                    "prefilter": (metrics.get("repair_grpo") or {}).get("prefilter")}
    return out


def heldout_mentions(cfg, arms: dict[str, list[dict]]) -> dict | None:
    """Under the rule split: per arm, its refinements that name a held-out rule family's attribute
    (harness.repair.excluded_attributes), beside the ceiling: the rule-library operator's refinements of the
    restricted program on the same held-out tasks until gold (harness.split_check.rule_operator_programs)."""
    design = Design.of(cfg)
    if design.kind != "rule":
        return None
    attributes = excluded_attributes(design.heldout_rules)
    sandbox = RewardKnobs.from_config(cfg).sandbox
    ceiling = [rule_operator_programs(design, t, cfg.harness_gold_threshold, sandbox)[0] for t in trace_tasks(cfg)]
    return {"attributes": list(attributes), CEILING: mention_stats(ceiling, attributes),
            **{arm: mention_stats(refinement_programs(traces), attributes) for arm, traces in arms.items()}}


def heldout_rule_lines(result: dict, run_dir: Path) -> list[str]:
    """The held-out rules: each arm's mention rate with the ceiling beside it, then the held-in repair benchmark
    (repair_eval.json, step 04) of every arm: can it add a rule its shown failures share at all?"""
    mentions = result.get("heldout_mentions")
    lines = []
    if mentions:
        lines += [f"Refinements naming a held-out attribute ({', '.join(mentions['attributes'])}); the ceiling is the "
                  "rule-library operator, which knows the held-out rules, refining the restricted program until gold:",
                  "", "| arm | refinements | naming a held-out attribute | searches with one |", "|---|---|---|---|"]
        for arm, m in mentions.items():
            if arm != "attributes":
                lines.append(f"| {arm}{' (ceiling)' if arm == CEILING else ''} | {m['refinements']} | "
                             f"{_num(m['mention_share'], '.1%')} | {m['searches_mentioning']}/{m['searches']} |")
    path = run_dir / "repair_eval.json"
    if path.is_file():
        data = json.loads(path.read_text())
        k = data.get("knobs", {})
        lines += ["", f"The held-in repair benchmark (`repair_eval.json`: {k.get('heldin_tasks')} tasks of families "
                  f"training never saw, each searched from a parent one rule below gold, budget "
                  f"{k.get('max_iterations')} refinements):", ""]
        lines += [f"- {summary_line(arm, data['arms'][arm]['summary'])}" for arm in sorted(data["arms"])]
        for pair, tests in sorted(data.get("paired", {}).items()):
            a, _, b = pair.partition(" vs ")
            if {a, b} & {"repair_sft", "trained"} and {a, b} <= {"frozen", "sft", "repair_sft", "trained", CEILING}:
                t = tests["first_refinement"]
                lines.append(f"- {pair}, first refinement over {t['tasks']} tasks: {t['better']} better, "
                             f"{t['worse']} worse, sign test {t['p_text']}")
    return lines or ["- not the rule split, and no repair_eval.json"]


def power_lines(result: dict) -> list[str]:
    """Could this design have seen what GRPO added? The smallest detectable differences of trained vs sft, and
    the tasks a paired test would need to find a one-step difference at the spread measured here."""
    by = {(c["a"], c["b"]): c for c in result["comparisons"]}
    c = by.get(("trained", "sft"))
    if c is None:
        return ["- no trained vs sft comparison in this run"]
    steps, node0 = c["measures"]["steps"], c["measures"]["node0_gold"]
    none = "cannot be estimated (no spread in either arm)"
    lines = [f"- over n = {c['n_tasks']} tasks (alpha 0.05, power 0.8, normal approximation), the smallest "
             f"difference this design detects in steps to gold: {_num(steps['mde80'], none=none)}; in node-0 gold "
             f"rate: {none if node0['mde80'] is None else format(100 * node0['mde80'], '.0f') + ' points'}"]
    need = tasks_for_effect(steps["sd_of_differences"] or 0.0, 1.0)
    lines.append(f"- a one-step difference in steps to gold needs {need} tasks at the spread of task differences "
                 f"measured here (sd {_num(steps['sd_of_differences'])} steps, budget {result['max_iterations']})"
                 if need else "- the task differences in steps had no spread: a sample size cannot be derived")
    return lines


def zero_variance_lines(zero: dict[str, dict]) -> list[str]:
    lines = []
    for arm, z in zero.items():
        per_step = " ".join(f"{v:.2f}" for v in z["per_step"]) or "not recorded"
        kinds = ("; prompts per step (zero-shot/refinement): " +
                 " ".join(f"{a:g}/{b:g}" for a, b in z["prompt_kinds"])) if z.get("prompt_kinds") else ""
        lines.append(f"- `{arm}` ({z['steps']} GRPO steps): zero-variance share of groups per step: {per_step}; "
                     f"over all steps {_num(z['share'])} (a zero-variance group gives GRPO no gradient){kinds}")
        if z.get("prefilter"):
            f = z["prefilter"]
            lines.append(f"  - its prompts, chosen by pass rate: {f['with_signal']} of {f['candidates']} repair prompts "
                         f"had unequal rewards over {f['samples']} answer{'s' * (f['samples'] != 1)} of its start model; {f['kept_with_signal']} "
                         f"of the {f['kept']} trained on ({f['generations']} generations, {f['wall_s']:.0f} s)")
    return lines or ["- no GRPO training in this run"]


def metrics_lines(run_dir: Path) -> list[str]:
    """One line per metrics file: its per-step numbers (first and last step when there are many)."""
    lines = []
    for name in METRICS:
        path = run_dir / name
        if not path.exists():
            continue
        steps = json.loads(path.read_text()).get("steps") or []
        shown = steps if len(steps) <= 4 else [steps[0], steps[-1]]
        parts = ["step {}: {}".format(s.get("step"), ", ".join(f"{k} {s[k]:.3g}" for k in METRIC_KEYS
                                                               if isinstance(s.get(k), (int, float))))
                 for s in shown]
        lines.append(f"- `{name}` ({len(steps)} steps): {'; '.join(parts) or 'no steps recorded'}")
    return lines


def sandbox_lines(config: dict) -> list[str]:
    """Which backend ran each step's programs (run_config.json["sandbox"]), with counts and fallbacks."""
    lines = []
    for step, record in sorted((config.get("sandbox") or {}).items()):
        runs = ", ".join(f"{backend} {n}" for backend, n in sorted((record.get("runs") or {}).items())) or "none"
        falls = record.get("fallbacks") or []
        fallback = "; fallbacks: " + "; ".join(f"{f['at']} {f['reason']}" for f in falls) if falls else ""
        day = record.get("daytona") or {}
        daytona = (f"; Daytona sandbox {day.get('sandbox')}: network block "
                   f"{'confirmed' if day.get('network_block_all') else 'NOT confirmed'} (probe reached "
                   f"{', '.join(k for k, v in (day.get('probe') or {}).items() if v) or 'nothing'}), Python "
                   f"{day.get('python')}, {day.get('slots')} slot(s), retries {(day.get('stats') or {}).get('retries', 0)}"
                   f", recreated {(day.get('stats') or {}).get('recreated', 0)}") if day.get("sandbox") else ""
        lines.append(f"- {step}: asked {record.get('requested')}, programs run: {runs}, sandbox failures "
                     f"{record.get('infra_failures', 0)}{fallback}{daytona}")
    return lines


def sft_target_name(knobs: dict) -> str:
    """The SFT target a run used ('auto' resolved by backend; runs before W8_SFT_TARGET used the auto rule), with
    the held-out rule families it leaves out under the rule split."""
    target = knobs.get("sft_target") or "auto"
    name = sft_target_for(knobs.get("backend", "local")) if target == "auto" else target
    return f"{name} without {knobs.get('heldout_rules')}" if knobs.get("split") == "rule" else name


def grpo_steps_line(zero: dict[str, dict], knobs: dict, hp: dict) -> str:
    """How much GRPO really ran: steps, and prompts seen out of the train tasks (one prompt per local step)."""
    steps = {arm: z["steps"] for arm, z in zero.items()}
    if not steps:
        return "not run"
    ran = ", ".join(f"{arm} {n} step(s)" for arm, n in steps.items())
    if knobs.get("backend", "local") == "local":
        return (f"{ran}, each one prompt x a group of {hp.get('group_size')}, so at most {max(steps.values())} of "
                f"the {knobs.get('train_count')} train prompts were used")
    return f"{ran} over {knobs.get('train_count')} train prompts"


def summary_markdown(run_dir: Path, result: dict, arms: dict[str, list[dict]], zero: dict[str, dict],
                     missing: list[str] | None = None) -> str:
    config = load_run_config(run_dir)
    knobs, hp = config["knobs"], config.get("hparams", {})
    dec = result["decoding"]
    lines = [
        f"# r3 run `{config['run_id']}`",
        "",
        f"- model: `{config['model']}` (backend `{config['backend']}`, preset `{knobs.get('preset') or 'none'}`), "
        f"git `{config['git_sha']}`",
        f"- hardware: {', '.join(config['accelerators']['detected'])}; started {config['started_at']}",
        f"- split: {knobs.get('split', 'page')}" + (f", held-out rule families {knobs.get('heldout_rules')} (no training "
        "example depends on them; every held-out task holds 3 or more that do)" if knobs.get("split") == "rule" else
                                                    " (held-out pages; the same rules on every page)"),
        f"- searches: n = {result['n_tasks']} held-out tasks (each from its own page) x {knobs.get('trace_seeds')} "
        f"search seed(s) = {result['n_searches']} searches per arm, {knobs.get('trace_examples_per_obs')} "
        f"examples each; budget {result['max_iterations']} refinements; gold = balanced accuracy >= "
        f"{result['gold_threshold']}; the unit of analysis is the task",
        f"- decoding, every arm: operator `{dec.get('name')}`, temperature {dec.get('temperature')}, up to "
        f"{dec.get('max_new_tokens')} tokens" + (f", {dec['dtype']}" if dec.get("dtype") else "")
        + (f", top_p {dec['top_p']}, top_k {dec['top_k']}" if dec.get("do_sample") else ""),
        f"- training: SFT {knobs.get('harness_sft_steps')} step(s) on target `{sft_target_name(knobs)}` over "
        f"{knobs.get('sft_count') or knobs.get('train_count')} row(s); GRPO {grpo_steps_line(zero, knobs, hp)}"
        + (f"; hyperparameters ({hp.get('backend')}): " + ", ".join(f"{k} {v}" for k, v in hp.items() if k != "backend")
           if hp else ""),
        "",
        "## headline",
        "",
        *headline_lines(result),
        "",
        shrunk_headline(result),
        "",
        "## per arm",
        "",
        *arm_table(result),
        "",
        "## arms planned but not compared",
        "",
        *(missing or ["- none"]),
        "",
        "## solved by budget",
        "",
        *curve_lines(result),
        "",
        "## refinements: does the search do more than resample?",
        "",
        *refinement_lines(result),
        "",
        "## held-out rules: mentions, and the held-in repair benchmark",
        "",
        *heldout_rule_lines(result, run_dir),
        "",
        "## compute ledger",
        "",
        *ledger_lines(result["ledger"], result["n_tasks"], result["warm_start"]),
        "",
        "## paired comparisons over tasks",
        "",
        *comparison_lines(result),
        "",
        "## power: could this design see an effect?",
        "",
        *power_lines(result),
        "",
        "## GRPO groups with zero reward variance",
        "",
        *zero_variance_lines(zero),
        "",
        "## every search (steps to gold)",
        "",
        *searches_table(arms),
        "",
        "## training metrics",
        "",
        *(metrics_lines(run_dir) or ["- none recorded"]),
        "",
        "## sandbox (what actually ran the programs)",
        "",
        *(sandbox_lines(config) or ["- not recorded"]),
        "",
        "## wall times",
        "",
        *wall_time_lines(run_dir),
        "",
        "## reproduce",
        "",
        *reproduce_lines(config),
    ]
    return "\n".join(lines) + "\n"


def wall_time_lines(run_dir: Path) -> list[str]:
    """Each step's wall time and peak memory from its marker; in a results folder (no markers) the rows the
    summary.md already there recorded when its run wrote it, kept as they were."""
    head = ["| step | wall s | peak RSS MB | summary |", "|---|---|---|---|"]
    markers = {step: read_marker(run_dir, step) for step in STEPS[:-1]}
    if not any(markers.values()) and (run_dir / "summary.md").is_file():
        kept = (run_dir / "summary.md").read_text().split("## wall times", 1)[-1].splitlines()
        rows = [line for line in kept if line.startswith("| 0")]
        if rows:
            return [*head, *rows, "", "(recorded by the run's own step 05: its step markers are not in this folder)"]
    return head + [f"| {step} | {(m or {}).get('wall_s', '-')} | {(m or {}).get('peak_rss_mb', '-')} | "
                   f"{(m or {}).get('summary', 'not run')} |" for step, m in markers.items()]


def env_value(value) -> str:
    """A knob's value as its W8_* variable takes it."""
    return "" if value is None else ("1" if value else "0") if isinstance(value, bool) else str(value)


def reproduce_lines(config: dict) -> list[str]:
    """The exact command that reproduces the run: its git commit, its preset, and every knob whose recorded value
    differs from what that preset gives (knobs the knob table no longer has are kept: the commit had them)."""
    knobs, preset = config["knobs"], config["knobs"].get("preset") or ""
    try:
        base = load_config(env={"W8_PRESET": preset} if preset else {}).as_dict()
    except ConfigError:  # a preset this checkout no longer has: every recorded knob is given
        base = {}
    known = {k.name for k in KNOBS}
    differ = [f"W8_{name.upper()}={shlex.quote(env_value(value))}" for name, value in knobs.items()
              if name != "preset" and (name not in known or name not in base or env_value(base[name]) != env_value(value))]
    sha = str(config.get("git_sha") or "unknown")
    command = " ".join([f"W8_PRESET={preset}"] * bool(preset) + differ + ["bash scripts/run_r3.sh"])
    dirty = ("; the run's working tree had uncommitted changes (-dirty), which this command does not bring back"
             if sha.endswith("-dirty") else "")
    return [f"The run's commit, its preset (`{preset or 'none'}`) and the {len(differ)} knob(s) whose recorded value "
            f"differs from what {'the preset gives' if preset else 'the defaults give'} in the checkout that wrote this "
            f"summary (run_config.json holds every knob){dirty}:", "", "```bash",
            f"git checkout {sha.removesuffix('-dirty')}", command, "```"]


def equal_compute_cuts(cfg, run_dir: Path, arms: dict[str, list[dict]]) -> list[tuple[str, str]]:
    """frozen cut at an arm's own equal-compute budget (frozen@<k>, from frozen's one long search), for every arm
    of harness/arms.py's table with own_compute_cut; adds them to `arms` and returns the pairs to compare."""
    matched = matched_budgets(cfg, planned_arms(cfg))
    source = FROZEN_LONG if (run_dir / arm_file(FROZEN_LONG)).is_file() else "frozen_matched"
    if source not in arms and not (run_dir / arm_file(source)).is_file():
        return []
    long = arms.get(source) or load_traces(run_dir / arm_file(source))
    pairs = []
    for arm in (a.name for a in ARM_TABLE if a.own_compute_cut):
        budget = matched.get(arm)
        if arm not in arms or budget is None or budget == matched.get("trained"):
            continue
        if budget > long[0]["knobs"]["max_iterations"]:
            continue
        arms[f"frozen@{budget}"] = [prefix_trace(t, budget) for t in long]
        pairs.append((arm, f"frozen@{budget}"))
    return pairs


def compare_folder(cfg, run_dir: Path) -> dict:
    """The compare of a folder's arm traces: trace_compare.json, the three figures and summary.md, written there."""
    arms = {arm: load_traces(run_dir / arm_file(arm)) for arm in ARMS if (run_dir / arm_file(arm)).exists()}
    if len(arms) < 2:
        raise StepError(f"{run_dir} has {len(arms)} arm trace(s) ({', '.join(arms) or 'none'}); a compare needs two: "
                        f"run step 01 (frozen) or 04 ({', '.join(a for a in SEARCHED if a != 'frozen')}) first")
    for arm in arms:  # the evidence must say where each arm's programs ran
        if problem := sandbox_problem(run_dir / arm_file(arm)):
            raise StepError(f"compare refused: {problem}")
    present = list(arms)
    extra_pairs = equal_compute_cuts(cfg, run_dir, arms)
    zero = grpo_zero_variance(run_dir)
    try:
        result = compare_arms(arms, sft_target=sft_target_source(sft_target_of_config(cfg)),
                              grpo_zero_variance={arm: z["share"] for arm, z in zero.items()}, extra_pairs=extra_pairs)
    except CompareError as err:
        raise StepError(f"compare refused: {err}") from None
    result["grpo_zero_variance"] = zero
    planned = planned_arms(cfg)
    result["ledger"] = ledger(run_dir, result, planned_training_generations(cfg, planned))
    result["warm_start"] = warm_start(cfg, run_dir, list(result["arms"]))
    result["missing_arms"] = [arm for arm in planned if arm not in present]
    result["heldout_mentions"] = heldout_mentions(cfg, {arm: arms[arm] for arm in present})
    atomic_write_json(run_dir / "trace_compare.json", result)
    plot_arms({arm: arms[arm] for arm in present}, run_dir / "trace.png")
    plot_budget_curves(result["budget_curves"], run_dir / "budget_curves.png", cfg.trace_max_iterations)
    plot_token_curves(result["token_curves"], run_dir / "budget_curves_tokens.png")
    atomic_write_text(run_dir / "summary.md", summary_markdown(run_dir, result, {a: arms[a] for a in present}, zero,
                                                                missing_lines(run_dir, planned, present)))
    return result


def body(cfg, run_dir: Path, args) -> StepResult:
    result = compare_folder(cfg, run_dir)
    by = {(c["a"], c["b"]): c for c in result["comparisons"]}
    parts = [f"{a} vs {b} solved {by[(a, b)]['measures']['solved']['mean_a']:.0%} vs "
             f"{by[(a, b)]['measures']['solved']['mean_b']:.0%}, node-0 gold "
             f"{by[(a, b)]['measures']['node0_gold']['mean_a']:.0%} vs {by[(a, b)]['measures']['node0_gold']['mean_b']:.0%}"
             for a, b in (("trained", "frozen"), ("trained", "frozen_matched"), ("trained", "sft")) if (a, b) in by]
    first = result["comparisons"][0] if result["comparisons"] else None
    summary = (f"{'; '.join(parts) or (first and first['verdict']) or 'no comparable pair of arms'} over "
               f"{result['n_tasks']} tasks: shrunk {'yes' if result['shrunk'] else 'no'}"
               + (f" (Wilcoxon {p_text(by[('trained', 'frozen')]['measures']['steps']['wilcoxon_p'])})"
                  if "steps" in by.get(("trained", "frozen"), {}).get("measures", {}) else "")
               + (" (no GRPO effect readable: " + "; ".join(result["warnings"]) + ")" if result["warnings"] else ""))
    return StepResult(["trace_compare.json", "trace.png", "budget_curves.png", "budget_curves_tokens.png", "summary.md"],
                      summary)


def redo_results(folder: Path) -> int:
    """--results DIR: the compare redone in a results folder from its committed traces, metrics and run_config.json
    (no run folder, lock or marker; the knobs are the run's own). The wall-time rows are kept from its summary.md."""
    try:
        cfg = config_of_run(folder)
        result = compare_folder(cfg, folder)
    except (StepError, ConfigError, OSError, ValueError, KeyError) as err:
        print(f"error: [{STEP}] {folder}: {err}", file=sys.stderr)
        return 1
    print(f"[{STEP}] {folder}: {len(result['comparisons'])} comparisons over {result['n_tasks']} tasks redone: "
          "trace_compare.json, trace.png, budget_curves.png, budget_curves_tokens.png, summary.md")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = step_parser(STEP, __doc__)
    parser.add_argument("--results", type=Path, metavar="DIR", default=None,
                        help="redo the compare in a results folder (results/<run-id>/) from its committed traces")
    args = parser.parse_args(argv)  # a mistyped flag is refused here too
    if args.results is not None:
        return redo_results(args.results)
    return run_step(STEP, __doc__, body, argv, parser=parser)


if __name__ == "__main__":
    raise SystemExit(main())
