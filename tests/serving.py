"""Starting the real service for the tests: ``python -m pinyin_hanzi.cli.serve`` on 127.0.0.1 and a free port,
the shipped model, ready once /health answers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import pytest

from conftest import ROOT, python_path

START_TIMEOUT_S = 180  # loading the model takes seconds, more on a busy machine


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve_command(*args: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``python -m pinyin_hanzi.cli.serve ARGS`` run from the repository."""
    env = {key: value for key, value in os.environ.items() if key != "PINYIN_HANZI_CHECKPOINT"}
    env["PYTHONPATH"] = python_path(ROOT)
    return [sys.executable, "-m", "pinyin_hanzi.cli.serve", *args], env


def start_service(*args: str, preexec_fn=None) -> tuple[subprocess.Popen, str]:
    """The service process and its base URL; fails the test with its stderr if it does not come up.
    ``preexec_fn`` runs in the child before it starts (to lower a resource limit)."""
    port = free_port()
    if "--workers" not in args:  # the tests count on one model process; the default depends on the cores
        args = ("--workers", "1", *args)
    command, env = serve_command("--port", str(port), *args)
    log = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a full pipe nobody reads would block it
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=preexec_fn)
    process.log = log
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the service exited with {process.returncode}:\n{output(process)}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    stop_service(process)
    pytest.fail(f"the service did not answer /health within {START_TIMEOUT_S} s")


def output(process: subprocess.Popen) -> str:
    """What the service has written to its standard output and error so far (all of it once stopped)."""
    if process.log.closed:
        return process.output
    process.log.seek(0)
    return process.log.read()


def stop_service(process: subprocess.Popen, timeout: float = 30) -> tuple[int, str]:
    """SIGTERM, then the exit status and output (SIGKILL after ``timeout``: status -9). Closes the output
    file (a second call returns the same output): left to the garbage collector, it is a ResourceWarning."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if not process.log.closed:
        process.output = output(process)
        process.log.close()
    return process.returncode, process.output
