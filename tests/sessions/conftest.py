from __future__ import annotations

import pytest

from tests.sessions.slack_server import LocalSlack


@pytest.fixture
def stand_in():
    """A local stand-in for Slack's Web API (tests/sessions/slack_server.py)."""
    server = LocalSlack()
    yield server
    server.close()
