"""Start the example app under gunicorn (or uvicorn) on 127.0.0.1 and talk to its workers.

Shared by the tests (tests/test_serving_gunicorn.py) and the benchmark (benchmarks/bench_http.py):
real processes, real sockets. Standard library only, so it imports without the server packages.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[2]
APP = "examples.serving.app:app"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(
    workers: int,
    port: int,
    *,
    server: str = "gunicorn",
    preload: bool = False,
    app: str = APP,
    extra: Sequence[str] = (),
) -> list[str]:
    """The command line a user would type (gunicorn with uvicorn workers, or plain uvicorn)."""
    if server == "gunicorn":
        gunicorn = shutil.which("gunicorn", path=os.path.dirname(sys.executable)) or "gunicorn"
        cmd = [
            gunicorn,
            "-w",
            str(workers),
            "-k",
            "uvicorn.workers.UvicornWorker",
            "-b",
            f"127.0.0.1:{port}",
            "--timeout",
            "120",
            "--graceful-timeout",
            "5",
        ]
        return cmd + (["--preload"] if preload else []) + list(extra) + [app]
    if server == "uvicorn":
        return [
            sys.executable,
            "-m",
            "uvicorn",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
            *extra,
            app,
        ]
    raise ValueError(f"server must be 'gunicorn' or 'uvicorn', got {server!r}")


class Server:
    """One server process tree; ``with Server(...) as s:`` starts it and always stops it."""

    def __init__(
        self,
        model: str,
        workers: int,
        *,
        env: Mapping[str, str] | None = None,
        server: str = "gunicorn",
        preload: bool = False,
        app: str = APP,
        default: bool = False,
        log_path: str | None = None,
        preexec: Callable[[], None] | None = None,
        pythonpath: Sequence[str] = (),
    ) -> None:
        self.port = free_port()
        self.workers = workers
        self.cmd = server_command(workers, self.port, server=server, preload=preload, app=app)
        e = dict(os.environ if env is None else env)
        e["PYTHONPATH"] = os.pathsep.join([*pythonpath, str(ROOT), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        e["TF_AUTOPAR_EXAMPLE_MODEL"] = model
        e.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        if default:
            e["TF_AUTOPAR_EXAMPLE_DEFAULT"] = "1"
        self.env = e
        self.preexec = preexec
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 180.0) -> "Server":
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            self.cmd,
            env=self.env,
            cwd=str(ROOT),
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=self.preexec,
            start_new_session=True,
        )
        if self.log_path:
            log.close()
        self.wait_workers(self.workers, timeout_s)
        return self

    def log(self) -> str:
        return Path(self.log_path).read_text(errors="replace")[-4000:] if self.log_path else ""

    def request(self, method: str, path: str, body: Any = None, timeout_s: float = 60.0) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, data, {"Content-Type": "application/json"} if data else {})
            r = conn.getresponse()
            return r.status, json.loads(r.read() or b"null")
        finally:
            conn.close()

    def statuses(self, n: int, timeout_s: float = 60.0, exclude: Sequence[int] = ()) -> dict[int, dict]:
        """/status from ``n`` distinct live workers (new connections land on any worker)."""
        seen: dict[int, dict] = {}
        deadline = time.monotonic() + timeout_s
        while len(seen) < n:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}): {self.log()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(seen)} of {n} workers answered within {timeout_s} s: {self.log()}")
            try:
                code, st = self.request("GET", "/status", timeout_s=10)
            except (OSError, http.client.HTTPException):
                time.sleep(0.2)
                continue
            if code == 200 and st["pid"] not in exclude:
                seen[st["pid"]] = st
        return seen

    def wait_workers(self, n: int, timeout_s: float) -> dict[int, dict]:
        return self.statuses(n, timeout_s)

    def worker_pids(self) -> list[int]:
        """The master's live children (gunicorn's workers; uvicorn's too)."""
        assert self.proc is not None
        try:
            text = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except OSError:
            return []
        return [int(x) for x in text.split()]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        except ProcessLookupError:
            pass

    def __enter__(self) -> "Server":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def served_paths(status: dict) -> list[str]:
    """The fast path's state for each batch of each served function in one worker's /status."""
    return [b["path"] for s in status.get("served", []) for b in s["buckets"]]


def fast_path_decided(status: dict) -> bool:
    """Every batch of the worker was frozen, checked against the original on its live calls and
    decided: served by the frozen session, or kept on the original because the check measured it
    not faster (on a loaded host a tiny model can lose; the worker ran the whole fast path)."""
    buckets = [b for s in status.get("served", []) for b in s["buckets"]]
    return bool(buckets) and all(
        b["path"] == "frozen session" or (b["path"] == "original" and "not faster" in b.get("reason", ""))
        for b in buckets
    )


def warm_until_served(server: Server, body: Any, timeout_s: float = 90.0, n: int | None = None) -> dict[int, dict]:
    """Send ``body`` until every worker reports its batch served by the frozen session (or the
    fast path decided to keep the original path); returns the last /status of each worker."""
    n = server.workers if n is None else n
    deadline = time.monotonic() + timeout_s
    while True:
        for _ in range(4 * n):
            code, out = server.request("POST", "/predict", body)
            if code != 200:
                raise RuntimeError(f"/predict answered {code}: {out}")
        st = server.statuses(n)
        if all(p and p[0] in ("frozen session", "original") for p in map(served_paths, st.values())):
            return st
        if time.monotonic() > deadline:
            return st
        time.sleep(0.3)
