"""``spider2local export --format inspect``: a real run, exported, read back by Inspect.

The run is made the way a user makes one: the real CLI and claude-agent-sdk, scripted through
the fake Anthropic API, real dbt and scoring on the sample suite (fleet001 and bakery001, two
trials each; fleet001's first trial writes the model, runs dbt, queries it and calls the
verifier, which calls a tool of its own). The export is read back with
:func:`inspect_ai.log.read_eval_log`, Inspect's own reader, and compared with the run folder's
result files. Damaged copies of that folder (a truncated result, a cut transcript, a link in
place of a file, a broken run.json) export what can be read, or stop with one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from spider2local.dataset.sample import build as sample_build
from spider2local.sandbox.probe import probe
from spider2local.testing import FakeAnthropic, reply, tool
from spider2local.testing.script import system_text
from tests.agents.test_mini_swe_agent import mini_venv  # noqa: F401  (a fixture)
from tests.cli.test_run_command import cli

pytestmark = pytest.mark.in_process_readers
"""Runs here score in-process: their subject is the run's bookkeeping (tests/conftest.py)."""

inspect_log = pytest.importorskip("inspect_ai.log", reason="the [export] extra is not installed")

SOLUTION = Path(sample_build.__file__).resolve().parent / "solutions" / "fleet001"
VERIFIER = "You are the verifier of a dbt project"


def _route(body: Mapping[str, Any]) -> str | None:
    text = system_text(body)
    if VERIFIER in text:
        asked = json.dumps(body.get("messages"))
        return "verify_fleet" if "vehicle_performance" in asked else "verify_other"
    return next((t for t in ("fleet001", "bakery001") if f"/{t}" in text), None)


@pytest.fixture(scope="module")
def claude_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scripted Claude run of the sample (2 tasks x 2 trials); its folder."""
    tmp = tmp_path_factory.mktemp("export-run")
    solution = tmp / "solution.sql"
    shutil.copy(SOLUTION / "models" / "vehicle_performance.sql", solution)
    verify = tool("Agent", description="verify", prompt="Check vehicle_performance.",
                  subagent_type="verifier", run_in_background=False)
    verify_other = tool("Agent", description="verify", prompt="Check the bakery models.",
                        subagent_type="verifier", run_in_background=False)
    script = {
        "fleet001": [
            reply("Copying the model.", tool("Bash", command=f"cp {solution} "
                                         "models/vehicle_performance.sql && dbt run"),
                  input_tokens=1200, output_tokens=300, cache_creation_tokens=800),
            reply(tool("mcp__spider2__query", sql="SELECT count(*) AS n FROM "
                                                   "vehicle_performance"),
                  input_tokens=1500, output_tokens=40, cache_read_tokens=900),
            reply(verify, input_tokens=1700, output_tokens=50),
            reply("Done: built and verified.", input_tokens=1900, output_tokens=25),
            # trial 2: nothing written, the verifier asked by the follow-up
            reply("Nothing to do.", input_tokens=100, output_tokens=5),
            reply(verify_other, input_tokens=110, output_tokens=5),
            reply("Still nothing.", input_tokens=120, output_tokens=5)],
        "bakery001": [reply("Nothing to do.", input_tokens=100, output_tokens=5),
                      reply(verify_other, input_tokens=110, output_tokens=5),
                      reply("ok", input_tokens=100, output_tokens=5)] * 2,
        "verify_fleet": [
            reply(tool("mcp__spider2__describe_table", table="vehicle_performance"),
                  input_tokens=700, output_tokens=30),
            reply("All declared columns present.\nVERDICT: PASS", input_tokens=900,
                  output_tokens=20)],
        "verify_other": [reply("Nothing was built.\nVERDICT: FAIL", input_tokens=50,
                               output_tokens=5)] * 3,
    }
    args = ("--dataset", "sample", "run", "fleet001", "bakery001", "--agent", "claude",
            "--trials", "2", "--jobs", "1", "--verify-rounds", "1", "--retries", "0",
            "--isolation", "none", "--runs-dir", "runs", "--run-id", "t")
    with FakeAnthropic(script, route=_route) as fake:
        env = {**os.environ, "PYTHONWARNINGS": "ignore", **fake.env()}
        proc = cli(*args, cwd=tmp, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return tmp / "runs" / "t"


def _results(run: Path) -> dict[tuple[str, int], dict[str, Any]]:
    found = {(p.parent.name, 1): p for p in run.glob("*/result.json")}
    found |= {(p.parent.name, int(p.parent.parent.name)): p
              for p in run.glob("_trials/*/*/result.json")}
    return {k: json.loads(p.read_text()) for k, p in found.items()}


def _export(run: Path, *extra: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return cli("export", str(run), "--format", "inspect", *extra, cwd=cwd)


@pytest.mark.slow
def test_the_export_is_read_back_by_inspect_with_a_sample_per_task_and_the_verdicts(
        claude_run: Path, tmp_path: Path) -> None:
    results = _results(claude_run)
    assert {k: r["status"] for k, r in results.items()} == {
        ("fleet001", 1): "passed", ("fleet001", 2): "failed",
        ("bakery001", 1): "failed", ("bakery001", 2): "failed"}
    proc = _export(claude_run, "-o", str(tmp_path / "run.eval"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(tmp_path / "run.eval")
    assert f"inspect view --log-dir {tmp_path}" in proc.stderr
    log = inspect_log.read_eval_log(str(tmp_path / "run.eval"))
    assert log.status == "success" and log.eval.config.epochs == 2
    assert log.eval.dataset.sample_ids == ["bakery001", "fleet001"]
    assert log.samples is not None and len(log.samples) == 4
    samples = {(s.id, s.epoch): s for s in log.samples}
    assert set(samples) == set(results)
    for key, sample in samples.items():
        result = results[key]
        assert sample.scores is not None
        score = sample.scores["duckdb_match"]
        assert score.value == ("C" if result["passed"] else "I"), key
        assert score.metadata is not None
        assert score.metadata["tables"] == result["score"]["tables"]  # per-table results
        assert score.metadata["tables_total"] == result["tables_total"]
        usage = sample.model_usage["claude-sonnet-4-5"]
        assert usage.input_tokens == result["usage"]["input_tokens"]
        assert usage.output_tokens == result["usage"]["output_tokens"]
        assert usage.input_tokens_cache_read == result["usage"]["cache_read_tokens"]
        assert usage.total_cost == pytest.approx(result["usage"]["cost_usd_computed"])
        assert sample.metadata["status"] == result["status"]
        assert sample.started_at == result["started_at"]
    assert "failing_tables" in samples[("bakery001", 1)].scores["duckdb_match"].metadata  # type: ignore[index]
    assert samples[("bakery001", 1)].scores["duckdb_match"].metadata[  # type: ignore[index]
        "failing_tables"] == ["product_sales", "daily_revenue"]
    accuracy = log.results.scores[0].metrics["accuracy"].value  # type: ignore[union-attr]
    assert accuracy == pytest.approx(0.25)

    # the passing trial's conversation: prompt, the agent's text, its calls and their results
    passing = samples[("fleet001", 1)]
    assert passing.input.startswith("Complete the fleet project")  # type: ignore[union-attr]
    roles = [m.role for m in passing.messages]
    assert roles[0] == "user" and roles.count("assistant") == 4 and roles.count("tool") == 3
    calls = [c for m in passing.messages if m.role == "assistant"
             for c in (m.tool_calls or [])]  # type: ignore[union-attr]
    assert [c.function for c in calls] == ["Bash", "mcp__spider2__query", "Agent"]
    assert calls[0].arguments["command"].endswith("dbt run")
    answers = {m.tool_call_id: m for m in passing.messages if m.role == "tool"}  # type: ignore[union-attr]
    bash = answers[calls[0].id]
    assert "OK created sql table model main.vehicle_performance" in bash.text
    assert "\x1b" not in bash.text  # dbt's colours are not part of the output
    assert answers[calls[1].id].function == "mcp__spider2__query"
    assert passing.output.completion == "Done: built and verified."
    # the verifier's own conversation, with its tool call, kept with its report
    (verifier,) = passing.metadata["subagents"]
    assert verifier["type"] == "verifier" and verifier["call_id"] == calls[2].id
    assert "VERDICT: PASS" in verifier["report"]
    sub_calls = [c["function"] for m in verifier["messages"] for c in m.get("tool_calls", [])]
    assert sub_calls == ["mcp__spider2__describe_table"]
    first = verifier["messages"][0]
    assert (first["role"], first["content"]) == ("user", "Check vehicle_performance.")
    # the same as Inspect's transcript events: model calls, tool calls with their results, the
    # verifier inside an agent span under the call that started it, the score last
    kinds = [e.event for e in passing.events]
    # 4 of the agent, 1 of the verifier: the CLI streams a subagent's tool calls, not its
    # last answer, which reads as its report (the Agent call's result)
    assert kinds.count("model") == 5 and kinds[-1] == "score"
    tools = {e.function: e for e in passing.events if e.event == "tool"}
    assert "OK created sql table model" in str(tools["Bash"].result)
    assert tools["Agent"].agent == "verifier" and "VERDICT: PASS" in str(tools["Agent"].result)
    (span,) = [e for e in passing.events if e.event == "span_begin"]
    assert (span.type, span.name, span.id) == ("agent", "verifier", calls[2].id)
    inside = [e for e in passing.events if e.span_id == span.id]
    assert [e.event for e in inside] == ["model", "tool"]
    assert tools["mcp__spider2__describe_table"].span_id == span.id


@pytest.mark.slow
def test_the_default_output_is_in_the_run_folder_and_json_is_inspect_s_json(
        claude_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "t"
    shutil.copytree(claude_run, run)
    proc = cli("export", "latest", "--format", "inspect", cwd=tmp_path)  # the resolver's RUN
    assert proc.returncode == 0, proc.stderr
    assert (run / "inspect" / "t.eval").is_file()
    as_json = tmp_path / "log.json"
    assert _export(run, "-o", str(as_json), cwd=tmp_path).returncode == 0
    assert json.loads(as_json.read_text())["eval"]["task"] == "spider2-dbt"
    log = inspect_log.read_eval_log(str(as_json))
    assert log.samples is not None and len(log.samples) == 4


@pytest.mark.slow
def test_a_damaged_copy_exports_what_it_can_and_says_what_it_left_out(
        claude_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "t"
    shutil.copytree(claude_run, run)
    cut = run / "_trials" / "2" / "bakery001" / "result.json"
    cut.write_text(cut.read_text()[:100])  # truncated: that trial is unfinished
    transcript = run / "fleet001" / "transcript.jsonl"
    lines = transcript.read_text().splitlines(keepends=True)
    garbage = ['not json\n', '[1, 2]\n', '{"kind": "AssistantMessage", "data": {"content": 7}}\n',
               '{"kind": "UserMessage", "data": {"content": [3, {"tool_use_id": 5}]}}\n',
               '{"kind": "AssistantMessage", "data": []}\n']
    transcript.write_text("".join(lines[:6] + garbage) + lines[6][: len(lines[6]) // 2])
    other = run / "_trials" / "2" / "fleet001" / "transcript.jsonl"
    other.unlink()
    other.symlink_to("/etc/passwd")  # a link is not this run's record: never read
    proc = _export(run, "-o", str(tmp_path / "x.eval"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "not exported (no readable result.json): bakery001#2" in proc.stderr
    assert "fleet001#1: 3 transcript line(s) that are not JSON skipped" in proc.stderr
    log = inspect_log.read_eval_log(str(tmp_path / "x.eval"))
    samples = {(s.id, s.epoch): s for s in log.samples or []}
    assert set(samples) == {("fleet001", 1), ("fleet001", 2), ("bakery001", 1)}
    assert samples[("fleet001", 1)].scores["duckdb_match"].value == "C"  # type: ignore[index]
    assert samples[("fleet001", 1)].messages[0].text.startswith("Complete the fleet")
    assert samples[("fleet001", 2)].messages == []
    assert "root:" not in json.dumps(samples[("fleet001", 2)].model_dump(), default=str)


@pytest.mark.slow
def test_a_run_folder_that_cannot_be_exported_is_one_line(claude_run: Path,
                                                          tmp_path: Path) -> None:
    def one_line(proc: subprocess.CompletedProcess[str]) -> str:
        assert proc.returncode == 2, (proc.stdout, proc.stderr)
        (line,) = proc.stderr.strip().splitlines()
        return line

    run = tmp_path / "t"
    shutil.copytree(claude_run, run)
    assert "is a folder" in one_line(_export(run, "-o", str(tmp_path), cwd=tmp_path))
    assert "cannot write the eval log" in one_line(
        _export(run, "-o", "/proc/nope/x.eval", cwd=tmp_path))
    for result in [*run.glob("*/result.json"), *run.glob("_trials/*/*/result.json")]:
        result.write_text("{")
    line = one_line(_export(run, cwd=tmp_path))
    assert line.startswith(f"spider2local: error: {run}: nothing to export: no readable "
                           "result.json (bakery001, fleet001, bakery001#2, fleet001#2)")
    manifest = run / "run.json"
    manifest.write_text(manifest.read_text()[:50])
    assert "run.json" in one_line(_export(run, cwd=tmp_path))
    assert "no run 'nosuch'" in one_line(cli("export", "nosuch", "--format", "inspect",
                                              cwd=tmp_path))


def test_without_the_extra_the_command_names_it(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from spider2local.cli.app import cli as app

    run = tmp_path / "r"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"manifest_version": 3, "run_id": "r"}))
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # as if not installed
    out = CliRunner().invoke(app, ["export", str(run), "--format", "inspect"])
    assert out.exit_code == 2
    assert out.stderr.strip() == ("spider2local: error: --format inspect needs the inspect-ai "
                                  "package, which is not installed (pip install "
                                  "'spider2local[export]')")
    monkeypatch.delitem(sys.modules, "inspect_ai")
    empty = CliRunner().invoke(app, ["export", str(run), "--format", "inspect"])
    assert empty.exit_code == 2
    assert "nothing to export: no finished trial" in empty.stderr
    atif = CliRunner().invoke(app, ["export", str(run), "--format", "atif"])
    assert atif.exit_code == 2 and "needs Python 3.12 or newer" in atif.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def inspect_view(log_dir: Path) -> Iterator[str]:
    """``inspect view`` serving ``log_dir`` on a loopback port; stopped after the test."""
    port = _free_port()
    view = shutil.which("inspect", path=str(Path(sys.executable).parent))
    assert view is not None, "inspect-ai installs the `inspect` command"
    proc = subprocess.Popen([view, "view", "--log-dir", str(log_dir), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_inspect_view_shows_the_exported_conversation(claude_run: Path, tmp_path: Path) -> None:
    from tests.report.test_html import chromium_page

    out = tmp_path / "logs"
    assert _export(claude_run, "-o", str(out / "run.eval"), cwd=tmp_path).returncode == 0
    with inspect_view(out) as url, chromium_page() as page:
        page.goto(f"{url}/#/logs/run.eval/samples/sample/fleet001/1/messages")
        page.get_by_text("Done: built and verified.").first.wait_for(timeout=30_000)
        body = page.inner_text("body")
    assert "Complete the fleet project" in body
    assert "OK created sql table model main.vehicle_performance" in body
    assert "mcp__spider2__query" in body
    with inspect_view(out) as url, chromium_page() as page:
        page.goto(f"{url}/#/logs/run.eval/samples/sample/fleet001/1/transcript")
        page.get_by_text("Copying the model.").first.wait_for(timeout=30_000)
        body = page.inner_text("body")
    assert "verifier" in body.lower() and "All declared columns present." in body


@pytest.mark.slow
def test_a_command_agent_s_command_line_and_outputs_are_a_tool_call_and_its_results(
        tmp_path: Path) -> None:
    command = "echo hello from the agent; echo oops >&2; exit 3"
    done = cli("--dataset", "sample", "run", "library001", "--agent", "command",
               "--agent-command", command, "--isolation", "none", "--retries", "0",
               "--runs-dir", "runs", "--run-id", "c", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    proc = cli("export", "c", "--format", "inspect", "-o", "c.eval", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (sample,) = inspect_log.read_eval_log(str(tmp_path / "c.eval")).samples or []
    call, out, err = sample.messages
    assert call.role == "assistant" and call.tool_calls is not None  # type: ignore[union-attr]
    (tool_call,) = call.tool_calls  # type: ignore[union-attr]
    assert (tool_call.function, tool_call.arguments["command"]) == ("command", command)
    assert (out.role, out.function, out.text) == ("tool", "stdout", "hello from the agent\n")  # type: ignore[union-attr]
    assert (err.function, err.text) == ("stderr", "oops\n")  # type: ignore[union-attr]
    assert sample.scores is not None and sample.scores["duckdb_match"].value == "I"
    assert sample.metadata["error"]["message"].startswith("the agent command exited with "
                                                          "status 3")


@pytest.mark.slow
@pytest.mark.skipif(not probe().ok, reason=f"no namespace sandbox: {probe().reason}")
def test_mini_swe_agent_s_own_trajectory_is_the_exported_conversation(
        mini_venv: Path, tmp_path: Path) -> None:  # noqa: F811 (the fixture imported above)
    """mini-swe-agent (a command agent, through the OpenAI-compatible route) keeps its chat in
    agent.trajectory.json: the export shows what its model was told and answered, each bash
    call with the observation it got back."""
    from spider2local.suite.load import bundled_suite_path
    from spider2local.testing import FakeOpenAI
    from tests.agents.test_mini_swe_agent import SUBMIT, agent_table, run_cli

    suite = tmp_path / "tasks.toml"
    suite.write_text(bundled_suite_path().read_text() + agent_table(mini_venv))
    script = [reply("Looking around.", tool("bash", command="ls models"),
                    input_tokens=1200, output_tokens=40),
              reply("Submitting.", tool("bash", command=SUBMIT), input_tokens=1500,
                    output_tokens=12)]
    with FakeOpenAI(script) as fake:
        done = run_cli(suite, ["bakery001", "--agent", "mini", "--run-id", "m"], fake, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    proc = cli("export", "m", "--format", "inspect", "-o", "m.eval", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (sample,) = inspect_log.read_eval_log(str(tmp_path / "m.eval")).samples or []
    roles = [m.role for m in sample.messages]
    assert roles[:2] == ["system", "user"] and roles.count("assistant") == 2
    assert "bakery" in sample.input  # type: ignore[operator]  # the instruction it was given
    calls = [c for m in sample.messages if m.role == "assistant"
             for c in m.tool_calls or []]  # type: ignore[union-attr]
    assert [(c.function, c.arguments["command"]) for c in calls] == [
        ("bash", "ls models"), ("bash", SUBMIT)]
    first = next(m for m in sample.messages if m.role == "tool")
    assert first.tool_call_id == calls[0].id and "daily_revenue.yml" in first.text  # type: ignore[union-attr]
    assert sample.scores is not None and sample.scores["duckdb_match"].value == "I"
    usage = sample.model_usage
    assert sum(u.input_tokens for u in usage.values()) == 2700
