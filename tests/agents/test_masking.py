"""Masking of MCP tool results and alert data (masking); pure Python, no database."""

from __future__ import annotations

import base64
import itertools
import json
import logging
import time
from collections.abc import Callable

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.demo_mcp.server import DemoCluster
from masking import (
    PATTERN_NAMES,
    SECRET_VALUE_MARKER,
    WITHHELD_NOTICE,
    kubernetes,
    mask_alert,
    mask_tool_result,
    patterns,
)
from tests import secrets_corpus

SECRET_JSON = {
    "apiVersion": "v1",
    "data": {"password": "aHVudGVyMg==", "username": "cGF5bWVudHM="},
    "kind": "Secret",
    "metadata": {"name": "payments-db-credentials", "namespace": "payments"},
    "type": "Opaque",
}
CONFIGMAP_JSON = {
    "apiVersion": "v1",
    "data": {"LOG_LEVEL": "info", "FEATURE_FLAGS": "fast-checkout"},
    "kind": "ConfigMap",
    "metadata": {"name": "payments-config", "namespace": "payments"},
}

# The shape of `kubectl get secret payments-db-credentials -o yaml`.
SECRET_YAML = """\
apiVersion: v1
data:
  password: aHVudGVyMg==
  tls.key: TFMwdExTMUNSVWRKVGlCUVVrbFdRVlJG
kind: Secret
metadata:
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: |
      {"apiVersion":"v1","data":{"password":"aHVudGVyMg=="},"kind":"Secret","metadata":{"name":"payments-db-credentials","namespace":"payments"}}
  creationTimestamp: "2025-10-02T09:14:11Z"
  name: payments-db-credentials
  namespace: payments
stringData:
  url: postgres://payments:hunter2@postgres:5432/payments
type: Opaque
"""
SECRET_VALUES = ("aHVudGVyMg==", "TFMwdExTMUNSVWRKVGlCUVVrbFdRVlJG", "hunter2", "cGF5bWVudHM=")


def assert_no_secret_values(text: str) -> None:
    for value in SECRET_VALUES:
        assert value not in text


# --- Kubernetes Secrets -------------------------------------------------------------------


def test_secret_in_json_keeps_keys_and_masks_values() -> None:
    masked = mask_tool_result(json.dumps(SECRET_JSON))
    assert_no_secret_values(masked)
    parsed = json.loads(masked)
    assert parsed["data"] == {"password": SECRET_VALUE_MARKER, "username": SECRET_VALUE_MARKER}
    assert parsed["metadata"] == SECRET_JSON["metadata"]
    assert masked == json.dumps(parsed, indent=2)  # re-serialized as indented JSON


def test_secret_in_kubectl_yaml_including_last_applied_annotation() -> None:
    masked = mask_tool_result(SECRET_YAML)
    assert_no_secret_values(masked)
    parsed = yaml.safe_load(masked)
    assert parsed["data"] == {"password": SECRET_VALUE_MARKER, "tls.key": SECRET_VALUE_MARKER}
    assert parsed["stringData"] == {"url": SECRET_VALUE_MARKER}
    assert parsed["metadata"]["name"] == "payments-db-credentials"
    assert list(parsed) == ["apiVersion", "data", "kind", "metadata", "stringData", "type"]
    annotation = parsed["metadata"]["annotations"][
        "kubectl.kubernetes.io/last-applied-configuration"
    ]
    assert json.loads(annotation)["data"] == {"password": SECRET_VALUE_MARKER}
    assert json.loads(annotation)["metadata"]["namespace"] == "payments"


def test_secret_list_masks_every_item() -> None:
    second = {**SECRET_JSON, "data": {"token": "c2VydmljZS10b2tlbg=="}}
    secret_list = {"apiVersion": "v1", "kind": "SecretList", "items": [SECRET_JSON, second]}
    masked = mask_tool_result(json.dumps(secret_list))
    assert "c2VydmljZS10b2tlbg==" not in masked
    assert_no_secret_values(masked)
    items = json.loads(masked)["items"]
    assert [set(item["data"].values()) for item in items] == [{SECRET_VALUE_MARKER}] * 2
    assert list(items[1]["data"]) == ["token"]


def test_list_masks_the_secret_and_leaves_the_configmap_alone() -> None:
    mixed = {"apiVersion": "v1", "kind": "List", "items": [SECRET_JSON, CONFIGMAP_JSON]}
    for text in (json.dumps(mixed), yaml.safe_dump(mixed, sort_keys=False)):
        masked = mask_tool_result(text)
        assert_no_secret_values(masked)
        items = (json.loads if text.startswith("{") else yaml.safe_load)(masked)["items"]
        assert items[0]["data"]["password"] == SECRET_VALUE_MARKER
        assert items[1] == CONFIGMAP_JSON


def test_configmap_alone_is_returned_byte_for_byte() -> None:
    text = json.dumps(CONFIGMAP_JSON)  # compact: proves it was not even re-serialized
    assert mask_tool_result(text) == text
    as_yaml = yaml.safe_dump(CONFIGMAP_JSON)
    assert mask_tool_result(as_yaml) == as_yaml


def test_truncated_secret_json_is_masked_by_the_text_fallback() -> None:
    text = json.dumps(
        {"apiVersion": "v1", "kind": "Secret", "data": {"password": "aHVudGVyMg==", "x": "eA=="}}
    )
    truncated = text[:-3]  # a tool output cut off mid-document does not parse
    masked = mask_tool_result(truncated)
    assert_no_secret_values(masked)
    assert "eA==" not in masked
    assert '"password"' in masked


def test_secret_yaml_inside_prose_is_masked_by_the_text_fallback() -> None:
    text = "Here is what I found:\n\t" + SECRET_YAML  # a tab: not valid YAML any more
    masked = mask_tool_result(text)
    assert_no_secret_values(masked)
    assert "  password: '[MASKED_SECRET_VALUE]'" in masked
    assert "name: payments-db-credentials" in masked


def test_large_secret_list_yaml_is_masked_by_the_text_fallback() -> None:
    # Bigger than the YAML parsing limit, so the line-based masker does the work.
    secrets = [
        {**SECRET_JSON, "data": {"password": f"aHVudGVy{i:05d}", "ca.crt": "TFMwdExT"}}
        for i in range(2000)
    ]
    mixed = {"apiVersion": "v1", "kind": "List", "items": [*secrets, CONFIGMAP_JSON]}
    text = yaml.safe_dump(mixed, sort_keys=False)
    assert len(text) > kubernetes.MAX_YAML_CHARS
    masked = mask_tool_result(text)
    assert "aHVudGVy" not in masked
    assert "TFMwdExT" not in masked
    items = yaml.safe_load(masked)["items"]  # still valid YAML
    assert items[1999]["data"] == {"password": SECRET_VALUE_MARKER, "ca.crt": SECRET_VALUE_MARKER}
    assert items[2000] == CONFIGMAP_JSON


def test_multi_document_yaml_masks_only_the_secret() -> None:
    text = "---\n" + yaml.safe_dump(CONFIGMAP_JSON) + "---\n" + yaml.safe_dump(SECRET_JSON)
    masked = mask_tool_result(text)
    assert_no_secret_values(masked)
    docs = list(yaml.safe_load_all(masked))
    assert docs[0] == CONFIGMAP_JSON
    assert docs[1]["data"]["username"] == SECRET_VALUE_MARKER


def test_kubectl_json_with_escaped_last_applied_annotation() -> None:
    applied = json.dumps(SECRET_JSON, separators=(",", ":")) + "\n"
    secret = {**SECRET_JSON, "metadata": {"annotations": {"last-applied": applied}}}
    masked = mask_tool_result(json.dumps(secret, indent=4))
    assert_no_secret_values(masked)
    annotation = json.loads(masked)["metadata"]["annotations"]["last-applied"]
    assert annotation.endswith("}\n")
    assert json.loads(annotation)["data"]["password"] == SECRET_VALUE_MARKER


def test_yaml_alias_bomb_is_not_expanded() -> None:
    levels = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, name in itertools.pairwise("abcdefghi"):
        levels.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    text = "kind: Secret\ndata: {password: aHVudGVyMg==}\n" + "\n".join(levels) + "\n"
    assert_no_secret_values(mask_tool_result(text))  # and it returns: the graph is walked once


def test_kubectl_describe_secret_shows_sizes_only_and_is_unchanged() -> None:
    text = (
        "Name:         payments-db-credentials\nNamespace:    payments\nLabels:       <none>\n"
        "Annotations:  <none>\n\nType:  Opaque\n\nData\n====\npassword:  16 bytes\n"
        "username:  8 bytes\ntoken:  1066 bytes\n"
    )
    assert mask_tool_result(text) == text


# --- Regex patterns -------------------------------------------------------------------------

MASKED = [
    ("api_key: 0123456789abcdef", "api_key: [MASKED_API_KEY]"),
    ("X-API-Key: sk-live-51H8xyz", "X-API-Key: [MASKED_API_KEY]"),
    ('{"apikey": "abc123"}', '{"apikey": "[MASKED_API_KEY]"}'),
    ("password: hunter2", "password: [MASKED_PASSWORD]"),
    ("DATABASE_PASSWORD=s3cr3t;x&y", "DATABASE_PASSWORD=[MASKED_PASSWORD]"),
    ('{"db_passwd": "s3cr3t", "port": 5432}', '{"db_passwd": "[MASKED_PASSWORD]", "port": 5432}'),
    ('{"pwd": 123456, "user": "bob"}', '{"pwd": "[MASKED_PASSWORD]", "user": "bob"}'),
    ("login pwd=abc user=bob", "login pwd=[MASKED_PASSWORD] user=bob"),
    ("DB_PASSWORD:  hunter2", "DB_PASSWORD:  [MASKED_PASSWORD]"),
    ("token: abc123def", "token: [MASKED_TOKEN]"),
    ('"access_token":"ya29.a0AfH6"', '"access_token":"[MASKED_TOKEN]"'),
    ("Authorization: Bearer abcDEF123456.xyz_-~+/=", "Authorization: Bearer [MASKED_TOKEN]"),
    ("kubectl get pods --token=abc123", "kubectl get pods --token=[MASKED_TOKEN]"),
    ("kubectl get pods --token abc123", "kubectl get pods --token [MASKED_TOKEN]"),
    ("AWS key AKIAIOSFODNN7EXAMPLE used", "AWS key [MASKED_AWS_ACCESS_KEY] used"),
    (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws_secret_access_key = [MASKED_AWS_SECRET_KEY]",
    ),
    ("GITHUB_TOKEN=ghp_" + "a1B2" * 9, "GITHUB_TOKEN=[MASKED_GITHUB_TOKEN]"),
    ("push with gho_" + "Z" * 40 + " failed", "push with [MASKED_GITHUB_TOKEN] failed"),
    ("hook xoxb-1234567890-abcdefghij ok", "hook [MASKED_SLACK_TOKEN] ok"),
    ("client_secret: abc123", "client_secret: [MASKED_SECRET]"),
    ("SECRET_KEY=django-insecure-x", "SECRET_KEY=[MASKED_SECRET]"),
    (
        "id eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk ok",
        "id [MASKED_JWT] ok",
    ),
    ("private_key: c2VjcmV0", "private_key: [MASKED_PRIVATE_KEY]"),
    ('password: "cut off by trunc', 'password: "[MASKED_PASSWORD]"'),
    ('{\\"password\\":\\"hunter2\\"}', '{\\"password\\":\\"[MASKED_PASSWORD]\\"}'),
    (
        "- name: DB_PASSWORD\n  value: hunter2",
        "- name: DB_PASSWORD\n  value: [MASKED_ENV_SECRET_VALUE]",
    ),
    (
        '{"name": "API_TOKEN", "value": "abc"}',
        '{"name": "API_TOKEN", "value": "[MASKED_ENV_SECRET_VALUE]"}',
    ),
    # Found by an attacker's review (issue 6): none of these was masked.
    (
        "see https://user:hunter2pass@host.example.com/x",
        "see https://user:[MASKED_PASSWORD]@host.example.com/x",
    ),
    ("Authorization: Basic dXNlcjpodW50ZXIy", "Authorization: Basic [MASKED_BASIC_AUTH]"),
    (
        "curl -H 'authorization: basic dXNlcjpodW50ZXIy' x",
        "curl -H 'authorization: basic [MASKED_BASIC_AUTH]' x",
    ),
    ("Authorization: token Zx81hd0s2kq", "Authorization: token [MASKED_AUTHORIZATION]"),
    ("key sk_live_" + "51HxYzAbCdEfGhIjKlMnOpQr" + " ok", "key [MASKED_STRIPE_KEY] ok"),
    ("rk_live_" + "51HxYzAbCdEfGhIjKlMnOpQr", "[MASKED_STRIPE_KEY]"),
    ("maps key AIzaSyA1234567890abcdefghijklmnopqrstuv!", "maps key [MASKED_GOOGLE_API_KEY]!"),
    ("OPENAI_API_KEY=sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1w", "OPENAI_API_KEY=[MASKED_API_KEY]"),
    ("DB_PASS=s3cr3tvalue", "DB_PASS=[MASKED_PASSWORD]"),
    ("DB_PASS: s3cr3tvalue", "DB_PASS: [MASKED_PASSWORD]"),
    ('{"dbPass": "s3cr3t"}', '{"dbPass": "[MASKED_PASSWORD]"}'),
    ("REDIS_PASSWD=abc", "REDIS_PASSWD=[MASKED_PASSWORD]"),
    ("APP_SECRET=zzz yyy=1", "APP_SECRET=[MASKED_SECRET] yyy=1"),
    ("export GH_TOKEN=abc123", "export GH_TOKEN=[MASKED_TOKEN]"),
    ("MY_SERVICE_KEY=keyvalue", "MY_SERVICE_KEY=[MASKED_KEY]"),
    ("signing_key: aBcD", "signing_key: [MASKED_KEY]"),
    ("GCP_CREDENTIALS=credvalue", "GCP_CREDENTIALS=[MASKED_CREDENTIALS]"),
    ("passphrase: correct horse battery", "passphrase: [MASKED_PASSPHRASE]"),
    ("password: my secret phrase\nuser: bob", "password: [MASKED_PASSWORD]\nuser: bob"),
    ("password: |\n  hunter2\n  more\nnext: 1", "password: |\n  [MASKED_PASSWORD]\nnext: 1"),
    ("password: a long\n  folded value\nnext: 1", "password: [MASKED_PASSWORD]\nnext: 1"),
    ('password: "a long\n  quoted value"\nnext: 1', 'password: "[MASKED_PASSWORD]"\nnext: 1'),
    (
        "SENTRY_DSN=https://abcdef0123456789abcdef0123456789@o12.ingest.sentry.io/34",
        "SENTRY_DSN=https://[MASKED_URL_CREDENTIAL]@o12.ingest.sentry.io/34",
    ),
    (
        "git remote https://ghs_tokentokentoken12@github.com/x",
        "git remote https://[MASKED_URL_CREDENTIAL]@github.com/x",
    ),
    ("curl -u admin:hunter2 http://x", "curl -u admin:[MASKED_PASSWORD] http://x"),
    ("kubectl --db-password=abc", "kubectl --db-password=[MASKED_PASSWORD]"),
    # Added when masking learnt to generalise (issue 17; tests/agents/test_masking_formats.py).
    ("Cookie: sid=abc123; theme=dark", "Cookie: sid=[MASKED_SESSION]; theme=[MASKED_SESSION]"),
    ("GET /b/o?se=2024&sig=Ab3dEf6hIj9kLm2nOp5q", "GET /b/o?se=2024&sig=[MASKED_SIGNATURE]"),
    (
        "https://discord.com/api/webhooks/1/Ab3dEf",
        "https://discord.com/api/webhooks/[MASKED_WEBHOOK]",
    ),
    ("blob: YWRtaW46aHVudGVyMg==", "blob: [MASKED_ENCODED_SECRET]"),
]


@pytest.mark.parametrize(("text", "expected"), MASKED)
def test_pattern_masks_the_value_and_keeps_the_key(text: str, expected: str) -> None:
    assert mask_tool_result(text) == expected
    assert mask_alert(text) == expected


UNCHANGED = [
    'FATAL: password authentication failed for user "payments"',
    "password authentication failed for user payments",
    "WARN config: DATABASE_PASSWORD is not set; connecting without a password",
    "fe_sendauth: no password supplied",
    "401 Unauthorized: token expired",
    "Bearer token expired, refreshing",
    'WWW-Authenticate: Bearer realm="api", error="invalid_token"',
    "required env: DATABASE_PASSWORD, API_KEY, GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY",
    "DATABASE_PASSWORD=",
    'password: ""',
    "password: ***",
    "password: [MASKED_PASSWORD]",
    "POSTGRES_PASSWORD:  <set to the key 'password' in secret 'payments-db-credentials'>",
    "password: ${DB_PASSWORD}",
    "token: null",
    "automountServiceAccountToken: false",
    "prompt_tokens: 1234, completion_tokens: 56",
    "Tokens:  <none>",
    "PWD=/app\nOLDPWD=/",
    "open /etc/passwd: permission denied",
    "paged oncall: jane.doe@example.com and sre-team@example.org",
    "REDIS_URL: redis://redis.payments.svc:6379/0",
    "Readiness: http-get http://:8080/healthz/ready delay=5s",
    'MountVolume.SetUp failed for volume "tls" : secret "payments-tls" not found',
    "secretKeyRef: {key: password, name: payments-db-credentials}",
    "- name: LOG_LEVEL\n  value: info",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
    "certificate-authority-data: DATA+OMITTED\nclient-key-data: REDACTED",
    "git clone git@github.com:org/repo.git",
    "valueFrom:\n  secretKeyRef:\n    key: password\n    name: db",
    "sort_key: created_at\nprimary_key: id",
    "tests pass: 12, fail: 0",
    "Basic authentication failed for user bob",
    "Authorization: denied for user bob",
    "token_type: Bearer\nmax_tokens: 1024\nbypass: true",
    "ssh://git@github.com/org/repo.git",
    "Type:  Secret (a volume populated by a Secret)\n    SecretName:  payments-tls",
    "https://example.com/docs@v2",
]


@pytest.mark.parametrize("text", UNCHANGED)
def test_evidence_and_placeholders_are_not_masked(text: str) -> None:
    assert mask_tool_result(text) == text
    assert mask_alert(text) == text


@pytest.mark.parametrize(
    "url",
    [
        "postgres://payments:hunter2@postgres.payments.svc:5432/payments",
        "redis://:hunter2@redis.payments.svc:6379/0",
        "amqp://user:p@ss:w@rd@rabbit:5672",
    ],
)
def test_url_userinfo_password_is_masked_but_user_and_host_kept(url: str) -> None:
    masked = mask_tool_result(f"DATABASE_URL={url} (from env)")
    assert "hunter2" not in masked
    assert "p@ss" not in masked
    assert "[MASKED_PASSWORD]@" in masked
    assert masked.endswith(" (from env)")
    scheme, rest = url.split("://")
    user = rest.split(":")[0]
    host = rest.rsplit("@", 1)[1]
    assert f"{scheme}://{user}:[MASKED_PASSWORD]@{host}" in masked


@pytest.mark.parametrize(
    ("label", "marker"),
    [
        ("RSA PRIVATE KEY", "[MASKED_PRIVATE_KEY]"),
        ("PRIVATE KEY", "[MASKED_PRIVATE_KEY]"),
        ("ENCRYPTED PRIVATE KEY", "[MASKED_PRIVATE_KEY]"),
        ("EC PRIVATE KEY", "[MASKED_PRIVATE_KEY]"),
        ("OPENSSH PRIVATE KEY", "[MASKED_SSH_PRIVATE_KEY]"),
        ("CERTIFICATE", "[MASKED_CERTIFICATE]"),
    ],
)
def test_pem_block_is_masked_whole(label: str, marker: str) -> None:
    body = "Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,ABCDEF\n\nMIIEowIBAAKCAQEA7bq+x/y\nZm9vYmFy==\n"
    text = f"before\n-----BEGIN {label}-----\n{body}-----END {label}-----\nafter"
    assert mask_tool_result(text) == f"before\n{marker}\nafter"


def test_pem_block_cut_off_without_end_line_is_still_masked() -> None:
    text = "key follows\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq\nZm9vYmFy"
    assert mask_tool_result(text) == "key follows\n[MASKED_PRIVATE_KEY]"


def test_pem_block_inside_a_json_string_keeps_the_json_valid() -> None:
    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----\n"
    masked = mask_tool_result(json.dumps({"tls.key": pem, "other": "kept"}))
    assert json.loads(masked) == {"tls.key": "[MASKED_PRIVATE_KEY]\n", "other": "kept"}


def test_kubeconfig_fields_are_masked() -> None:
    kubeconfig = """\
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t
    server: https://10.0.0.1:6443
  name: prod
users:
- name: admin
  user:
    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=
    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQ==
    token: 9f8e7d6c5b4a
"""
    masked = mask_tool_result(kubeconfig)
    assert "LS0t" not in masked
    assert "9f8e7d6c5b4a" not in masked
    assert "    certificate-authority-data: [MASKED_KUBECONFIG_DATA]\n" in masked
    assert "    client-certificate-data: [MASKED_KUBECONFIG_DATA]\n" in masked
    assert "    client-key-data: [MASKED_KUBECONFIG_DATA]\n" in masked
    assert "    token: [MASKED_TOKEN]\n" in masked
    assert "server: https://10.0.0.1:6443" in masked


def test_every_pattern_name_has_a_positive_case() -> None:
    masked = " ".join(mask_tool_result(text) for text, _ in MASKED)
    masked += mask_tool_result(
        "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----"
    )
    masked += mask_tool_result("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----")
    masked += mask_tool_result("client-key-data: eA==")
    for name in PATTERN_NAMES:
        assert f"[MASKED_{name.upper()}]" in masked, name


# --- Idempotence, failure modes, speed ------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(SECRET_JSON),
        SECRET_YAML,
        "Here is what I found:\n\t" + SECRET_YAML,
        json.dumps({"apiVersion": "v1", "kind": "Secret", "data": {"password": "eA=="}})[:-3],
        "\n".join(text for text, _ in MASKED),
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
        "postgres://payments:hunter2@postgres:5432/payments",
    ],
)
def test_masking_is_idempotent(text: str) -> None:
    once = mask_tool_result(text)
    assert once != text
    assert mask_tool_result(once) == once
    assert mask_alert(once) == once


def test_a_structure_that_cannot_be_read_is_still_masked_as_text(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(text: str) -> str:
        raise RuntimeError(f"boom while reading {text}")

    monkeypatch.setattr(kubernetes, "mask_kubernetes_secrets", explode)
    with caplog.at_level(logging.DEBUG, logger="masking"):
        masked = mask_tool_result(SECRET_YAML + "password: hunter2\n")
        alert = mask_alert(SECRET_YAML)
    for text in (masked, alert):
        assert_no_secret_values(text)
        assert "  password: '[MASKED_SECRET_VALUE]'" in text
    assert "RuntimeError" in caplog.text
    assert "hunter2" not in caplog.text  # the log gets the exception type only


def test_tool_result_fails_closed_when_a_text_pass_breaks(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(text: str) -> str:
        raise MemoryError(text)

    monkeypatch.setattr(patterns, "mask_patterns", explode)
    with caplog.at_level(logging.DEBUG, logger="masking"):
        assert mask_tool_result("password: hunter2") == WITHHELD_NOTICE
    assert "MemoryError" in caplog.text
    assert "hunter2" not in caplog.text


def test_alert_fails_open_only_when_a_text_pass_breaks(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(text: str) -> str:
        raise ValueError(text)

    monkeypatch.setattr(patterns, "mask_patterns", explode)
    alert = "PaymentsAPIDown: payments-api has no ready pods; oncall jane@example.com"
    with caplog.at_level(logging.DEBUG, logger="masking"):
        assert mask_alert(alert) == alert
    assert "ValueError" in caplog.text
    assert "PaymentsAPIDown" not in caplog.text


def test_alert_is_masked_like_a_tool_result() -> None:
    alert = json.dumps(
        {"alert": "DBDown", "annotations": {"dsn": "postgres://app:hunter2@db:5432/app"}}
    )
    masked = mask_alert(alert)
    assert "hunter2" not in masked
    assert (
        json.loads(masked)["annotations"]["dsn"] == "postgres://app:[MASKED_PASSWORD]@db:5432/app"
    )


def _best_seconds(text: str, runs: int = 2) -> float:
    """CPU seconds of this process (the best of ``runs``): other processes sharing the
    machine's cores do not count."""
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        mask_tool_result(text)
        best = min(best, time.process_time() - start)
    return best


def assert_linear(make: Callable[[int], str]) -> None:
    """Masking ``make(n)`` grows linearly with n: four times the input, about four times
    the time (quadratic growth would take sixteen).

    This guards against catastrophic backtracking (a hostile tool result stalling a
    worker); how fast masking is gets measured in bench/masking.py.
    """
    small, large = make(128 * 1024), make(512 * 1024)
    t_small, t_large = _best_seconds(small), _best_seconds(large)
    assert t_large < 8 * t_small + 0.05, (t_small, t_large)


def _repeat(unit: str, prefix: str = "", suffix: str = "") -> Callable[[int], str]:
    return lambda size: prefix + unit * (size // len(unit)) + suffix


WORST_CASES = [
    _repeat("a"),  # one huge word
    _repeat("a-"),  # a word boundary at every other character
    _repeat("password="),
    _repeat("-----BEGIN RSA PRIVATE KEY-----"),  # never terminated
    _repeat("://a:"),
    _repeat("a", "x://", ":b"),
    _repeat("eyJ"),
    _repeat("data:\n", "kind: Secret\n"),
    _repeat("name: DB_PASSWORD"),
    _repeat("xoxb-"),
    _repeat("sk-"),
    _repeat("sk_live_"),
    _repeat("AIza"),
    _repeat("Basic "),
    _repeat("Authorization: "),
    _repeat("https://"),
    _repeat("-u a:"),
    _repeat("a_"),
    _repeat("DB_PASS"),
    _repeat("password: |\n"),
    _repeat("password: x\n "),
    _repeat('password: "\n '),
    _repeat("passphrase: a b c d "),
    _repeat("--a"),
    _repeat("glpat-"),
    _repeat("AC"),
    _repeat("1", "", ":"),
    _repeat('{"password": "hunter2", "name": "API_TOKEN", "value": "x"}\n'),
]


@pytest.mark.parametrize("make", WORST_CASES)
def test_hostile_inputs_are_masked_in_linear_time(make: Callable[[int], str]) -> None:
    assert_linear(make)


def test_a_mebibyte_of_logs_is_masked() -> None:
    lines = [
        "2025-11-21T14:24:43.816Z WARN  config: DATABASE_PASSWORD is not set; no password",
        "2025-11-21T14:24:43.951Z ERROR db: fe_sendauth: no password supplied token=abc123",
        "GET /api/v1/pods Authorization: Bearer abcDEF123456 url=postgres://u:p@db:5432/x",
        '{"password": "hunter2", "name": "API_TOKEN", "value": "x", "kind": "Pod"}',
    ]
    text = "\n".join(lines * (1024 * 1024 // sum(len(line) + 1 for line in lines) + 1))
    masked = mask_tool_result(text)
    assert "hunter2" not in masked
    assert "abc123" not in masked
    assert masked.count("DATABASE_PASSWORD is not set") == text.count(
        "DATABASE_PASSWORD is not set"
    )


@pytest.mark.parametrize(
    "text",
    [
        "kind: Secret\n" + "data:\n" * (21 * 1024),  # just under the YAML parsing limit
        "kind: Secret\n" + "- a\n" * (32 * 1024 - 4),
    ],
)
def test_documents_at_the_yaml_parsing_limit_are_handled(text: str) -> None:
    assert mask_tool_result(text) != WITHHELD_NOTICE


def test_a_mebibyte_secret_list_is_masked() -> None:
    items = [{**SECRET_JSON, "metadata": {"name": f"s{i}"}} for i in range(6000)]
    text = json.dumps({"apiVersion": "v1", "kind": "SecretList", "items": items}, indent=2)
    assert len(text) >= 1024 * 1024
    assert_no_secret_values(mask_tool_result(text))


# --- The demo cluster's real outputs stay useful --------------------------------------------

CRASHING = "payments-api-7d9f8b6c5d-x2k4p"


@pytest.fixture(scope="module")
def cluster() -> DemoCluster:
    return DemoCluster()


def test_demo_cluster_outputs_keep_their_evidence(cluster: DemoCluster) -> None:
    outputs = {
        "pods": cluster.get_pods("payments"),
        "describe": cluster.describe_pod("payments", CRASHING),
        "describe_db": cluster.describe_pod("payments", "postgres-0"),
        "logs": cluster.get_pod_logs("payments", CRASHING, tail_lines=50, previous=True),
        "events": cluster.get_events("payments"),
        "deployments": cluster.get_deployments("payments"),
    }
    # None of the snapshot's outputs holds a secret value, so masking must change nothing.
    for name, text in outputs.items():
        assert mask_tool_result(text) == text, name
    assert "CrashLoopBackOff" in outputs["pods"]
    assert "DATABASE_USER:  payments" in outputs["describe"]
    assert "REDIS_URL:  redis://redis.payments.svc:6379/0" in outputs["describe"]
    assert (
        "POSTGRES_PASSWORD:  <set to the key 'password' in secret 'payments-db-credentials'>"
        in outputs["describe_db"]
    )
    assert "DATABASE_PASSWORD is not set" in outputs["logs"]
    assert "fe_sendauth: no password supplied" in outputs["logs"]
    assert "Back-off restarting failed container" in outputs["events"]


# --- What cannot be bypassed (issue 6) -------------------------------------------------------

PLANTED = (
    "AKIAQCANARY000000001",
    "ghp_" + "Canary" * 6,
    "hunter2canary",
    "aHVudGVyMmNhbmFyeQ==",
)
PLANTED_ALERT = (
    "apiVersion: v1\nkind: Secret\ndata:\n  password: aHVudGVyMmNhbmFyeQ==\n"
    "metadata: {name: db}\n---\nalert: DBDown\npassword: hunter2canary\n"
    "aws: AKIAQCANARY000000001\ngithub: ghp_" + "Canary" * 6 + "\n"
)


def _at_stack_depth(frames: int, function):
    """Call ``function`` from ``frames`` Python frames deep, as a server's stack would."""
    if frames == 0:
        return function()
    return _at_stack_depth(frames - 1, function)


@pytest.mark.parametrize("depth", [500, 5_000, 100_000])
def test_deep_nesting_neither_raises_nor_lets_secrets_through(depth: int) -> None:
    # The finding: a Secret plus a list nested 500 deep raised RecursionError under a
    # request's stack, and alert masking failed open with every secret in it.
    nested = "x: " + "[" * depth + "]" * depth + "\n"
    alert = PLANTED_ALERT + nested
    as_json = json.dumps({"kind": "Secret", "data": {"password": PLANTED[3]}, "p": "x"})
    as_json = (
        as_json[:-1] + ', "deep": ' + "[" * depth + "]" * depth + ', "password": "hunter2canary"}'
    )
    for text in (alert, as_json):
        for mask in (mask_alert, mask_tool_result):
            masked = _at_stack_depth(600, lambda mask=mask, text=text: mask(text))
            for value in PLANTED:
                assert value not in masked


def test_a_deep_document_is_masked_as_text_and_otherwise_kept() -> None:
    nested = "[" * 200 + "]" * 200
    text = PLANTED_ALERT + "x: " + nested + "\n"
    masked = mask_alert(text)
    assert nested in masked  # not re-serialized
    assert "  password: '[MASKED_SECRET_VALUE]'" in masked


DETECTED = [
    ("glpat-" + "Xy12" * 5, "[MASKED_GITLAB_TOKEN]"),
    ("SG." + "a" * 22 + "." + "b" * 43, "[MASKED_SENDGRID_API_KEY]"),
    ("SK" + "0123456789abcdef" * 2, "[MASKED_TWILIO_API_KEY]"),
    ("sq0csp-" + "A" * 43, "[MASKED_SQUARE_OAUTH_SECRET]"),
    ("0123456789abcdef0123456789abcdef-us12", "[MASKED_MAILCHIMP_ACCESS_KEY]"),
    ("123456789:" + "A" * 35, "[MASKED_TELEGRAM_BOT_TOKEN]"),
]


@pytest.mark.parametrize(("token", "expected"), DETECTED)
def test_detect_secrets_token_shapes_are_masked(token: str, expected: str) -> None:
    assert mask_tool_result(f"output: {token} done") == f"output: {expected} done"


# Secret-named keys and values as the planted-secret corpus uses them; any nesting, any
# serialization, anywhere in the document.
_SECRET_KEYS = st.sampled_from(
    [
        "password",
        "DB_PASS",
        "clientSecret",
        "api_key",
        "token",
        "MY_SERVICE_KEY",
        "passphrase",
        "GCP_CREDENTIALS",
        "aws_secret_access_key",
        "X-Auth-Token",
    ]
)
_CANARY = st.from_regex(r"cAnArY[A-Za-z0-9]{6,20}", fullmatch=True)
_PLAIN = st.one_of(st.integers(), st.booleans(), st.from_regex(r"[a-z ]{0,12}", fullmatch=True))


@st.composite
def _documents(draw):
    canaries: list[str] = []

    def node(depth: int):
        kind = draw(st.integers(0, 4 if depth < 6 else 1))
        if kind == 0:
            return draw(_PLAIN)
        if kind == 1:
            canary = draw(_CANARY)
            canaries.append(canary)
            return {draw(_SECRET_KEYS): canary}
        if kind == 2:
            return [node(depth + 1) for _ in range(draw(st.integers(0, 3)))]
        if kind == 3:
            canary = draw(_CANARY)
            canaries.append(canary)
            b64 = base64.b64encode(canary.encode()).decode()
            return {"kind": "Secret", "apiVersion": "v1", "data": {"k": b64}}
        return {
            draw(st.from_regex(r"[a-z]{1,8}", fullmatch=True)): node(depth + 1)
            for _ in range(draw(st.integers(0, 3)))
        }

    document = node(0)
    style = draw(st.sampled_from(["json", "json-indent", "yaml", "yaml-flow"]))
    if style == "json":
        text = json.dumps(document)
    elif style == "json-indent":
        text = json.dumps(document, indent=2)
    else:
        text = yaml.safe_dump(document, default_flow_style=style == "yaml-flow", width=40)
    prefix = draw(st.sampled_from(["", "Here is the output:\n", "alert: x\n"]))
    return prefix + text, canaries


@settings(max_examples=300, deadline=None)
@given(_documents())
def test_planted_secrets_never_survive_any_document(case) -> None:
    text, canaries = case
    for mask in (mask_alert, mask_tool_result):
        masked = mask(text)
        for canary in canaries:
            assert canary not in masked
            assert base64.b64encode(canary.encode()).decode() not in masked


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_masking_never_raises_and_is_idempotent_on_any_text(text: str) -> None:
    once = mask_alert(text)
    assert mask_tool_result(once) == once


# --- The planted-secret corpus (tests/secrets_corpus.py) ----------------------------------


@pytest.mark.parametrize(("shape", "text"), list(secrets_corpus.documents()))
def test_no_planted_secret_survives_in_any_shape(shape: str, text: str) -> None:
    for mask in (mask_alert, mask_tool_result):
        masked = mask(text)
        leaked = [value for value in secrets_corpus.forbidden() if value in masked]
        assert not leaked, f"{shape}: {leaked}\n{masked}"


@pytest.mark.parametrize("name", list(secrets_corpus.LINES))
def test_each_planted_format_is_masked_on_its_own(name: str) -> None:
    line, value = secrets_corpus.LINES[name]
    assert value not in mask_tool_result(line)
    assert value not in mask_alert(f"alert: x\n{line}\nmore: y")
