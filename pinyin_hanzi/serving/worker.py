"""Where the HTTP service runs its model: :class:`ModelProcess` (a process of its own, what ``serve.py`` uses)
or :class:`ModelThread` (the server's own process, for tests with stand-in converters and for comparison).

Both answer the same blocking ``call(kind, *args)`` (``"convert"``: ``Converter.convert_lines``;
``"attention"``: :func:`attention_layers`; ``"history"``: :func:`update_history`; ``"checkpoint_history"``:
:func:`checkpoint_history`), made by the model's one thread in the server, one call at a time.

Why a process: the search is Python code that holds the interpreter lock while it runs. In one process the
event loop (HTTP parsing, JSON, validation) then waits for the model, so requests reach the batcher late and
batches stay small, and the model waits for the event loop. In its own process the model has a core and an
interpreter of its own, and the server only pickles lines over a pipe and candidates back.
"""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.connection
import pickle
import signal
import sys
import time
from typing import Any, Sequence

from pinyin_hanzi.errors import PinyinHanziError

START_TIMEOUT_S = 600  # loading a large model on a busy machine
STOP_TIMEOUT_S = 10


WARM_UP = ["ni hao", "nh"]  # a line of full syllables and one of abbreviations, converted before "ready"


class WorkerDied(Exception):
    """The model process ended while a call was waiting for it (a crash, a kill, out of memory)."""


def convert(converter, lines: list[str], beam: int, nbest: int, chinese_punctuation: bool,
            typing: tuple[tuple[str, object], ...] = ()) -> list[list]:
    """``typing``: the request's typing options (prefixes, fuzzy, shuangpin) as keyword pairs; () the model's."""
    return converter.convert_lines(lines, beam=beam, nbest=nbest, chinese_punctuation=chinese_punctuation,
                                   **dict(typing))


def attention_layers(converter, text: str, syllables: Sequence[str]) -> list[list[list[float]]]:
    """Cross-attention of ``text`` read as ``syllables`` (paired one to one; the service checks that): per
    decoder layer a (t, s) list of lists, heads averaged (t characters, s syllables)."""
    import torch  # here and in _worker only: the server process, which imports this module, never loads torch

    device = next(converter.model.parameters()).device
    source = torch.tensor([converter.pinyin_vocab.encode(list(syllables))], device=device)
    target = torch.tensor([converter.hanzi_vocab.encode(text)], device=device)
    with torch.inference_mode():
        maps = converter.model.attention_maps(source, target)
    return [layer[0].float().mean(dim=0).tolist() for layer in maps["cross"]]  # (h, t, s) -> (t, s)


def update_history(converter, changes: Sequence[tuple[str, object]]) -> None:
    """Apply what the server's history learned (``("extend", clauses)``) or forgot (``("forget", text)``) to
    the converter's own, in memory (serving/learning.py), in order."""
    for change, value in changes:
        if change == "extend":
            converter.history.extend(value)
        else:
            converter.history.forget(value)


def checkpoint_history(converter) -> str:
    """The history file the converter's checkpoint names (its decode.history; "" none): serve.py's default.
    The converter itself was made with history "" (the server owns the file), so its config no longer says."""
    if not getattr(converter, "checkpoint", None):
        return ""
    import torch

    from pinyin_hanzi.checkpoint import CONFIG_KEY
    from pinyin_hanzi.config import config_from_dict

    # memory-mapped: only the small config is read, not the weights (the model is loaded already)
    state = torch.load(converter.checkpoint, map_location="cpu", weights_only=True, mmap=True)
    return config_from_dict(state[CONFIG_KEY], str(converter.checkpoint)).decode.history


CALLS = {"convert": convert, "attention": attention_layers, "history": update_history,
         "checkpoint_history": checkpoint_history}


def describe(converter) -> dict:
    """What the server needs to know of the model without holding it: its default beam, its checkpoint, how
    it reads input and cuts it into windows (for request_cost.CostModel), how many positions its attention
    spans and how many clauses its history keeps (a stand-in converter in the tests may lack the latter:
    None)."""
    checkpoint = getattr(converter, "checkpoint", None)
    model_config = getattr(getattr(converter, "model", None), "config", None)
    reads = hasattr(converter, "typing_options")  # a stand-in converter in the tests has no settings of its own
    typing = converter.typing_options() if reads else None
    return {"beam": converter.beam, "constrained": converter.constrained,
            "trained_with_prefixes": bool(getattr(converter, "trained_with_prefixes", False)),
            "checkpoint": str(checkpoint) if checkpoint else None,
            "window": converter.planner.window if reads else None,
            "prefix_beam": converter.decode.prefix_beam if reads else None,
            "prefixes": typing.prefixes if typing else False, "fuzzy": sorted(typing.fuzzy) if typing else [],
            "shuangpin": typing.shuangpin if typing else None,
            "max_positions": getattr(model_config, "max_positions", None),
            "history_clauses": converter.decode.history_clauses if reads else None}


class ModelThread:
    """The converter in the server's process: ``call`` runs on the caller's thread."""

    kind = "thread"

    def __init__(self, converter):
        self.converter = converter
        self.info = describe(converter)

    def call(self, kind: str, *args) -> Any:
        return CALLS[kind](self.converter, *args)

    def state(self) -> dict:
        return {"kind": self.kind, "state": "ready", "pid": None, "restarts": 0}

    def restart(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def exited(self) -> str | None:
        return None  # the server's own process


class ModelProcess:
    """The model loaded once in a spawned process, called over a pipe.

    ``start()`` blocks until the model is loaded and raises PinyinHanziError (one line) if it cannot be; the
    worker ignores SIGINT (a terminal's Ctrl-C reaches the whole process group: the server stops it) and ends
    when ``stop()`` asks, when it is signalled, or when the server is gone (its end of the pipe closes). A
    worker that dies during a call raises :class:`WorkerDied` from that call instead of leaving it waiting.
    """

    kind = "process"

    def __init__(self, checkpoint: str | None = None, *, device: str = "cpu", threads: int = 1,
                 user_words: str | None = None):
        self.checkpoint, self.device, self.threads, self.user_words = checkpoint, device, threads, user_words
        self.info: dict | None = None
        self.restarts = 0
        self._process = None
        self._conn = None
        self._state = "stopped"  # starting, ready, dead, stopped

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the process (it loads the model meanwhile; several load at once)."""
        context = multiprocessing.get_context("spawn")  # fork would copy the server's threads and locks
        ours, theirs = context.Pipe()
        self._state = "starting"
        process = context.Process(target=_worker, args=(theirs, self.checkpoint, self.device, self.threads,
                                                        self.user_words),
                                  name="pinyin_hanzi model", daemon=True)  # daemon: ended if the server exits
        process.start()
        theirs.close()  # only the worker holds its end now: its exit is EOF here
        self._process, self._conn = process, ours

    def wait_ready(self) -> None:
        """Block until the launched process has loaded the model; PinyinHanziError where it cannot."""
        process, ours = self._process, self._conn
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while not ours.poll(0.2):
                if not process.is_alive() and not ours.poll(0):
                    raise PinyinHanziError(f"the model process {self._exit()} while loading the model")
                if time.monotonic() > deadline:
                    raise PinyinHanziError(f"the model process did not load the model within {START_TIMEOUT_S} s")
            status, value = ours.recv()
        except (EOFError, OSError):
            self._state = "dead"
            raise PinyinHanziError(f"the model process {self._exit()} while loading the model") from None
        except PinyinHanziError:
            self._state = "dead"
            self.stop()
            raise
        if status != "ready":
            self.stop()
            raise PinyinHanziError(value)
        self.info = value
        self._state = "ready"

    def call(self, kind: str, *args) -> Any:
        if self._state != "ready":
            raise WorkerDied(f"the model process is {self._state}")
        try:
            self._conn.send((kind, args))
            status, value = self._conn.recv()
        except (EOFError, OSError):
            self._state = "dead"
            raise WorkerDied(f"the model process {self._exit()}") from None
        if status == "error":
            raise value
        return value

    def restart(self) -> None:
        """A fresh worker after a crash (blocking; raises PinyinHanziError if it cannot load the model)."""
        self.stop()
        self.restarts += 1
        self.start()

    def stop(self) -> None:
        """Ask the worker to end, then make sure it has: terminate, and kill if it will not go."""
        process, conn = self._process, self._conn
        if process is None:
            return
        if conn is not None:
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
            conn.close()
        process.join(STOP_TIMEOUT_S)
        if process.is_alive():
            process.terminate()
            process.join(STOP_TIMEOUT_S)
        if process.is_alive():
            process.kill()
            process.join()
        self._conn = None
        if self._state != "dead":
            self._state = "stopped"

    def exited(self) -> str | None:
        """Why the process has ended (killed, out of memory) if it has while ready and between calls, else
        None; it is then marked dead. Asked by the server's event loop while no call holds the model: the
        process's sentinel says whether it has ended without reaping it, so this never races the calling
        thread's own look at it."""
        process = self._process
        if self._state != "ready" or process is None or not multiprocessing.connection.wait([process.sentinel], 0):
            return None
        self._state = "dead"
        return f"the model process {self._exit()}"

    def state(self) -> dict:
        process = self._process
        return {"kind": self.kind, "state": self._state, "pid": process.pid if process is not None else None,
                "restarts": self.restarts}

    def _exit(self) -> str:
        process = self._process
        if process is None:
            return "is not running"
        process.join(2)  # EOF comes as the process exits: give it the moment to be reaped
        code = process.exitcode
        if code is None:
            return "stopped answering"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with status {code}"


def _worker(conn, checkpoint: str | None, device: str, threads: int, user_words: str | None = None) -> None:
    """The worker process: load the model (with the user dictionary ``user_words``, if given, and a history in
    memory: the server owns the history file and tells this process what it learns), then answer calls until
    told to stop or the server is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.disable()  # until the model is loaded (runtime.startup_done)
    import torch  # the model process's own: the server process, which imports this module, never loads torch

    from pinyin_hanzi import Converter  # the model process's own, as torch above
    from pinyin_hanzi.runtime import startup_done

    torch.set_num_threads(threads)
    try:
        converter = Converter.from_checkpoint(checkpoint, device=device, user_words=user_words, history="",
                                              log=lambda note: print(note, file=sys.stderr, flush=True))
        # first use builds the reading tables and kernels (seconds): here, so that "ready" means a first request
        # (an input method's first key) is answered as fast as any later one
        converter.convert_lines(WARM_UP, nbest=2)
        message = ("ready", describe(converter))
    except PinyinHanziError as error:
        converter, message = None, ("failed", str(error))
    except Exception as error:  # a bug or a broken install: the server reports it and exits
        converter, message = None, ("failed", f"loading the model failed: {type(error).__name__}: {error}")
    startup_done()
    if not _send(conn, message) or converter is None:
        return
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return  # the server is gone
        if request is None:
            return
        kind, args = request
        try:
            with torch.inference_mode():
                reply = ("ok", CALLS[kind](converter, *args))
        except Exception as error:
            reply = ("error", _picklable(error))
        if not _send(conn, reply):
            return


def _send(conn, message) -> bool:
    """False where the server is gone. A reply that cannot be pickled goes as an error (send pickles the
    whole message before it writes anything)."""
    try:
        conn.send(message)
        return True
    except (OSError, ValueError):
        return False
    except Exception as error:
        return _send(conn, ("error", RuntimeError(f"the model's reply cannot be sent: {type(error).__name__}")))


def _picklable(error: Exception) -> Exception:
    """``error`` itself where it survives the pipe (the project's errors do), else a RuntimeError naming it."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
