from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model

from sessions import services
from tests.conftest import running_session

pytestmark = pytest.mark.django_db

PAGES = [
    "alertsession",
    "stage",
    "agentexecution",
    "timelineevent",
    "message",
    "llminteraction",
    "mcpinteraction",
    "sessionevent",
    "apitoken",
    "workercluster",
]


@pytest.mark.parametrize("model", PAGES)
def test_every_admin_list_and_record_renders(client, model):
    admin = get_user_model().objects.create_superuser("root", "", "pw-123456789")
    client.force_login(admin)
    _, lease = running_session()
    services.timeline_event_add(lease=lease, event_type="llm_response", content="hi")
    services.worker_cluster_beat(cluster_id=uuid.uuid4(), host="h", pid=1, workers=2)
    response = client.get(f"/admin/alert_sessions/{model}/")
    assert response.status_code == 200
    assert client.get(f"/admin/alert_sessions/{model}/add/").status_code == 403  # read-only
