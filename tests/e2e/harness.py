"""Runs a real TARSy deployment for end-to-end tests and benchmarks.

A fresh data directory and SQLite database, migrations, a login, a provider, then
daphne and a qcluster as subprocesses — the same processes ``bin/run`` starts.
``scaled_deployment`` runs several of each on a fresh PostgreSQL database instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests import sqlite_template
from tests.sqlite_template import copy_sqlite

if TYPE_CHECKING:
    import psycopg

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
    commands: dict[str, list[str]] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)
    # Every web process's URL when there are several (``scaled_deployment``).
    web_urls: list[str] = field(default_factory=list)
    # An API token of the user e2e-client, made with the login and the provider: one
    # Django start-up fewer than ``manage.py create_api_token`` in each test.
    token: str = ""

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

    def start(self, name: str, *, log_mode: str = "w") -> subprocess.Popen:
        log = self.data_dir / f"{name}.log"
        return subprocess.Popen(
            self.commands[name],
            cwd=ROOT,
            env=self.env,
            stdout=log.open(log_mode),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def crash_and_restart(self, name: str) -> None:
        """Kill a process the hard way (no shutdown at all) and start a new one."""
        index = list(self.commands).index(name)
        old = self.processes[index]
        os.killpg(old.pid, signal.SIGKILL)
        old.wait(timeout=15)
        self.processes[index] = self.start(name, log_mode="a")
        _wait_for_health(self)

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Read the deployment's database directly (SQLite file or PostgreSQL), as an
        operator would; ``%s`` placeholders. UUIDs come back as 32 hex digits on both."""
        url = self.env["DATABASE_URL"]
        if url.startswith("sqlite"):
            with contextlib.closing(
                sqlite3.connect(f"file:{self.database}?mode=ro", uri=True)
            ) as db:
                rows = db.execute(sql.replace("%s", "?"), params).fetchall()
        else:
            import psycopg

            with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as db:
                rows = db.execute(sql, params).fetchall()
        return [tuple(v.hex if isinstance(v, uuid.UUID) else v for v in row) for row in rows]

    def api(
        self,
        method: str,
        path: str,
        token: str,
        body: dict | None = None,
        *,
        base_url: str | None = None,
    ) -> tuple[int, Any]:
        """Call the REST API of ``base_url`` (a web process; the first by default)."""
        request = urllib.request.Request(
            f"{base_url or self.base_url}{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def api_token(self) -> str:
        return self.token or self.manage("create_api_token", "e2e-client").strip()

    def restart(self, name: str) -> None:
        """Start ``name`` again after it was killed; its log goes on in the same file."""
        index = list(self.commands).index(name)
        self.processes[index] = self.start(name, log_mode="a")

    def worker_clusters(self) -> dict[str, str]:
        """Which qcluster each live process belongs to: ``{"host:pid": "qcluster-2"}``, in
        the form of ``AlertSession.worker_id``. Each qcluster leads its own process group."""
        host = socket.gethostname()
        return {
            f"{host}:{pid}": name
            for name, process in zip(self.commands, self.processes, strict=True)
            if name.startswith("qcluster")
            for pid in process_group(process.pid)
        }

    def log_tail(self, lines: int = 60) -> str:
        out = []
        for log in self.logs:
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name} ---\n" + "\n".join(text))
        return "\n".join(out)


def demo_provider(chunk_delay: float = 0.04) -> dict:
    """The scripted demo provider (investigates the bundled demo cluster), as a row."""
    return {
        "name": "demo",
        "type": "scripted",
        "model": "demo-investigator",
        "options": {"script": "demo", "chunk_delay": chunk_delay},
        "is_default": True,
    }


# The login the browser tests use, and an API token for the REST ones (printed).
_LOGIN_CODE = (
    "from django.contrib.auth import get_user_model\n"
    "from sessions.auth import api_token_create\n"
    f"get_user_model().objects.create_user({USERNAME!r}, password={PASSWORD!r})\n"
    "print(api_token_create(username='e2e-client'))\n"
)


def _provider_setup_code(provider: dict) -> str:
    return (
        _LOGIN_CODE + "import json\nfrom llm.models import LLMProvider\n"
        f"LLMProvider.objects.create(**json.loads({json.dumps(provider)!r}))\n"
    )


def _sqlite_with_login() -> tuple[Path, str]:
    """``migrated_sqlite()`` with the login and an API token (``_LOGIN_CODE``), made once
    like it; returns the database and the token."""
    kind = "login-" + hashlib.sha256(_LOGIN_CODE.encode()).hexdigest()[:8]
    token_file = sqlite_template.shared_dir() / f"{kind}.token"

    def make(database: Path) -> None:
        copy_sqlite(migrated_sqlite(), database)
        with tempfile.TemporaryDirectory(prefix="tarsy-login-") as where:
            env = _environment(Path(where), f"sqlite:///{database}", None)
            output = Deployment("", Path(where), env).manage("shell", "-c", _LOGIN_CODE)
        token_file.write_text(output.split()[-1])

    database = sqlite_template.template(kind, make)
    return database, token_file.read_text()


def _add_provider(database: Path, provider: dict) -> None:
    """Write the provider's row straight into a deployment's SQLite database: what
    ``LLMProvider.objects.create`` would write, without starting Django in a process of
    its own (seconds of CPU per deployment)."""
    from django.db import connection

    from llm.models import LLMProvider

    row = LLMProvider(**provider)
    fields = [field for field in LLMProvider._meta.concrete_fields if not field.primary_key]
    values = [field.get_db_prep_save(field.pre_save(row, add=True), connection) for field in fields]
    columns = ", ".join(f'"{field.column}"' for field in fields)
    marks = ", ".join("?" for _ in fields)
    table = LLMProvider._meta.db_table
    with contextlib.closing(sqlite3.connect(database)) as db, db:
        db.execute(f'INSERT INTO "{table}" ({columns}) VALUES ({marks})', values)


@contextlib.contextmanager
def deployment(
    tmp_path: Path,
    *,
    provider: dict,
    extra_env: dict[str, str] | None = None,
    clusters: int = 1,
    webs: int = 1,
) -> Iterator[Deployment]:
    """``webs`` > 1: more daphne processes on the same database (``daphne-2`` … on
    ports of their own; every web process's URL in ``web_urls``, the first one's first)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    port = free_port()
    more_ports = [free_port() for _ in range(webs - 1)]
    # TARSY_E2E_DATABASE_URL runs the deployment on another database (an empty
    # PostgreSQL one, say); by default each deployment gets a fresh SQLite file.
    database_url = (
        os.environ.get("TARSY_E2E_DATABASE_URL") or f"sqlite:///{data_dir / 'tarsy.sqlite3'}"
    )
    env = _environment(data_dir, database_url, extra_env)
    dep = Deployment(f"http://127.0.0.1:{port}", data_dir, env)
    if more_ports:
        dep.web_urls = [f"http://127.0.0.1:{p}" for p in (port, *more_ports)]
    if os.environ.get("TARSY_E2E_DATABASE_URL"):
        dep.manage("migrate", "--no-input", "-v0")
        dep.manage("flush", "--no-input", "-v0")  # a shared database: start empty
        dep.token = dep.manage("shell", "-c", _provider_setup_code(provider)).split()[-1]
    elif sqlite_template.SHARED_DIR is None:
        # Outside pytest (the bench scripts): no Django in this process, no templates.
        dep.manage("migrate", "--no-input", "-v0")
        dep.token = dep.manage("shell", "-c", _provider_setup_code(provider)).split()[-1]
    else:
        template, dep.token = _sqlite_with_login()
        copy_sqlite(template, dep.database)
        _add_provider(dep.database, provider)
    commands = {
        "daphne": _daphne_command(port),
        **{f"daphne-{n}": _daphne_command(p) for n, p in enumerate(more_ports, 2)},
        **{
            "qcluster" + (f"-{n}" if n > 1 else ""): [sys.executable, "manage.py", "qcluster"]
            for n in range(1, clusters + 1)
        },
    }
    dep.commands = commands
    try:
        for name in commands:
            dep.logs.append(data_dir / f"{name}.log")
            dep.processes.append(dep.start(name))
        _wait_for_health(dep)
        yield dep
    finally:
        _stop(dep.processes)


def migrated_sqlite() -> Path:
    """An SQLite database migrated by ``manage.py migrate``, made once per migration state
    for every test process (tests/sqlite_template.py): each deployment starts from a copy
    of it. Migrating a fresh database for real is what tests/sessions/test_setup.py checks."""

    def migrate(database: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="tarsy-migrate-") as where:
            env = _environment(Path(where), f"sqlite:///{database}", None)
            Deployment("", Path(where), env).manage("migrate", "--no-input", "-v0")

    return sqlite_template.template("migrated", migrate)


def _environment(
    data_dir: Path, database_url: str, extra_env: dict[str, str] | None
) -> dict[str, str]:
    env = {
        **os.environ,
        "TARSY_DATA_DIR": str(data_dir),
        "DATABASE_URL": database_url,
        "SECRET_KEY": "e2e-not-secret",
        "TARSY_WORKERS": "1",
        "TARSY_QUEUE_POLL": "0.05",
        # Well inside _stop's SIGKILL, so every test ends its cluster the graceful way.
        "TARSY_SHUTDOWN_GRACE": "5",
        "PYTHONUNBUFFERED": "1",
        **(extra_env or {}),
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    return env


def _daphne_command(port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "daphne",
        "-b",
        "127.0.0.1",
        "-p",
        str(port),
        "tarsy_site.asgi:application",
    ]


def postgres_server_url() -> str | None:
    """The PostgreSQL server scale-out tests may create databases on:
    ``TARSY_TEST_POSTGRES_URL``, else ``DATABASE_URL`` when it is a PostgreSQL one."""
    for name in ("TARSY_TEST_POSTGRES_URL", "DATABASE_URL"):
        url = os.environ.get(name, "")
        if url.startswith(("postgres://", "postgresql://")):
            return url
    return None


def _postgres_admin(server_url: str) -> psycopg.Connection:
    """An autocommit connection to the server's maintenance database (CREATE and DROP
    DATABASE cannot run inside a transaction, nor from inside the database itself)."""
    import psycopg

    parts = urllib.parse.urlsplit(server_url)
    error: Exception | None = None
    # Django does the same: the ``postgres`` database, else the one the URL names.
    for name in ("postgres", parts.path.lstrip("/")):
        try:
            return psycopg.connect(
                parts._replace(scheme="postgresql", path=f"/{name}").geturl(), autocommit=True
            )
        except psycopg.OperationalError as exc:
            error = exc
    raise RuntimeError(f"cannot reach PostgreSQL at {parts.hostname}:{parts.port}: {error}")


@contextlib.contextmanager
def postgres_database(server_url: str) -> Iterator[str]:
    """A new, empty database on the server of ``server_url``, dropped on exit (with
    whatever is still connected to it); yields its URL."""
    from psycopg import sql

    name = f"tarsy_e2e_{uuid.uuid4().hex[:12]}"
    with _postgres_admin(server_url) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urllib.parse.urlsplit(server_url)._replace(path=f"/{name}").geturl()
    finally:
        with _postgres_admin(server_url) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextlib.contextmanager
def scaled_deployment(
    tmp_path: Path,
    *,
    provider: dict,
    server_url: str,
    webs: int = 2,
    clusters: int = 2,
    extra_env: dict[str, str] | None = None,
) -> Iterator[Deployment]:
    """Several web hosts and worker hosts sharing one database: a fresh PostgreSQL
    database on ``server_url``, migrated once, then ``webs`` daphne processes (``daphne-1``
    … on ports of their own, listed in ``web_urls``) and ``clusters`` qclusters
    (``qcluster-1`` …). Returns once every web process is healthy and every cluster has
    reported for work, so that the first alerts are not all taken by whichever started
    first."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with postgres_database(server_url) as database_url:
        env = _environment(data_dir, database_url, extra_env)
        ports = [free_port() for _ in range(webs)]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        dep = Deployment(urls[0], data_dir, env, web_urls=urls)
        dep.manage("migrate", "--no-input", "-v0")
        dep.token = dep.manage("shell", "-c", _provider_setup_code(provider)).split()[-1]
        dep.commands = {
            **{f"daphne-{n}": _daphne_command(port) for n, port in enumerate(ports, 1)},
            **{
                f"qcluster-{n}": [sys.executable, "manage.py", "qcluster"]
                for n in range(1, clusters + 1)
            },
        }
        try:
            for name in dep.commands:
                dep.logs.append(data_dir / f"{name}.log")
                dep.processes.append(dep.start(name))
            _wait_for_health(dep)
            _wait_for_clusters(dep)
            yield dep
        finally:
            _stop(dep.processes)


def _wait_for_clusters(dep: Deployment, timeout: float = 60) -> None:
    """Until each qcluster's supervisor has beaten (it does once its workers are forked)."""
    leaders = {
        process.pid
        for name, process in zip(dep.commands, dep.processes, strict=True)
        if name.startswith("qcluster")
    }
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in dep.processes:
            if process.poll() is not None:
                raise RuntimeError(f"a TARSy process exited early:\n{dep.log_tail()}")
        beating = {pid for (pid,) in dep.query("SELECT pid FROM alert_sessions_workercluster")}
        if leaders <= beating:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the worker clusters did not start in {timeout} s:\n{dep.log_tail()}")


def _stop(processes: list[subprocess.Popen]) -> None:
    # SIGTERM to each leader, as a container stop does: qcluster then stops its
    # sentinel and workers in order, within its TARSY_SHUTDOWN_GRACE (5 s here).
    # Whatever is left in a group afterwards is killed.
    #
    # Only pids that are still ours get a signal: a leader the test already reaped (it
    # killed and waited for it) has a pid the system may have given to another process
    # meanwhile — pids wrap within minutes on a box running tests in parallel, and a
    # stray SIGTERM has ended whole pytest runs. So leaders are waited for without being
    # reaped (a zombie keeps its pid), and a reaped leader's group is signalled only
    # while members of it are left (a process group's id is not reused while it has any).
    for process in processes:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
    for process in processes:
        _wait_unreaped(process, timeout=15)
        if process.returncode is None or process_group(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


def _wait_unreaped(process: subprocess.Popen, timeout: float) -> None:
    """Until ``process`` has exited, leaving it a zombie (its pid stays its own)."""
    deadline = time.monotonic() + timeout
    while process.returncode is None and time.monotonic() < deadline:
        try:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            if os.waitid(os.P_PID, process.pid, flags) is not None:
                return
        except ChildProcessError:
            return
        time.sleep(0.05)


def _wait_for_health(dep: Deployment, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    waiting = list(dep.web_urls or [dep.base_url])
    while time.monotonic() < deadline:
        for process in dep.processes:
            if process.poll() is not None:
                raise RuntimeError(f"a TARSy process exited early:\n{dep.log_tail()}")
        for url in list(waiting):
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{url}/health", timeout=2) as response,
            ):
                if response.status == 200:
                    waiting.remove(url)
        if not waiting:
            return
        time.sleep(0.2)
    raise RuntimeError(f"TARSy did not become healthy in {timeout} s:\n{dep.log_tail()}")


def process_group(pgid: int) -> list[int]:
    """The live processes of a process group (Linux /proc)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, …
            members.append(int(entry.name))
    return members


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


DEMO_ALERT = "alert: PodCrashLooping\nnamespace: payments\ndeployment: payments-api"


def submit_alert(page, base_url: str, alert_type: str, data: str = DEMO_ALERT) -> str:
    """Submit an alert through the form, as a user does; returns the new session's id."""
    page.goto(f"{base_url}/sessions/new/")
    page.select_option("#id_alert_type", alert_type)
    page.fill("#id_data", data)
    page.click("#alert-form button[type=submit]")
    page.wait_for_url("**/sessions/*/")
    return page.url.rstrip("/").rsplit("/", 1)[1]


@dataclass
class FakeGeminiProcess:
    """The fake Gemini API (``tests/llm/fakes/gemini.py``) running as its own process."""

    url: str
    record: Path
    log: Path
    process: subprocess.Popen

    def requests(self) -> list[dict[str, Any]]:
        """The requests recorded so far: ``{"path", "query", "headers", "body"}``."""
        if not self.record.exists():
            return []
        # A line is complete once its newline is written; the last piece may be partial.
        lines = self.record.read_text().split("\n")[:-1]
        return [json.loads(line) for line in lines if line.strip()]

    def wait_for_requests(self, count: int, timeout: float = 30) -> list[dict[str, Any]]:
        """At least ``count`` recorded requests; the fake records a request only after it
        has finished streaming the reply, so the client may be done slightly earlier."""
        deadline = time.monotonic() + timeout
        while True:
            requests = self.requests()
            if len(requests) >= count:
                return requests
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the fake Gemini recorded {len(self.requests())} requests, not {count}, "
                    f"in {timeout} s:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def log_tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {self.log.name} ---\n" + "\n".join(text)


@contextlib.contextmanager
def fake_gemini(
    tmp_path: Path, replies: list[dict[str, Any]], *, timeout: float = 30
) -> Iterator[FakeGeminiProcess]:
    """Serve ``replies`` (the fake's JSON script format) from a separate process, so that
    a deployment's worker process can reach it over HTTP; stopped on exit."""
    script = tmp_path / "gemini-script.json"
    script.write_text(json.dumps({"replies": replies}))
    record = tmp_path / "gemini-requests.jsonl"
    log = tmp_path / "fake-gemini.log"
    command = [
        sys.executable,
        str(ROOT / "tests" / "llm" / "fakes" / "gemini.py"),
        "--port",
        "0",
        "--script",
        str(script),
        "--record",
        str(record),
    ]
    with log.open("w") as stderr:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
    try:
        url = _read_url(process, log, timeout)
        yield FakeGeminiProcess(url, record, log, process)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def _read_url(process: subprocess.Popen, log: Path, timeout: float) -> str:
    """The fake prints its URL on stdout once it listens."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([process.stdout], [], [], min(remaining, 0.5))
        if readable:
            line = process.stdout.readline().strip()
            if line.startswith("http://"):
                return line
            if not line and process.poll() is not None:
                break
        elif process.poll() is not None:
            break
    raise RuntimeError(
        f"the fake Gemini did not start in {timeout} s:\n{log.read_text(errors='replace')}"
    )


def normalized(html: str) -> str:
    """A page's HTML as the server renders it, whatever the live path left behind: htmx's
    attributes and classes on live-inserted elements, and the CSRF fields a form rendered
    live lacks (htmx sends the token as a header)."""
    html = re.sub(r'\s(hx-swap-oob|data-upsert-into|data-upsert-position)="[^"]*"', "", html)
    html = re.sub(r'<input type="hidden" name="csrfmiddlewaretoken"[^>]*>', "", html)
    # Every htmx-* class (htmx-added and htmx-settling are both there while a swap
    # settles, which a loaded machine catches); an attribute left empty goes too.
    html = re.sub(r'\sclass="([^"]*)"', _without_htmx_classes, html)
    return re.sub(r">\s+<", "><", html).strip()


def _without_htmx_classes(match: re.Match[str]) -> str:
    if "htmx-" not in match.group(1):
        return match.group(0)
    kept = [name for name in match.group(1).split() if not name.startswith("htmx-")]
    return f' class="{" ".join(kept)}"' if kept else ""
