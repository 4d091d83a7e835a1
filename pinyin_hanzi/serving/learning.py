"""The service's user history (``POST /learn``, ``POST /forget``) and how its models keep theirs equal to it.

The server process owns the one :class:`~pinyin_hanzi.lm.history.History`: its file, the file's lock, its
saving. Each model process converts with a Converter whose history is in memory only (two processes cannot own
one file). What the server learns or forgets is queued for every model (:class:`SharedHistory`) and handed to
it in the same job as its next call, on that model's own thread, before the call: so a conversion asked for
after ``/learn`` answered is decoded by a model that has learned it, whether that model was idle or busy when
``/learn`` came, and a model learns the changes in the order the server made them. A model process restarted
after a crash starts from a copy of the whole history instead of the changes it missed.
"""

from __future__ import annotations

from pinyin_hanzi.lm.history import History

# A change a model is told of: ("extend", clauses the server learned) or ("forget", text or None: everything).
Change = tuple[str, object]


class SharedHistory:
    """``history`` and, for each of ``models`` models, the changes it has not been told of yet; every model
    starts with a copy of what ``history`` holds. Used from the event loop's thread only (the routes and the
    batcher): the model threads get their changes as call arguments, never this object."""

    def __init__(self, history: History, models: int):
        self.history = history
        self._pending: list[list[Change]] = [self._copy() for _ in range(models)]

    def __len__(self) -> int:
        return len(self.history)

    def learn(self, text: str) -> list[str]:
        """Learn committed ``text`` (cut into clauses as ``History.learn`` cuts it); the clauses kept."""
        clauses = self.history.learn(text)
        if clauses:
            self._tell(("extend", clauses))  # clauses, not text: every model keeps exactly what the server kept
        return clauses

    def forget(self, text: str | None = None) -> int:
        """Forget everything (None) or the clauses holding ``text``; how many clauses were forgotten."""
        forgotten = self.history.forget(text)
        if forgotten:
            self._tell(("forget", text))
        return forgotten

    def take(self, index: int) -> list[Change]:
        """The changes model ``index`` has yet to apply, in order; from now on it is counted as told of them."""
        changes, self._pending[index] = self._pending[index], []
        return changes

    def restarted(self, index: int) -> None:
        """Model ``index`` starts again with an empty history: what it is owed is the whole history now."""
        self._pending[index] = self._copy()

    def _tell(self, change: Change) -> None:
        for pending in self._pending:
            pending.append(change)

    def _copy(self) -> list[Change]:
        return [("extend", list(self.history.clauses))] if len(self.history) else []
