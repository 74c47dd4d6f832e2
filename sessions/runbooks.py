"""Runbooks: the how-to an alert brings (text, or a URL on the allowlist), or
``defaults.runbook``. A URL is fetched when the session starts, masked like alert data and
given to every investigating agent; a fetch that fails is a warning on the timeline, and
the investigation goes on without it.

Fetched runbooks and the repository listing are cached per process for
``system.runbooks.cache_ttl`` seconds: a burst of alerts naming one runbook costs one
request, and an edit on GitHub is seen a minute later at most.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from config.types import TarsyConfig
from masking import mask_alert, mask_text
from masking.bounded import load_json, storable

logger = logging.getLogger(__name__)

# The token of ``system.github.token_env`` goes to these hosts only, never to another
# allowed domain.
GITHUB_HOSTS = frozenset(
    {"github.com", "www.github.com", "raw.githubusercontent.com", "api.github.com"}
)
GITHUB_API = "https://api.github.com"
FETCH_TIMEOUT = 10.0  # seconds; a session does not wait longer for its runbook
LISTING_DEPTH = 3  # folders below repo_url that the listing walks into
LISTING_CHARS = 4 * 1024 * 1024  # of one folder's listing from GitHub's API
# https://github.com/<owner>/<repo>/(blob|tree)/<ref>/<path>
GITHUB_PATH = re.compile(r"^/([^/]+)/([^/]+)/(blob|tree)/([^/]+)(?:/(.*))?$")

# None in production. Tests set an httpx transport that sends GitHub's hosts to a local
# server, so the real URLs, allowlist and token rules are the ones exercised.
transport: httpx.BaseTransport | None = None

# Where GitHub's API and raw content are reached instead of their hosts (an egress
# gateway, a test's fake): the allowlist and the token rules still judge the GitHub URL,
# and the token goes to this base URL in its place.
GITHUB_BASE_URL_VARIABLES = {
    "api.github.com": "TARSY_GITHUB_API_URL",
    "raw.githubusercontent.com": "TARSY_GITHUB_RAW_URL",
}


class RunbookError(Exception):
    """Why a runbook URL was refused or could not be fetched."""


def looks_like_url(runbook: str) -> bool:
    """A runbook that is one word with a scheme is a URL; anything else is the text."""
    text = runbook.strip()
    return bool(text) and not any(c.isspace() for c in text) and "://" in text


def check_url(url: str, allowed_domains: tuple[str, ...]) -> str:
    """The URL itself when it is http(s) on an allowed domain (or ``www.`` + one)."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
    except ValueError as exc:
        raise RunbookError(f"{url!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise RunbookError(f"scheme {parts.scheme!r} is not allowed; use http or https")
    if not host:
        raise RunbookError(f"{url!r} has no host")
    if not any(host in (domain, f"www.{domain}") for domain in allowed_domains):
        allowed = ", ".join(allowed_domains) or "none"
        raise RunbookError(f"domain {host!r} is not allowed; allowed domains: {allowed}")
    return url


def raw_url(url: str) -> str:
    """A GitHub page of a file (``…/blob/<ref>/<path>``) as its raw content's URL."""
    parts = urlsplit(url)
    match = GITHUB_PATH.match(parts.path)
    if (parts.hostname or "").lower() not in ("github.com", "www.github.com") or not match:
        return url
    owner, repo, _, ref, path = match.groups()
    return f"https://raw.githubusercontent.com/{owner}/{repo}/{ref}/{path or ''}"


def fetch(url: str, config: TarsyConfig) -> str:
    """The runbook at ``url``, masked, cut at ``max_bytes``; ``RunbookError`` says why not."""
    settings = config.system.runbooks
    check_url(url, settings.allowed_domains)
    source = raw_url(url)
    return _cache.get_or_set(
        ("runbook", source), settings.cache_ttl, lambda: _download(source, config)
    )


def list_runbooks(config: TarsyConfig) -> list[str]:
    """The markdown files under ``system.runbooks.repo_url`` (as GitHub page URLs that pass
    the allowlist); ``[]`` when none is configured or GitHub cannot be reached."""
    settings = config.system.runbooks
    if not settings.repo_url:
        return []
    urls = _cache.get_or_set(
        ("listing", settings.repo_url), settings.cache_ttl, lambda: _listing(config)
    )
    return [url for url in urls if _allowed(url, settings.allowed_domains)]


def _listing(config: TarsyConfig) -> list[str]:
    """The listing, or [] when it failed, for whatever reason (TARSy's contract). The
    empty listing is cached too: a GitHub outage must not slow every form down."""
    repo_url = config.system.runbooks.repo_url
    try:
        return _list_folder(repo_url, config)
    except Exception as exc:
        logger.warning("Listing the runbooks of %s failed: %s", repo_url, mask_text(str(exc)))
        return []


def _allowed(url: str, allowed_domains: tuple[str, ...]) -> bool:
    try:
        check_url(url, allowed_domains)
    except RunbookError:
        return False
    return True


def _download(url: str, config: TarsyConfig) -> str:
    limit = config.system.runbooks.max_bytes
    try:
        with (
            _client() as client,
            client.stream("GET", _reached(url), headers=_auth(url, config)) as response,
        ):
            if response.status_code != httpx.codes.OK:
                raise RunbookError(f"{_host(url)} answered HTTP {response.status_code} for {url}")
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > limit:
                    break
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        reason = mask_text(str(exc)) or type(exc).__name__
        raise RunbookError(f"{url} could not be fetched: {reason}") from None
    # Decoding drops invalid UTF-8; NUL, valid UTF-8 but not storable, becomes U+FFFD.
    text = storable(bytes(body[:limit]).decode("utf-8", errors="ignore"))
    if len(body) > limit:
        text += f"\n\n[The runbook was cut here, at {limit} bytes.]"
    return mask_alert(text)


def _list_folder(repo_url: str, config: TarsyConfig, depth: int = 0) -> list[str]:
    parts = urlsplit(repo_url)
    match = GITHUB_PATH.match(parts.path)
    if (parts.hostname or "").lower() not in ("github.com", "www.github.com") or not match:
        raise RunbookError(
            f"system.runbooks.repo_url {repo_url!r} is not a GitHub folder "
            "(https://github.com/<owner>/<repo>/tree/<ref>/<path>)"
        )
    owner, repo, _, ref, path = match.groups()
    api = f"{GITHUB_API}/repos/{owner}/{repo}/contents/{quote(path or '')}"
    try:
        with _client() as client:
            response = client.get(
                _reached(api),
                params={"ref": ref},
                headers={"Accept": "application/vnd.github+json", **_auth(api, config)},
            )
        if response.status_code != httpx.codes.OK:
            raise RunbookError(f"GitHub answered HTTP {response.status_code} for {api}")
        # A folder's listing is a flat list of small objects (GitHub lists 1,000 at most).
        items: Any = load_json(
            response.content, what="the folder's listing", max_depth=8, max_chars=LISTING_CHARS
        )
    except (httpx.HTTPError, ValueError) as exc:
        raise RunbookError(f"{api}: {exc}") from None
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise RunbookError(f"{api} is not a folder")
    urls = []
    for item in items:
        if item.get("type") == "file" and str(item.get("name", "")).lower().endswith(".md"):
            urls.append(item["html_url"])
        elif item.get("type") == "dir" and depth < LISTING_DEPTH:
            folder = f"https://github.com/{owner}/{repo}/tree/{ref}/{item['path']}"
            urls.extend(_list_folder(folder, config, depth + 1))
    return sorted(urls)


def _client() -> httpx.Client:
    # No redirects: a redirect could lead the request, and its token, off the allowlist.
    return httpx.Client(timeout=FETCH_TIMEOUT, transport=transport, follow_redirects=False)


def _auth(url: str, config: TarsyConfig) -> dict[str, str]:
    name = config.system.github_token_env
    token = os.environ.get(name, "").strip() if name else ""
    if not token or _host(url) not in GITHUB_HOSTS:
        return {}
    return {"Authorization": f"Bearer {token}"}


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def _reached(url: str) -> str:
    """The URL requested for ``url``: on GITHUB_BASE_URL_VARIABLES' base URL when its
    variable is set, else ``url`` itself."""
    variable = GITHUB_BASE_URL_VARIABLES.get(_host(url))
    base = os.environ.get(variable, "").strip().rstrip("/") if variable else ""
    if not base:
        return url
    parts = urlsplit(url)
    return base + parts.path + (f"?{parts.query}" if parts.query else "")


class _TTLCache:
    """A small per-process cache. A failed fetch raises and is not cached: the next
    session tries again."""

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self.entries: dict[tuple[str, str], tuple[float, Any]] = {}
        self.lock = threading.Lock()

    def get_or_set(self, key: tuple[str, str], ttl: float, compute):
        with self.lock:
            hit = self.entries.get(key)
            if hit is not None and hit[0] > self.clock():
                return hit[1]
        value = compute()
        with self.lock:
            self.entries[key] = (self.clock() + ttl, value)
        return value

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()


_cache = _TTLCache()
