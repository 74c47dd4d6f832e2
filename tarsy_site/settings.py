"""TARSy settings, read from the environment (see docs/configuration.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.queue import queue_settings
from tarsy_site.env import env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("TARSY_DATA_DIR", str(BASE_DIR / "data"))).resolve()

DEBUG = env_bool("DEBUG", default=False)
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    # A local run gets a random key persisted under the data directory, so logins
    # survive restarts without anyone having to invent a secret.
    _key_file = DATA_DIR / "secret_key"
    if _key_file.exists():
        SECRET_KEY = _key_file.read_text().strip()
    else:
        from django.core.management.utils import get_random_secret_key

        DATA_DIR.mkdir(parents=True, exist_ok=True)
        SECRET_KEY = get_random_secret_key()
        _key_file.write_text(SECRET_KEY)
        _key_file.chmod(0o600)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# Pages on other origins allowed to open TARSy's WebSockets (tarsy_site/websocket.py).
ALLOWED_WS_ORIGINS = env_list("ALLOWED_WS_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    # Before django_q: its qcluster command (with TARSy's supervision) replaces django-q2's.
    "worker.apps.WorkerConfig",
    "django_q",
    "django_htmx",
    "ninja",  # its static files: Swagger UI served from here, not a CDN
    "sessions.apps.SessionsConfig",
    "llm",
    "agents",
    "web.apps.WebConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Before anything reads the session cookie or a form: a NUL would reach a query.
    "tarsy_site.middleware.RejectNulMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "tarsy_site.urls"
ASGI_APPLICATION = "tarsy_site.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "web.context_processors.demo_provider",
            ],
        },
    },
]


def _database() -> dj_database_url.DBConfig:
    url = env_str("DATABASE_URL")
    if not url:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{DATA_DIR / 'tarsy.sqlite3'}"
    try:
        config = dj_database_url.parse(url, conn_max_age=0)
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"DATABASE_URL={url!r} is not understood ({exc}); use sqlite:///path or "
            "postgres://user:password@host:5432/name"
        ) from None
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # WAL lets readers and the worker's writer proceed together; IMMEDIATE takes the
        # write lock up front so concurrent read-then-write transactions wait (up to the
        # timeout) instead of failing with "database is locked".
        config["OPTIONS"] = {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        # Tests run workers in threads beside the test: an in-memory database (shared
        # cache) answers "table is locked" at once instead of waiting like a file does.
        config["TEST"] = {"NAME": str(DATA_DIR / "test.sqlite3")}
    elif config["ENGINE"] == "django.db.backends.postgresql":
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise ImproperlyConfigured(
                "DATABASE_URL is a PostgreSQL URL but its driver is not installed: "
                "run .venv/bin/pip install -e '.[postgres]'"
            ) from None
    else:
        raise ImproperlyConfigured(
            f"DATABASE_URL uses {config['ENGINE']}; TARSy supports sqlite:// and postgres://"
        )
    return config


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "sessions:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Without collectstatic (tests, first run) WhiteNoise serves straight from the finders.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    # Rendered HTML of finished timeline items (they never change), per process:
    # TARSY_FRAGMENT_CACHE_ITEMS of them, least recently used dropped first.
    "fragments": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "tarsy-fragments",
        "TIMEOUT": None,
        "OPTIONS": {
            "MAX_ENTRIES": env_int("TARSY_FRAGMENT_CACHE_ITEMS", 20000),
            "CULL_FREQUENCY": 4,
        },
    },
}

# One daphne process: the in-memory layer is enough, because the relay in each daphne
# process reads the shared event log and fans out locally (the worker never talks to
# the channel layer).
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels.layers.InMemoryChannelLayer",
        # Stream chunks arrive in bursts; a full consumer queue would drop them.
        "CONFIG": {"capacity": 10000, "expiry": 120},
    }
}

TARSY_CONFIG = env_str("TARSY_CONFIG", str(BASE_DIR / "config" / "tarsy.yaml"))
# A TARSy configuration's ``queue:`` values (config/queue.py) stand in for the TARSY_*
# variables below that are not set.
_QUEUE = queue_settings(TARSY_CONFIG)


def _queued(name: str, default: float, minimum: float) -> float:
    return env_float(name, max(minimum, _QUEUE.get(name, default)), minimum=minimum)


# The session timeout is enforced inside the task; django-q2's own timeout and retry
# sit above it so that django-q2 never kills or re-delivers a healthy run (a system
# check in sessions/checks.py holds this).
TARSY_SESSION_TIMEOUT = _queued("TARSY_SESSION_TIMEOUT", 40 * 60, minimum=1)
Q_CLUSTER: dict[str, Any] = {
    "name": "tarsy",
    "orm": "default",
    "workers": env_int("TARSY_WORKERS", 2, minimum=1),
    "timeout": int(TARSY_SESSION_TIMEOUT + 120),
    "retry": int(TARSY_SESSION_TIMEOUT + 180),
    "max_attempts": 1,
    # A cluster holds at most one task beyond those its workers run: a task pulled by a
    # cluster that then dies waits for recovery (TARSY_PENDING_RECOVERY_AFTER), and a busy
    # cluster does not hoard tasks another one could run now.
    "queue_limit": 1,
    "catch_up": False,
    "poll": _queued("TARSY_QUEUE_POLL", 0.1, minimum=0.01),
    "save_limit": 1000,
    "ack_failures": True,
    "label": "Task queue",
}

TARSY_MAX_ALERT_BYTES = 1024 * 1024
# Each daphne's relay reads the event log when woken (sessions/wakeup.py), and this often
# in case a wake-up was lost.
TARSY_RELAY_POLL_INTERVAL = env_float("TARSY_RELAY_POLL_INTERVAL", 1.0, minimum=0.001)
TARSY_CATCHUP_LIMIT = env_int("TARSY_CATCHUP_LIMIT", 200, minimum=1)
# An open socket re-checks its login this often: logged out, deactivated → closed.
TARSY_WS_ACCESS_CHECK_INTERVAL = env_float("TARSY_WS_ACCESS_CHECK_INTERVAL", 15, minimum=0.05)
TARSY_TRANSIENT_EVENT_TTL = env_float("TARSY_TRANSIENT_EVENT_TTL", 3600, minimum=1)
# Per LLM call: silence before the first delta, silence between deltas, and the whole call.
TARSY_LLM_FIRST_CHUNK_TIMEOUT = env_float("TARSY_LLM_FIRST_CHUNK_TIMEOUT", 120, minimum=0.1)
TARSY_LLM_STALL_TIMEOUT = env_float("TARSY_LLM_STALL_TIMEOUT", 60, minimum=0.1)
TARSY_LLM_CALL_TIMEOUT = env_float("TARSY_LLM_CALL_TIMEOUT", 300, minimum=0.1)
# Workers and leases (sessions/services.py, worker/supervision.py).
TARSY_HEARTBEAT_INTERVAL = _queued("TARSY_HEARTBEAT_INTERVAL", 10, minimum=0.1)
TARSY_ORPHAN_THRESHOLD = _queued("TARSY_ORPHAN_THRESHOLD", 60, minimum=1)
TARSY_LEASE_CHECK_INTERVAL = env_float("TARSY_LEASE_CHECK_INTERVAL", 0.5, minimum=0.05)
TARSY_RECOVERY_INTERVAL = _queued("TARSY_RECOVERY_INTERVAL", 10, minimum=0.1)
TARSY_PENDING_RECOVERY_AFTER = env_float("TARSY_PENDING_RECOVERY_AFTER", 60, minimum=1)
TARSY_MAX_CONCURRENT_SESSIONS = env_int(
    "TARSY_MAX_CONCURRENT_SESSIONS", int(_QUEUE.get("TARSY_MAX_CONCURRENT_SESSIONS", 20)), minimum=0
)
# Each worker process runs many pieces of work at once on one event loop (worker/engine.py):
# an investigation is nearly all waiting. Chat answers and scorings have room of their own,
# so a worker full of investigations still answers questions. The default workers (2) have
# room for a few more than the global limit above: an uneven split of a burst between them
# leaves none waiting for a worker.
TARSY_WORKER_SESSIONS = env_int("TARSY_WORKER_SESSIONS", 12, minimum=1)
TARSY_WORKER_FOLLOWUPS = env_int("TARSY_WORKER_FOLLOWUPS", 8, minimum=1)
# A qcluster told to stop (SIGTERM, SIGINT) takes no more work at once and gives the work
# it runs this long to finish; then it ends what still runs (failed, or queued again with
# TARSY_SHUTDOWN_REQUEUE) and exits. The default leaves room inside Kubernetes' default
# 30 s terminationGracePeriodSeconds (worker/supervision.py).
TARSY_SHUTDOWN_GRACE = _queued("TARSY_SHUTDOWN_GRACE", 20, minimum=0)
TARSY_SHUTDOWN_REQUEUE = env_bool("TARSY_SHUTDOWN_REQUEUE", default=False)
# MCP servers shared by all sessions of a worker (agents/tools/mcp_hub.py); false: one set of
# server processes per agent execution, as before.
TARSY_MCP_SHARED = env_bool("TARSY_MCP_SHARED", default=True)
# A worker lists each of its servers' tools this often and records their health.
TARSY_MCP_HEALTH_INTERVAL = env_float("TARSY_MCP_HEALTH_INTERVAL", 15, minimum=0.1)
# The qcluster imports the LLM backends its providers use before forking workers.
TARSY_WARM_BACKENDS = env_bool("TARSY_WARM_BACKENDS", default=True)
# Tool results, in estimated tokens (characters / 4; agents/tools/results.py): what a
# timeline item keeps, the most any tool call hands the model, and the most of a result
# a summariser reads.
TARSY_TOOL_RESULT_STORAGE_TOKENS = env_int("TARSY_TOOL_RESULT_STORAGE_TOKENS", 8000, minimum=100)
TARSY_TOOL_RESULT_MAX_TOKENS = env_int("TARSY_TOOL_RESULT_MAX_TOKENS", 25000, minimum=100)
TARSY_SUMMARIZATION_INPUT_TOKENS = env_int("TARSY_SUMMARIZATION_INPUT_TOKENS", 100000, minimum=100)
# Addresses of reverse proxies (IPs or CIDR networks) whose X-Forwarded-User,
# X-Forwarded-Email and X-Remote-User headers name the API request's author.
TARSY_TRUSTED_PROXIES = env_list("TARSY_TRUSTED_PROXIES", [])
# /metrics: a scraper sends "Authorization: Bearer <TARSY_METRICS_TOKEN>"; without a token
# set, only logged-in staff may read it (or anyone, with TARSY_METRICS_PUBLIC=true).
TARSY_METRICS_TOKEN = env_str("TARSY_METRICS_TOKEN", "")
TARSY_METRICS_PUBLIC = env_bool("TARSY_METRICS_PUBLIC", default=False)
# How long a session's event-log rows outlive its end, and how many persistent events of a
# session are kept beyond that for reconnecting clients (the catch-up cap needs one more).
TARSY_EVENT_RETENTION = env_float("TARSY_EVENT_RETENTION", 60, minimum=0)
# Streamed text goes to the pages at most this often per worker session (seconds), past
# the database (sessions/streams.py), and is saved to the database at most every
# TARSY_STREAM_SAVE_INTERVAL (what a relay missed, what a page loading later shows).
TARSY_STREAM_FLUSH_INTERVAL = env_float("TARSY_STREAM_FLUSH_INTERVAL", 0.05, minimum=0)
TARSY_STREAM_SAVE_INTERVAL = env_float("TARSY_STREAM_SAVE_INTERVAL", 1.0, minimum=0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("TARSY_LOG_LEVEL", "INFO")},
    "loggers": {
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        "mcp": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
    },
}

# Alert data is capped at 1 MiB by TARSy itself (413); Django's own body limit sits
# well above it so that an oversized alert gets the 413 that names the limit rather
# than Django's generic 400.
DATA_UPLOAD_MAX_MEMORY_SIZE = 8 * 1024 * 1024
