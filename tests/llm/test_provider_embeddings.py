"""Providers' embedding models for investigation memory (issue 21; TARSY-GO-NEWER §1.1):
Google's ``batchEmbedContents`` and OpenAI's ``/embeddings`` through their SDKs, against a
fake server on 127.0.0.1 speaking each wire format. The key is read from its variable at
every call and never shows in an error; a failure to embed never fails a session."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.checks import check_memory_embedder
from agents.memory import WithMemory, memory_embedder, session_memories
from config.loader import ConfigError, get_config
from llm import embeddings
from llm.embeddings import (
    EmbeddingFailed,
    GoogleEmbedder,
    LocalHashingEmbedder,
    OpenAIEmbedder,
)
from sessions import services
from sessions.models import InjectedMemory, InvestigationMemory, TimelineEvent
from sessions.selectors.memory import recall

KEY_ENV = "TARSY_TEST_EMBEDDING_KEY"
KEY = "sk-test-" + "Q7w8E9r0T1y2U3i4" * 2  # what the variable holds; never in an error


class FakeEmbeddings:
    """Both providers' embedding endpoints. Each text's vector is the sum of its topics'
    (``topics``: word → direction), else ``other``, times 3 (not unit length: the client
    normalises). ``fail`` answers HTTP 500 with the key echoed; ``size`` and ``drop``
    answer vectors of the wrong size, or too few; ``delay`` answers late."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.topics: dict[str, list[float]] = {}
        self.fail = False
        self.size: int | None = None
        self.drop = 0
        self.delay = 0.0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                    }
                )
                if fake.delay:
                    time.sleep(fake.delay)
                if fake.fail:
                    key = self.headers.get("x-goog-api-key") or self.headers.get("Authorization")
                    self.answer(500, {"error": {"code": 500, "message": f"broken for {key}"}})
                elif self.path.endswith(":batchEmbedContents"):
                    vectors = [
                        fake.vector(r["content"]["parts"][0]["text"], r["outputDimensionality"])
                        for r in body["requests"]
                    ][fake.drop :]
                    self.answer(200, {"embeddings": [{"values": v} for v in vectors]})
                elif self.path.endswith("/embeddings"):
                    vectors = [fake.vector(t, body["dimensions"]) for t in body["input"]]
                    vectors = vectors[fake.drop :]
                    data = [
                        {"object": "embedding", "index": i, "embedding": v}
                        for i, v in enumerate(vectors)
                    ]
                    self.answer(
                        200,
                        {
                            "object": "list",
                            "data": data[::-1],  # any order: ``index`` says which
                            "model": body["model"],
                            "usage": {"prompt_tokens": 3, "total_tokens": 3},
                        },
                    )
                else:
                    self.answer(404, {"error": {"code": 404, "message": "no such path"}})

            def answer(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        # A client that timed out has gone when the late answer is written: not news.
        self.server.handle_error = lambda request, address: None  # type: ignore[method-assign]
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def vector(self, text: str, dimensions: int) -> list[float]:
        size = self.size or dimensions
        vector = np.zeros(size)
        for word, direction in self.topics.items():
            if word in text.lower():
                vector[: len(direction)] += direction
        if not vector.any():
            vector[size - 1] = 1.0
        return (vector * 3).tolist()


@pytest.fixture
def fake() -> Iterator[FakeEmbeddings]:
    server = FakeEmbeddings()
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
        server.thread.join(5)


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    for variable in ("TARSY_GOOGLE_BASE_URL", "TARSY_OPENAI_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)


def google(fake: FakeEmbeddings, **given: Any) -> GoogleEmbedder:
    settings = {"api_key_env": KEY_ENV, "dimensions": 4, "base_url": fake.url, **given}
    return GoogleEmbedder(**settings)


def openai(fake: FakeEmbeddings, **given: Any) -> OpenAIEmbedder:
    settings = {
        "model": "text-embedding-3-small",
        "api_key_env": KEY_ENV,
        "dimensions": 4,
        "base_url": f"{fake.url}/v1",
        **given,
    }
    return OpenAIEmbedder(**settings)


def unit(vector: list[float]) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float32)
    return array / np.linalg.norm(array)


# --- the wire ------------------------------------------------------------------------------


def test_google_sends_one_request_per_text_with_its_task_and_size(fake, key):
    fake.topics = {"payments": [1, 2, 2]}
    embedder = google(fake)
    assert (embedder.name, embedder.dimensions, embedder.gate) == (
        "google:gemini-embedding-2-preview",
        4,
        0.7,
    )
    rows = embedder.embed(["payments-api OOMKilled", "DNS lookups fail"], "query")
    [request] = fake.requests
    assert request["path"] == "/v1beta/models/gemini-embedding-2-preview:batchEmbedContents"
    assert request["headers"]["x-goog-api-key"] == KEY
    assert request["body"]["requests"] == [
        {
            "content": {"parts": [{"text": text}], "role": "user"},
            "taskType": "RETRIEVAL_QUERY",
            "outputDimensionality": 4,
            "model": "models/gemini-embedding-2-preview",
        }
        for text in ("payments-api OOMKilled", "DNS lookups fail")
    ]
    assert rows.dtype == np.float32
    np.testing.assert_allclose(rows, [unit([1, 2, 2, 0]), unit([0, 0, 0, 1])], atol=1e-6)
    embedder.embed(["payments lesson"], "document")
    assert fake.requests[1]["body"]["requests"][0]["taskType"] == "RETRIEVAL_DOCUMENT"


def test_google_takes_tarsys_base_url_with_its_api_version(fake, key):
    google(fake, base_url=f"{fake.url}/v1beta/", model="gemini-embedding-001").embed(["x"], "query")
    assert fake.requests[0]["path"] == "/v1beta/models/gemini-embedding-001:batchEmbedContents"


def test_openai_sends_model_input_and_dimensions_with_the_bearer_key(fake, key):
    fake.topics = {"payments": [0, 3, 4]}
    embedder = openai(fake)
    assert embedder.name == "openai:text-embedding-3-small"
    rows = embedder.embed(["DNS lookups fail", "payments-api OOMKilled"], "document")
    [request] = fake.requests
    assert request["path"] == "/v1/embeddings"
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    assert request["body"] == {
        "model": "text-embedding-3-small",
        "input": ["DNS lookups fail", "payments-api OOMKilled"],
        "dimensions": 4,
        "encoding_format": "float",
    }  # no task type: OpenAI has none
    # Answered in reverse order: each row is still its own text's.
    np.testing.assert_allclose(rows, [unit([0, 0, 0, 1]), unit([0, 3, 4, 0])], atol=1e-6)


def test_an_openai_compatible_server_that_names_no_key_variable_needs_none(fake, key):
    embedder = OpenAIEmbedder(model="nomic", dimensions=4, base_url=fake.url)
    embedder.embed(["x"], "query")
    assert fake.requests[0]["headers"]["authorization"] == "Bearer EMPTY"


@pytest.mark.parametrize("make", [google, openai])
def test_many_texts_go_in_batches_of_a_hundred_in_order(fake, key, make):
    fake.topics = {"payments": [1, 0, 0]}
    texts = [("payments " if i % 3 == 0 else "dns ") + str(i) for i in range(250)]
    rows = make(fake).embed(texts, "document")
    sizes = [len(r["body"].get("requests") or r["body"].get("input") or []) for r in fake.requests]
    assert sizes == [100, 100, 50]
    expected = np.array(
        [unit([1, 0, 0, 0]) if i % 3 == 0 else unit([0, 0, 0, 1]) for i in range(250)]
    )
    np.testing.assert_allclose(rows, expected, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-6)


@pytest.mark.parametrize("make", [google, openai])
def test_a_blank_text_is_a_zero_row_and_is_not_sent(fake, key, make):
    rows = make(fake).embed(["  ", "dns", ""], "query")
    assert not rows[0].any()
    assert not rows[2].any()
    assert np.linalg.norm(rows[1]) == pytest.approx(1.0)
    sent = fake.requests[0]["body"]
    assert (sent.get("input") or [r["content"]["parts"][0]["text"] for r in sent["requests"]]) == [
        "dns"
    ]
    assert make(fake).embed(["", " "], "query").shape == (2, 4)
    assert len(fake.requests) == 1  # nothing to embed: no request


# --- failures ------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [google, openai])
def test_an_unset_key_variable_is_named_and_nothing_is_sent(fake, monkeypatch, make):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(EmbeddingFailed, match=f"environment variable {KEY_ENV} .* is not set"):
        make(fake).embed(["payments"], "query")
    assert fake.requests == []
    monkeypatch.setenv(KEY_ENV, KEY)  # read at every call, not when it was made
    embedder = make(fake)
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(EmbeddingFailed):
        embedder.embed(["payments"], "query")
    monkeypatch.setenv(KEY_ENV, KEY)
    assert embedder.embed(["payments"], "query").shape == (1, 4)
    assert KEY not in repr(embedder)
    assert KEY not in str(vars(embedder))


@pytest.mark.parametrize("make", [google, openai])
def test_an_http_error_fails_with_the_key_masked(fake, key, make):
    fake.fail = True
    with pytest.raises(EmbeddingFailed) as failed:
        make(fake).embed(["payments"], "document")
    message = str(failed.value)
    assert "HTTP 500" in message
    assert "broken for" in message  # what the provider said
    assert KEY not in message
    assert failed.value.__cause__ is None  # the SDK's unmasked error is not chained


@pytest.mark.parametrize("make", [google, openai])
def test_vectors_of_the_wrong_size_or_number_fail(fake, key, make):
    fake.size = 3
    with pytest.raises(EmbeddingFailed, match="vectors of 3 dimensions, not the 4 configured"):
        make(fake).embed(["payments"], "query")


@pytest.mark.parametrize("make", [google, openai])
def test_too_few_vectors_fail(fake, key, make):
    fake.drop = 1
    with pytest.raises(EmbeddingFailed, match="asked for 2 vectors, got 1"):
        make(fake).embed(["payments", "dns"], "query")


@pytest.mark.parametrize("make", [google, openai])
def test_a_slow_provider_times_out(fake, key, make, monkeypatch):
    monkeypatch.setattr(embeddings, "TIMEOUT", 0.3)
    fake.delay = 1.5
    started = time.monotonic()
    with pytest.raises(EmbeddingFailed, match="time"):
        make(fake).embed(["payments"], "query")
    assert time.monotonic() - started < 1.4


# --- the configuration ---------------------------------------------------------------------


def configured(tarsy_config, embedding: dict | None):
    memory: dict[str, Any] = {"enabled": True}
    if embedding is not None:
        memory["embedding"] = embedding
    tarsy_config(lambda config: config["defaults"].update(memory=memory))
    return get_config()


def test_memory_embedder_follows_defaults_memory_embedding(tarsy_config, monkeypatch):
    for variable in ("TARSY_GOOGLE_BASE_URL", "TARSY_OPENAI_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    assert isinstance(memory_embedder(configured(tarsy_config, None)), LocalHashingEmbedder)
    given = {
        "provider": "openai",
        "model": "bge-small",
        "api_key_env": KEY_ENV,
        "dimensions": 384,
        "base_url": "http://embeddings.internal:8080/v1",
    }
    embedder = memory_embedder(configured(tarsy_config, given))
    assert isinstance(embedder, OpenAIEmbedder)
    assert (embedder.name, embedder.dimensions, embedder.api_key_env, embedder.base_url) == (
        "openai:bge-small",
        384,
        KEY_ENV,
        "http://embeddings.internal:8080/v1",
    )
    # As for the LLM providers: TARSY_OPENAI_BASE_URL reaches every OpenAI one.
    monkeypatch.setenv("TARSY_OPENAI_BASE_URL", "http://gateway.internal/v1")
    assert memory_embedder(get_config()).base_url == "http://gateway.internal/v1"
    # A block that names no provider: TARSy's defaults, Google's.
    embedder = memory_embedder(configured(tarsy_config, {"model": "gemini-embedding-001"}))
    assert isinstance(embedder, GoogleEmbedder)
    assert (embedder.name, embedder.dimensions, embedder.api_key_env, embedder.gate) == (
        "google:gemini-embedding-001",
        768,
        "GOOGLE_API_KEY",
        0.7,
    )


@pytest.mark.parametrize(
    ("embedding", "problem"),
    [
        ({"provider": "cohere"}, "unknown embedding provider 'cohere'; allowed: google, openai"),
        ({"provider": "openai", "base_url": "embeddings:8080"}, "expected an http:// or https://"),
        ({"provider": "google", "dimensions": 0}, "dimensions"),
    ],
)
def test_a_wrong_embedding_setting_is_a_configuration_error(tarsy_config, embedding, problem):
    with pytest.raises(ConfigError) as refused:
        configured(tarsy_config, embedding)
    assert "embedding" in str(refused.value)
    assert problem in str(refused.value)


# --- memory with a provider's embeddings ---------------------------------------------------

LESSON = "payments-api pods are OOMKilled at a 512Mi memory limit; raising it to 1Gi fixed it"
OOM_ALERT = "Pod payments-api-7d9f OOMKilled in namespace payments: memory limit exceeded"


@pytest.fixture
def provider_memory(fake, key, tarsy_config):
    """Memory on, embedded by an OpenAI-compatible server (the fake)."""
    fake.topics = {"payments": [1, 0, 0], "dns": [0, 1, 0]}
    embedding = {
        "provider": "openai",
        "model": "fake-embed",
        "api_key_env": KEY_ENV,
        "dimensions": 4,
        "base_url": f"{fake.url}/v1",
    }
    return configured(tarsy_config, embedding)


def learn(content: str = LESSON, embedder=None) -> InvestigationMemory:
    return services.memory_create(
        embedder=embedder or memory_embedder(get_config()),
        content=content,
        category="semantic",
        valence="positive",
    )


def claimed(alert_data: str = OOM_ALERT):
    session = services.session_create(
        alert_type="kubernetes",
        alert_data=alert_data,
        chain_id="kubernetes-investigation",
        author="t",
    )
    lease = services.session_claim(session_id=session.id, worker_id="w:1").lease
    assert lease is not None
    return session, lease


@pytest.mark.django_db
def test_a_lesson_is_stored_and_recalled_with_the_providers_vectors(provider_memory, fake):
    lesson = learn()
    assert (lesson.embedding_model, lesson.dimensions) == ("openai:fake-embed", 4)
    stored = np.frombuffer(bytes(lesson.embedding), dtype="<f4")
    np.testing.assert_allclose(stored, unit([1, 0, 0, 0]), atol=1e-6)
    [found] = recall(memory_embedder(get_config()), OOM_ALERT, limit=5)
    assert found.memory.id == lesson.id
    assert found.similarity == pytest.approx(1.0, abs=1e-6)
    # Under the gate (orthogonal), and another embedder's store: nothing.
    assert recall(memory_embedder(get_config()), "CoreDNS dns lookups fail", limit=5) == []
    assert recall(LocalHashingEmbedder(), OOM_ALERT, limit=5) == []
    assert [r["body"]["input"] for r in fake.requests] == [
        [LESSON],
        [OOM_ALERT],
        ["CoreDNS dns lookups fail"],
    ]


@pytest.mark.django_db
def test_without_the_key_nothing_is_recalled_or_learned_and_nothing_breaks(
    provider_memory, monkeypatch
):
    lesson = learn()
    session, lease = claimed()
    monkeypatch.delenv(KEY_ENV)
    config = get_config()
    with pytest.raises(EmbeddingFailed, match=KEY_ENV):
        recall(memory_embedder(config), OOM_ALERT, limit=5)
    # A session's start: nothing injected, no error.
    memories = async_to_sync(session_memories)(session, lease, config)
    assert (memories.recalled, memories.section) == ((), "")
    assert not InjectedMemory.objects.exists()
    # The recall tool: an error the agent reads (naming the variable, not a value).
    tools = WithMemory(None, config=config, session=session, injected=[])  # type: ignore[arg-type]
    result = async_to_sync(tools.call_tool)("recall_past_investigations", {"query": "payments"})
    assert result.is_error
    assert KEY_ENV in result.content
    assert KEY not in result.content
    # A Reflector's lesson is skipped; its other actions still apply.
    created = services.memory_reflection_apply(
        lease=lease,
        session=session,
        embedder=memory_embedder(config),
        create=[{"content": "payments again", "category": "episodic", "valence": "neutral"}],
        reinforce=[str(lesson.id)],
        deprecate=[],
    )
    assert created == []
    lesson.refresh_from_db()
    assert lesson.seen_count == 2
    assert InvestigationMemory.objects.count() == 1


@pytest.mark.django_db
def test_an_edit_that_cannot_be_embedded_is_a_502_and_changes_nothing(
    provider_memory, monkeypatch, client, user, api_token, fake
):
    lesson = learn()
    user.is_staff = True
    user.save()

    def patch(body: dict):
        return client.patch(
            f"/api/v1/memories/{lesson.id}",
            data=json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {api_token}",
        )

    monkeypatch.delenv(KEY_ENV)
    refused = patch({"content": "payments pods need 2Gi now"})
    assert refused.status_code == 502
    error = refused.json()["error"]
    assert "cannot be embedded" in error
    assert KEY_ENV in error
    lesson.refresh_from_db()
    assert lesson.content == LESSON
    fake.fail = True
    monkeypatch.setenv(KEY_ENV, KEY)
    refused = patch({"content": "payments pods need 2Gi now"})
    assert refused.status_code == 502
    assert "HTTP 500" in refused.json()["error"]
    assert KEY not in refused.json()["error"]
    fake.fail = False
    assert patch({"content": "payments pods need 2Gi now"}).status_code == 200
    lesson.refresh_from_db()
    assert (lesson.content, lesson.embedding_model) == (
        "payments pods need 2Gi now",
        "openai:fake-embed",
    )


@pytest.mark.django_db
def test_lessons_of_another_embedder_are_reported_until_reembedded(provider_memory, monkeypatch):
    old = learn(embedder=LocalHashingEmbedder())
    [warning] = check_memory_embedder(None, databases=["default"])
    assert warning.id == "tarsy.W030"
    assert "1 stored lesson was embedded by local-hashing-v1 (768 dimensions)" in warning.msg
    assert "openai:fake-embed (4 dimensions)" in warning.msg
    assert "manage.py tarsy_reembed" in warning.msg
    assert check_memory_embedder(None, databases=None) == []  # asked where the database is
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(CommandError, match=f"{KEY_ENV} .* is not set; 0 of 1 re-embedded"):
        call_command("tarsy_reembed", stdout=io.StringIO())
    monkeypatch.setenv(KEY_ENV, KEY)
    call_command("tarsy_reembed", stdout=io.StringIO())
    old.refresh_from_db()
    assert (old.embedding_model, old.dimensions) == ("openai:fake-embed", 4)
    assert check_memory_embedder(None, databases=["default"]) == []


@pytest.mark.real_process  # a session's run starts its MCP servers
@pytest.mark.django_db(transaction=True)
def test_a_session_and_its_score_succeed_when_the_embedder_cannot_embed(
    provider_memory, monkeypatch, scripted_provider, caplog
):
    from agents.memory import REFLECTOR
    from worker.tasks import run_session, score_session

    learn()
    monkeypatch.delenv(KEY_ENV)
    reflection = {"create": [{"content": "x", "category": "semantic", "valence": "neutral"}]}
    scripted_provider(
        [{"text": "The memory limit is too low."}],
        agents={
            "ScoringAgent": {"turns": [{"text": "Fine.\nSCORE: 80"}, {"text": "None."}]},
            REFLECTOR: {"turns": [{"text": json.dumps(reflection)}]},
        },
    )
    # The deep-investigation chain is scored (TARSy's example chain).
    session = services.session_create(
        alert_data="alert: PodCrashLooping\nnamespace: payments",
        author="t",
        alert_type="DeepInvestigation",
        chain_id="deep-investigation",
    )
    assert run_session(str(session.id)) == "completed"
    assert (
        f"no lessons recalled: embedding model openai:fake-embed: environment variable {KEY_ENV}"
        in caplog.text
    )
    assert not InjectedMemory.objects.filter(session=session).exists()
    assert not TimelineEvent.objects.filter(session=session, event_type="memory_injected").exists()
    score = session.scores.get(status="pending")
    score_session(str(score.id))
    score.refresh_from_db()
    assert (score.status, score.total_score) == ("completed", 80)
    assert InvestigationMemory.objects.count() == 1  # the one learned with the key
    assert "no reflection, the embedder failed" in caplog.text
    assert KEY not in caplog.text
