"""The default kit (prompts/ and skills/): a lint of the rules real runs found costly, and the
duplicate-entry rule checked on a real ``dbt parse``.

The lint rejects what cost passes in published real runs (docs/kit-notes.md): selections that
rebuild a model's shipped ancestors (``+model+``), a blanket ban on editing YML (which leaves
airbnb001 unbuildable), benchmark framing, and tool names the session does not have. The tool
names are derived from the code that builds the session, never listed here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from spider2local.agents import prompts
from spider2local.agents.claude import session, support
from spider2local.dbtools.tools import tool_names
from spider2local.resources import prompts_dir, skills_dir

FIXTURE = Path(__file__).parent / "data" / "duplicate_entry"
DUPLICATE = "daily_agg_reviews"
DBT_DUPLICATE_MESSAGE = "found two schema.yml entries for the same resource"
"""dbt-core 1.11's words, as the kit quotes them (checked against real dbt below)."""


def kit_files(prompts_root: Path | None = None, skills_root: Path | None = None) -> list[Path]:
    """What the agent reads: the templates and every skill file (the READMEs are for people)."""
    p, s = prompts_root or prompts_dir(), skills_root or skills_dir()
    return sorted([*(f for f in p.glob("*.md") if f.name != "README.md"),
                   *(f for f in s.rglob("*") if f.is_file() and f.parent != s)])


def known_tools() -> set[str]:
    """Every tool the Claude session offers, as its code declares them: the database tools
    (from :data:`spider2local.dbtools.tools.TOOLS`, as the session names them), the
    verifier's, the subagent tool and the built-in tools the session describes, minus the
    ones it disallows."""
    short_db_names = set(tool_names())  # TOOL_DETAIL also keys the database tools' short names
    return ({*session.DB_TOOLS, *session.VERIFIER_TOOLS, *support.AGENT_TOOLS,
             *(set(session.TOOL_DETAIL) - short_db_names)} - set(session.DISALLOWED))


_MCP = re.compile(r"\bmcp__\w+?__\w+")
_NAMED_TOOL = re.compile(r"\b(?:the |an? )?([A-Z][A-Za-z]+) tool\b")
_TOOL_LIST = re.compile(r"\b([A-Z][a-z]+(?:, (?:and )?[A-Z][a-z]+)+)\b")
_TOOL_BULLET = re.compile(r"^\s*- ([A-Z][a-z]+) for `", re.MULTILINE)
_SUBAGENT = re.compile(r"subagent_type:\s*\"(\w+)\"")


def tool_mentions(text: str) -> set[str]:
    """The tool names a kit text uses: ``mcp__server__tool`` tokens, "the X tool", and lists
    of capitalised names with at least two tools in it ("Read, Write, Edit, Grep, Glob"), a
    bullet "- Bash for `dbt`"."""
    found = set(_MCP.findall(text)) | set(_NAMED_TOOL.findall(text)) | \
        set(_TOOL_BULLET.findall(text))
    known = known_tools()
    for listed in _TOOL_LIST.findall(text):
        names = {w.removeprefix("and ") for w in listed.split(", ")}
        if len(names & known) >= 2:  # a list of tools, not "Postgres, Snowflake or BigQuery"
            found |= names
    return found


_SELECT = re.compile(r"\bdbt\s+(?:run|build|test|compile|ls|list|show|seed|snapshot)\b"
                     r"[^\n`]*?(?:--select|--models|-s|-m)\s+([^\n`|]*)")
_BOTH_SIDES = re.compile(r"`\+[^`\s+]+\+`")
_NO_YML = re.compile(r"\b(?:never|do not|don't|must not)\s+(?:edit|change|modify|touch)\s+"
                     r"(?:the\s+|any\s+)?(?:yml|yaml|\.yml|schema\.yml)\b", re.IGNORECASE)
_FRAMING = re.compile(r"\b(?:benchmark\w*|evaluat\w*|grader\w*|graded|grading|scor(?:e|es|ed|"
                      r"ing)|leaderboard|gold|spider2-dbt|column by column|row by row)\b",
                      re.IGNORECASE)
_PLAIN_EXCEPT = re.compile(r"\bEXCEPT\s+SELECT\b", re.IGNORECASE)


def lint(text: str) -> list[str]:
    """What is wrong with one kit text (empty: nothing)."""
    problems = []
    for args in _SELECT.findall(text):
        for arg in args.split():
            if arg.startswith("-"):
                break
            if arg.startswith("+"):
                problems.append(f"selection {arg!r} rebuilds the model's shipped ancestors")
    problems += [f"selection {m} rebuilds the shipped ancestors" for m in
                 _BOTH_SIDES.findall(text)]
    problems += [f"blanket YML ban: {m.group(0)!r}" for m in _NO_YML.finditer(text)]
    problems += [f"benchmark framing: {m.group(0)!r}" for m in _FRAMING.finditer(text)]
    problems += [f"plain EXCEPT hides duplicated rows: {m.group(0)!r}"
                 for m in _PLAIN_EXCEPT.finditer(text)]
    known = known_tools()
    problems += [f"no such tool: {name}" for name in sorted(tool_mentions(text) - known)]
    problems += [f"no such subagent: {name}" for name in _SUBAGENT.findall(text)
                 if name != prompts.VERIFIER]
    return problems


def test_the_kit_passes_its_lint() -> None:
    files = kit_files()
    assert len(files) >= 10
    found = {str(path.relative_to(path.parents[1])): lint(path.read_text()) for path in files}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_tools_the_kit_names_are_the_session_s() -> None:
    """The names come from the code (a renamed database tool makes this fail), and the kit
    uses the ones the agent most needs."""
    known = known_tools()
    assert "mcp__spider2__project_scan" in known and "Agent" in known and "Bash" in known
    assert "WebFetch" not in known and "project_scan" not in known
    used = set().union(*(tool_mentions(p.read_text()) for p in kit_files()))
    assert {"mcp__spider2__query", "mcp__spider2__project_scan", "Agent", "Bash"} <= used


@pytest.mark.parametrize(("text", "problem"), [
    ("Build it: `dbt run --select +orders+`.", "rebuilds the model's shipped ancestors"),
    ("dbt run -s +stg_a b+ --full-refresh", "rebuilds the model's shipped ancestors"),
    ("Select `+<model>+` to be safe.", "rebuilds the shipped ancestors"),
    ("Leave complete models alone; never edit YML files.", "blanket YML ban"),
    ("Do not modify schema.yml.", "blanket YML ban"),
    ("Your table gets evaluated against the expected one.", "benchmark framing"),
    ("Graders compare column by column.", "benchmark framing"),
    ("This is a benchmark task.", "benchmark framing"),
    ("SELECT * FROM a EXCEPT SELECT * FROM b", "plain EXCEPT"),
    ("Call `mcp__spider2__run_sql` for queries.", "no such tool: mcp__spider2__run_sql"),
    ("Use the WebSearch tool for docs.", "no such tool: WebSearch"),
    ("You have Read, Write, Browse and Grep.", "no such tool: Browse"),
    ("- Shell for `dbt` commands", "no such tool: Shell"),
    ('Call it with `subagent_type: "checker"`.', "no such subagent: checker"),
])
def test_the_lint_catches_each_rule(text: str, problem: str) -> None:
    assert any(problem in p for p in lint(text)), lint(text)


@pytest.mark.parametrize("text", [
    "dbt run --select orders+ stg_orders orders_summary+",
    "`+materialized: view` folders keep their views",
    "Change YML only when dbt cannot parse the project otherwise.",
    "SELECT a FROM x EXCEPT ALL SELECT a FROM y",
    "Read, Grep, Glob and the `mcp__spider2__*` database tools",
])
def test_what_the_kit_may_say(text: str) -> None:
    assert lint(text) == []


def test_the_system_prompt_carries_the_decisive_rules() -> None:
    """Skills are not always read: the rules that decide a pass are in agent.md itself."""
    text = " ".join((prompts_dir() / "agent.md").read_text().split())
    for rule in ("--select <model>+", DBT_DUPLICATE_MESSAGE, "EXCEPT ALL", "$pacing",
                 "doc('...')", "source()", "dense_rank()", "round(sum(x), 2)",
                 "only where your own LEFT JOIN created the NULL", "--full-refresh",
                 "read the clock", "mcp__spider2__project_scan"):
        assert rule in text, rule


def test_pacing_names_the_session_s_limits() -> None:
    text = prompts.render_pacing(200, 1800.0)
    assert "at most 200 turns and 30 minutes" in text
    assert f"{prompts.BASH_TIMEOUT_MS // 60_000} minutes unless you pass a longer" in text
    assert "limited number of turns" in prompts.render_pacing(None, None)
    assert support.BASH_TIMEOUTS["BASH_DEFAULT_TIMEOUT_MS"] == str(prompts.BASH_TIMEOUT_MS)


# --- the duplicate-entry rule on real dbt --------------------------------------------------------

def yml_entries(project: Path) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    for path in sorted((project / "models").rglob("*.yml")):
        data = yaml.safe_load(path.read_text())
        for i, entry in enumerate(data.get("models") or []):
            yield path, i, entry


def apply_duplicate_entry_rule(project: Path, model: str) -> Path:
    """What the kit tells the agent on "found two schema.yml entries": delete the duplicate
    entry, the one without the full column list, and nothing else. Returns the file changed."""
    entries = [(path, i, e) for path, i, e in yml_entries(project) if e["name"] == model]
    assert len(entries) == 2
    path, index, _ = min(entries, key=lambda found: len(found[2].get("columns") or []))
    data = yaml.safe_load(path.read_text())
    del data["models"][index]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def dbt_parse(project: Path) -> subprocess.CompletedProcess[str]:
    """A full parse (``--no-partial-parse``: a cache can hide the error, measured), with the
    dbt of this environment, offline."""
    dbt = Path(sys.executable).parent / "dbt"
    return subprocess.run([str(dbt), "parse", "--no-partial-parse", "--profiles-dir", "."],
                          cwd=project, capture_output=True, text=True, timeout=300, check=False,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(project),
                               "DO_NOT_TRACK": "1", "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"})


@pytest.mark.slow
def test_the_duplicate_entry_rule_makes_an_airbnb001_like_project_parse(tmp_path: Path) -> None:
    project = tmp_path / "airbnb"
    shutil.copytree(FIXTURE, project)
    assert dbt_parse(project).returncode == 0  # orphan entries: dbt only warns
    (project / "models" / "agg" / f"{DUPLICATE}.sql").write_text(
        "select listing_id, review_date, review_sentiment, count(*) as review_totals\n"
        "from {{ ref('src_reviews') }}\ngroup by 1, 2, 3\n")
    before = dbt_parse(project)
    assert before.returncode != 0
    assert DBT_DUPLICATE_MESSAGE in before.stdout and DUPLICATE in before.stdout
    # the kit quotes dbt's words, so the agent recognises the error
    for name in ("agent.md", "command.md"):
        assert DBT_DUPLICATE_MESSAGE in " ".join((prompts_dir() / name).read_text().split())
    others = {(p.name, e["name"]): e for p, _, e in yml_entries(project) if e["name"] != DUPLICATE}
    kept = next(e for _, _, e in yml_entries(project)
                if e["name"] == DUPLICATE and len(e.get("columns") or []) == 4)
    changed = apply_duplicate_entry_rule(project, DUPLICATE)
    assert changed.name == "agg.yml"
    after = dbt_parse(project)
    assert after.returncode == 0, after.stdout[-2000:]
    # nothing else changed: every other entry as it was, the full contract kept
    assert {(p.name, e["name"]): e for p, _, e in yml_entries(project)
            if e["name"] != DUPLICATE} == others
    assert [e for _, _, e in yml_entries(project) if e["name"] == DUPLICATE] == [kept]
