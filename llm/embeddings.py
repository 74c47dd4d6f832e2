"""Text embeddings for investigation memory (TARSy's ADR-0014; issue 21).

An ``Embedder`` turns texts into unit-length float32 vectors of a fixed size. Stored
vectors say which embedder made them (``name``): vectors of two embedders are never
compared, and changing the embedder means re-embedding what is stored.

``LocalHashingEmbedder`` needs no key, no network and no model download: feature
hashing of a text's words. It is the weaker default — it matches shared
words, not meaning — so that memory works in the demo, in tests and air-gapped; a
provider's embedding model replaces it where one is configured. Its similarities run
lower than a learned model's, so it carries its own similarity gate (``gate``).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections import Counter
from typing import Literal, Protocol

import numpy as np

Task = Literal["query", "document"]

# Words: letters and digits, with the inner dashes, dots and underscores of names
# (payments-api, kube-system, v1.2) kept together.
_WORD = re.compile(r"[0-9a-z]+(?:[._-][0-9a-z]+)*")


def words(text: str) -> list[str]:
    """The lower-cased words of a text, as keyword search and the local embedder see it."""
    return _WORD.findall(text.lower())


# Too common to say what a text is about.
_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "in",
        "on",
        "to",
        "for",
        "and",
        "or",
        "not",
        "no",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "it",
        "its",
        "this",
        "that",
        "these",
        "with",
        "when",
        "then",
        "than",
        "from",
        "by",
        "as",
        "at",
        "all",
        "any",
        "most",
        "first",
        "into",
        "out",
        "over",
        "after",
        "before",
    ]
)


def _features(text: str) -> Counter[str]:
    """Each word, and each part of a compound one (payments-api → payments, api), less the
    stop words: a pod's generated suffix still leaves its deployment's name to match."""
    features: Counter[str] = Counter()
    for word in words(text):
        parts = re.split(r"[._-]", word)
        if len(parts) > 1:
            features[word] += 1
        features.update(part for part in parts if part and part not in _STOP)
    return features


class Embedder(Protocol):
    name: str
    dimensions: int
    gate: float  # the least cosine similarity a recalled memory needs

    def embed(self, texts: list[str], task: Task) -> np.ndarray:
        """One unit-length float32 row per text (a zero row for a text with no words)."""
        ...


class LocalHashingEmbedder:
    """Words (``_features``) hashed (BLAKE2b) into ``dimensions`` signed buckets, weighted
    1 + log(count), L2-normalised. Deterministic across processes and hosts."""

    name = "local-hashing-v1"
    # An alert and a lesson about the same service and failure share about half their
    # words (0.4 to 0.55 here); unrelated ones under 0.2. A learned model's 0.7 would pass
    # almost nothing of this embedder's.
    gate = 0.4

    def __init__(self, dimensions: int = 768) -> None:
        self.dimensions = dimensions

    def embed(self, texts: list[str], task: Task) -> np.ndarray:
        rows = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in zip(rows, texts, strict=True):
            for feature, count in _features(text).items():
                digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self.dimensions
                sign = 1.0 if digest[4] & 1 else -1.0
                row[bucket] += sign * (1.0 + math.log(count))
            norm = float(np.linalg.norm(row))
            if norm:
                row /= norm
        return rows


def to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def from_blobs(blobs: list[bytes], dimensions: int) -> np.ndarray:
    """Stored vectors as one matrix (rows in the order given)."""
    if not blobs:
        return np.zeros((0, dimensions), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dimensions)


# --- providers' embedding models ------------------------------------------------------------
#
# TARSy's ``defaults.memory.embedding`` (TARSY-GO-NEWER §1.1): a provider's learned model
# replaces the local embedder. The key's *value* is read from its variable at every call
# and kept nowhere: not on the embedder, not in a log, not in an error. An error says
# which variable is unset, or what the provider answered, with the key masked.

EMBEDDING_PROVIDERS = ("google", "openai")
# A provider's model and key variable where the configuration names none (TARSy's defaults
# for Google; OpenAI's smallest third-generation model and the SDK's own variable).
DEFAULT_MODEL = {"google": "gemini-embedding-2-preview", "openai": "text-embedding-3-small"}
DEFAULT_KEY_ENV = {"google": "GOOGLE_API_KEY", "openai": "OPENAI_API_KEY"}
DEFAULT_DIMENSIONS = 768
# A learned model's similarity gate (TARSy's 0.7).
PROVIDER_GATE = 0.7
BATCH = 100  # texts per request (Gemini's batchEmbedContents takes at most 100)
TIMEOUT = 30.0  # seconds per request
# What of one text is sent: an alert may be 1 MB, and embedding models take a few
# thousand tokens (more is an error at OpenAI). Its head says what it is about.
MAX_TEXT_CHARS = 8_000
# An OpenAI-compatible server (a base_url) that names no key variable gets this one, as
# the LLM providers do (llm/langchain_models.py).
PLACEHOLDER_KEY = "EMPTY"
_GOOGLE_API_VERSIONS = ("v1beta", "v1alpha", "v1")
_GOOGLE_TASK = {"query": "RETRIEVAL_QUERY", "document": "RETRIEVAL_DOCUMENT"}


class EmbeddingFailed(Exception):
    """An embedding model could not embed (no key, refused, timed out, a wrong answer).
    Its message never carries the key."""


class _ProviderEmbedder:
    """What the providers' embedders share: the key read per call, batches, the checks
    of what came back, and unit rows."""

    provider = ""
    gate = PROVIDER_GATE

    def __init__(
        self,
        *,
        model: str = "",
        api_key_env: str = "",
        dimensions: int | None = None,
        base_url: str = "",
    ) -> None:
        self.model = model or DEFAULT_MODEL[self.provider]
        self.dimensions = dimensions or DEFAULT_DIMENSIONS
        self.base_url = base_url
        # An OpenAI-compatible server may need no key; every other use names a variable.
        keyless = self.provider == "openai" and base_url and not api_key_env
        self.api_key_env = "" if keyless else api_key_env or DEFAULT_KEY_ENV[self.provider]
        self.name = f"{self.provider}:{self.model}"

    def __repr__(self) -> str:  # never the key: it is not here to show
        return f"<{type(self).__name__} {self.name} ({self.dimensions} dimensions)>"

    def embed(self, texts: list[str], task: Task) -> np.ndarray:
        rows = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        # A blank text has no meaning to embed (and providers reject it): a zero row.
        wanted = [i for i, text in enumerate(texts) if text.strip()]
        if not wanted:
            return rows
        key = self._key()
        for start in range(0, len(wanted), BATCH):
            batch = wanted[start : start + BATCH]
            sent = [texts[i][:MAX_TEXT_CHARS] for i in batch]
            try:
                vectors = self._request(key, sent, task)
            except EmbeddingFailed:
                raise
            except Exception as exc:
                raise EmbeddingFailed(self._problem(exc, key)) from None
            rows[batch] = self._checked(vectors, len(sent))
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        np.divide(rows, norms, out=rows, where=norms > 0)
        return rows

    def _key(self) -> str:
        if not self.api_key_env:
            return PLACEHOLDER_KEY
        value = os.environ.get(self.api_key_env, "")
        if not value:
            raise EmbeddingFailed(
                f"embedding model {self.name}: environment variable {self.api_key_env} "
                "(defaults.memory.embedding.api_key_env) is not set"
            )
        return value

    def _checked(self, vectors: list[list[float]] | None, count: int) -> np.ndarray:
        vectors = vectors or []
        if len(vectors) != count:
            raise EmbeddingFailed(
                f"embedding model {self.name}: asked for {count} vectors, got {len(vectors)}"
            )
        sizes = {len(vector) for vector in vectors}
        if sizes != {self.dimensions}:
            got = ", ".join(str(size) for size in sorted(sizes))
            raise EmbeddingFailed(
                f"embedding model {self.name}: vectors of {got} dimensions, not the "
                f"{self.dimensions} configured (defaults.memory.embedding.dimensions)"
            )
        matrix = np.asarray(vectors, dtype=np.float32)
        if not np.isfinite(matrix).all():
            raise EmbeddingFailed(f"embedding model {self.name}: a vector is not finite")
        return matrix

    def _problem(self, exc: Exception, key: str) -> str:
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        if key and key != PLACEHOLDER_KEY:
            text = text.replace(key, "****")
        where = f" at {self.base_url}" if self.base_url else ""
        return f"embedding model {self.name}{where}: {_kind(exc)}{text}"

    def _request(self, key: str, texts: list[str], task: Task) -> list[list[float]] | None:
        raise NotImplementedError


def _kind(exc: Exception) -> str:
    """``HTTP 500: ``, ``timed out: ``, … ahead of an SDK's message."""
    status = getattr(exc, "status_code", None) or getattr(exc, "code", None)
    if isinstance(status, int):
        return f"HTTP {status}: "
    name = type(exc).__name__.lower()
    if "timeout" in name:
        return f"timed out after {TIMEOUT:g} s: "
    if "connect" in name:
        return "cannot connect: "
    return f"{type(exc).__name__}: "


class GoogleEmbedder(_ProviderEmbedder):
    """Gemini's embedding models through google-genai: ``POST {base}/v1beta/models/
    {model}:batchEmbedContents``, key in ``x-goog-api-key``, ``taskType`` RETRIEVAL_QUERY
    or RETRIEVAL_DOCUMENT, ``outputDimensionality``. ``base_url`` may be TARSy's form (it
    ends with the API version, ``…/v1beta``) or the LLM providers' (it does not)."""

    provider = "google"

    def _request(self, key: str, texts: list[str], task: Task) -> list[list[float]] | None:
        from google import genai
        from google.genai import types

        base, version = self.base_url.rstrip("/"), "v1beta"
        if base.rsplit("/", 1)[-1] in _GOOGLE_API_VERSIONS:
            base, version = base.rsplit("/", 1)
        options = types.HttpOptions(
            base_url=base + "/" if base else None,
            api_version=version,
            timeout=int(TIMEOUT * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),  # no retries of the SDK's
        )
        with genai.Client(api_key=key, vertexai=False, http_options=options) as client:
            response = client.models.embed_content(
                model=self.model,
                # One Content per text: a list of strings would be one Content of many
                # parts, which gemini-embedding-2 answers with one vector for them all.
                contents=[types.Content(role="user", parts=[types.Part(text=t)]) for t in texts],
                config=types.EmbedContentConfig(
                    task_type=_GOOGLE_TASK[task], output_dimensionality=self.dimensions
                ),
            )
        return [list(e.values or ()) for e in response.embeddings or ()]


class OpenAIEmbedder(_ProviderEmbedder):
    """OpenAI's embedding models, or an OpenAI-compatible server's (``base_url``):
    ``POST {base}/embeddings`` with ``model``, ``input``, ``dimensions`` and floats asked
    for; the key as a bearer token. OpenAI has no task type."""

    provider = "openai"

    def _request(self, key: str, texts: list[str], task: Task) -> list[list[float]] | None:
        import openai

        with openai.OpenAI(
            api_key=key, base_url=self.base_url or None, timeout=TIMEOUT, max_retries=0
        ) as client:
            response = client.embeddings.create(
                model=self.model, input=texts, dimensions=self.dimensions, encoding_format="float"
            )
        data = sorted(response.data or [], key=lambda item: item.index)
        return [list(item.embedding) for item in data]
