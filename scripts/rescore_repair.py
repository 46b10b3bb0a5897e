"""Rescore repair task files without the repo's code: every parent below gold, every reference gold.

    python -I scripts/rescore_repair.py .w8-biayn/repair/repair_tasks.jsonl .w8-biayn/repair/repair_heldin.jsonl
    python -I scripts/rescore_repair.py --threshold 0.9 FILE...

Standard library only (run with -I: no repo module can be imported): each line's parent and reference are
executed in a fresh namespace on the line's own state and examples, balanced accuracy is computed here
((TPR + TNR) / 2, an exception or a non-bool counting as wrong), and the programs are the repo's own
generated code, not model output. Prints one line per file; exits 1 if any parent is gold or any reference
is not, naming the first such task.
"""

import argparse
import json
import sys


def balanced_accuracy(code, state, examples):
    scope = {}
    exec(compile(code, "<rescored>", "exec"), scope)
    fn = scope["is_legal_action"]
    hits = {True: [0, 0], False: [0, 0]}
    for e in examples:
        try:
            got = fn(state, e["action"])
        except Exception:
            got = None
        hits[e["legal"]][0] += isinstance(got, bool) and got is e["legal"]
        hits[e["legal"]][1] += 1
    rates = [h / n for h, n in hits.values() if n]
    return sum(rates) / len(rates)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--threshold", type=float, default=0.9, help="gold: balanced accuracy >= this [0.9]")
    args = p.parse_args(argv)
    bad = 0
    for path in args.files:
        n = below = gold = 0
        with open(path) as f:
            for line in f:
                task = json.loads(line)
                n += 1
                parent = balanced_accuracy(task["parent"], task["state"], task["examples"])
                reference = balanced_accuracy(task["reference"], task["state"], task["examples"])
                below += parent < args.threshold
                gold += reference >= args.threshold
                if not parent < args.threshold <= reference and not bad:
                    print(f"error: {task['task_id']}: parent {parent:.3f}, reference {reference:.3f} "
                          f"(gold at {args.threshold})", file=sys.stderr)
                bad += not parent < args.threshold <= reference
        print(f"rescored outside the repo's code: {path}: {n} tasks, parents below gold {below}/{n}, "
              f"references gold {gold}/{n}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
