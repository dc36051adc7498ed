"""The report as JSON: the model as plain data, with a schema version of its own.

``REPORT_SCHEMA`` moves when a key is renamed or removed (adding keys keeps it): tools that
read ``report --format json`` (compare, CI scripts) check it.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from spider2local.report.summary import SUSPECT, RunReport

REPORT_SCHEMA = 1


def report_json(report: RunReport) -> dict[str, Any]:
    h = report.headline
    headline = asdict(h)
    headline["tokens"]["total"] = h.tokens.total
    return {
        "schema_version": REPORT_SCHEMA,
        "run_id": report.run_id, "agent": report.agent,
        "agent_command": report.agent_command, "model": report.model,
        "isolation": report.isolation, "dataset": report.dataset,
        "started_at": report.started_at, "finished_at": report.finished_at,
        "interrupted": report.interrupted,
        "headline": headline,
        "suspect": [r.task_id for r in report.rows if r.integrity == SUSPECT],
        "rates": asdict(report.rates), "cost_usd": report.cost_usd,
        "tasks": [{**asdict(r), "tokens": {**asdict(r.tokens), "total": r.tokens.total}}
                  for r in report.rows],
    }
