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


def _child(job: dict, timeout: int) -> None:
    """Become ``python SCRIPT ARGV`` and never return."""
    import atexit
    import runpy
    import signal
    import traceback

    signal.alarm(timeout)
    for fd, path, flags in ((0, job["stdin"], os.O_RDONLY), (1, job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(job["cwd"])
    sys.argv = [job["script"], *job["argv"]]
    sys.path[0] = os.path.dirname(job["script"])
    status = 0
    try:
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


def _serve(spec_path: str) -> None:
    import importlib

    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    for module in PRELOAD:
        importlib.import_module(module)
    sys.stdout.flush()
    sys.stderr.flush()
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
    _serve(sys.argv[1])
