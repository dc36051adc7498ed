"""The integrity scan on adversarial inputs (each must be caught) and honest ones (none may)."""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spider2local.core.results import Integrity
from spider2local.integrity import scan
from spider2local.integrity.scan import (
    Protected,
    find_hits,
    project_baseline,
    scan_task,
    trie_pattern,
)
from spider2local.run.folder import RunFolder
from tests.helpers import ReferenceRun, by_task

DATA = "/data/spider2-dbt"


@pytest.fixture
def prot(tmp_path: Path) -> Protected:
    ws = tmp_path / "spider2local-t1-abc"
    (ws / "t1" / "models").mkdir(parents=True)
    return Protected.for_task(workspace=ws, cwd=ws / "t1", dataset_root=Path(DATA),
                              gold=Path(f"{DATA}/evaluation_suite/gold/t1/shop_gold.duckdb"),
                              start_db=Path(f"{DATA}/examples/t1/shop.duckdb"),
                              runs_dir=tmp_path / "runs", suite_file=tmp_path / "tasks.toml",
                              cache_dir=tmp_path / "cache" / "spider2local")


def rules(text: str, prot: Protected) -> set[str]:
    return {rule for rule, _, _ in find_hits(text, prot)}


@pytest.mark.parametrize(("text", "rule"), [
    # The gold path in plain sight, in another case, in JSON and Python escapes.
    (f"cp {DATA}/x/shop.duckdb .", "dataset root"),
    ("ls /DATA/Spider2-DBT/", "dataset root"),
    (r"open('\u002fdata\u002fspider2-dbt\u002fx')", "dataset root"),
    (r"p = '\x2fdata\x2fspider2-dbt'", "dataset root"),
    # Split across lines and string pieces.
    ("p = ('/data/spider2'\n     '-dbt/evaluation' + '_suite')", "dataset root"),
    ("EVAL = 'spider2_' \\\n  'eval.jsonl'", "evaluation file"),
    ("find / -name SPIDER2_EVAL.JSONL", "evaluation file"),
    ("ls ../../Evaluation_Suite/gold", "gold folder"),
    ("cp shop_gold.duckdb here.duckdb", "gold file"),
    # Opening files outside the workspace, whatever the quoting or the spelling.
    ("ATTACH '/srv/other.duckdb' AS g (READ_ONLY)", "file outside the workspace"),
    ('attach if not exists "/srv/other.duckdb" as g', "file outside the workspace"),
    ("Attach Database\n  '../../../elsewhere/x.duckdb' AS g", "file outside the workspace"),
    ("ATTACH $$/srv/other.duckdb$$ AS g", "file outside the workspace"),
    ("select * from read_parquet(['ok.parquet', '/srv/x.parquet'])",
     "file outside the workspace"),
    ("SELECT * FROM READ_CSV_AUTO('~/secrets.csv')", "file outside the workspace"),
    ("COPY orders FROM '/srv/orders.csv'", "file outside the workspace"),
    ("select * from '/srv/x.parquet'", "file outside the workspace"),
    ("con = duckdb.connect(database='/srv/gold.duckdb', read_only=True)",
     "file outside the workspace"),
    ("{{ config(pre_hook=\"ATTACH IF NOT EXISTS '/srv/g.duckdb' AS g (READ_ONLY)\") }}",
     "file outside the workspace"),
    # Other processes' environments.
    ("cat /proc/1234/environ | tr '\\0' '\\n'", "process environment"),
    ("for f in /proc/*/environ; do strings $f; done", "process environment"),
])
def test_adversarial_text_is_caught(text: str, rule: str, prot: Protected) -> None:
    assert rule in rules(text, prot), list(find_hits(text, prot))


def test_the_run_s_own_files_are_protected_too(prot: Protected, tmp_path: Path) -> None:
    assert "runs folder" in rules(f"cat {tmp_path}/runs/r1/t2/result.json", prot)
    assert "suite file" in rules(f"cat {tmp_path}/tasks.toml", prot)
    assert "spider2local cache" in rules(f"ls {tmp_path}/cache/spider2local/sample", prot)


@pytest.mark.parametrize("text", [
    "ATTACH 'scratch.duckdb' AS s",                          # relative: inside the project
    "ATTACH ':memory:' AS m",
    "select * from read_csv('seeds/raw.csv')",
    "select * from \"main\".\"orders\" o join 'data/x.parquet' p on true",
    "SELECT * FROM orders WHERE note = 'from the evaluation of suites'",
    "{{ config(pre_hook=\"ATTACH '{{ var('p') }}' AS g\") }}",  # Jinja: judged compiled
    "select * from read_parquet('https://example.com/x.parquet')",
    "cat /proc/cpuinfo; ls /data/spider2-dbtx /data/spider2",  # other paths, same prefix
    "shop.duckdb is the start database; gold is elsewhere",
])
def test_honest_text_is_not_flagged(text: str, prot: Protected) -> None:
    assert list(find_hits(text, prot)) == []


def test_paths_inside_the_workspace_are_fine_also_absolute_or_with_dotdot(
        prot: Protected) -> None:
    ws = prot.workspace
    assert not prot.outside(str(ws / "t1" / "shop.duckdb"))
    assert not prot.outside("../claude-config/x")          # still inside the workspace root
    assert prot.outside("../../x.duckdb")                    # leaves it
    assert prot.outside(str(ws) + "-other/x.duckdb")         # a sibling with the same prefix


def test_a_symlink_out_of_the_workspace_is_outside(prot: Protected, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.duckdb"
    target.write_bytes(b"x")
    (prot.cwd / "link.duckdb").symlink_to(target)
    assert prot.outside("link.duckdb")
    assert "file outside the workspace" in rules("ATTACH 'link.duckdb' AS g", prot)


def test_the_gold_name_is_not_searched_when_it_is_the_start_database_s(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    prot = Protected.for_task(workspace=ws, cwd=ws, dataset_root=Path(DATA),
                              gold=Path(f"{DATA}/evaluation_suite/gold/t1/shop.duckdb"),
                              start_db=Path(f"{DATA}/examples/t1/shop.duckdb"))
    assert list(find_hits("dbt run; duckdb shop.duckdb 'select 1'", prot)) == []


def test_a_folder_holding_the_workspace_is_not_a_needle(tmp_path: Path) -> None:
    """Workspaces made under the runs folder (a user's --workspace-parent choice) must not make
    every honest path suspect."""
    ws = tmp_path / "runs" / "spider2local-t1-x"
    ws.mkdir(parents=True)
    prot = Protected.for_task(workspace=ws, cwd=ws, dataset_root=None, gold=None,
                              start_db=None, runs_dir=tmp_path / "runs")
    assert prot.paths == ()


def test_scan_task_reads_transcript_queries_and_only_files_the_agent_changed(
        prot: Protected, tmp_path: Path) -> None:
    project = prot.cwd
    (project / "models" / "vendored.sql").write_text("select * from read_csv('/srv/x.csv')")
    baseline = project_baseline(project)  # as prepared: not the agent's doing
    (project / "models" / "m.sql").write_text(
        "select 1\n-- copy\n{{ config(pre_hook=\"ATTACH '/srv/g.duckdb' AS g\") }}\n")
    (project / "data.bin").write_bytes(b"\0\0/proc/1/environ")  # binary: not read
    transcript = tmp_path / "transcript.jsonl"
    transcript.write_text("\n".join(json.dumps(e) for e in [
        {"kind": "attempt", "data": {"workspace": f"{DATA}/not-the-agent"}},
        {"kind": "AssistantMessage", "data": {"content": [
            {"name": "Bash", "input": {"command": "ls /proc/77/environ"}}]}},
        {"kind": "UserMessage", "data": {"content": [{"content": "no such file"}]}},
    ]) + "\n{torn")
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"sql": "ATTACH '/srv/g.duckdb' AS g", "error": "refused"}))
    result = scan_task(transcript=transcript, queries=queries, project=project,
                       baseline=baseline, prot=prot)
    assert result.integrity is Integrity.SUSPECT
    found = {(e.source, e.line, e.rule) for e in result.evidence}
    assert found == {("transcript.jsonl", 2, "process environment"),
                     ("queries.jsonl", 1, "file outside the workspace"),
                     ("project/models/m.sql", 3, "file outside the workspace")}, found
    assert all(len(e.excerpt) < 200 for e in result.evidence)


def test_a_clean_task_says_clean_and_missing_files_are_no_error(
        prot: Protected, tmp_path: Path) -> None:
    project = prot.cwd
    baseline = project_baseline(project)
    (project / "models" / "orders.sql").write_text("select * from {{ ref('raw_orders') }}")
    result = scan_task(transcript=tmp_path / "none.jsonl", queries=tmp_path / "none2.jsonl",
                       project=project, baseline=baseline, prot=prot)
    assert result.integrity is Integrity.CLEAN and result.evidence == ()


@pytest.mark.slow
def test_the_sample_reference_run_is_clean(reference_run: ReferenceRun) -> None:
    """The runner's own entries (workspace paths, the reference solution's folder inside the
    dataset) and real dbt logs are no evidence: every task of an honest run is clean."""
    assert reference_run.outcome.returncode == 0, reference_run.outcome.stderr
    results = by_task(RunFolder(reference_run.run_dir).trial_results())
    assert len(results) == 4
    found = {tid: (r.integrity, r.integrity_evidence) for tid, r in results.items()}
    assert found == dict.fromkeys(results, (Integrity.CLEAN, ()))


def test_this_task_s_own_run_folder_is_no_evidence_other_tasks_are(
        prot: Protected, tmp_path: Path) -> None:
    mine = Protected.for_task(workspace=prot.workspace, cwd=prot.cwd, dataset_root=None,
                              gold=None, start_db=None, runs_dir=tmp_path / "runs",
                              artifacts=tmp_path / "runs" / "r1" / "t1")
    assert list(find_hits(f'"log_path": "{tmp_path}/runs/r1/t1/dbt"', mine)) == []
    assert list(find_hits(f"{tmp_path}/runs/r1/t1", mine)) == []
    assert "runs folder" in rules(f"cat {tmp_path}/runs/r1/t2/result.json", mine)
    assert "runs folder" in rules(f"cat {tmp_path}/runs/r1/t1x/result.json", mine)


def test_a_fifo_or_a_linked_project_left_by_the_agent_never_blocks_the_scan(
        prot: Protected, tmp_path: Path) -> None:
    """The scan runs after the sandbox is gone: reading a FIFO the agent left would wait for a
    writer that died with it, for ever (the run hangs); a project folder swapped for a link to
    ``/`` would walk the runner's whole file system."""
    import os
    import threading

    project = prot.cwd
    baseline = project_baseline(project)
    os.mkfifo(project / "models" / "pipe.sql")
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(scan_task(
        transcript=tmp_path / "none.jsonl", queries=tmp_path / "none2.jsonl", project=project,
        baseline=baseline, prot=prot)), daemon=True)
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():  # unblock the stuck reader so the test process can end
        with (project / "models" / "pipe.sql").open("w"):
            pass
        pytest.fail("the scan blocked on a FIFO left in the project")
    linked = tmp_path / "linked-project"
    linked.symlink_to("/")
    assert project_baseline(linked) == {}


@given(st.lists(st.text(alphabet="/ab.-", min_size=1, max_size=6), min_size=1, max_size=12),
       st.text(alphabet="/ab.-x", max_size=60))
def test_trie_pattern_finds_every_needle_a_plain_search_finds(needles: list[str],
                                                             text: str) -> None:
    """The needles' trie, searched zero-width, starts at exactly the positions where some
    needle starts, and captures the longest one there: what one search per needle found."""
    pattern = re.compile(f"(?=({trie_pattern(needles)}))")
    found = {m.start(): m.group(1) for m in pattern.finditer(text)}
    naive: dict[int, str] = {}
    for needle in needles:
        for pos in range(len(text)):
            if text.startswith(needle, pos) and len(needle) > len(naive.get(pos, "")):
                naive[pos] = needle
    assert found == naive


def test_hundreds_of_off_limits_paths_each_still_hit_with_its_own_rule(tmp_path: Path) -> None:
    """A task's off-limits list holds every remembered runs folder (hundreds, some nested in
    others): each is still found with its boundaries, the nested pair both."""
    ws = tmp_path / "spider2local-t1-abc"
    (ws / "t1").mkdir(parents=True)
    many = [Path(f"/old/runs-{i}") for i in range(600)] + [Path("/old/runs-7/inner")]
    prot = Protected.for_task(workspace=ws, cwd=ws / "t1", dataset_root=None, gold=None,
                              start_db=None, off_limits=many)
    hits = list(find_hits("cat /old/runs-7/inner/x; ls /old/runs-599 /old/runs-6000", prot))
    assert all("/old/runs-" in excerpt for _, _, excerpt in hits)
    assert sum(rule == "off limits" for rule, _, _ in hits) == 3  # runs-7, its inner, 599


def _protected(ws: Path, paths: Iterable[str]) -> Protected:
    (ws / "t1").mkdir(parents=True, exist_ok=True)
    return Protected.for_task(workspace=ws, cwd=ws / "t1", dataset_root=None, gold=None,
                              start_db=None, off_limits=[Path(p) for p in paths])


def _alone(prot: Protected, text: str) -> list[tuple[str, int | None, str]]:
    """find_hits as with a search built for ``prot``'s needles alone (the shared one set
    aside for the call)."""
    saved = scan._shared
    scan._shared = None
    try:
        return list(find_hits(text, dataclasses.replace(prot)))  # its searches built anew
    finally:
        scan._shared = saved


@settings(deadline=None, max_examples=200)
@example(earlier=["/a"], needles=["/a", "/a/b"], text="/a/b /a")  # longer one of its own
@example(earlier=["/b"], needles=["/b", "/a"],  # its own hit first (excerpts apart)
         text="/a" + " " * 130 + "/b" + " " * 130 + "/a")
@given(st.lists(st.sampled_from(["/a", "/a/b", "/ab", "/b/a", "/a/b/c", "/b", "/c.d", "/a-b"]),
                max_size=6),
       st.lists(st.sampled_from(["/a", "/a/b", "/ab", "/b/a", "/a/b/c", "/b", "/c.d", "/a-b"]),
                min_size=1, max_size=6),
       st.text(alphabet="/abc.- x", max_size=40))
def test_a_search_shared_with_other_tasks_finds_exactly_what_the_task_s_own_finds(
        earlier: list[str], needles: list[str], text: str) -> None:
    """The needle search is shared by the tasks of a run (built once for one task's needles,
    a small one added for the few another has beyond them): whatever the earlier task's
    needles were (more, fewer, longer ones sharing prefixes), a task's hits are exactly the
    hits of a search built for its needles alone, in the same order."""
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "spider2local-t1-abc"
        scan._shared = None
        _protected(ws, earlier)._needles  # noqa: B018 (builds the shared search)
        prot = _protected(ws, needles)
        assert list(find_hits(text, prot)) == _alone(prot, text)


def test_a_run_s_tasks_share_one_big_search_and_each_finds_its_own_paths(tmp_path: Path) -> None:
    many = [f"/old/runs-{i}" for i in range(300)]
    first = _protected(tmp_path / "spider2local-t1-1", [*many, "/data/gold/t1"])
    second = _protected(tmp_path / "spider2local-t2-2", [*many, "/data/gold/t2"])
    shared = first._needles[0][0]
    assert second._needles[0][0] is shared and len(second._needles[0]) == 2  # + its own
    text = "ls /data/gold/t1 /data/gold/t2 /old/runs-299"
    assert [e for _, _, e in find_hits(text, second)] == [text, text]  # t2's gold, runs-299
    assert [r for r, _, _ in find_hits(text, first)] == ["off limits"] * 2
    assert list(find_hits(text, second)) == _alone(second, text)
