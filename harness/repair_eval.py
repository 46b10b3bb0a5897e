"""The held-in repair benchmark: can an operator add the rule its shown failures share? (the positive control)

    from harness.repair_eval import evaluate_arm, arm_summary, RuleLibraryOperator
    results = evaluate_arm("sft", operator, heldin_tasks, knobs, out_dir / "sft")   # one record per task
    arm_summary(results)     # solved by the first refinement, within the budget, mentions of the property

Each held-in task (harness.repair: held-out pages, families training never sees) is searched as a trace is:
the same prompts, operator and sandbox (harness.search), except that node 0 is the task's parent program
instead of a zero-shot answer (RootedOperator), so every refinement starts from a program one rule below
gold and the first refinement's prompt shows the failures that rule explains. Per task: the first gold node
(None if none within the budget), whether node 1 is gold, and for each refinement whether its program
mentions the rule's property (harness.repair.mentions).

RuleLibraryOperator is the ceiling: an operator that knows every held-in family's rule and adds the one that
fixes the most shown failures (ties: the rule that fires on the fewest of the state's element lines, then
library order), as the rule-library operator does for the real rules on the study's held-out tasks.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.operators import Generation, Operator, Request
from harness.prompts import MAX_FAILURES
from harness.repair import (Family, RepairTask, compile_harness, guard, real_pair, rule_fires, splice, target_lines,
                            verdict)
from harness.search import SearchKnobs, SearchSpec, run_searches
from harness.stats import p_text, sign_test


def mentions(code: str, prop: str) -> bool:
    """Whether a program names the rule's property: its name (before `=`), or the whole text otherwise."""
    key = prop.split("=")[0] if re.fullmatch(r"[A-Za-z_][\w-]*=.*", prop) else prop
    return key in (code or "")


def fence(code: str) -> str:
    return "```python\n" + code.rstrip("\n") + "\n```\n"


class RootedOperator(Operator):
    """Answers a repair task's zero-shot request with the task's parent (no model call, no tokens); every other
    request goes to the wrapped operator in one batch."""

    def __init__(self, inner: Operator, roots: dict[str, str]):
        self.inner, self.roots = inner, roots
        self.name, self.model = inner.name, inner.model

    def answer(self, requests: Sequence[Request]) -> list[Generation]:
        asked = [r for r in requests if not (r.code is None and r.task.task_id in self.roots)]
        answers = iter(self.inner.answer(asked) if asked else [])
        return [Generation(fence(self.roots[r.task.task_id])) if r.code is None and r.task.task_id in self.roots
                else next(answers) for r in requests]

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "node0": "the repair task's parent"}

    def close(self) -> None:
        self.inner.close()


class RuleLibraryOperator(Operator):
    """The ceiling: adds the library rule that fixes the most shown failures (no model)."""

    name = "deterministic"
    model = "repair-rule-library"

    def __init__(self, tasks: Sequence[RepairTask], heldout: Sequence[str]):
        self.heldout = tuple(heldout)
        seen: dict[tuple[str, str], Family] = {}
        for t in tasks:
            kind, verbs, subject = _parse_family(t.family)
            seen.setdefault((t.family, t.property), Family(kind, verbs, subject))
        self.library = [(family, prop) for (_, prop), family in seen.items()]

    def answer(self, requests: Sequence[Request]) -> list[Generation]:
        return [self._one(r) for r in requests]

    def _candidate(self, family: Family, prop: str, parent: str) -> str | None:
        if family.kind == "real":
            real_parent, reference = real_pair(self.heldout, family.subject)
            return reference if parent.strip() == real_parent.strip() else None
        return splice(parent, guard(family.verbs, family.kind, prop))

    def _one(self, request: Request) -> Generation:
        start = time.perf_counter()
        if request.code is None:
            raise ValueError("the rule-library operator only refines: node 0 of a repair search is its parent")
        failures = list(request.failures)[:MAX_FAILURES]
        lines = target_lines(request.task.state)
        best, best_key = request.code, None
        for order, (family, prop) in enumerate(self.library):
            program = self._candidate(family, prop, request.code)
            if program is None:
                continue
            fn = compile_harness(program)
            fixed = sum(verdict(fn, f.state, f.action) is f.expected for f in failures)
            fires = 0 if family.kind == "real" else sum(
                rule_fires(family, prop, f"{family.verbs[0]}('{bid}')", lines) for bid in lines)
            key = (fixed, -fires, -order)
            if fixed and (best_key is None or key > best_key):
                best, best_key = program, key
        return Generation(fence(best), wall_s=time.perf_counter() - start)


def _parse_family(name: str) -> tuple[str, tuple[str, ...], str]:
    """'present:click+dblclick:clickable' -> ('present', ('click', 'dblclick'), 'clickable'); 'real:hidden' too."""
    kind, _, rest = name.partition(":")
    if kind == "real":
        return kind, (), rest
    verbs, _, subject = rest.partition(":")
    return kind, tuple(verbs.split("+")), subject


def evaluate_arm(arm: str, operator: Operator, tasks: Sequence[RepairTask], knobs: SearchKnobs, out_dir: Path,
                 progress: Callable[[str], None] | None = print) -> list[dict[str, Any]]:
    """Search every task from its parent with `operator` (resumable: one state file per task under out_dir)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rooted = RootedOperator(operator, {t.task.task_id: t.parent for t in tasks})
    specs = [SearchSpec(t.task, knobs, None, out_dir / (t.task.task_id.replace("/", "_") + ".state.json"),
                        label=f"[{arm}] {t.family} {t.task.obs_id}") for t in tasks]
    traces = run_searches(specs, rooted, progress)
    return [task_result(t, trace.to_trace(), knobs.reward.gold_threshold) for t, trace in zip(tasks, traces)]


def task_result(task: RepairTask, trace: dict[str, Any], threshold: float) -> dict[str, Any]:
    """One task's row of repair_eval.json (gold recomputed from each node's balanced accuracy)."""
    nodes = trace["nodes"]
    gold = [n["valid"] and n["balanced_accuracy"] >= threshold for n in nodes]
    refinements = nodes[1:]
    return {"task_id": task.task.task_id, "family": task.family, "synthetic": task.synthetic, "madeup": task.madeup,
            "property": task.property, "parent_balanced_accuracy": nodes[0]["balanced_accuracy"] if nodes else None,
            "solved_node": next((n["index"] for n, g in zip(nodes, gold) if g and n["index"] > 0), None),
            "first_refinement": len(gold) > 1 and gold[1], "refinements": len(refinements),
            "mentions": [mentions(n["code"], task.property) for n in refinements],
            "valid": [n["valid"] for n in refinements],
            "best_balanced_accuracy": max(n["balanced_accuracy"] for n in nodes) if nodes else None,
            "tokens": trace["tokens"]["total"]}


def arm_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per arm: solved by the first refinement and within the budget (all tasks, synthetic, made-up, real), the
    share of refinements that mention the property, and the share of valid refinements."""
    def part(sel: Sequence[dict[str, Any]]) -> dict[str, Any]:
        refs = sum(r["refinements"] for r in sel)
        return {"tasks": len(sel), "first_refinement": sum(r["first_refinement"] for r in sel),
                "within_budget": sum(r["solved_node"] is not None for r in sel), "refinements": refs,
                "mention_share": round(sum(sum(r["mentions"]) for r in sel) / refs, 4) if refs else None,
                "valid_share": round(sum(sum(r["valid"]) for r in sel) / refs, 4) if refs else None}
    return {"all": part(rows), "synthetic": part([r for r in rows if r["synthetic"]]),
            "madeup": part([r for r in rows if r["madeup"]]), "real": part([r for r in rows if not r["synthetic"]])}


def paired(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], key: str = "first_refinement") -> dict[str, Any]:
    """Arm a against arm b over the same tasks: tasks a solves and b does not, the reverse, and the sign test."""
    def solved(row: dict[str, Any]) -> bool:  # node 1 gold, or a gold node within the budget
        return bool(row[key]) if key == "first_refinement" else row[key] is not None
    by_task = {r["task_id"]: r for r in b}
    pairs = [(solved(r), solved(by_task[r["task_id"]])) for r in a if r["task_id"] in by_task]
    better = sum(x and not y for x, y in pairs)
    worse = sum(y and not x for x, y in pairs)
    p = sign_test(better, worse)
    return {"tasks": len(pairs), "better": better, "worse": worse, "p": p, "p_text": p_text(p)}


CEILING = "rule-library"


def evaluate_arms(arms: dict[str, Callable[[], Operator]], tasks: Sequence[RepairTask], knobs: SearchKnobs,
                  out_dir: Path, results: dict[str, Any] | None = None, models: dict[str, str] | None = None,
                  progress: Callable[[str], None] | None = print) -> dict[str, Any]:
    """repair_eval.json's content: each arm (name -> a function making its operator; CEILING's is the rule
    library) searched over the tasks into out_dir/<arm>/ (resumable), added to `results` (an arm run again
    replaces its entry), then every pair of arms compared over the same tasks."""
    results = results if results is not None else {"arms": {}}
    for name, make in arms.items():
        start = time.monotonic()
        operator = make()
        try:
            rows = evaluate_arm(name, operator, tasks, knobs, out_dir / name, progress=progress)
        finally:
            operator.close()
        results["arms"][name] = {"model": (models or {}).get(name, CEILING if name == CEILING else ""),
                                 "operator": operator.describe(), "seconds": round(time.monotonic() - start, 1),
                                 "summary": arm_summary(rows), "tasks": rows}
    results["paired"] = pair_all(results["arms"])
    return results


def pair_all(arms: dict[str, Any]) -> dict[str, Any]:
    """repair_eval.json's "paired": every pair of arms (by name) compared over the same tasks, node 1 and budget."""
    names = sorted(arms)
    return {f"{a} vs {b}": {key: paired(arms[a]["tasks"], arms[b]["tasks"], key)
                            for key in ("first_refinement", "solved_node")} for a in names for b in names if a < b}


def benchmark_knobs(cfg: Any, knobs: SearchKnobs, n_tasks: int) -> dict[str, Any]:
    """repair_eval.json's "knobs": the searches' knobs, the task count and the operator's decoding."""
    return {**knobs.record(), "heldin_tasks": n_tasks, "operator": cfg.operator,
            "operator_max_new_tokens": cfg.operator_max_new_tokens, "operator_temperature": cfg.operator_temperature,
            "gguf_type": cfg.gguf_type}


def summary_line(arm: str, summary: dict[str, Any]) -> str:
    """One arm in one line: first refinement, within budget, mentions of the property, valid refinements."""
    s, a = summary["synthetic"], summary["all"]
    return (f"{arm}: first refinement {a['first_refinement']}/{a['tasks']} (synthetic {s['first_refinement']}/"
            f"{s['tasks']}), within budget {a['within_budget']}/{a['tasks']}, refinements naming the property "
            f"{a['mention_share']}, valid {a['valid_share']}")
