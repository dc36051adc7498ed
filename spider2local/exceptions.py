"""Every error spider2local raises on purpose.

The CLI turns a :class:`UserError` into one line on stderr and exit code 2: bad input must never
show a traceback. Errors that belong to a single task (a dbt crash, a timeout, a failed score) are
not raised out of the runner: they are stored as data in that task's result, so one broken task
never stops a run. Infrastructure failures (API overloaded, CLI crash before any turn) are data
too: ``AgentOutcome.infrastructure`` tells the runner a retry may help.
"""

from __future__ import annotations

from pathlib import Path


class Spider2LocalError(Exception):
    """Base class of every error raised on purpose by spider2local."""


class UserError(Spider2LocalError):
    """Bad input from the user: a file, an option or the environment.

    ``str()`` is the one line the CLI prints: where the problem is, what it is, and the fix.
    """

    def __init__(self, message: str, *, path: Path | str | None = None, fix: str | None = None):
        self.path = Path(path) if path is not None else None
        self.message = message
        self.fix = fix
        where = f"{self.path}: " if self.path is not None else ""
        hint = f" ({fix})" if fix else ""
        super().__init__(f"{where}{message}{hint}")


class SuiteError(UserError):
    """The suite file (tasks.toml) is malformed: bad TOML, unknown key, wrong type, bad date."""


class DatasetError(UserError):
    """The dataset root as a whole cannot be used (missing folder, unreadable task list)."""


class ClockError(UserError):
    """The fake clock cannot be set up: the libfaketime library is missing or unusable."""


class CredentialsError(UserError):
    """The agent needs credentials that the environment does not provide."""


class ResourceMissing(UserError, FileNotFoundError):
    """A file of the installation itself (prompts/, skills/, tasks.toml) is gone: reinstall.
    Also a FileNotFoundError, so callers that treat an absent optional resource as empty keep
    working."""


class DbtError(Spider2LocalError):
    """dbt could not be started or produced no usable output."""


class AgentError(Spider2LocalError):
    """The agent failed in a way that is the agent's (or the model's) fault."""



class SandboxFailed(Spider2LocalError):
    """A sandbox could not be built (a ``mount`` of its plan failed, ``unshare`` was refused):
    the program inside never ran, so whatever it was doing (scoring, a query, an agent) was
    not done; the machine's fault (or our mount plan's), never a verdict (issue 27). The
    message starts "sandbox could not be built:" and carries the tool's own line."""


class ScoringError(Spider2LocalError):
    """The result could not be scored at all (as opposed to scoring 0)."""


class DeadlinePassed(Spider2LocalError):
    """A stage after the agent (checkpoint, score, scan, collect) ran past its deadline: what
    the agent left made it hang (a FIFO as the WAL, a view that never finishes, a tree with
    millions of entries). The agent's doing: the task fails with this reason, never re-run."""

    def __init__(self, stage: str, seconds: float, detail: str = "") -> None:
        self.stage, self.seconds, self.detail = stage, seconds, detail
        more = f": {detail}" if detail else ""
        super().__init__(f"{stage} did not finish within its deadline of {seconds:g}s "
                         f"(what the agent left makes it hang){more}")
