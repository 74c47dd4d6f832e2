"""Planted secrets: every format TARSy promises to mask, each carrying the canary
``Zq7x`` (or, for base64-encoded values, known strings), in the shapes they take in
alerts, runbooks and tool results.

Used by the masking unit tests and by the end-to-end test that checks no canary reaches
the database file, the logs, a WebSocket frame, the API or the LLM.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import yaml

CANARY = "Zq7x"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAZq7xPemBodyLine0000000000000000000000000000000\n"
    "-----END RSA PRIVATE KEY-----\n"
)
SECRET_DATA = {"password": b64("Zq7xSecretValue01"), "api-token": b64("Zq7xSecretValue02")}
STRING_DATA = {"url": "postgres://app:Zq7xStringData03@db:5432/app"}

# name → (a line of text that holds it, the secret value itself)
LINES: dict[str, tuple[str, str]] = {
    "aws_access_key": ("aws key AKIAZQ7XCANARY000001 used", "AKIAZQ7XCANARY000001"),
    "aws_secret_key": (
        "aws_secret_access_key = wJalrZq7xUtnFEMIK7MDENGbPxRfiCYCANARY001",
        "wJalrZq7xUtnFEMIK7MDENGbPxRfiCYCANARY001",
    ),
    "github_token": ("GITHUB_TOKEN=ghp_" + "Zq7x" * 9, "ghp_" + "Zq7x" * 9),
    "slack_token": (
        "slack: xoxb-1234567890-Zq7xSlackCanary01",
        "xoxb-1234567890-Zq7xSlackCanary01",
    ),
    "stripe_key": (
        "charge with sk_live_Zq7xStripeCanary00000001",
        "sk_live_Zq7xStripeCanary00000001",
    ),
    "stripe_restricted": (
        "rk_live_Zq7xStripeCanary00000002 rotated",
        "rk_live_Zq7xStripeCanary00000002",
    ),
    "google_api_key": (
        "maps AIzaSyZq7xGoogleCanary000000000000000 ok",
        "AIzaSyZq7xGoogleCanary000000000000000",
    ),
    "openai_key": (
        "OPENAI_API_KEY=sk-proj-Zq7xOpenAICanary0000000000000000",
        "sk-proj-Zq7xOpenAICanary0000000000000000",
    ),
    "jwt": (
        "id eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJacTd4In0.Zq7xJwtSignature01 ok",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJacTd4In0.Zq7xJwtSignature01",
    ),
    "bearer": (
        "Authorization: Bearer Zq7xBearerToken0123456789abcdef",
        "Zq7xBearerToken0123456789abcdef",
    ),
    "basic": ("Authorization: Basic " + b64("admin:Zq7xBasicPass"), b64("admin:Zq7xBasicPass")),
    "url_password": ("DATABASE_URL=postgres://app:Zq7xUrlPass01@db.svc:5432/app", "Zq7xUrlPass01"),
    "https_password": ("fetch https://user:Zq7xUrlPass02@host.example.com/x", "Zq7xUrlPass02"),
    "sentry_dsn": (
        "SENTRY_DSN=https://0123456789abcdefZq7x0123456789ab@o1.ingest.sentry.io/2",
        "0123456789abcdefZq7x0123456789ab",
    ),
    "git_token_user": (
        "git clone https://Zq7xGitTokenUser0001@github.com/org/x",
        "Zq7xGitTokenUser0001",
    ),
    "db_pass_env": ("DB_PASS=Zq7xDbPass01", "Zq7xDbPass01"),
    "db_pass_yaml": ("DB_PASS: Zq7xDbPass02", "Zq7xDbPass02"),
    "passwd": ("REDIS_PASSWD=Zq7xRedisPasswd", "Zq7xRedisPasswd"),
    "pwd": ("MYSQL_PWD=Zq7xMysqlPwd", "Zq7xMysqlPwd"),
    "secret_env": ("APP_SECRET=Zq7xAppSecret", "Zq7xAppSecret"),
    "token_env": ("SLACK_BOT_TOKEN=Zq7xBotToken", "Zq7xBotToken"),
    "key_env": ("MY_SERVICE_KEY=Zq7xServiceKey", "Zq7xServiceKey"),
    "credentials_env": ("GCP_CREDENTIALS=Zq7xGcpCredentials", "Zq7xGcpCredentials"),
    "passphrase": ("passphrase: correct horse Zq7x staple", "correct horse Zq7x staple"),
    "curl_user": ("curl -u admin:Zq7xCurlPass https://api.internal/", "Zq7xCurlPass"),
    "token_flag": ("kubectl get pods --token Zq7xKubectlToken", "Zq7xKubectlToken"),
    "gitlab": ("CI token glpat-Zq7xGitLabCanary00001", "glpat-Zq7xGitLabCanary00001"),
    "sendgrid": (
        "mail key SG.Zq7xSendGridCanary0000.Zq7xSendGridCanary0000000000000000000000000",
        "SG.Zq7xSendGridCanary0000.Zq7xSendGridCanary0000000000000000000000000",
    ),
}

KUBERNETES_SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "db-credentials", "namespace": "payments"},
    "type": "Opaque",
    "data": SECRET_DATA,
    "stringData": STRING_DATA,
}

KUBECONFIG = f"""\
apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: {b64("Zq7xClusterCA")}
    server: https://10.0.0.1:6443
  name: prod
users:
- name: admin
  user:
    client-certificate-data: {b64("Zq7xClientCert")}
    client-key-data: {b64("Zq7xClientKey")}
    token: Zq7xKubeconfigToken
"""

POD_ENV = """\
    env:
    - name: DATABASE_PASSWORD
      value: Zq7xPodEnvPassword
    - name: LOG_LEVEL
      value: info
"""


def forbidden() -> list[str]:
    """Every planted value, as it must never appear anywhere."""
    values = [value for _, value in LINES.values()]
    values += list(SECRET_DATA.values()) + [b64(v) for v in STRING_DATA.values()]
    values += [b64("Zq7xClusterCA"), b64("Zq7xClientCert"), b64("Zq7xClientKey")]
    return [*values, CANARY]


def plain_text() -> str:
    return "\n".join(line for line, _ in LINES.values()) + "\n" + PEM + POD_ENV


def documents() -> Iterator[tuple[str, str]]:
    """(shape, text): the corpus as each kind of document TARSy meets."""
    lines = [line for line, _ in LINES.values()]
    settings = {
        "password": "Zq7xJsonPassword",
        "clientSecret": "Zq7xJsonClientSecret",
        "nested": {"deeper": [{"api_key": "Zq7xNestedApiKey", "note": LINES["bearer"][0]}]},
    }
    yield "plain text", plain_text()
    yield "json", json.dumps({"config": settings, "log": lines}, indent=2)
    yield "json-compact", json.dumps({"config": settings, "secret": KUBERNETES_SECRET})
    yield "yaml", yaml.safe_dump({"config": settings, "env": {"DB_PASS": "Zq7xYamlDbPass"}})
    yield "kubernetes secret yaml", yaml.safe_dump(KUBERNETES_SECRET, sort_keys=False)
    yield "kubernetes secret json", json.dumps(KUBERNETES_SECRET, indent=2)
    yield "secret list", json.dumps({"kind": "SecretList", "items": [KUBERNETES_SECRET]})
    yield "kubeconfig", KUBECONFIG
    yield "escaped json in a log line", "applied: " + json.dumps(json.dumps(settings))
    yield "env file", 'DB_PASS="Zq7xEnvFilePass"\nPASSPHRASE="correct horse Zq7x battery"\n'


def documents_by_shape() -> dict[str, str]:
    return dict(documents())


# Values planted only inside the documents above (beyond LINES).
DOCUMENT_VALUES = [
    "Zq7xJsonPassword",
    "Zq7xJsonClientSecret",
    "Zq7xNestedApiKey",
    "Zq7xYamlDbPass",
    "Zq7xPodEnvPassword",
    "Zq7xKubeconfigToken",
    "Zq7xEnvFilePass",
]
