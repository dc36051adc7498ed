"""The sequential record of a run made with ``run --against RUN_A --until-decided``:
``<run>/sequential.json``, rewritten after every round.

It says what the run is being compared with and under which design (so a resume, a report or
``compare`` needs nothing else), and the analysis as it stood at the last round: every look,
the decision and the round it came in, the difference with its repeated confidence interval,
the adjusted p-value, B's trials and cost, and the fixed design's trials. The looks can always
be replayed from the two runs' trials (:func:`spider2local.sequential.analysis.analyse` is
deterministic); the record keeps what the run decided at the time, which a resume continues
from and checks against.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from spider2local.core.layout import SEQUENTIAL_RECORD
from spider2local.exceptions import UserError
from spider2local.sequential.analysis import SPENDING, Decision, Design, Look, Outcome

RECORD = SEQUENTIAL_RECORD
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class SequentialRecord:
    against: str
    """Run A's folder (absolute path), as given and resolved when the run started."""
    against_id: str
    design: Design
    tasks: tuple[str, ...]
    """The paired tasks, in the analysis's order."""
    decision: Decision
    decided_round: int | None
    next_round: int | None
    looks: tuple[Look, ...]
    difference: float
    interval: tuple[float, float]
    p_value: float
    trials_b: int
    fixed_trials: int
    cost_usd: float | None
    notes: tuple[str, ...] = ()

    @classmethod
    def of(cls, against: Path, against_id: str, tasks: Sequence[str], outcome: Outcome,
           cost_usd: float | None, notes: Sequence[str] = ()) -> SequentialRecord:
        return cls(str(against), against_id, outcome.design, tuple(tasks), outcome.decision,
                   outcome.decided_round, outcome.next_round, outcome.looks,
                   outcome.difference, outcome.interval, outcome.p_value, outcome.trials_b,
                   outcome.fixed_trials, cost_usd, tuple(notes))

    @property
    def sentence(self) -> str:
        """The answer in one line."""
        iv = f"[{self.interval[0] * 100:+.1f}, {self.interval[1] * 100:+.1f}]"
        diff = f"{self.difference * 100:+.1f} points {iv}"
        p = "p < 0.001" if self.p_value < 0.001 else f"p = {self.p_value:.3g}"
        spent = (f"{self.trials_b} trials of B (a fixed design of equal power: "
                 f"{self.fixed_trials})"
                 + (f", ${self.cost_usd:.2f}" if self.cost_usd is not None else ""))
        when = f" in round {self.decided_round}" if self.decided_round else ""
        what = {
            Decision.B_BETTER: f"B is better{when}",
            Decision.B_WORSE: f"B is worse{when}",
            Decision.FUTILITY: f"stopped for futility{when}: a difference of "
                               f"{self.design.min_difference * 100:.0f} points could no "
                               "longer be shown",
            Decision.NO_DIFFERENCE: f"no difference shown{when}",
            Decision.UNDECIDED: "undecided so far"
                                + (f" (round {self.next_round} is next)"
                                   if self.next_round else ""),
        }[self.decision]
        return f"{what}: {diff}, adjusted {p}; {spent}"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION, "against": self.against,
            "against_id": self.against_id, "design": asdict(self.design),
            "spending": SPENDING, "tasks": list(self.tasks), "decision": self.decision.value,
            "decided_round": self.decided_round, "next_round": self.next_round,
            "looks": [asdict(look) for look in self.looks], "difference": self.difference,
            "interval": list(self.interval), "p_value": self.p_value,
            "trials_b": self.trials_b, "fixed_trials": self.fixed_trials,
            "cost_usd": self.cost_usd, "notes": list(self.notes), "sentence": self.sentence,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SequentialRecord:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"schema version {version!r} is not {SCHEMA_VERSION}")
        design = Design(**data["design"])
        looks = tuple(Look(**look) for look in data["looks"])
        low, high = data["interval"]
        return cls(str(data["against"]), str(data["against_id"]), design,
                   tuple(str(t) for t in data["tasks"]), Decision(data["decision"]),
                   data["decided_round"], data["next_round"], looks, float(data["difference"]),
                   (float(low), float(high)), float(data["p_value"]), int(data["trials_b"]),
                   int(data["fixed_trials"]),
                   None if data["cost_usd"] is None else float(data["cost_usd"]),
                   tuple(str(n) for n in data.get("notes", ())))


def read_record(run_root: Path) -> SequentialRecord | None:
    """The run's record, ``None`` when it has none (not a sequential run). A damaged record
    is one line naming the file (exit 2), never a traceback."""
    path = run_root / RECORD
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"cannot read the sequential record: {exc.strerror}", path=path,
                        fix="check the file's permissions") from None
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return SequentialRecord.from_json(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"damaged sequential record ({exc})", path=path,
                        fix="restore it, or delete it and resume the run with "
                            "--against RUN_A --until-decided to rebuild it") from None


def write_record(run_root: Path, record: SequentialRecord) -> None:
    """Atomically (a temporary file renamed over it): a run killed mid-write keeps the last
    complete record."""
    path = run_root / RECORD
    tmp = path.with_name(f".{RECORD}.tmp")
    tmp.write_text(json.dumps(record.to_json(), indent=2, allow_nan=False) + "\n",
                   encoding="utf-8")
    tmp.replace(path)
