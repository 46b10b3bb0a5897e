"""Every arm of a run in one table: what it starts from, how it is trained, the knob that plans it, the
comparisons it enters and its colour. The traces, steps 03-05, the ledger and the figures read it.

    from harness.arms import ARMS, arm, planned, comparisons, colour
    [a.name for a in planned(cfg)]        # ['frozen', 'frozen_matched', 'sft', 'trained', 'refine']
    comparisons()                          # [('trained', 'frozen'), ...]: headline pairs first, then by row
    colour("trained")                      # the same colour in every figure

An arm is one model searched on the run's held-out (task, seed) pairs (harness.traces); only the model
differs between arms. frozen_matched has no searches of its own: it is frozen's search cut at the
trained arm's compute (harness.budget). Adding an arm is one row here and, when step 03 trains it, its
training function in harness.arm_training (TRAININGS[name]); docs/layout.md, "How to add an arm".

A comparison lives on the row of the later of its two arms, so a new arm's row holds every comparison
it enters and no other row changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from harness.rule_split import curriculum_of


@dataclass(frozen=True)
class Comparison:
    """A vs B (is A better than B?), `why` in words for the summary; headline: printed first."""
    a: str
    b: str
    why: str = ""
    headline: bool = False

    @property
    def pair(self) -> tuple[str, str]:
        return self.a, self.b


@dataclass(frozen=True)
class Arm:
    name: str
    starts_from: str              # the model its training starts from, in words
    trained_by: str               # how it is trained, in words ("-": not trained)
    knob: str                     # what plans it, in words (its knob, or "always")
    planned: Callable[[Any], bool]  # planned by these knobs?
    comparisons: tuple[Comparison, ...]
    colour: str                   # its colour in every figure (Okabe-Ito palette: readable to colour-blind eyes)
    folder: str | None = None     # its training folder under the run; step 04 searches its newest export
    metrics: str | None = None    # its GRPO metrics file (the ledger's GRPO samples, summary's zero variance)
    from_answer_key: bool = False  # starts from step 02's SFT on the answer key (the ledger's warm-start)
    grpo: bool = False            # one GRPO training (harness.budget counts its samples)
    harvests: Callable[[Any], int] = lambda cfg: 0  # train-page harvests its training searches (planned)
    cut_from: str | None = None   # an arm with no searches of its own: this arm's searches cut at its budget
    own_compute_cut: bool = False  # also compared with frozen cut at this arm's own equal-compute budget
    training: str | None = None   # its training function in harness.arm_training.TRAININGS (step 03)
    # operator generations its training spends outside GRPO and train-page harvests, planned (harness.budget)
    other_generations: Callable[[Any], int] = lambda cfg: 0


def repair(cfg: Any) -> bool:
    """Under the repair curriculum (W8_CURRICULUM, auto: the rule split) the repair_sft arm is trained and the
    trained arm starts from it and trains GRPO on repair prompts."""
    return curriculum_of(cfg) == "repair"


def relabel_generations(cfg: Any) -> int:
    """The repair warm-start's harvest: one refinement of each W8_REPAIR_SOAR_TASKS parent (harness.repair_training)."""
    return min(cfg.repair_soar_tasks, cfg.repair_sft_rows) if repair(cfg) else 0


PREFILTER_POOL = 2  # the repair GRPO rows are chosen from this many times W8_TRAIN_COUNT prompts (pass-rate filter)


def trained_other_generations(cfg: Any) -> int:
    """The trained arm's sampling outside GRPO under the repair curriculum: its start's relabeling harvest, and the
    pass-rate filter's W8_GRPO_PREFILTER_SAMPLES answers to each of PREFILTER_POOL x W8_TRAIN_COUNT prompts."""
    return relabel_generations(cfg) + (PREFILTER_POOL * cfg.train_count * cfg.grpo_prefilter_samples
                                       if repair(cfg) else 0)


ARMS: tuple[Arm, ...] = (
    Arm("frozen", "the model as shipped (W8_HARNESS_MODEL)", "-", "always", lambda cfg: True, (),
        colour="#0072B2"),
    Arm("frozen_matched", "frozen's searches, cut at the trained arm's compute (harness.budget)", "-",
        "W8_FROZEN_MATCHED_ARM", lambda cfg: bool(cfg.frozen_matched_arm), (), colour="#56B4E9", cut_from="frozen"),
    Arm("sft", "the model as shipped", "oracle SFT (step 02)", "W8_HARNESS_SFT_STEPS > 0",
        lambda cfg: cfg.harness_sft_steps > 0, (Comparison("sft", "frozen", "the warm-start alone"),),
        colour="#E69F00", folder="sft", from_answer_key=True),
    Arm("repair_sft", "the model as shipped", "repair warm-start: SFT on repair prompts answered with the fix "
        "(its own wrong programs relabeled among them) and the zero-shot rows", "W8_CURRICULUM=repair (auto: rule split)",
        repair, (Comparison("repair_sft", "sft", "the repair warm-start vs the oracle warm-start", headline=True),
                 Comparison("repair_sft", "frozen", "the repair warm-start alone")),
        colour="#000000", folder="repair_sft", metrics="repair_sft_metrics.json", training="repair_sft",
        other_generations=relabel_generations),
    Arm("trained", "repair_sft's export under the repair curriculum; else sft's (the model as shipped without SFT)",
        "GRPO (on repair prompts under the repair curriculum)", "always", lambda cfg: True,
        (Comparison("trained", "frozen", headline=True),
         Comparison("trained", "frozen_matched", "frozen at the trained arm's compute", headline=True),
         Comparison("trained", "sft", "what training added to the oracle warm-start", headline=True),
         Comparison("trained", "repair_sft", "what repair GRPO added")),
        colour="#D55E00", folder="grpo", metrics="grpo_metrics.json", from_answer_key=True, grpo=True,
        training="trained", other_generations=trained_other_generations),
    Arm("grpo_only", "the model as shipped", "GRPO", "W8_GRPO_ONLY_ARM (with SFT)",
        lambda cfg: bool(cfg.grpo_only_arm) and cfg.harness_sft_steps > 0,
        (Comparison("grpo_only", "frozen", "GRPO without the warm-start"),
         Comparison("trained", "grpo_only", "what SFT added")),
        colour="#CC79A7", folder="grpo_only", metrics="grpo_only_metrics.json", grpo=True, own_compute_cut=True,
        training="grpo_only"),
    Arm("refine", "sft's export", "oracle SFT + GRPO on zero-shot and refinement prompts (a harvest's; under the repair curriculum its tasks')", "W8_REFINE_ARM",
        lambda cfg: bool(cfg.refine_arm),
        (Comparison("refine", "trained", "training the search's prompt vs training node 0", headline=True),
         Comparison("refine", "sft"), Comparison("refine", "frozen"), Comparison("refine", "frozen_matched")),
        colour="#009E73", folder="refine", metrics="refine_metrics.json", from_answer_key=True, grpo=True,
        harvests=lambda cfg: 0 if repair(cfg) else 1, own_compute_cut=True, training="refine"),
    Arm("self", "the model as shipped (no answer key)",
        "harvests + rejection-sampling fine-tuning + GRPO on mixed prompts", "W8_SELF_ARM",
        lambda cfg: bool(cfg.self_arm),
        (Comparison("self", "frozen"),
         Comparison("self", "frozen_matched", "no answer key vs the frozen operator at the trained arm's compute",
                    headline=True),
         Comparison("self", "trained")),
        colour="#8C564B", folder="self", metrics="self_metrics.json", grpo=True,
        harvests=lambda cfg: cfg.self_rounds + 1, own_compute_cut=True, training="self"),
)

BY_NAME = {a.name: a for a in ARMS}
NAMES = tuple(BY_NAME)
SEARCHED = tuple(a.name for a in ARMS if a.cut_from is None)  # arms with searches of their own
CUT_COLOUR = "#555555"  # frozen@<k>: frozen cut at an arm's own equal-compute budget (not a row)
SPARE_COLOURS = ("#332288", "#117733", "#AA4499", "#44AA99", "#999933", "#882255")  # names outside the table


def arm(name: str) -> Arm:
    """The row of an arm; KeyError naming the known arms."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name!r} is not an arm of harness/arms.py (have: {', '.join(NAMES)})") from None


def planned(cfg: Any) -> list[Arm]:
    """The arms these knobs plan, in table order."""
    return [a for a in ARMS if a.planned(cfg)]


def comparisons() -> list[Comparison]:
    """Every comparison of the table: the headline ones first, then by row, each in its row's order."""
    every = [c for a in ARMS for c in a.comparisons]
    return [c for c in every if c.headline] + [c for c in every if not c.headline]


def comparison_name(a: str, b: str) -> str:
    """'trained vs repair_sft (what repair GRPO added)'; frozen@<k> is frozen cut at a's own equal-compute budget."""
    if b.startswith("frozen@"):
        return f"{a} vs frozen at {a}'s own training compute ({b}: budget {b.split('@')[1]})"
    why = next((c.why for c in comparisons() if c.pair == (a, b)), "")
    return f"{a} vs {b}" + (f" ({why})" if why else "")


def colour(name: str, others: list[str] | None = None) -> str:
    """An arm's colour: its row's; frozen@<k> the cut colour; a name outside the table a spare colour, by its place
    among `others` (the names drawn)."""
    if name in BY_NAME:
        return BY_NAME[name].colour
    if name.startswith("frozen@") or name == "frozen_long":
        return CUT_COLOUR
    strangers = [n for n in (others or [name]) if n not in BY_NAME and not n.startswith("frozen@")]
    return SPARE_COLOURS[strangers.index(name) % len(SPARE_COLOURS)] if name in strangers else SPARE_COLOURS[0]
