"""The report as JSON: the model as plain data, with a schema version of its own.

``REPORT_SCHEMA`` moves when a key is renamed or removed, or a key changes meaning (adding
keys keeps it): tools that read ``report --format json`` (compare, CI scripts) check it.

2: trials. ``tasks`` holds one entry per (task, trial), each with its ``trial``; ``rates`` and
the headline's pass and suspect counts count trials (with one trial per task, as in 1);
``trials`` (K) and ``stats`` are new: per task ``trials_run`` / ``trials_passed`` / ``rate``,
``pass_at_1`` per denominator with ``se`` and its 95% ``interval``, ``pass_k`` (pass@k and
pass^k per k), ``flaky``. Fractions are 0..1, not percentages.

Added since (same schema): ``budget`` (the run's ``--max-cost-usd`` as ``cap_usd``, what it
counted as ``spent_usd``, trials it ``cut`` mid-way and trials it left ``not_started``) and
each task's ``cut_by_budget``. The row-aligned check (docs/scoring.md): the headline's
``lenient_passes`` (of the passes, those whose rows do not line up) and
``row_checked_passes``; per task ``row_aligned`` (true, false, or null: not passed, undecided,
or scored before the check), ``lenient``, ``lenient_tables`` and ``row_diffs`` (per failing
table: the gold rows missing from the result and the extra result rows, with counts).
Failure classes: per task ``failure_class`` and ``failure_detail`` (null and "" for a pass),
the headline's ``failure_classes`` (class -> trials).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from spider2local.report.summary import SUSPECT, RunReport, RunStats

REPORT_SCHEMA = 2


def report_json(report: RunReport) -> dict[str, Any]:
    h = report.headline
    headline = asdict(h)
    headline["tokens"]["total"] = h.tokens.total
    headline["cut_tokens"]["total"] = h.cut_tokens.total
    return {
        "schema_version": REPORT_SCHEMA,
        "run_id": report.run_id, "agent": report.agent,
        "agent_command": report.agent_command, "agent_apis": list(report.agent_apis),
        "model": report.model,
        "isolation": report.isolation, "unsealed": report.unsealed,
        "dataset": report.dataset,
        "started_at": report.started_at, "finished_at": report.finished_at,
        "interrupted": report.interrupted,
        "headline": headline,
        "suspect": [r.task_id for r in report.rows if r.integrity == SUSPECT],
        "rates": asdict(report.rates), "cost_usd": report.cost_usd,
        "trials": report.trials,
        "budget": {"cap_usd": report.max_cost_usd, "spent_usd": report.spent_usd,
                   "cut": report.cut_by_budget, "not_started": report.not_run_for_budget},
        "stats": stats_json(report.stats),
        "sequential": report.sequential.to_json() if report.sequential is not None else None,
        "replay": report.replay.to_json() if report.replay is not None else None,
        "tasks": [{**asdict(r), "tokens": {**asdict(r.tokens), "total": r.tokens.total},
                   "lenient": r.lenient,
                   "row_diffs": [{"table": name, **asdict(diff)} for name, diff in r.row_diffs]}
                  for r in report.rows],
    }


def stats_json(stats: RunStats) -> dict[str, Any]:
    return {
        "trials_run": stats.trials_run, "trials_planned": stats.trials_planned,
        "pass_at_1": {label: {"value": e.value, "se": e.se, "interval": asdict(e.interval),
                              "tasks": e.tasks, "attempted": e.attempted}
                      for label, e in stats.pass_at_1},
        "pass_k": [asdict(row) for row in stats.pass_k],
        "flaky": list(stats.flaky),
        "per_task": [{"id": t.task_id, "trials_run": t.run, "trials_passed": t.passed,
                      "trials_planned": t.planned, "rate": t.rate, "flaky": t.flaky}
                     for t in stats.tasks],
    }
