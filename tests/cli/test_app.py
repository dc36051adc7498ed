"""The CLI as a user meets it: real subprocesses, one-line errors (exit code 2), no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "spider2local", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.process
def test_list_sample_suite_from_anywhere(tmp_path: Path) -> None:
    proc = run_cli("list", "--json", cwd=tmp_path)  # no tasks.toml here: the bundled suite
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    tasks = {t["id"]: t for t in data["tasks"]}
    assert len(tasks) >= 4 and all(t["runnable"] for t in tasks.values())
    assert all(t["has_solution"] for t in tasks.values())
    clocked = [t for t in tasks.values() if t["date_method"] != "clock-independent"]
    assert clocked and all(t["fake_date"] != "2024-09-15" for t in clocked)


@pytest.mark.process
def test_list_real_dataset(shared_dataset: Path) -> None:
    proc = run_cli("--dataset", str(shared_dataset), "list")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()[2:] if line.strip()}
    assert "runnable" in rows["playbook001"] and "attribution_touches" in rows["playbook001"]
    assert "runnable" in rows["mrr001"]
    assert "2 tasks, 2 runnable" in proc.stdout


@pytest.mark.process
def test_dataset_option_after_command(shared_dataset: Path) -> None:
    proc = run_cli("list", "--json", "--dataset", str(shared_dataset))
    assert proc.returncode == 0
    assert [t["id"] for t in json.loads(proc.stdout)["tasks"]] == ["playbook001", "mrr001"]


@pytest.mark.process
def test_bad_suite_file(tmp_path: Path) -> None:
    bad = tmp_path / "tasks.toml"
    bad.write_text("[run]\njobs = 'many'\n")
    assert_one_line_error(run_cli("--suite", str(bad), "list"), str(bad),
                          "run.jobs: must be an integer")


@pytest.mark.process
def test_missing_dataset_root(tmp_path: Path) -> None:
    assert_one_line_error(run_cli("list", "--dataset", str(tmp_path / "nowhere")),
                          "dataset root not found", "--dataset")


@pytest.mark.process
def test_per_task_problems_do_not_abort(tiny_dataset: Callable[..., Path]) -> None:
    root = tiny_dataset("good1", "bad1")
    (root / "examples" / "bad1" / "shop.duckdb").unlink()
    proc = run_cli("list", "--json", "--dataset", str(root))
    assert proc.returncode == 0, proc.stderr
    status = {t["id"]: t["status"] for t in json.loads(proc.stdout)["tasks"]}
    assert status == {"good1": "runnable",
                      "bad1": "start database shop.duckdb missing (profiles.yml points at it)"}


@pytest.mark.process
def test_derive_dates_unknown_task_is_a_user_error(tiny_dataset: Callable[..., Path],
                                                   tmp_path: Path) -> None:
    root = tiny_dataset("t1")
    proc = run_cli("derive-dates", "--dataset", str(root), "--dry-run", "t1", "bogus",
                   cwd=tmp_path)
    assert_one_line_error(proc, "unknown task id(s): bogus", "spider2local list")
    assert not (tmp_path / "tasks.toml").exists()


@pytest.mark.process
def test_derive_dates_says_which_named_tasks_have_no_gold(tiny_dataset: Callable[..., Path],
                                                          tmp_path: Path) -> None:
    root = tiny_dataset("t1", with_gold=False)
    proc = run_cli("derive-dates", "--dataset", str(root), "--dry-run", "t1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "skipped t1: no usable gold (gold file gold/t1/shop.duckdb missing)" in proc.stderr


@pytest.mark.process
def test_doctor_reports_each_check(shared_dataset: Path) -> None:
    proc = run_cli("doctor", "--dataset", str(shared_dataset))
    lines = proc.stdout.splitlines()
    names = {line.split(":")[0].split(None, 1)[1] for line in lines if ":" in line}
    assert {"python", "dbt-core", "dbt-duckdb", "duckdb", "libfaketime", "claude cli",
            "credentials", "dataset"} <= names
    assert any(line.startswith("ok") and "dataset" in line and "2 runnable" in line
               for line in lines)
    required_failed = [line for line in lines if line.startswith("FAIL")]
    assert proc.returncode == (1 if required_failed else 0)


@pytest.mark.process
def test_doctor_fails_on_missing_library(tmp_path: Path) -> None:
    env = {**os.environ, "SPIDER2LOCAL_LIBFAKETIME": str(tmp_path / "nope.so")}
    proc = subprocess.run([sys.executable, "-m", "spider2local", "doctor", "--no-clock-test"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 1
    assert any(line.startswith("FAIL  libfaketime") for line in proc.stdout.splitlines())


@pytest.mark.process
@pytest.mark.parametrize("args", [["--version"], ["--help"], ["list", "--help"]])
def test_basic_invocations(args: list[str]) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 0 and proc.stdout


@pytest.mark.process
def test_score_file_against_a_gold_file(shared_dataset: Path, tmp_path: Path) -> None:
    gold = shared_dataset / "evaluation_suite" / "gold" / "playbook001" / "playbook.duckdb"
    start = shared_dataset / "examples" / "playbook001" / "playbook.duckdb"
    ok = run_cli("score", str(start), "--gold", str(gold), "--tables", "attribution_touches",
                 "--cols", "[[15, 16, 17, 18]]", "--ignore-order", "true", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["passed"] is True
    # All 19 columns graded in row order: the start database's rows are not in gold's order.
    strict = run_cli("score", str(start), "--gold", str(gold), "--tables", "attribution_touches")
    assert strict.returncode == 1
    assert "FAIL  attribution_touches" in strict.stdout and "(row by row)" in strict.stdout


@pytest.mark.parametrize(("extra", "fragment"), [
    (["--tables", "a,b", "--cols", "[[0]]"], "unequal lengths (2, 1, 2)"),
    (["--tables", "a", "--cols", "[[0]"], "--cols is not JSON"),
    (["--tables", "no_such_table"], "cannot score"),
    ([], "--gold needs --tables"),
])
@pytest.mark.process
def test_score_file_bad_options(shared_dataset: Path, extra: list[str], fragment: str) -> None:
    gold = shared_dataset / "evaluation_suite" / "gold" / "mrr001" / "mrr.duckdb"
    assert_one_line_error(run_cli("score", str(gold), "--gold", str(gold), *extra), fragment)


@pytest.mark.process
def test_score_cols_take_negative_positions_as_iloc_does(tmp_path: Path) -> None:
    """``--cols '[[-1]]'`` grades the last gold column (upstream's ``gold.iloc[:, [-1]]``);
    a position iloc refuses is no option error but that table's official 0 (exit 1)."""
    from tests.helpers import make_duckdb

    gold = make_duckdb(tmp_path / "gold.duckdb", {"t": "select 1 as id, 'a' as name"})
    result = make_duckdb(tmp_path / "result.duckdb", {"t": "select 'a' as label"})
    last = run_cli("score", str(result), "--gold", str(gold), "--tables", "t", "--cols",
                   "[[-1]]", "--json")
    assert last.returncode == 0, last.stderr
    assert json.loads(last.stdout)["passed"] is True
    first = run_cli("score", str(result), "--gold", str(gold), "--tables", "t", "--cols", "[[-2]]")
    assert first.returncode == 1, first.stderr
    outside = run_cli("score", str(result), "--gold", str(gold), "--tables", "t", "--cols",
                      "[[-3]]", "--json")
    assert outside.returncode == 1, outside.stderr
    table = json.loads(outside.stdout)["tables"][0]
    assert table["passed"] is False and "out of range" in table["error"]


@pytest.mark.process
def test_score_a_linked_file_agrees_with_the_library(tmp_path: Path) -> None:
    """The CLI and ``score_database`` on a path through a link: one rule, one verdict."""
    from spider2local.evaluation import score_database
    from spider2local.evaluation.params import EvalParams
    from tests.helpers import make_duckdb

    gold = make_duckdb(tmp_path / "gold.duckdb", {"t": "select 1 as id"})
    real = make_duckdb(tmp_path / "work" / "result.duckdb", {"t": "select 1 as id"})
    link = tmp_path / "link.duckdb"
    link.symlink_to(real)
    proc = run_cli("score", str(link), "--gold", str(gold), "--tables", "t", "--json")
    assert proc.returncode == 0, proc.stderr
    library = score_database(link, gold, EvalParams("gold.duckdb", ("t",), ((),), (False,)))
    assert json.loads(proc.stdout)["passed"] is library.passed is True


@pytest.mark.process
def test_score_file_needs_a_gold(shared_dataset: Path) -> None:
    db = shared_dataset / "examples" / "mrr001" / "mrr.duckdb"
    assert_one_line_error(run_cli("score", str(db)), "needs --task ID or --gold FILE")


def in_process(*args: str, env: dict[str, str | None], cwd: Path) -> tuple[int, str, str]:
    """The CLI in this process (click's runner): the doctor's imports (the SDK, for the CLI's
    version) are paid once per test worker instead of once per call."""
    from click.testing import CliRunner

    from spider2local.cli.app import cli

    old = Path.cwd()
    os.chdir(cwd)
    try:
        out = CliRunner().invoke(cli, list(args), env=env)
    finally:
        os.chdir(old)
    return out.exit_code, out.stdout, out.stderr


NO_KEYS: dict[str, str | None] = {"ANTHROPIC_API_KEY": None, "CLAUDE_CODE_OAUTH_TOKEN": None}


@pytest.mark.process
def test_doctor_requires_credentials_only_for_a_claude_suite(tmp_path: Path) -> None:
    for agent, code, mark in (("claude", 1, "FAIL"), ("reference", 0, "warn")):
        suite = tmp_path / f"{agent}.toml"
        suite.write_text(f'schema = 1\n[run]\nagent = "{agent}"\n')
        got, stdout, _ = in_process("--suite", str(suite), "doctor", "--no-clock-test",
                                    env=NO_KEYS, cwd=tmp_path)
        assert got == code, stdout
        assert any(line.startswith(f"{mark}  credentials") for line in stdout.splitlines())


@pytest.mark.process
def test_doctor_checks_what_the_chosen_agent_needs(tmp_path: Path) -> None:
    """A user without an API key who only wants reference or noop runs got exit 1 from
    doctor (the suite's agent is claude); ``--agent reference`` needs no key, and the
    credential line says it is optional and for which agent."""
    suite = tmp_path / "claude.toml"
    suite.write_text('schema = 1\n[run]\nagent = "claude"\n')
    base = ("--suite", str(suite), "doctor", "--no-clock-test")
    code, stdout, _ = in_process(*base, env=NO_KEYS, cwd=tmp_path)
    assert code == 1, stdout
    code, stdout, _ = in_process(*base, "--agent", "reference", env=NO_KEYS, cwd=tmp_path)
    assert code == 0, stdout
    line = next(li for li in stdout.splitlines() if li.startswith("warn  credentials"))
    assert "optional: needed only for --agent claude" in line
    code, _, stderr = in_process(*base, "--agent", "nosuch", env=NO_KEYS, cwd=tmp_path)
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and "nosuch" in stderr


def test_commands_find_the_suite_upward_from_a_subfolder(tmp_path: Path) -> None:
    """From a subfolder, `list` used the bundled sample suite instead of the project's
    tasks.toml one level up."""
    suite = tmp_path / "tasks.toml"
    suite.write_text('schema = 1\n[dataset]\nroot = "sample"\n'
                     '[subsets]\nmine = ["nosuch001"]\n')
    deep = tmp_path / "project" / "models"
    deep.mkdir(parents=True)
    code, _, stderr = in_process("run", "--subset", "mine", "--agent", "noop", env={},
                                 cwd=deep)
    # the bundled suite has no subset 'mine' ("unknown subset"): the one upward was read
    assert code == 2 and "nosuch001" in stderr and "unknown subset" not in stderr, stderr


@pytest.mark.process
def test_doctor_refuses_a_blank_key_as_run_does(tmp_path: Path) -> None:
    # One rule for "credentials are set": a key of spaces is refused by `run` (exit 2), so
    # doctor must not call it ok (it did: it only asked whether the variable was non-empty).
    env: dict[str, str | None] = {**NO_KEYS, "ANTHROPIC_API_KEY": "   "}
    suite = tmp_path / "claude.toml"
    suite.write_text('schema = 1\n[run]\nagent = "claude"\n')
    code, stdout, _ = in_process("--suite", str(suite), "doctor", "--no-clock-test", env=env,
                                 cwd=tmp_path)
    assert code == 1, stdout
    assert "FAIL  credentials: none (set ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN" in stdout
    code, _, stderr = in_process("--suite", str(suite), "run", "--runs-dir",
                                 str(tmp_path / "runs"), env=env, cwd=tmp_path)
    assert code == 2 and "needs credentials" in stderr


@pytest.mark.process
def test_score_a_file_that_is_not_duckdb(shared_dataset: Path, tmp_path: Path) -> None:
    gold = shared_dataset / "evaluation_suite" / "gold" / "mrr001" / "mrr.duckdb"
    notdb = tmp_path / "run3.out"
    notdb.write_text("a log, not a database\n")
    assert_one_line_error(run_cli("score", str(notdb), "--gold", str(gold), "--tables", "mrr"),
                          "cannot score: run3.out is not a DuckDB file")


def test_every_command_shows_the_date_run_will_use(tiny_dataset: Callable[..., Path],
                                                   tmp_path: Path) -> None:
    """One source of truth: until derive-dates writes a date, list, audit and run all use the
    suite default; audit only suggests the derived date, and list and run warn about it."""
    from click.testing import CliRunner

    from spider2local.cli.app import cli

    root = tiny_dataset("d001", "plain001", gold_tables={"dim_days": (
        "select cast(range as date) as d from "
        "range(date '2024-01-01', date '2024-03-10', interval 1 day)")})
    (root / "examples" / "d001" / "models" / "dim_days.sql").write_text(
        "select cast(range as date) as d from range(date '2024-01-01', current_date, "
        "interval 1 day)\n")
    suite = tmp_path / "tasks.toml"
    suite.write_text(f"schema = 1\n[dataset]\nroot = {json.dumps(str(root))}\n"
                     "[run]\ndate = 2024-09-15\n")
    base = ["--suite", str(suite)]

    def invoke(*args: str) -> tuple[dict, str]:  # type: ignore[type-arg]
        out = CliRunner().invoke(cli, [*base, *args])
        assert out.exit_code == 0, out.output
        return json.loads(out.stdout), out.stderr

    listed, list_err = invoke("list", "--json")
    dates = {t["id"]: (t["fake_date"], t["date_source"]) for t in listed["tasks"]}
    assert dates["d001"] == ("2024-09-15", "default")
    assert "1 task(s) read the clock but have no date" in list_err
    assert "d001" in list_err and "plain001" not in list_err
    assert "spider2local derive-dates" in list_err and list_err.count("\n") == 1
    audited, _ = invoke("audit", "--json")
    row = {t["id"]: t for t in audited["tasks"]}["d001"]
    assert (row["date"], row["date_source"]) == ("2024-09-15", "default")
    assert (row["suggested_date"], row["suggested_method"]) == ("2024-03-09", "date-spine")
    text = CliRunner().invoke(cli, [*base, "audit"]).stdout
    assert "2024-09-15 (default); suggested 2024-03-09, unused" in text

    derived = CliRunner().invoke(cli, [*base, "derive-dates", "--no-verify"])
    assert derived.exit_code == 0, derived.output
    listed, list_err = invoke("list", "--json")
    dates = {t["id"]: (t["fake_date"], t["date_source"]) for t in listed["tasks"]}
    assert dates["d001"] == ("2024-03-09", "task") and "warning" not in list_err
    audited, _ = invoke("audit", "--json")
    row = {t["id"]: t for t in audited["tasks"]}["d001"]
    assert (row["date"], row["date_source"], row["suggested_date"]) == (
        "2024-03-09", "task", None)


@pytest.mark.process
def test_doctor_check_api_makes_one_tiny_request(tmp_path: Path) -> None:
    from spider2local.testing.fake_api import FakeAnthropic, Hang, HttpError, reply

    suite = tmp_path / "claude.toml"
    suite.write_text('schema = 1\n[run]\nagent = "claude"\nmodel = "claude-doctor-test"\n')
    for turn, code, line in ((reply("Hi"), 0, "ok    api: HTTP 200"),
                             (HttpError(529), 1, "FAIL  api: HTTP 529"),
                             (Hang(), 1, "FAIL  api: no answer")):
        with FakeAnthropic([turn]) as fake:
            env: dict[str, str | None] = {**NO_KEYS, **fake.env()}
            code_got, stdout, _ = in_process("--suite", str(suite), "doctor", "--no-clock-test",
                                             "--check-api", "--api-timeout", "0.5",
                                             env=env, cwd=tmp_path)
            served = fake.requests
        assert code_got == code, stdout
        assert any(x.startswith(line) for x in stdout.splitlines()), stdout
        assert "test-key-fake-api" not in stdout
        assert [r.body["model"] for r in served] == ["claude-doctor-test"]
    # without the flag, no request at all
    with FakeAnthropic([reply("Hi")]) as fake:
        in_process("--suite", str(suite), "doctor", "--no-clock-test",
                   env={**NO_KEYS, **fake.env()}, cwd=tmp_path)
        assert fake.requests == []


def test_workspace_size_takes_binary_units_and_refuses_nonsense() -> None:
    from spider2local.suite.options import setting
    size = setting("workspace_size")
    assert size.parse("4G", text=True) == 4 * 2**30
    assert size.parse("512MiB", text=True) == 512 * 2**20
    assert size.parse(1000, text=False) == 1000
    for bad in ("12q", "0", "-1G", ""):
        with pytest.raises(ValueError, match="must be a size"):
            size.parse(bad, text=True)


@pytest.mark.parametrize(("raised", "code"), [
    (BaseExceptionGroup("stopped", [KeyboardInterrupt()]), 130),
    (BaseExceptionGroup("both", [KeyboardInterrupt(), ValueError("boom")]), None),
])
def test_a_stop_signal_inside_a_task_group_is_interrupted_not_a_traceback(
        raised: BaseExceptionGroup[BaseException], code: int | None) -> None:
    """A stop signal before a run takes its handlers (the free passes' reader starting) raised
    KeyboardInterrupt inside a task group: wrapped, it printed a traceback and exit code 1. It
    is "interrupted", exit 130, like a bare one; a group with anything else stays an error."""
    import click
    from click.testing import CliRunner

    from spider2local.cli.app import _Group

    @click.group(cls=_Group)
    def group() -> None:
        pass

    @group.command()
    def stop() -> None:
        raise raised

    if code is None:  # re-raised as it was (CliRunner passes on what is not an Exception)
        with pytest.raises(BaseExceptionGroup):
            CliRunner().invoke(group, ["stop"])
        return
    done = CliRunner().invoke(group, ["stop"])
    assert done.exit_code == code and "spider2local: interrupted" in done.output, done.output


def test_asyncios_closed_loop_child_warning_is_dropped_and_no_other() -> None:
    """After an interrupt, a reader child killed with the run's tree can end after the event
    loop closed; asyncio's watcher thread then warned "Loop ... that handles pid N is closed"
    under the CLI's "interrupted" (it still reaps the child). The CLI's logging drops exactly
    that record, installed once however often the logging is configured."""
    import asyncio
    import logging

    from spider2local.cli.app import ClosedLoopChild, _configure_logging

    _configure_logging()
    _configure_logging()
    log = logging.getLogger("asyncio")
    assert sum(isinstance(f, ClosedLoopChild) for f in log.filters) == 1
    loop = asyncio.new_event_loop()
    loop.close()
    closed = log.makeRecord("asyncio", logging.WARNING, __file__, 1,
                            "Loop %r that handles pid %r is closed", (loop, 4242), None)
    other = log.makeRecord("asyncio", logging.WARNING, __file__, 1,
                           "Executing %s took %.3f seconds", ("<Task>", 1.0), None)
    assert not log.filter(closed) and log.filter(other)
