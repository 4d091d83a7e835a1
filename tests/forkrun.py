"""Many short runs of the real command-line scripts, each in a process forked from one that has already
imported torch and the package: a run costs its own work, not the second or two of interpreter start-up
and imports that a fresh ``python script.py`` spends before it reads its first argument.

``run_scripts(jobs, ...)`` starts ``python forkrun.py SPEC`` once (with the environment a fresh process
would get); it imports, then forks a child per job, a few at a time. A child is what ``python SCRIPT ARGV``
would be: ``sys.argv``, ``sys.path[0]`` (the script's folder), working directory, standard input, output and
error files, the script run as ``__main__``, exit status from ``SystemExit``, standard streams flushed and
``atexit`` handlers run at exit, a traceback and status 1 for an uncaught exception. What it cannot be is a
process started with a standard stream closed: run those with ``subprocess`` (Python sets ``sys.stdout`` to
None at start-up, not later).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PRELOAD = ("torch", "pinyin_hanzi.cli.translate", "pinyin_hanzi.cli.train", "pinyin_hanzi.converter",
           "pinyin_hanzi.training", "pinyin_hanzi.checkpoint")  # imports only: no torch op runs before a fork


def run_scripts(jobs: dict[str, tuple[Path, list[str], bytes | None, Path]], workdir: Path, env: dict[str, str],
                parallel: int = 3, timeout: int = 300) -> dict[str, tuple[int, bytes, bytes]]:
    """Job name -> (exit status, stdout, stderr) for jobs name -> (script, argv, stdin bytes or None, cwd).
    A child still running after ``timeout`` seconds is killed by SIGALRM (status -14)."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec = []
    for number, (name, (script, argv, stdin, cwd)) in enumerate(jobs.items()):
        stdin_path = workdir / f"{number}.in"
        stdin_path.write_bytes(stdin or b"")
        spec.append({"name": name, "script": str(script), "argv": argv, "cwd": str(cwd), "stdin": str(stdin_path),
                     "stdout": str(workdir / f"{number}.out"), "stderr": str(workdir / f"{number}.err")})
    spec_path = workdir / "jobs.json"
    spec_path.write_text(json.dumps({"jobs": spec, "parallel": parallel, "timeout": timeout}), encoding="utf-8")
    server = subprocess.run([sys.executable, __file__, str(spec_path)], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                            timeout=timeout * len(spec), check=False)
    if server.returncode != 0:
        raise RuntimeError(f"forkrun failed ({server.returncode}): {server.stderr.decode('utf-8', 'replace')}")
    statuses = json.loads(server.stdout)
    return {job["name"]: (statuses[job["name"]], Path(job["stdout"]).read_bytes(), Path(job["stderr"]).read_bytes())
            for job in spec}


class Server:
    """One long-lived forking process for runs one after another (``run`` blocks until its child exits):
    for tests that run a script several times in sequence. Stop it with :meth:`close`."""

    def __init__(self, env: dict[str, str], workdir: Path, timeout: int = 300):
        self.env, self.workdir, self.timeout, self.count = env, workdir, timeout, 0
        workdir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen([sys.executable, __file__, "--serve"], env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)

    def run(self, args: list[str], stdin: str | None = None, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """What ``subprocess.run([python, *args], text=True, capture_output=True)`` returns; ``args`` is a
        script path and its arguments, or ``-m``, a module name and its arguments; ``env`` is added to the
        server's environment."""
        self.count += 1
        job = {"name": str(self.count), "argv": [str(arg) for arg in args[1:]], "cwd": str(cwd or os.getcwd()),
               "env": env or {}, **({"module": str(args[1])} if args[0] == "-m" else {"script": str(args[0])})}
        if "module" in job:
            job["argv"] = job["argv"][1:]
        for stream in ("stdin", "stdout", "stderr"):
            job[stream] = str(self.workdir / f"{self.count}.{stream}")
        Path(job["stdin"]).write_text(stdin or "", encoding="utf-8")
        self.process.stdin.write(json.dumps({**job, "timeout": self.timeout}) + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError("the forkrun server died")
        return subprocess.CompletedProcess(args, json.loads(reply)["status"],
                                           Path(job["stdout"]).read_text(encoding="utf-8", errors="replace"),
                                           Path(job["stderr"]).read_text(encoding="utf-8", errors="replace"))

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


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


def _preload() -> None:
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    sys.stdout.flush()
    sys.stderr.flush()


def _serve_one_at_a_time() -> None:
    _preload()
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


def _serve(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    _preload()
    statuses: dict[str, int] = {}
    running: dict[int, str] = {}
    pending = list(spec["jobs"])
    while pending or running:
        while pending and len(running) < spec["parallel"]:
            job = pending.pop(0)
            pid = os.fork()
            if pid == 0:
                try:
                    _child(job, spec["timeout"])
                finally:
                    os._exit(70)
            running[pid] = job["name"]
        pid, wait_status = os.wait()
        statuses[running.pop(pid)] = os.waitstatus_to_exitcode(wait_status)
    print(json.dumps(statuses))


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        _serve_one_at_a_time()
    else:
        _serve(sys.argv[1])
