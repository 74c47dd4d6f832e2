from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from llm.models import LLMProvider, ProviderType
from sessions.auth import api_token_create
from sessions.models import AlertSession, SessionStatus
from sessions.services import Lease


@pytest.fixture(autouse=True)
def fresh_mcp_hub():
    """Each test starts the MCP servers it uses: no server outlives its test."""
    yield
    from agents.tools import mcp_hub

    if mcp_hub._hub is not None:
        mcp_hub._hub.close()
        mcp_hub._hub = None


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite the golden files of the chain scenarios (tests/agents/golden/)",
    )


def running_session(**fields) -> tuple[AlertSession, Lease]:
    """A session some worker is running, and that worker's lease (no task, no queue)."""
    token = uuid.uuid4()
    defaults = {
        "alert_type": "kubernetes",
        "alert_data": "d",
        "chain_id": "kubernetes-investigation",
        "status": SessionStatus.IN_PROGRESS,
        "worker_id": "test-worker",
        "heartbeat_at": timezone.now(),
        "started_at": timezone.now(),
    }
    session = AlertSession.objects.create(**{**defaults, **fields, "lease_token": token})
    return session, Lease(session.id, token)


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user("alice", password="s3cret-pass")


@pytest.fixture
def outsider(db):
    return get_user_model().objects.create_user("mallory", password="s3cret-pass")


@pytest.fixture
def browser_client(user) -> Client:
    """A logged-in browser that enforces CSRF like a real one."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


@pytest.fixture
def api_token(user) -> str:
    return api_token_create(username=user.username)


@pytest.fixture
def demo_provider(db) -> LLMProvider:
    return LLMProvider.objects.create(
        name="demo",
        type=ProviderType.SCRIPTED,
        model="demo-investigator",
        options={"script": "demo", "chunk_delay": 0},
        is_default=True,
    )


@pytest.fixture
def write_script(tmp_path: Path):
    """Write a scripted-provider script and return its path."""

    def write(turns: list[dict], **extra) -> str:
        path = tmp_path / f"script-{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump({"chunk_delay": 0, **extra, "turns": turns}))
        return str(path)

    return write


@pytest.fixture
def scripted_provider(db, write_script):
    """A default scripted provider replaying the given turns."""

    def make(turns: list[dict], **extra) -> LLMProvider:
        return LLMProvider.objects.create(
            name="scripted-test",
            type=ProviderType.SCRIPTED,
            model="script",
            options={"script": write_script(turns, **extra)},
            is_default=True,
        )

    return make


@pytest.fixture
def tarsy_config(settings, tmp_path: Path):
    """Run with a modified copy of the bundled tarsy.yaml: ``tarsy_config(change)``."""
    from config.loader import get_config

    def use(change) -> None:
        config = yaml.safe_load((settings.BASE_DIR / "config" / "tarsy.yaml").read_text())
        change(config)
        path = tmp_path / "tarsy.yaml"
        path.write_text(yaml.safe_dump(config))
        settings.TARSY_CONFIG = str(path)
        get_config.cache_clear()

    yield use
    get_config.cache_clear()


@pytest.fixture
def scripted_summaries(db) -> Callable[[dict], None]:
    """For tests whose model is a fake server: the executive summary that ends every
    session goes to a scripted provider instead, so the fake answers only the agent.
    Call it from a ``tarsy_config`` change."""
    LLMProvider.objects.create(
        name="summaries", type=ProviderType.SCRIPTED, model="demo", options={"chunk_delay": 0}
    )

    def use(config: dict) -> None:
        for chain in config["agent_chains"].values():
            chain["executive_summary_provider"] = "summaries"

    return use
