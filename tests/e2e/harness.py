"""Runs a real TARSy deployment for end-to-end tests and benchmarks.

A fresh data directory and SQLite database, migrations, a login, a provider, then
daphne and a qcluster as subprocesses — the same processes ``bin/run`` starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
USERNAME = "sre"
PASSWORD = "e2e-password-1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Deployment:
    base_url: str
    data_dir: Path
    env: dict[str, str]
    processes: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    @property
    def database(self) -> Path:
        return self.data_dir / "tarsy.sqlite3"

    def manage(self, *args: str, input: str | None = None) -> str:
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
            )
        return result.stdout

    def log_tail(self, lines: int = 60) -> str:
        out = []
        for log in self.logs:
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name} ---\n" + "\n".join(text))
        return "\n".join(out)


def _provider_setup_code(provider: dict) -> str:
    return (
        "import json\nfrom django.contrib.auth import get_user_model\n"
        "from llm.models import LLMProvider\n"
        f"get_user_model().objects.create_user({USERNAME!r}, password={PASSWORD!r})\n"
        f"LLMProvider.objects.create(**json.loads({json.dumps(provider)!r}))\n"
    )


@contextlib.contextmanager
def deployment(
    tmp_path: Path, *, provider: dict, extra_env: dict[str, str] | None = None
) -> Iterator[Deployment]:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "TARSY_DATA_DIR": str(data_dir),
        "DATABASE_URL": f"sqlite:///{data_dir / 'tarsy.sqlite3'}",
        "SECRET_KEY": "e2e-not-secret",
        "TARSY_WORKERS": "1",
        "TARSY_QUEUE_POLL": "0.05",
        "PYTHONUNBUFFERED": "1",
        **(extra_env or {}),
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    dep = Deployment(f"http://127.0.0.1:{port}", data_dir, env)
    dep.manage("migrate", "--no-input", "-v0")
    dep.manage("shell", "-c", _provider_setup_code(provider))
    commands = {
        "daphne": [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "tarsy_site.asgi:application",
        ],
        "qcluster": [sys.executable, "manage.py", "qcluster"],
    }
    try:
        for name, command in commands.items():
            log = data_dir / f"{name}.log"
            dep.logs.append(log)
            dep.processes.append(
                subprocess.Popen(
                    command,
                    cwd=ROOT,
                    env=env,
                    stdout=log.open("w"),
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        _wait_for_health(dep)
        yield dep
    finally:
        for process in dep.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in dep.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def _wait_for_health(dep: Deployment, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in dep.processes:
            if process.poll() is not None:
                raise RuntimeError(f"a TARSy process exited early:\n{dep.log_tail()}")
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{dep.base_url}/health", timeout=2) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"TARSy did not become healthy in {timeout} s:\n{dep.log_tail()}")


def launch_browser(playwright):
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: run bin/test, which installs Debian's chromium")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)


def log_in(page, base_url: str) -> None:
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", USERNAME)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")
