"""Errors a user can cause. The command-line scripts print them as one line and exit non-zero."""


class PinyinHanziError(Exception):
    """Base class: a problem with the user's input, config, data or files, not a bug."""


class ConfigError(PinyinHanziError):
    """A config file or override is missing, malformed, unknown or invalid."""


class DataError(PinyinHanziError):
    """A corpus cannot be fetched, read or converted."""


class CheckpointError(PinyinHanziError):
    """A checkpoint is missing, unreadable, or does not fit this code."""


class TrainingError(PinyinHanziError):
    """Training cannot go on (for example the loss stopped being finite); the last checkpoint is intact."""


class OutputError(PinyinHanziError):
    """Output cannot be written: standard output is closed, the disk is full, an output folder is read-only
    or another process owns it."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, or a signal that asks a process to stop (SIGTERM, SIGUSR1), with what was kept and how to go
    on: the command-line tools print it and exit with 128 + ``signal_number`` (130 for Ctrl-C), as a shell
    reports a process that a signal ended. A KeyboardInterrupt, so that whatever lets Ctrl-C through lets
    this through too. ``exit_status`` replaces that status where the process is not the one that reports
    (a torchrun process other than rank 0)."""

    def __init__(self, message: str = "", signal_number: int = 2, exit_status: int | None = None):  # 2: SIGINT
        super().__init__(message)
        self.signal_number = signal_number
        self.exit_status = 128 + signal_number if exit_status is None else exit_status
