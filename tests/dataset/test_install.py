"""Dataset install (setup): zips in upstream's shape placed like upstream's setup.py, re-run safely,
verified with DuckDB; packages supplied offline from sibling tasks."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from spider2local.cli.app import cli
from spider2local.dataset.install import Action, FileKind, resolve_spider2_dbt, setup_dataset
from spider2local.dataset.load import load_dataset
from spider2local.dbtproject import packages
from spider2local.exceptions import DatasetError, UserError
from spider2local.suite.model import Suite
from tests.cli.test_app import run_cli
from tests.helpers import make_duckdb

TASKS = ("shop001", "bank001", "misnamed001", "nogold001")


def _checkout(tmp: Path) -> Path:
    """A Spider2 checkout without databases: task list, eval file, bare projects."""
    root = tmp / "Spider2" / "spider2-dbt"
    (root / "examples").mkdir(parents=True)
    gold = root / "evaluation_suite" / "gold"
    gold.mkdir(parents=True)
    for tid in TASKS:
        db = tid.rstrip("0123456789")
        project = root / "examples" / tid
        (project / "models").mkdir(parents=True)
        (project / "dbt_project.yml").write_text(f"name: {db}\nprofile: {db}\n")
        (project / "profiles.yml").write_text(
            f"{db}:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n"
            f"      path: ./{db}.duckdb\n")
        with (root / "examples" / "spider2-dbt.jsonl").open("a") as fh:
            fh.write(json.dumps({"instance_id": tid, "instruction": "Do it.", "type": "DBT"})
                     + "\n")
        ev = {"func": "duckdb_match", "parameters": {"gold": f"{db}.duckdb",
              "condition_tabs": ["t"], "condition_cols": [[0]], "ignore_orders": [True]}}
        with (gold / "spider2_eval.jsonl").open("a") as fh:
            fh.write(json.dumps({"instance_id": tid, "evaluation": ev}) + "\n")
    return root


def _zips(tmp: Path) -> tuple[Path, Path]:
    """Zips shaped like upstream's: __MACOSX, nested folders, a stray file, an unknown folder,
    a task without gold, and a gold folder holding a differently named file."""
    src = tmp / "dbs"
    files = {}
    for tid in TASKS:
        db = tid.rstrip("0123456789")
        files[f"{tid}/{db}.duckdb"] = make_duckdb(src / "start" / tid / f"{db}.duckdb",
                                                  {"raw": "select 1 as x"})
    start = tmp / "DBT_start_db.zip"
    with zipfile.ZipFile(start, "w") as zf:
        for name, path in files.items():
            zf.write(path, name)
        zf.write(files["bank001/bank.duckdb"], "__MACOSX/bank001/._bank.duckdb")
        zf.writestr("shop001/notes.txt", "not a database")
        zf.writestr("README.txt", "stray top-level file")
        zf.write(files["shop001/shop.duckdb"], "scratch/other.duckdb")
    gold = tmp / "dbt_gold.zip"
    with zipfile.ZipFile(gold, "w") as zf:
        zf.write(make_duckdb(src / "gold" / "shop.duckdb", {"t": "select 1 as x"}),
                 "shop001/nested/deeper/shop.duckdb")
        zf.write(make_duckdb(src / "gold" / "bank.duckdb", {"t": "select 2 as x"}),
                 "bank001/bank.duckdb")
        zf.write(make_duckdb(src / "gold" / "other.duckdb", {"t": "select 3 as x"}),
                 "misnamed001/misnamed_gold.duckdb")
        zf.writestr("__MACOSX/._shop001", "apple double")
    return start, gold


def test_places_like_upstream_skips_junk_and_verifies(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    start, gold = _zips(tmp_path)
    report = setup_dataset(root.parent, start, gold)  # the checkout, not spider2-dbt/
    assert report.root == root and report.ok
    placed = sorted((p.kind, str(p.path.relative_to(root)), p.action) for p in report.placements)
    assert placed == sorted(
        [("start", f"examples/{t}/{t.rstrip('0123456789')}.duckdb", "placed") for t in TASKS]
        + [("gold", "evaluation_suite/gold/shop001/shop.duckdb", "placed"),
           ("gold", "evaluation_suite/gold/bank001/bank.duckdb", "placed"),
           ("gold", "evaluation_suite/gold/misnamed001/misnamed_gold.duckdb", "placed")])
    assert set(report.skipped) == {"DBT_start_db.zip:__MACOSX/", "DBT_start_db.zip:README.txt",
                                   "DBT_start_db.zip:scratch/", "dbt_gold.zip:__MACOSX/"}
    assert not (root / "examples" / "shop001" / "notes.txt").exists()

    data = load_dataset(Suite(tmp_path / "tasks.toml", root))
    status = {t.id: t.status for t in data.tasks}
    assert status["shop001"] == status["bank001"] == "runnable"
    assert "misnamed.duckdb missing (found misnamed_gold.duckdb instead)" in status["misnamed001"]
    assert "missing" in status["nogold001"]


def test_rerun_skips_identical_and_replaces_changed(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    start, gold = _zips(tmp_path)
    setup_dataset(root, start, gold)
    target = root / "examples" / "bank001" / "bank.duckdb"
    target.write_bytes(target.read_bytes()[:-1] + b"\x01")  # same size, other content
    again = setup_dataset(root, start, gold)
    actions = {str(p.path.relative_to(root)): p.action for p in again.placements}
    assert actions["examples/bank001/bank.duckdb"] is Action.REPLACED
    assert actions["examples/shop001/shop.duckdb"] is Action.IDENTICAL
    assert actions["evaluation_suite/gold/shop001/shop.duckdb"] is Action.IDENTICAL
    # The summary counts by the words it always printed, and names what was replaced.
    summary = again.lines()
    assert summary[0] == f"{root}: 6 identical, 1 replaced"
    assert "replaced examples/bank001/bank.duckdb (its content differed)" in summary


def test_without_zips_checks_the_layout_and_flags_unusable_files(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    start, gold = _zips(tmp_path)
    setup_dataset(root, start, gold)
    (root / "examples" / "shop001" / "shop.duckdb").write_bytes(b"\0" * 8 + b"DUCK" + b"\0" * 99)
    report = setup_dataset(root)
    assert {p.action for p in report.placements} == {Action.PRESENT}
    bad = [p for p in report.placements if p.problem]
    assert [p.path.name for p in bad] == ["shop.duckdb"] and bad[0].kind is FileKind.START
    assert not report.ok
    assert any(line.startswith("BAD ") for line in report.lines())


def test_bad_paths_are_one_line_user_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no examples/ folder"):
        resolve_spider2_dbt(tmp_path)
    root = _checkout(tmp_path)
    junk = tmp_path / "junk.zip"
    junk.write_text("not a zip")
    with pytest.raises(DatasetError, match="cannot open zip"):
        setup_dataset(root, junk)


def _vendor(project: Path, name: str, version: str, *, pin: str | None = None,
            changelog: str | None = None) -> None:
    folder = project / "dbt_packages" / name
    folder.mkdir(parents=True)
    (folder / "dbt_project.yml").write_text(f"name: '{name}'\nversion: '{version}'\n")
    (folder / "macros").mkdir()
    (folder / "macros" / "m.sql").write_text("{% macro x() %}1{% endmacro %}\n")
    if changelog:
        (folder / "CHANGELOG.md").write_text(changelog)
    if pin:
        (project / "packages.yml").write_text(
            f"packages:\n  - package: dbt-labs/{name}\n    version: {pin}\n")


def test_missing_packages_supplied_from_compatible_siblings(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    ex = root / "examples"
    (ex / "shop001" / "packages.yml").write_text(
        "packages:\n  - package: dbt-labs/dbt_utils\n    version: 1.0.0\n"
        "  - package: fivetran/zuora_source\n    version: ['>=0.2.0', '<0.3.0']\n")
    (ex / "shop001" / "dbt_packages" / "dbt_utils").mkdir(parents=True)  # empty folder
    _vendor(ex / "bank001", "dbt_utils", "0.1.0", pin="1.1.1")  # compatible
    _vendor(ex / "misnamed001", "dbt_utils", "0.1.0", pin="1.0.0")  # exact: preferred
    _vendor(ex / "nogold001", "zuora_source", "0.3.1",
            changelog="# dbt_zuora_source v0.3.1\n")  # outside the range
    before = packages.missing_packages(ex / "shop001")
    assert "can supply it from sibling misnamed001 (exact 1.0.0)" in before[0]
    assert before[1].endswith("zuora_source not in dbt_packages (dbt deps needs the network)")

    report = setup_dataset(root)
    supplies = {s.requirement.name: s for task, s in report.supplies if task == "shop001"}
    assert supplies["dbt_utils"].sibling == "misnamed001"
    assert supplies["zuora_source"].sibling is None
    assert (ex / "shop001" / "dbt_packages" / "dbt_utils" / "macros" / "m.sql").is_file()
    assert packages.supplied_packages(ex / "shop001") == {"dbt_utils": "misnamed001 exact 1.0.0"}
    after = packages.missing_packages(ex / "shop001")
    assert len(after) == 1 and "zuora_source" in after[0]
    assert not (ex / "shop001" / "dbt_packages" / "zuora_source").exists()


def test_version_rules() -> None:
    assert packages.satisfies("0.2.9", (">=0.2.0",))
    assert not packages.satisfies("0.3.0", ("<0.3.0",))
    assert packages.satisfies("1.1.1", ("1.1.1",))
    assert not packages.satisfies("nonsense", (">=1.0.0",))
    assert packages.vendored_version(Path("/nonexistent"), None) is None


def test_setup_command(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    start, gold = _zips(tmp_path)
    args = ["setup", "--spider2", str(root), "--start-zip", str(start), "--gold-zip", str(gold)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "7 placed" in result.output
    assert "7 identical" in CliRunner().invoke(cli, args).output


def test_zips_named_like_the_other_kind_are_refused(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    start, gold = _zips(tmp_path)
    with pytest.raises(UserError, match=r"--start-zip dbt_gold\.zip looks like the gold zip"):
        setup_dataset(root, gold, None)
    with pytest.raises(UserError, match=r"--gold-zip DBT_start_db\.zip looks like the start"):
        setup_dataset(root, None, start)
    assert not list((root / "examples").glob("*/*.duckdb"))
    result = CliRunner().invoke(cli, ["setup", "--spider2", str(root), "--start-zip", str(gold)])
    assert result.exit_code == 2 and "--force" in result.output


def test_forced_gold_as_start_names_each_replacement_and_warns(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    start, gold = _zips(tmp_path)
    assert setup_dataset(root, start, gold).now_identical == ()
    report = setup_dataset(root, gold, None, force=True)
    lines = report.lines()
    assert "replaced examples/shop001/shop.duckdb (its content differed)" in lines
    assert "replaced examples/bank001/bank.duckdb (its content differed)" in lines
    assert {("shop001", "shop.duckdb"), ("bank001", "bank.duckdb")} <= set(report.now_identical)
    assert any(line.startswith("WARNING shop001: start and gold shop.duckdb are now "
                               "byte-identical") for line in lines)
    again = setup_dataset(root, gold, None, force=True)  # already identical before: no warning
    assert again.now_identical == () and not any("WARNING" in x for x in again.lines())


def _corrupt_crc(archive: Path, member: str) -> None:
    """Flip one byte of a stored member's data: its CRC no longer matches."""
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo(member)
    data = bytearray(archive.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + info.file_size // 2] ^= 0xFF
    archive.write_bytes(bytes(data))


@pytest.mark.process
@pytest.mark.parametrize("damage", ["not duckdb", "bad crc", "cut short"])
def test_setup_never_replaces_a_good_database_with_a_bad_member(tmp_path: Path,
                                                                damage: str) -> None:
    """Through the CLI: the good start database in place stays byte for byte, the member is
    named with the reason (exit 1, no traceback), and no temporary file is left beside it."""
    root = _checkout(tmp_path)
    start, gold = _zips(tmp_path)
    setup_dataset(root, start, gold)
    target = root / "examples" / "shop001" / "shop.duckdb"
    good = target.read_bytes()
    bad = tmp_path / "bad" / "DBT_start_db.zip"
    bad.parent.mkdir()
    member = "shop001/shop.duckdb"
    with zipfile.ZipFile(bad, "w", compression=zipfile.ZIP_STORED) as zf:
        if damage == "not duckdb":
            zf.writestr(member, b"<html>Google Drive: quota exceeded</html>" * 100)
        elif damage == "cut short":
            zf.writestr(member, good[:len(good) // 2 + 100])
        else:
            zf.writestr(member, good[:-1] + b"\x01")  # differs, so it would be written
    if damage == "bad crc":
        _corrupt_crc(bad, member)
    proc = run_cli("setup", "--spider2", str(root), "--start-zip", str(bad), cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert target.read_bytes() == good
    line = next(x for x in proc.stdout.splitlines() if x.startswith("BAD "))
    assert str(target) in line and "the file already there was kept" in line
    reason = {"not duckdb": "not a DuckDB file", "bad crc": "Bad CRC-32",
              "cut short": "truncated"}[damage]
    assert reason in line, line
    assert sorted(p.name for p in target.parent.iterdir() if "shop" in p.name) == ["shop.duckdb"]
