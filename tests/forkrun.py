"""Many short runs of the real command-line scripts, each in a process forked from one that has already
imported torch and the package: a run costs its own work, not the second or two of interpreter start-up
and imports that a fresh ``python script.py`` spends before it reads its first argument.

A :class:`Server` starts ``python forkrun.py`` once (with the environment a fresh process would get); it
imports, then forks a child per run it is sent. A child is what ``python SCRIPT ARGV`` (or ``python -m
MODULE ARGV``) would be: ``sys.argv``, ``sys.path[0]`` (the script's folder), working directory, standard
input, output and error files, the script run as ``__main__``, exit status from ``SystemExit``, standard
streams flushed and ``atexit`` handlers run at exit, a traceback and status 1 for an uncaught exception.
What it cannot be is a process started with a standard stream closed: run those with ``subprocess``
(Python sets ``sys.stdout`` to None at start-up, not later). :func:`run_all` runs many jobs on a few
servers at once.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import queue
import subprocess
import sys
from pathlib import Path

# Imports only: no torch op runs before a fork. torch._dynamo too: torch's optimizers import it on first use
# (about 2 s), so every training run forked would otherwise import it again.
PRELOAD = ("torch", "torch._dynamo", "pinyin_hanzi.cli.translate", "pinyin_hanzi.cli.train",
           "pinyin_hanzi.decoding.converter", "pinyin_hanzi.training.recipe", "pinyin_hanzi.checkpoint")


class Server:
    """One long-lived forking process for runs one after another (``run`` blocks until its child exits):
    for tests that run a script several times in sequence. Stop it with :meth:`close`."""

    def __init__(self, env: dict[str, str], workdir: Path, timeout: int = 300):
        self.env, self.workdir, self.timeout, self.count = env, workdir, timeout, 0
        workdir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen([sys.executable, __file__], env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)

    def run(self, args: list, stdin: str | bytes | None = None, cwd: Path | None = None,
            env: dict[str, str] | None = None, text: bool = True) -> subprocess.CompletedProcess:
        """What ``subprocess.run([python, *args], capture_output=True, text=text)`` returns; ``args`` is a
        script path and its arguments, or ``-m``, a module name and its arguments; ``env`` is added to the
        server's environment. A child still running after the server's ``timeout`` seconds is killed by
        SIGALRM (status -14)."""
        self.count += 1
        job = {"name": str(self.count), "argv": [str(arg) for arg in args[1:]], "cwd": str(cwd or os.getcwd()),
               "env": env or {}, **({"module": str(args[1])} if args[0] == "-m" else {"script": str(args[0])})}
        if "module" in job:
            job["argv"] = job["argv"][1:]
        for stream in ("stdin", "stdout", "stderr"):
            job[stream] = str(self.workdir / f"{self.count}.{stream}")
        Path(job["stdin"]).write_bytes(stdin.encode("utf-8") if isinstance(stdin, str) else stdin or b"")
        self.process.stdin.write(json.dumps({**job, "timeout": self.timeout}) + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError("the forkrun server died")
        outputs = [Path(job[stream]).read_bytes() for stream in ("stdout", "stderr")]
        if text:
            outputs = [output.decode("utf-8", errors="replace") for output in outputs]
        return subprocess.CompletedProcess(args, json.loads(reply)["status"], *outputs)

    def close(self) -> None:
        self.process.stdin.close()  # the server's loop ends at the end of its input
        self.process.wait(timeout=30)
        self.process.stdout.close()  # else the pipe is left to the garbage collector, with a ResourceWarning


def run_all(jobs: dict[str, tuple[list, bytes | None, Path]], env: dict[str, str], workdir: Path,
            parallel: int = 3) -> dict[str, subprocess.CompletedProcess]:
    """Job name -> its result (stdout and stderr as bytes) for jobs name -> (args, stdin, cwd) as
    :meth:`Server.run` takes them, ``parallel`` at a time, each server running one job at a time."""
    servers = [Server(env, workdir / f"server{number}") for number in range(parallel)]
    idle: queue.SimpleQueue[Server] = queue.SimpleQueue()
    for server in servers:
        idle.put(server)

    def run(job: tuple[list, bytes | None, Path]) -> subprocess.CompletedProcess:
        server = idle.get()
        try:
            return server.run(job[0], stdin=job[1], cwd=job[2], text=False)
        finally:
            idle.put(server)

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
            return dict(zip(jobs, pool.map(run, jobs.values())))
    finally:
        for server in servers:
            server.close()


def _child(job: dict, timeout: int) -> None:
    """Become ``python SCRIPT ARGV`` (or ``python -m MODULE ARGV``) and never return."""
    import atexit
    import io
    import runpy
    import signal
    import traceback

    signal.alarm(timeout)
    for fd, path, flags in ((0, job["stdin"], os.O_RDONLY), (1, job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    # The server read its jobs through sys.stdin: the script gets a fresh reader of its own standard input.
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                 encoding=sys.stdin.encoding, errors=sys.stdin.errors)
    os.chdir(job["cwd"])
    os.environ.update(job.get("env", {}))
    status = 0
    try:
        if "module" in job:
            sys.argv = [job["module"], *job["argv"]]
            sys.path[0] = job["cwd"]
            runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = [job["script"], *job["argv"]]
            sys.path[0] = os.path.dirname(job["script"])
            runpy.run_path(job["script"], run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
        if code is None or isinstance(code, int):
            status = code or 0
        else:
            print(code, file=sys.stderr)
            status = 1
    except BaseException:  # what the interpreter does with an uncaught exception
        traceback.print_exc()
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # the interpreter's "Exception ignored ... flushing sys.stdout" exit
            status = 120
    os._exit(status)


def _serve() -> None:
    """Import, then run each job read from stdin (a JSON line) in a forked child and answer its status."""
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    sys.stdout.flush()
    sys.stderr.flush()
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                _child(job, job["timeout"])
            finally:
                os._exit(70)
        _, wait_status = os.waitpid(pid, 0)
        print(json.dumps({"status": os.waitstatus_to_exitcode(wait_status)}), flush=True)


if __name__ == "__main__":
    _serve()
