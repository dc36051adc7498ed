"""The report as JUnit XML: one ``testcase`` per task, for CI test-report viewers.

A failed verdict is a ``failure`` carrying the per-table diagnostics; a task that ended without
a verdict (an error, a timeout with nothing scored) or was cut by an interrupt is an ``error``
carrying the stage and message; a task that cannot run, was never run, or has no gold is
``skipped``. Built with :mod:`xml.etree` so every text is escaped by the library.

Trials: one ``testcase`` per (task, trial). With one trial per task a testcase is named by the
task alone (as before trials existed, so a CI history of test names carries on); with several
it is named ``task[trial]`` (``gym001[2]``), the form pytest gives parametrised cases, so
viewers group a task's trials and count every trial that failed. The suite's ``properties``
carry the statistics (K, pass@1 with its interval per denominator, pass@k and pass^k, the
flaky tasks), which no testcase can hold.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from spider2local.core.results import Status
from spider2local.report.summary import SUSPECT, NotAttempted, Row, RunReport, Verdict
from spider2local.report.text import interval_text, percent, replay_line, sequential_line

CLASSNAME = "spider2local"
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
"""Characters XML 1.0 cannot hold at all, escaped or not (dbt's colour codes, NULs in agent
text): ElementTree writes them as they are and the file no longer parses."""


def xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _outcome(row: Row) -> tuple[str, str, str, str] | None:
    """``(element, type, message, body)`` or ``None`` for a pass."""
    if row.verdict is Verdict.PASS:
        return None
    if row.verdict is Verdict.FAIL:
        message = row.note or "failed"
        # the failure's type is its class (docs/scoring.md), so CI can group failures by why
        return "failure", row.failure_class or str(row.status), message, \
            row.diagnostics or message
    if row.status is NotAttempted.INTERRUPTED:
        return "error", "interrupted", row.note, row.note
    if row.status in (NotAttempted.SKIPPED, NotAttempted.NOT_RUN, NotAttempted.NOT_NEEDED,
                      Status.UNSCORED):
        return "skipped", str(row.status), row.note or str(row.status), ""
    stage = row.error_stage or "run"
    message = f"{stage}: {row.error_message or row.status}"
    return "error", row.error_kind or str(row.status), message, message


def render_junit(report: RunReport) -> str:
    counts = {"failure": 0, "error": 0, "skipped": 0}
    suite = ET.Element("testsuite", name=f"spider2local {report.run_id}")
    _suite_properties(ET.SubElement(suite, "properties"), report)
    several = report.trials > 1
    for row in report.rows:
        case = ET.SubElement(suite, "testcase", classname=CLASSNAME,
                             name=xml_text(row.name if several else row.task_id),
                             time=f"{row.seconds or 0.0:.3f}")
        if row.integrity == SUSPECT or several:
            props = ET.SubElement(case, "properties")
            if several:
                ET.SubElement(props, "property", name="trial", value=str(row.trial))
            if row.integrity == SUSPECT:
                ET.SubElement(props, "property", name="integrity", value=SUSPECT)
        outcome = _outcome(row)
        if outcome is not None:
            tag, kind, message, body = outcome
            counts[tag] += 1
            element = ET.SubElement(case, tag, message=xml_text(message))
            if tag != "skipped":
                element.set("type", xml_text(kind))
            element.text = xml_text(body) if body else None
    suite.set("tests", str(len(report.rows)))
    suite.set("failures", str(counts["failure"]))
    suite.set("errors", str(counts["error"]))
    suite.set("skipped", str(counts["skipped"]))
    suite.set("time", f"{report.headline.seconds:.3f}")
    root = ET.Element("testsuites", name="spider2local", tests=suite.get("tests", "0"),
                      failures=suite.get("failures", "0"), errors=suite.get("errors", "0"),
                      skipped=suite.get("skipped", "0"))
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _suite_properties(props: ET.Element, report: RunReport) -> None:
    def add(name: str, value: str) -> None:
        ET.SubElement(props, "property", name=name, value=xml_text(value))

    add("isolation", report.isolation)
    add("sealed", str(not report.unsealed).lower())
    add("trials", str(report.trials))
    for label, e in report.stats.pass_at_1:
        add(f"pass@1 {label}", interval_text(e))
    if report.trials > 1:
        for row in report.stats.pass_k:
            add(f"pass@{row.k}", percent(row.pass_at_k))
            add(f"pass^{row.k}", percent(row.pass_hat_k))
        add("flaky", ", ".join(report.stats.flaky) or "none")
    if report.sequential is not None:
        add("sequential", sequential_line(report.sequential))
    if report.replay is not None:
        add("replay", replay_line(report.replay))
