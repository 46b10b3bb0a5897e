"""Counts that describe a snapshot: the manifest written next to it and the benchmark report."""

from __future__ import annotations

from collections import Counter
from typing import Any

from harness.browser import error_kind
from harness.dataset import action_type

def snapshot_stats(records: list[dict]) -> dict[str, Any]:
    per_split: dict[str, Counter] = {}
    per_type: dict[str, Counter] = {}
    kinds: Counter = Counter()
    for r in records:
        split = per_split.setdefault(r["split"], Counter())
        split["observations"] += 1
        for a in r["actions"]:
            split["actions"] += 1
            split["legal"] += a["legal"]
            split["dom_changed"] += a["dom_changed"]
            t = per_type.setdefault(action_type(a["action"]), Counter())
            t["actions"] += 1
            t["legal"] += a["legal"]
            kinds[error_kind(a["error"]) or "legal"] += 1
    for c in per_split.values():
        c["pages"] = 0
    for split, pages in _pages_by_split(records).items():
        per_split[split]["pages"] = len(pages)
    actions = sum(c["actions"] for c in per_split.values())
    legal = sum(c["legal"] for c in per_split.values())
    per_obs = [len(r["actions"]) for r in records]
    minority = [min(sum(a["legal"] for a in r["actions"]), sum(not a["legal"] for a in r["actions"])) / len(r["actions"])
                for r in records]
    return {
        "totals": {"observations": len(records), "pages": len({r["page"] for r in records}), "actions": actions,
                   "legal_share": round(legal / actions, 4) if actions else 0.0,
                   "actions_per_obs_min": min(per_obs, default=0),
                   "minority_class_share_per_obs_min": round(min(minority, default=0.0), 4),
                   "minority_class_share_per_obs_median": round(sorted(minority)[len(minority) // 2], 4) if minority else 0.0},
        "splits": {s: dict(c) for s, c in sorted(per_split.items())},
        "action_types": {t: dict(c) for t, c in sorted(per_type.items())},
        "error_kinds": dict(sorted(kinds.items())),
    }


def _pages_by_split(records: list[dict]) -> dict[str, set]:
    out: dict[str, set] = {}
    for r in records:
        out.setdefault(r["split"], set()).add(r["page"])
    return out


def build_manifest(records: list[dict], dropped: list[dict], versions: dict, params: dict) -> dict[str, Any]:
    by_split = _pages_by_split(records)
    return {
        "benchmark": "harness-legality",
        "versions": versions,
        "params": params,
        "pages": {s: sorted(p) for s, p in sorted(by_split.items())},
        "seeds": sorted({r["seed"] for r in records}),
        "dropped": sorted(dropped, key=lambda d: d["obs_id"]),
        **snapshot_stats(records),
    }
