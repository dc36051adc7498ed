"""The report as one self-contained HTML file: no network, no CDN, inline SVG charts.

What is on the page: the headline (the same sentences as the terminal, pass@1 with its 95%
intervals among them), the run's recorded facts (versions, agent and model or command, limits,
dataset, trials: :mod:`.runinfo`) with each task's fake date and where it came from, and the
default-date warning; with several trials per task a task x trial grid (each cell a trial,
coloured by its outcome, linking to its details) with each task's rate and the pass@k /
pass^k table, three charts (outcome per trial, time and cost per trial, where the time went
by runner step), a sortable and filterable task table, and per task (a closed section that a
click on its row, a link or an #anchor in the URL opens) its per-table diagnostics, dbt errors
(each once), the verifier's reports, the files the agent wrote (coloured diffs against the
start project), the queries it ran, the transcript as a conversation (:mod:`.conversation`:
tool calls as code, results folded with their size), and the integrity flag with its evidence.

Agent text is hostile (a transcript may hold ``</script>`` or ``<img onerror=...>``), so:
every text goes through :func:`html.escape` (quotes included) and nothing from the run ever
goes inside the ``<script>`` element (the script only reads the DOM); and the page carries a
Content-Security-Policy that allows no network at all and runs only the one script whose hash
it names, so even a missed escape could not run code or fetch anything.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Sequence
from html import escape

from spider2local.core.results import Status
from spider2local.core.verdicts import DiffRow, RowDiff
from spider2local.report.conversation import transcript_html
from spider2local.report.details import Entry, TaskDetails, load_details
from spider2local.report.htmlcode import FOLD_LINES, code_html, diff_counts, diff_html, folded
from spider2local.report.runinfo import RunInfo, TaskDate, load_run_info
from spider2local.report.summary import SUSPECT, Row, RunReport, Verdict
from spider2local.report.text import headline_lines, money, seconds
from spider2local.run.folder import RunFolder

COLOURS = {"passed": "#2e7d32", "failed": "#c62828", "error": "#6a1b9a", "timeout": "#ef6c00",
           "unscored": "#9e9e9e", "skipped": "#bdbdbd", "interrupted": "#f9a825",
           "not run": "#e0e0e0", "not needed": "#eceff1"}
STAGE_COLOURS = ("#1565c0", "#00838f", "#558b2f", "#f9a825", "#6d4c41", "#8e24aa", "#546e7a")

SCRIPT = """
(function () {
  var table = document.getElementById('tasks');
  var body = table.tBodies[0];
  var filter = document.getElementById('filter');
  var status = document.getElementById('status-filter');
  function apply() {
    var text = filter.value.toLowerCase();
    var wanted = status.value;
    var shown = 0;
    Array.prototype.forEach.call(body.rows, function (row) {
      var ok = row.textContent.toLowerCase().indexOf(text) !== -1 &&
               (wanted === '' || row.getAttribute('data-status') === wanted);
      row.hidden = !ok;
      if (ok) { shown += 1; }
    });
    document.getElementById('shown').textContent = String(shown);
  }
  filter.addEventListener('input', apply);
  status.addEventListener('change', apply);
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
    th.addEventListener('click', function () {
      var numeric = th.getAttribute('data-type') === 'number';
      var down = th.getAttribute('data-dir') !== 'asc';
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (other) {
        other.removeAttribute('data-dir');
      });
      th.setAttribute('data-dir', down ? 'asc' : 'desc');
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[index].getAttribute('data-value');
        var y = b.cells[index].getAttribute('data-value');
        var order = numeric ? (parseFloat(x) || 0) - (parseFloat(y) || 0)
                            : x.localeCompare(y);
        return down ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
  apply();
  // A task's section opens wherever one points at it: a row of the table (anywhere on it), a
  // link (the outcome chart, the trial grid) or an #anchor in the URL, on load too. A link to
  // a closed <details> would only scroll to its summary.
  function reveal(id) {
    var target = id ? document.getElementById(id) : null;
    if (!target) { return false; }
    for (var node = target; node; node = node.parentElement) {
      if (node.tagName === 'DETAILS') { node.open = true; }
    }
    target.scrollIntoView({block: 'start'});
    return true;
  }
  function fromHash() {
    var id = window.location.hash.slice(1);
    try { id = decodeURIComponent(id); } catch (error) { return; }
    reveal(id);
  }
  document.addEventListener('click', function (event) {
    var el = event.target;
    if (!el || !el.closest) { return; }
    var link = el.closest('a[href^="#"]');
    var row = link ? null : el.closest('tr[data-anchor]');
    var id = link ? link.getAttribute('href').slice(1) :
             row ? row.getAttribute('data-anchor') : '';
    if (!id || !document.getElementById(id)) { return; }
    if (row && String(window.getSelection ? window.getSelection() : '')) { return; }
    event.preventDefault();
    if (window.location.hash !== '#' + id) { window.location.hash = id; }
    reveal(id);
  });
  window.addEventListener('hashchange', fromHash);
  var all = document.getElementById('open-all');
  if (all) {
    all.addEventListener('click', function () {
      var open = all.getAttribute('data-open') !== 'yes';
      Array.prototype.forEach.call(document.querySelectorAll('details.task'), function (d) {
        d.open = open;
      });
      all.setAttribute('data-open', open ? 'yes' : 'no');
      all.textContent = open ? 'close every task' : 'open every task';
    });
  }
  fromHash();
})();
"""

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #212121; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
.headline li { margin: .15em 0; }
.charts { display: flex; flex-wrap: wrap; gap: 1.5em; }
.chart { border: 1px solid #e0e0e0; padding: .5em; }
table { border-collapse: collapse; } td, th { padding: .2em .6em; border-bottom: 1px solid #eee;
  text-align: left; vertical-align: top; }
th { cursor: pointer; background: #f5f5f5; user-select: none; }
th[data-dir=asc]::after { content: " \\25B2"; } th[data-dir=desc]::after { content: " \\25BC"; }
td.note { max-width: 40em; }
.badge { padding: 0 .4em; border-radius: .3em; color: #fff; }
.diffpair { display: flex; gap: 1.5em; flex-wrap: wrap; }
.rowdiff { border-collapse: collapse; font-family: monospace; }
.rowdiff td, .rowdiff th { border: 1px solid #ccc; padding: 0 .4em; }
.diffcell { background: #ffcdd2; font-weight: bold; }
.lenient { background: #ef6c00; color: #fff; padding: 0 .4em; border-radius: .3em; }
.suspect { background: #b71c1c; color: #fff; padding: 0 .4em; border-radius: .3em; }
pre { background: #fafafa; border: 1px solid #eee; padding: .5em; overflow: auto;
  max-height: 30em; white-space: pre-wrap; word-break: break-word; }
details.task { border: 1px solid #e0e0e0; margin: .5em 0; padding: .3em .6em; }
details.task > summary { cursor: pointer; font-weight: 600; }
.entry { margin: .3em 0; } .entry .kind { font-weight: 600; color: #455a64; }
.controls { margin: .5em 0; }
td.trial { color: #fff; text-align: center; } td.trial a { color: #fff; }
#pass-k { margin-top: 1em; }
#tasks tbody tr { cursor: pointer; } #tasks tbody tr:hover { background: #f5f9ff; }
.meta { display: flex; flex-wrap: wrap; gap: .5em 2em; margin: .5em 0; }
.meta table { font-size: 13px; } .meta caption { text-align: left; font-weight: 600; }
.meta th { cursor: default; background: none; color: #546e7a; font-weight: normal; }
.meta td, .meta th { padding: .05em .6em .05em 0; border: none; }
.meta td { max-width: 36em; overflow-wrap: anywhere; }
.warning { background: #fff8e1; border: 1px solid #ffca28; padding: .4em .7em; }
details.task[open] { border-color: #90a4ae; }
details.task > summary .date { color: #607d8b; font-weight: normal; margin-left: .6em; }
h3 { font-size: 1em; margin: 1em 0 .3em; } h3 .none { font-weight: normal; color: #9e9e9e; }
pre.diff span { display: block; }
pre.diff .da { background: #e6ffed; color: #1b5e20; }
pre.diff .dd { background: #ffebe9; color: #b71c1c; }
pre.diff .dk { background: #f1f8ff; color: #0d47a1; }
pre.diff .dh { color: #616161; font-weight: 600; }
pre.code { background: #f6f8fa; margin: .2em 0; padding: .35em .5em; }
pre.lang-shell { background: #263238; color: #eceff1; } .ps1 { color: #80cbc4; user-select: none; }
.sk { color: #6a1b9a; font-weight: 600; } .ss { color: #2e7d32; } .sc { color: #78909c; }
.sj { color: #e65100; }
details.fold > summary, details.result > summary, details.section > summary {
  cursor: pointer; color: #37474f; }
.size { color: #78909c; font-size: 12px; } .peek { color: #90a4ae; font-family: monospace;
  font-size: 12px; margin-left: .5em; }
.conversation { border-left: 3px solid #eceff1; padding-left: .8em; }
.msg { margin: .5em 0; } .msg.assistant:not(.sub) > .who { display: none; }
.msg.assistant:not(.sub) > .prose { border-left: 3px solid #90caf9; padding-left: .5em; }
.msg .who, .tool-head .who { font-size: 12px; color: #78909c;
  text-transform: uppercase; letter-spacing: .04em; }
.prose { white-space: pre-wrap; word-break: break-word; }
.msg.prompt .prose, .msg.follow-up .prose { background: #e3f2fd; padding: .4em .6em; }
.msg.final .prose { background: #e8f5e9; padding: .4em .6em; }
.sub { margin-left: 2em; border-left: 2px solid #ce93d8; padding-left: .6em; }
.tool { margin: .4em 0; } .tool-head { font-size: 13px; }
.tool-name { font-family: monospace; font-weight: 600; background: #eceff1; padding: 0 .35em;
  border-radius: .25em; }
.arg { font-family: monospace; font-size: 12px; color: #546e7a; margin-left: .4em; }
.arg .key { color: #90a4ae; } code.path { font-size: 12px; }
.result .err, .result.error > summary { color: #c62828; } .result .ok { color: #2e7d32; }
.event { font-size: 12px; color: #78909c; margin: .2em 0; }
.event .kind { font-weight: 600; }
"""


def _e(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    return (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
            "img-src data:; base-uri 'none'; form-action 'none'")


def _anchor(task_id: str, trial: int | None = None) -> str:
    """The element id of a row's details: ``task-<id>``, ``task-<id>-<trial>`` with trials."""
    base = "task-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in task_id)
    return base if trial is None else f"{base}-{trial}"


def _row_anchor(row: Row, several: bool) -> str:
    return _anchor(row.task_id, row.trial if several else None)


def _grid(report: RunReport) -> str:
    """The task x trial grid (one row per task: its rate, then one coloured cell per trial)
    and the pass@k / pass^k table; empty with one trial per task."""
    if report.trials < 2:
        return ""
    cells: dict[str, dict[int, Row]] = {}
    for row in report.rows:
        cells.setdefault(row.task_id, {})[row.trial] = row
    head = "".join(f"<th>trial {t}</th>" for t in range(1, report.trials + 1))
    out = ['<table id="grid"><thead><tr><th>task</th><th>passed</th><th>rate</th>'
           f'<th>flaky</th>{head}</tr></thead><tbody>']
    for task in report.stats.tasks:
        rate = "-" if task.rate is None else f"{task.rate:.0%}"
        row_cells = []
        for trial in range(1, report.trials + 1):
            cell = cells.get(task.task_id, {}).get(trial)
            status = str(cell.status) if cell else "not run"
            colour = COLOURS.get(status, "#757575")
            link = f'<a href="#{_anchor(task.task_id, trial)}">{_e(status)}</a>' if cell and \
                isinstance(cell.status, Status) else _e(status)
            row_cells.append(f'<td class="trial" data-status="{_e(status)}" '
                             f'style="background:{colour}">{link}</td>')
        out.append(f'<tr data-task="{_e(task.task_id)}"><td>{_e(task.task_id)}</td>'
                   f'<td>{task.passed}/{task.run}</td><td>{_e(rate)}</td>'
                   f'<td>{"yes" if task.flaky else ""}</td>{"".join(row_cells)}</tr>')
    out.append("</tbody></table>")
    out.append('<table id="pass-k"><thead><tr><th>k</th><th>pass@k</th><th>pass^k</th>'
               '<th>tasks with at least k trials</th></tr></thead><tbody>')
    for k in report.stats.pass_k:
        out.append(f"<tr><td>{k.k}</td><td>{k.pass_at_k:.1%}</td><td>{k.pass_hat_k:.1%}</td>"
                   f"<td>{k.tasks}{f' ({k.short} left out)' if k.short else ''}</td></tr>")
    out.append("</tbody></table>")
    return "<h2>trials</h2>" + "".join(out)


def _bar_chart(title: str, items: Sequence[tuple[str, float | None, str]], unit: str,
               fmt: str = "{:.1f}") -> str:
    """A horizontal bar chart as inline SVG: ``(label, value, colour)`` per bar. A value of
    ``None`` (not known: no cost recorded) is no bar and reads ``-``, as in the table, never
    a made-up zero."""
    label_w, bar_w, row_h = 160, 260, 16
    peak = max((v for _, v, _ in items if v is not None), default=0.0) or 1.0
    height = row_h * len(items) + 24
    parts = [f'<svg class="chart" role="img" aria-label="{_e(title)}" '
             f'xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 80}" '
             f'height="{height}"><title>{_e(title)}</title>',
             f'<text x="0" y="14" font-weight="600">{_e(title)}</text>']
    for i, (label, value, colour) in enumerate(items):
        y = 22 + i * row_h
        width = max(1.0, bar_w * value / peak) if value else 0.0
        text = "-" if value is None else fmt.format(value) + unit
        parts.append(f'<g><title>{_e(label)}: {_e(text)}</title>'
                     f'<text x="0" y="{y + 11}" font-size="11">{_e(label[:24])}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{width:.1f}" height="{row_h - 3}" '
                     f'fill="{colour}"/>'
                     f'<text x="{label_w + width + 4:.1f}" y="{y + 11}" font-size="11">'
                     f'{_e(text)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def _outcome_chart(rows: Sequence[Row], several: bool = False) -> str:
    """One square per task, coloured by its status, then a legend with counts."""
    size, per_line = 18, 34
    lines = (len(rows) + per_line - 1) // per_line or 1
    counts: dict[str, int] = {}
    for row in rows:
        counts[str(row.status)] = counts.get(str(row.status), 0) + 1
    height = 24 + lines * size + 18 * len(counts) + 6
    parts = [f'<svg class="chart" id="outcome-chart" role="img" aria-label="outcome per task" '
             f'xmlns="http://www.w3.org/2000/svg" width="{per_line * size + 10}" '
             f'height="{height}"><title>outcome per task</title>'
             '<text x="0" y="14" font-weight="600">outcome per task</text>']
    for i, row in enumerate(rows):
        x, y = (i % per_line) * size, 22 + (i // per_line) * size
        colour = COLOURS.get(str(row.status), "#757575")
        label = row.name if several else row.task_id
        parts.append(f'<a href="#{_row_anchor(row, several)}"><rect x="{x}" y="{y}" '
                     f'width="{size - 2}" height="{size - 2}" fill="{colour}">'
                     f'<title>{_e(label)}: {_e(row.status)}</title></rect></a>')
    y = 22 + lines * size + 4
    for status, count in counts.items():
        parts.append(f'<rect x="0" y="{y}" width="12" height="12" '
                     f'fill="{COLOURS.get(status, "#757575")}"/>'
                     f'<text x="18" y="{y + 10}" font-size="12">{_e(status)}: {count}</text>')
        y += 18
    parts.append("</svg>")
    return "".join(parts)


def _charts(report: RunReport) -> str:
    rows = report.rows
    several = report.trials > 1
    timed = [(r.name if several else r.task_id, r.seconds or 0.0,
              COLOURS.get(str(r.status), "#757575")) for r in rows]
    costs = [(r.name if several else r.task_id, r.cost_usd,
              COLOURS.get(str(r.status), "#757575")) for r in rows]
    stages = sorted(report.headline.stage_seconds.items(), key=lambda kv: -kv[1])
    stage_bars = [(name, secs, STAGE_COLOURS[i % len(STAGE_COLOURS)])
                  for i, (name, secs) in enumerate(stages)]
    return ('<div class="charts">' + _outcome_chart(rows, several)
            + _bar_chart("time per task", timed, " s")
            + _bar_chart("cost per task", costs, "", "${:.2f}")
            + _bar_chart("time by stage (all tasks)", stage_bars, " s") + "</div>")


def _cell(text: object, sort_value: object = None) -> str:
    value = text if sort_value is None else sort_value
    return f'<td data-value="{_e(value)}">{_e(text)}</td>'


def _table(report: RunReport) -> str:
    heads = [("task", "text"), ("status", "text"), ("verdict", "text"), ("tables", "number"),
             ("time", "number"), ("cost", "number"), ("tokens", "number"),
             ("integrity", "text"), ("free", "text"), ("note", "text")]
    statuses = sorted({str(r.status) for r in report.rows})
    out = ['<div class="controls"><label>filter <input id="filter" type="search" '
           'placeholder="task, status, note..."></label> <label>status <select '
           'id="status-filter"><option value="">all</option>'
           + "".join(f'<option value="{_e(s)}">{_e(s)}</option>' for s in statuses)
           + f'</select></label> <span id="shown">{len(report.rows)}</span> of '
           f'{len(report.rows)} shown</div>',
           '<table id="tasks"><thead><tr>'
           + "".join(f'<th data-type="{t}">{_e(h)}</th>' for h, t in heads)
           + "</tr></thead><tbody>"]
    several = report.trials > 1

    def label(r: Row) -> str:
        return r.name if several else r.task_id

    for r in report.rows:
        colour = COLOURS.get(str(r.status), "#757575")
        integrity = r.integrity or "-"
        mark = f'<span class="suspect">{_e(integrity)}</span>' if integrity == SUSPECT \
            else _e(integrity)
        out.append(
            f'<tr data-status="{_e(r.status)}" data-anchor="{_row_anchor(r, several)}">'
            f'<td data-value="{_e(label(r))}"><a href="#{_row_anchor(r, several)}">'
            f'{_e(label(r))}</a></td>'
            f'<td data-value="{_e(r.status)}"><span class="badge" style="background:{colour}">'
            f'{_e(r.status)}</span></td>'
            + _cell(r.verdict)
            + _cell(f"{r.tables_passed}/{r.tables_total}" if r.tables_total else "-",
                    r.tables_passed / r.tables_total if r.tables_total else -1)
            + _cell(seconds(r.seconds), r.seconds if r.seconds is not None else -1)
            + _cell(money(r.cost_usd), r.cost_usd if r.cost_usd is not None else -1)
            + _cell(f"{r.tokens.total:,}", r.tokens.total)
            + f'<td data-value="{_e(integrity)}">{mark}</td>'
            + _cell("-" if r.free is None else "yes" if r.free else "no")
            + f'<td class="note" data-value="{_e(r.note)}">{_e(r.note)}</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


def _row_diff(table: str, diff: RowDiff) -> str:
    """One failing table's row diff: the gold rows the result lacks and the result rows gold
    lacks, side by side, with their counts; a cell that differs from the closest row on the
    other side is marked."""
    head = f"<h4>{_e(table)}</h4>"
    if diff.note:
        return head + f"<p>not computed: {_e(diff.note)}</p>"
    if not diff.missing_total and not diff.extra_total:
        return head + "<p>the same rows as gold, in another order</p>"

    def side(title: str, rows: Sequence[DiffRow], total: int, names: Sequence[str]) -> str:
        cells = "".join(f"<th>{_e(n)}</th>" for n in names) + "<th>count</th>"
        body = "".join(
            "<tr>" + "".join(f'<td class="diffcell">{_e(v)}</td>' if k in r.marked
                             else f"<td>{_e(v)}</td>" for k, v in enumerate(r.values))
            + f"<td>{r.count}</td></tr>" for r in rows)
        shown = sum(r.count for r in rows)
        more = f"<p>... and {total - shown} more</p>" if shown < total else ""
        return (f'<div class="diffside"><b>{_e(title)} ({total})</b><table class="rowdiff">'
                f"<tr>{cells}</tr>{body}</table>{more}</div>")

    return head + '<div class="diffpair">' + side(
        "gold rows missing from the result", diff.missing, diff.missing_total, diff.columns
    ) + side("result rows not in gold", diff.extra, diff.extra_total,
             diff.result_columns) + "</div>"


def _pre(text: str) -> str:
    return f"<pre>{_e(text)}</pre>"


def _section(title: str, body: str, empty: str = "none") -> str:
    if not body:
        return f'<h3>{_e(title)}: <span class="none">{_e(empty)}</span></h3>'
    return f"<h3>{_e(title)}</h3>" + body


def _folded_section(title: str, count: int, body: str, empty: str = "none") -> str:
    """A section folded by default (the queries): its title and count stay visible."""
    if not body:
        return _section(title, "", empty)
    return folded(f"<b>{_e(title)}</b> ({count})", body, css="section")


def _entries(entries: Iterable[Entry]) -> str:
    return "".join(f'<div class="entry"><span class="kind">{_e(e.kind)}</span> '
                   f'<span class="title">{_e(e.title)}</span>{_pre(e.text)}</div>'
                   for e in entries)


def _files(details: TaskDetails) -> str:
    """Each changed file's diff, coloured; a long one folded with its line counts."""
    out = []
    for f in details.files:
        if f.change == "as left":
            body = code_html(f.diff, "sql" if f.path.endswith(".sql") else "")
            counts = ""
        else:
            body = diff_html(f.diff)
            added, removed = diff_counts(f.diff)
            counts = f" +{added} −{removed}"
        summary = (f'<code class="path">{_e(f.path)}</code> <span class="size">'
                   f"({_e(f.change)}{_e(counts)})</span>")
        out.append(folded(summary, body, css="fold file",
                          is_open=f.diff.count("\n") <= FOLD_LINES))
    return "".join(out)


def _date_fact(date: TaskDate | None) -> str:
    if date is None or not date.date:
        return "fake date: not recorded"
    return f"fake date: {date.date} ({date.source})"


def _task(row: Row, details: TaskDetails, several: bool = False,
          date: TaskDate | None = None) -> str:
    flag = f' <span class="suspect">{_e(SUSPECT)}</span>' if row.integrity == SUSPECT else ""
    if row.lenient:
        flag += ' <span class="lenient">lenient pass</span>'
    facts_aligned = ("row-aligned: " + {True: "yes", False: "no (lenient pass)",
                                        None: "-"}[row.row_aligned])
    name = row.name if several else row.task_id
    when = f'<span class="date">at {_e(date.date)}</span>' if date and date.date else ""
    head = (f'<details class="task" id="{_row_anchor(row, several)}"><summary>{_e(name)}: '
            f'{_e(row.status)}, verdict {_e(row.verdict)}{flag}{when}</summary>')
    facts = [_date_fact(date),
             f"integrity: {row.integrity or '-'}", facts_aligned,
             f"free (untouched start already passes): "
             f"{'unknown' if row.free is None else 'yes' if row.free else 'no'}",
             f"time {seconds(row.seconds)}, cost {money(row.cost_usd)}, tokens "
             f"{row.tokens.total:,}, turns {row.turns}"]
    if row.durations:
        facts.append("steps: " + ", ".join(f"{k} {v:.1f}s" for k, v in row.durations.items()))
    if row.error_stage:
        facts.append(f"error: {row.error_stage} ({row.error_kind}): {row.error_message}")
    body = "<ul>" + "".join(f"<li>{_e(f)}</li>" for f in facts) + "</ul>"
    if date is not None and date.default:
        body += ('<p class="warning">This task ran at the suite\'s default date: it has no date '
                 "of its own. If its SQL reads the clock, its graded output may differ from gold "
                 "(record its date with <code>spider2local derive-dates</code>).</p>")
    if row.note and not row.error_stage and not row.diagnostics:
        # the note repeats the error line and the first diagnostic, both shown here already:
        # only a trial without either (skipped, not run) is explained by its note alone
        body += f"<p><b>note:</b> {_e(row.note)}</p>"
    body += _section("per-table diagnostics", _pre(row.diagnostics) if row.diagnostics else "",
                     "not scored")
    if row.row_diffs:
        body += _section("row diffs", "".join(_row_diff(name, diff)
                                              for name, diff in row.row_diffs))
    if details.evidence:
        body += _section("integrity evidence", "".join(_pre(e) for e in details.evidence))
    body += _section("dbt errors", "".join(_pre(e) for e in details.dbt_errors))
    body += _section("verifier's findings", _entries(details.subagent_reports))
    body += _section(f"files the agent wrote (against {details.diff_source})", _files(details),
                     "no file changed")
    queries = "".join(
        f"<h4>query {i} ({_e(q.rows)} rows, {_e(seconds(q.seconds))})"
        f"{' error: ' + _e(q.error) if q.error else ''}</h4>{code_html(q.sql, 'sql')}"
        for i, q in enumerate(details.queries, start=1))
    body += _folded_section("queries it ran", len(details.queries), queries)
    calls = sum(e.kind == "tool call" for e in details.transcript)
    body += _section(f"transcript ({len(details.transcript)} entries, {calls} tool calls)"
                     if details.transcript else "transcript", transcript_html(details.transcript))
    if details.traceback:
        body += _section("traceback (error.txt)", _pre(details.traceback))
    return head + body + "</details>"


def _facts_table(title: str, facts: Sequence[tuple[str, str]], css: str = "") -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts)
    return f'<table class="{_e(css)}"><caption>{_e(title)}</caption><tbody>{rows}</tbody></table>'


def _meta(info: RunInfo) -> str:
    """The run's recorded facts (versions, agent, limits, run, dataset) and the fake dates."""
    if not info.groups and not info.dates:
        return ""
    out = ['<h2>run</h2><div class="meta" id="run-meta">']
    out += [_facts_table(title, facts, f"meta-{title}") for title, facts in info.groups if facts]
    out.append("</div>")
    if info.warning:
        out.append(f'<p class="warning" id="date-warning">{_e(info.warning)}</p>')
    if info.dates:
        rows = "".join(f'<tr data-task="{_e(d.task_id)}"><td>{_e(d.task_id)}</td>'
                       f"<td>{_e(d.date or '-')}</td><td>{_e(d.source)}</td></tr>"
                       for d in info.dates)
        distinct = sorted({d.date for d in info.dates if d.date})
        summary = (f"<b>fake dates</b> ({len(info.dates)} tasks; "
                   f"{_e(', '.join(distinct[:4]))}{' ...' if len(distinct) > 4 else ''})")
        out.append(folded(summary, '<table id="fake-dates"><thead><tr><th>task</th>'
                          "<th>fake date</th><th>where it came from</th></tr></thead><tbody>"
                          f"{rows}</tbody></table>", css="section",
                          is_open=len(info.dates) <= 12))
    return "".join(out)


def render_html(report: RunReport, folder: RunFolder | None = None) -> str:
    """The page; with ``folder``, each task's details are read from its folder too."""
    lines = headline_lines(report)
    several = report.trials > 1
    info = load_run_info(folder, report.agent_command) if folder is not None else RunInfo()
    dates = {d.task_id: d for d in info.dates}
    tasks = []
    for row in report.rows:
        details = load_details(folder.trial_dir(row.task_id, row.trial), report.dataset) \
            if folder is not None and isinstance(row.status, Status) \
            else TaskDetails(row.task_id)
        tasks.append(_task(row, details, several, dates.get(row.task_id)))
    passed = sum(r.verdict is Verdict.PASS for r in report.rows)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{_e(_csp(SCRIPT))}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>spider2local {_e(report.run_id)}: {passed} passed</title>"
        f"<style>{STYLE}</style></head><body>"
        f"<h1>{_e(lines[0])}</h1>"
        '<ul class="headline">' + "".join(f"<li>{_e(x)}</li>" for x in lines[1:]) + "</ul>"
        + _meta(info)
        + _grid(report)
        + "<h2>charts</h2>" + _charts(report)
        + "<h2>tasks</h2>" + _table(report)
        + '<h2>per task <button type="button" id="open-all">open every task</button></h2>'
        + "".join(tasks)
        + f"<script>{SCRIPT}</script></body></html>\n")

