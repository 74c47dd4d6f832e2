"""Runbooks for real: alerts submitted through the API and the form, sessions run on the
scripted provider, and GitHub played by a local HTTP server (``github_server.py``) that
the real GitHub URLs are routed to."""

from __future__ import annotations

import json

import pytest

from sessions import runbooks
from sessions.models import AlertSession, LLMInteraction, TimelineEvent
from tests.agents.github_server import LocalGitHub
from worker.tasks import run_session

pytestmark = pytest.mark.django_db(transaction=True)

RUNBOOK = "# Crash loops\n\n1. Read the pod's logs.\n2. Check the last rollout.\n"
BLOB_URL = "https://github.com/acme/runbooks/blob/main/k8s/crashloop.md"
RAW_PATH = "acme/runbooks/main/k8s/crashloop.md"
GITHUB_TOKEN = "ghp_" + "R" * 36


@pytest.fixture
def github(monkeypatch):
    server = LocalGitHub(files={RAW_PATH: RUNBOOK})
    monkeypatch.setattr(runbooks, "transport", server.transport())
    runbooks._cache.clear()
    yield server
    runbooks._cache.clear()
    server.close()


@pytest.fixture
def configure(tarsy_config, scripted_provider):
    """A one-agent chain without tools for the alert type ``runbook-test``, the scripted
    model answering once, and ``system`` / ``defaults`` changes on top."""

    def use(*, system=None, defaults=None) -> None:
        def change(config: dict) -> None:
            config["agents"]["Reader"] = {"mcp_servers": []}
            config["agent_chains"]["runbook-test"] = {
                "alert_types": ["runbook-test"],
                "stages": [{"name": "investigation", "agents": [{"name": "Reader"}]}],
            }
            config.setdefault("system", {}).update(system or {})
            config.setdefault("defaults", {}).update(defaults or {})

        tarsy_config(change)
        scripted_provider([{"text": "## Summary\nThe pod crash-loops."}])

    return use


def post_alert(client, api_token, **body):
    return client.post(
        "/api/v1/alerts",
        data=json.dumps({"data": "pod payments-api is crash-looping", **body}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_token}",
    )


def investigate(client, api_token, **body) -> AlertSession:
    response = post_alert(client, api_token, alert_type="runbook-test", **body)
    assert response.status_code == 202, response.content
    session_id = response.json()["session_id"]
    assert run_session(session_id) == "completed"
    return AlertSession.objects.get(id=session_id)


def prompt_of(session: AlertSession) -> str:
    call = LLMInteraction.objects.filter(session=session).order_by("id").first()
    return json.dumps(call.request_messages, ensure_ascii=False)


def warnings_of(session: AlertSession) -> list[TimelineEvent]:
    return list(TimelineEvent.objects.filter(session=session, event_type="warning"))


def test_a_github_runbook_is_fetched_raw_with_the_token_and_given_to_the_agent(
    client, api_token, github, configure, monkeypatch
):
    configure(system={"github": {"token_env": "TEST_GITHUB_TOKEN"}})
    monkeypatch.setenv("TEST_GITHUB_TOKEN", GITHUB_TOKEN)
    session = investigate(client, api_token, runbook=BLOB_URL)
    assert session.runbook_url == BLOB_URL
    assert session.runbook == ""
    [request] = github.requests
    assert (request.host, request.path) == ("raw.githubusercontent.com", f"/{RAW_PATH}")
    assert request.headers["authorization"] == f"Bearer {GITHUB_TOKEN}"
    assert "2. Check the last rollout." in prompt_of(session)
    assert not warnings_of(session)


def test_a_runbook_on_a_domain_off_the_allowlist_is_refused_at_submission(
    client, api_token, github, configure
):
    configure(system={"runbooks": {"allowed_domains": ["github.com", "docs.example.org"]}})
    response = post_alert(client, api_token, runbook="https://evil.example.com/runbook.md")
    assert response.status_code == 400
    message = response.json()["error"]
    assert message.startswith("invalid runbook URL: ")
    assert "'evil.example.com'" in message
    assert "allowed domains: github.com, docs.example.org" in message
    assert not AlertSession.objects.exists()
    assert not github.requests


@pytest.mark.parametrize(
    ("runbook", "problem"),
    [
        ("ftp://github.com/acme/runbooks/x.md", "scheme 'ftp' is not allowed"),
        ("https://github.com.evil.org/x.md", "domain 'github.com.evil.org' is not allowed"),
        ("https://github.com/x?access_token=ghp_" + "a" * 36, "looks like a secret"),
    ],
)
def test_other_bad_runbook_urls_are_named(client, api_token, configure, runbook, problem):
    configure()
    response = post_alert(client, api_token, runbook=runbook)
    assert response.status_code == 400
    assert problem in response.json()["error"]


def test_the_form_shows_the_allowlist_error(browser_client, configure):
    configure()
    page = browser_client.get("/sessions/new/")
    response = browser_client.post(
        "/sessions/new/",
        {
            "csrfmiddlewaretoken": page.cookies["csrftoken"].value,
            "alert_type": "runbook-test",
            "data": "pod crash-looping",
            "runbook": "https://pastebin.example/raw/1",
        },
    )
    assert response.status_code == 400
    assert "invalid runbook URL: domain &#x27;pastebin.example&#x27; is not allowed" in (
        response.content.decode()
    )
    assert "github.com, raw.githubusercontent.com" in response.content.decode()


def test_a_runbook_that_cannot_be_fetched_is_a_warning_and_the_investigation_goes_on(
    client, api_token, github, configure, browser_client
):
    configure()
    missing = "https://github.com/acme/runbooks/blob/main/k8s/gone.md"
    session = investigate(client, api_token, runbook=missing)
    assert session.status == "completed"
    assert session.final_analysis.startswith("## Summary")
    [warning] = warnings_of(session)
    assert "HTTP 404" in warning.content
    assert "goes on without it" in warning.content
    assert warning.metadata == {"source": "runbook", "url": missing}
    assert "## Runbook" not in prompt_of(session)
    page = browser_client.get(f"/sessions/{session.id}/").content.decode()
    assert 'class="item warning completed"' in page
    assert "Warning: runbook" in page


def test_a_runbook_server_that_is_down_is_a_warning_too(client, api_token, github, configure):
    configure()
    github.close()
    session = investigate(client, api_token, runbook=BLOB_URL)
    assert session.status == "completed"
    [warning] = warnings_of(session)
    assert "could not be fetched" in warning.content


def test_a_fetched_runbook_is_reused_until_the_cache_ttl_passes(github, configure, monkeypatch):
    configure(system={"runbooks": {"cache_ttl": "30s"}})
    from config.loader import get_config

    now = [1000.0]
    monkeypatch.setattr(runbooks._cache, "clock", lambda: now[0])
    assert runbooks.fetch(BLOB_URL, get_config()) == RUNBOOK
    github.files[RAW_PATH] = "# Edited"
    now[0] += 29
    assert runbooks.fetch(BLOB_URL, get_config()) == RUNBOOK
    assert len(github.requests) == 1  # the second one was a cache hit
    now[0] += 2
    assert runbooks.fetch(BLOB_URL, get_config()) == "# Edited"
    assert len(github.requests) == 2


def test_a_secret_in_the_runbook_is_masked_before_the_model_or_the_page_sees_it(
    client, api_token, github, configure, browser_client
):
    configure()
    github.files[RAW_PATH] = RUNBOOK + f"\nexport GITHUB_TOKEN={GITHUB_TOKEN}\n"
    session = investigate(client, api_token, runbook=BLOB_URL)
    prompt = prompt_of(session)
    assert "Read the pod's logs" in prompt
    assert GITHUB_TOKEN not in prompt
    assert "[MASKED_" in prompt
    assert GITHUB_TOKEN not in browser_client.get(f"/sessions/{session.id}/trace/").content.decode()


def test_the_token_goes_to_github_only(github, configure, monkeypatch):
    configure(
        system={
            "github": {"token_env": "TEST_GITHUB_TOKEN"},
            "runbooks": {"allowed_domains": ["docs.example.org"]},
        }
    )
    monkeypatch.setenv("TEST_GITHUB_TOKEN", GITHUB_TOKEN)
    github.files["runbooks/crashloop.md"] = RUNBOOK
    from config.loader import get_config

    assert runbooks.fetch("https://docs.example.org/runbooks/crashloop.md", get_config()) == RUNBOOK
    [request] = github.requests
    assert request.host == "docs.example.org"
    assert "authorization" not in request.headers


def test_a_large_runbook_is_cut_at_max_bytes(github, configure):
    configure(system={"runbooks": {"max_bytes": 1000}})
    github.files[RAW_PATH] = "x" * 5000
    from config.loader import get_config

    text = runbooks.fetch(BLOB_URL, get_config())
    assert text.startswith("x" * 1000 + "\n\n[The runbook was cut here, at 1000 bytes.]")
    assert "x" * 1001 not in text


def test_a_text_runbook_is_kept_as_text_and_masked(client, api_token, configure):
    configure()
    session = investigate(client, api_token, runbook=f"Restart it. token: {GITHUB_TOKEN}")
    assert session.runbook_url == ""
    assert session.runbook.startswith("Restart it.")
    assert GITHUB_TOKEN not in session.runbook
    assert "Restart it." in prompt_of(session)


def test_the_default_runbook_applies_when_the_alert_brings_none(
    client, api_token, github, configure
):
    configure(defaults={"runbook": BLOB_URL})
    session = investigate(client, api_token)
    assert "1. Read the pod's logs." in prompt_of(session)
    with_own = investigate(client, api_token, runbook="Only look at the events.")
    assert "Only look at the events." in prompt_of(with_own)
    assert "1. Read the pod's logs." not in prompt_of(with_own)


REPO = "https://github.com/acme/runbooks/tree/main/k8s"


def folder_item(path: str, kind: str = "file") -> dict:
    return {
        "name": path.rsplit("/", 1)[-1],
        "path": path,
        "type": kind,
        "html_url": f"https://github.com/acme/runbooks/blob/main/{path}",
    }


def test_the_runbooks_of_the_repository_are_listed_for_the_api_and_the_form(
    client, api_token, github, configure, browser_client
):
    configure(system={"runbooks": {"repo_url": REPO}})
    github.folders["acme/runbooks/k8s"] = [
        folder_item("k8s/crashloop.md"),
        folder_item("k8s/notes.txt"),
        folder_item("k8s/network", "dir"),
    ]
    github.folders["acme/runbooks/k8s/network"] = [folder_item("k8s/network/dns.md")]
    response = client.get("/api/v1/runbooks", HTTP_AUTHORIZATION=f"Bearer {api_token}")
    assert response.status_code == 200
    assert response.json() == [
        "https://github.com/acme/runbooks/blob/main/k8s/crashloop.md",
        "https://github.com/acme/runbooks/blob/main/k8s/network/dns.md",
    ]
    assert github.requests[0].host == "api.github.com"
    assert github.requests[0].query == {"ref": ["main"]}
    page = browser_client.get("/sessions/new/").content.decode()
    assert 'name="runbook_choice"' in page
    assert '<option value="https://github.com/acme/runbooks/blob/main/k8s/network/dns.md"' in page


def test_a_runbook_picked_in_the_form_is_the_sessions_runbook(browser_client, github, configure):
    configure(system={"runbooks": {"repo_url": REPO}})
    github.folders["acme/runbooks/k8s"] = [folder_item("k8s/crashloop.md")]
    page = browser_client.get("/sessions/new/")
    response = browser_client.post(
        "/sessions/new/",
        {
            "csrfmiddlewaretoken": page.cookies["csrftoken"].value,
            "alert_type": "runbook-test",
            "data": "pod crash-looping",
            "runbook_choice": BLOB_URL,
        },
    )
    assert response.status_code == 302
    assert AlertSession.objects.get().runbook_url == BLOB_URL


def test_the_listing_is_empty_when_github_fails(client, api_token, github, configure):
    configure(system={"runbooks": {"repo_url": REPO}})
    github.status = 500
    response = client.get("/api/v1/runbooks", HTTP_AUTHORIZATION=f"Bearer {api_token}")
    assert response.status_code == 200
    assert response.json() == []


def test_the_listing_is_empty_without_a_repository(client, api_token, github, configure):
    configure()
    response = client.get("/api/v1/runbooks", HTTP_AUTHORIZATION=f"Bearer {api_token}")
    assert response.json() == []
    assert not github.requests


def test_github_base_urls_send_fetches_and_listings_elsewhere_with_the_token(
    github, configure, monkeypatch
):
    """TARSY_GITHUB_RAW_URL / TARSY_GITHUB_API_URL (an egress gateway): GitHub's URLs are
    judged as GitHub's (allowlist, token) and requested at the base URL instead."""
    configure(system={"github": {"token_env": "TEST_GITHUB_TOKEN"}, "runbooks": {"repo_url": REPO}})
    monkeypatch.setenv("TEST_GITHUB_TOKEN", GITHUB_TOKEN)
    monkeypatch.setattr(runbooks, "transport", None)  # no routing: the variables do it
    gateway = f"http://127.0.0.1:{github.port}/gateway/"
    monkeypatch.setenv("TARSY_GITHUB_RAW_URL", gateway + "raw")
    monkeypatch.setenv("TARSY_GITHUB_API_URL", gateway + "api")
    github.files[f"gateway/raw/{RAW_PATH}"] = RUNBOOK
    github.files["gateway/api/repos/acme/runbooks/contents/k8s"] = json.dumps(
        [folder_item("k8s/crashloop.md")]
    )
    from config.loader import get_config

    assert runbooks.fetch(BLOB_URL, get_config()) == RUNBOOK
    assert runbooks.list_runbooks(get_config()) == [BLOB_URL]
    raw, api = github.requests
    assert (raw.host, raw.path) == ("127.0.0.1", f"/gateway/raw/{RAW_PATH}")
    assert (api.path, api.query) == (
        "/gateway/api/repos/acme/runbooks/contents/k8s",
        {"ref": ["main"]},
    )
    assert [r.headers["authorization"] for r in (raw, api)] == [f"Bearer {GITHUB_TOKEN}"] * 2
    # Another allowed host is not GitHub's: neither redirected nor given the token.
    assert runbooks._reached("https://docs.example.org/a.md") == "https://docs.example.org/a.md"
