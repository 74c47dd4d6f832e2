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
