"""Across settings: rliable's probability that a SCOUT run beats a run of OPD (and of the prefix-0
control) on the same setting, over every setting and seed, with its stratified-bootstrap interval.
A descriptive view (95%), outside the claims page's families of tests: no single setting's seeds
can give it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from scout import stats
from scout.results import Cache

# SCOUT against OPD and against the prefix-0 control (OPD whose teacher GRPO trained from bare prompts)
ACROSS = (("scout", "opd", ""), ("scout", "opd_teacher_grpo", "the prefix-0 control"))


@dataclass(frozen=True)
class Across:
    variant: str
    baseline: str
    label: str  # "SCOUT over OPD"
    improvement: stats.Improvement

    @property
    def measured(self) -> bool:
        return not math.isnan(self.improvement.point)


def across_settings(cache: Cache) -> list[Across]:
    """Each comparison over the settings and seeds the grid has both arms on (run-level Avg, runs
    missing a benchmark left out), where there are at least two settings."""
    out = []
    for variant, baseline, name in ACROSS:
        x, y = {}, {}
        for setting in cache.grid.settings:
            if cache.has_variant(setting, variant) and cache.has_variant(setting, baseline):
                a, b = (list(cache.row(setting, v).run_avg.dropna()) for v in (variant, baseline))
                if a and b:
                    x[setting], y[setting] = [100 * v for v in a], [100 * v for v in b]
        if len(x) > 1:  # across settings: one setting's runs are its own claims' rows
            label = f"{cache.label(variant)} over {name or cache.label(baseline)}"
            out.append(Across(variant, baseline, label, stats.probability_of_improvement(x, y)))
    return out


def across_records(rows: list[Across]) -> list[dict]:
    """JSON-ready rows of the across-settings view for the manifest."""
    def clean(v):
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return [{"variant": r.variant, "baseline": r.baseline, "label": r.label,
             **{k: clean(v) for k, v in asdict(r.improvement).items()}} for r in rows]  # fmt: skip
