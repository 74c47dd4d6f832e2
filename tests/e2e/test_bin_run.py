"""bin/run is quiet and says where to log in last: a "==> step" line per phase, the login
URL and the admin password hint after daphne listens and the workers have reported in,
and no access log unless TARSY_ACCESS_LOG turns it on.

bin/run sources bin/_setup.sh, which installs into the shared .venv when pyproject.toml
changed: the tests run a copy of bin/run beside a _setup.sh that only changes into the
repository, so no test ever installs anything. (The install's output was checked by hand:
pip 26 forwards setuptools' "Editable installation." notice box as a warning, and
bin/_setup.sh's PYTHONWARNINGS filter removes it.)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.harness import free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
UP = "==> TARSy is up: open http://127.0.0.1:"
STEPS = [
    "==> migrating the database",
    "==> checking the configuration",
    "==> collecting static files",
    "==> checking the login and the LLM providers",
    "==> starting the web server (daphne) and the workers (qcluster)",
]


class Run:
    def __init__(self, tmp_path: Path, extra_env: dict[str, str]) -> None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        shutil.copy(ROOT / "bin" / "run", bin_dir / "run")
        (bin_dir / "_setup.sh").write_text(f'cd "{ROOT}"\n')
        self.port = free_port()
        data = tmp_path / "data"
        env = {
            **os.environ,
            "TARSY_DATA_DIR": str(data),
            "DATABASE_URL": f"sqlite:///{data / 'tarsy.sqlite3'}",
            "SECRET_KEY": "bin-run-not-secret",
            "TARSY_PORT": str(self.port),
            "TARSY_WORKERS": "1",
            "TARSY_SHUTDOWN_GRACE": "5",
            "TARSY_START_TIMEOUT": "240",
            "PYTHONUNBUFFERED": "1",
            **extra_env,
        }
        for name in ("TARSY_ACCESS_LOG", "TARSY_ADMIN_PASSWORD", "DJANGO_ALLOW_ASYNC_UNSAFE"):
            if name not in extra_env:
                env.pop(name, None)
        for key in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
            env.pop(key, None)
        self.proc = subprocess.Popen(
            ["bash", str(bin_dir / "run")],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def wait_for(self, predicate, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate(self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self.reader.is_alive()):
                    raise AssertionError("bin/run printed:\n" + "\n".join(self.lines))
                self.changed.wait(min(left, 1))

    def get(self, path: str) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as r:
            return r.status

    def stop(self) -> int:
        """Ctrl-C, as a terminal sends it: SIGINT to the whole process group."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self.reader.join(timeout=10)


@pytest.fixture
def run_bin(tmp_path):
    runs: list[Run] = []

    def start(**extra_env: str) -> Run:
        runs.append(Run(tmp_path, extra_env))
        return runs[-1]

    yield start
    for run in runs:
        run.stop()


def index_of(lines: list[str], prefix: str) -> int:
    return next(i for i, line in enumerate(lines) if line.startswith(prefix))


def test_steps_then_the_login_last_and_no_access_log(run_bin):
    run = run_bin()
    run.wait_for(lambda lines: any("password is in" in line for line in lines))
    lines = list(run.lines)
    positions = [index_of(lines, step) for step in STEPS]
    assert positions == sorted(positions), lines
    up = index_of(lines, UP)
    assert lines[up] == f"{UP}{run.port}/login/ (Ctrl-C to stop)"
    assert up > positions[-1]
    hint = index_of(lines, "    Created the login 'admin'; its password is in ")
    assert hint > up, lines
    password_file = Path(run.proc.args[1]).parent.parent / "data" / "admin-password.txt"
    assert str(password_file) in lines[hint]
    assert password_file.read_text().strip()
    assert any(line.startswith("    No LLM provider was configured") for line in lines[up:])
    # Start-up is complete when the hint shows: the page answers, a worker is alive.
    assert run.get("/login/") == 200
    with urllib.request.urlopen(f"http://127.0.0.1:{run.port}/health", timeout=30) as r:
        assert b'"worker_pool": {"status": "healthy"' in r.read()
    assert run.stop() in (0, 130, 143), run.lines
    output = "\n".join(run.lines)
    assert "==> stopping TARSy" in output
    assert "GET /login/" not in output, output
    assert "GET /health" not in output, output


def test_tarsy_access_log_turns_the_access_log_on(run_bin):
    run = run_bin(TARSY_ACCESS_LOG="1")
    run.wait_for(lambda lines: any("password is in" in line for line in lines))
    assert run.get("/login/") == 200
    run.wait_for(lambda lines: any('"GET /login/' in line for line in lines), timeout=60)
