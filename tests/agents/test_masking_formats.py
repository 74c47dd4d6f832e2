"""Masking that generalises (masking): secrets found by the name they are given in
any syntax, inside encodings, by their shape on command lines, in URLs and cookies, and as
key material without its armour — and the ordinary output of SRE tools left alone.

The figures against corpora the project did not write (trufflehog's and detect-secrets'
test cases, loghub's and holmesgpt's SRE output) come from bench/masking.py.
"""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from masking import mask_alert, mask_tool_result
from tests.agents.test_masking import assert_linear


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


SECRET = "S3cr3tPa55w0rdZq7x"

# (text holding SECRET, a piece of evidence around it that must stay)
FORMATS = [
    # The three the docs (docs/security.md) promised and missed.
    (f"postgres://app:pa/ss{SECRET}@db.payments.svc:5432/app", "@db.payments.svc:5432/app"),
    (f"DB_PASSWORD_2={SECRET}", "DB_PASSWORD_2="),
    (
        json.dumps({"log": json.dumps({"msg": "cfg", "body": json.dumps({"password": SECRET})})}),
        '\\"msg\\": \\"cfg\\"',
    ),
    # Command lines of database and remote-shell clients.
    (f"mysql -h db -u root -p{SECRET} payments", "-u root -p"),
    (f"mysqldump --user=root --password={SECRET} app > app.sql", "--user=root"),
    (f"sshpass -p '{SECRET}' ssh admin@bastion", "ssh admin@bastion"),
    (f"redis-cli -h cache -p 6379 -a {SECRET} ping", "-p 6379"),
    (f"mongosh mongodb://db:27017 -u admin -p {SECRET}", "-u admin"),
    (f"sqlcmd -S db -U sa -P '{SECRET}' -Q 'select 1'", "-Q 'select 1'"),
    (f"ldapsearch -x -D cn=admin,dc=x -w {SECRET} -b dc=example,dc=org", "-b dc=example,dc=org"),
    (f"smbclient //fs/share -U admin%{SECRET}", "-U admin%"),
    (f"xfreerdp /v:host /u:admin /p:{SECRET}", "/u:admin"),
    (f"ipmitool -I lanplus -H bmc-7 -U admin -P {SECRET} power status", "power status"),
    (f"snmpwalk -v2c -c {SECRET} 10.0.0.1 ifDescr", "10.0.0.1 ifDescr"),
    (f"docker login -u bot -p {SECRET} registry.example.com", "registry.example.com"),
    (f"keytool -importkeystore -deststorepass {SECRET} -srcstoretype PKCS12", "PKCS12"),
    (f"openssl pkcs12 -in a.p12 -passin pass:{SECRET} -nodes", "-nodes"),
    (f"PGPASSWORD={SECRET} psql -h db -U app", "psql -h db -U app"),
    (f"machine db.example.com login app password {SECRET}", "login app password "),
    (f"db.example.com:5432:payments:app:{SECRET}", "db.example.com:5432:payments:app:"),
    (f"CREATE USER app IDENTIFIED BY '{SECRET}';", "CREATE USER app"),
    (f"ALTER ROLE app WITH LOGIN PASSWORD '{SECRET}';", "ALTER ROLE app"),
    # Cookies.
    (f"Cookie: _ga=GA1.2.3; sessionid={SECRET}; theme=dark", "Cookie: _ga="),
    (f"Set-Cookie: session={SECRET}; Path=/; HttpOnly; Secure", "Path=/; HttpOnly"),
    (f"curl -b 'sid={SECRET}' https://app.example.com", "https://app.example.com"),
    (json.dumps({"headers": {"cookie": f"sid={SECRET}; lang=en"}}), '"headers"'),
    # Signed URLs.
    (
        "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=3600"
        f"&X-Amz-Signature=0a1b2c3d4e5f6071{SECRET.lower()}8293a4b5c6d7e8f9&X-Amz-SignedHeaders=host",
        "X-Amz-SignedHeaders=host",
    ),
    (
        f"https://b.s3.amazonaws.com/k?X-Amz-Security-Token={SECRET}&X-Amz-Date=20240101T000000Z",
        "X-Amz-Date=20240101T000000Z",
    ),
    (
        f"https://acct.blob.core.windows.net/c/b?sv=2022-11-02&sp=r&sig={quote(SECRET + '+/=')}",
        "sv=2022-11-02&sp=r",
    ),
    (
        f"https://d1.cloudfront.net/x.png?Expires=1700000000&Signature=Ab3~{SECRET}-Ef5_Gh6"
        "&Key-Pair-Id=APKAEIBAERJR2EXAMPLE",
        "Key-Pair-Id=APKAEIBAERJR2EXAMPLE",
    ),
    # Bare tokens with their vendors' prefixes, and any prefix before a long random tail.
    (f"push failed with glpat-{SECRET}AbCd", "push failed with"),
    (f"//registry.npmjs.org/:_authToken=npm_{SECRET}Ab3dEf6hIj9kLm2n", "//registry.npmjs.org/"),
    (f"HF hf_{SECRET}Ab3dEf6hIj9kLmN", "HF "),
    (f"export VAULT hvs.CAESI{SECRET}Gh4KHgo", "export VAULT"),
    (f"using acme_live_{SECRET}Ab3dEf6hIj9kLm2nOp5q now", "using "),
    # Key material and registry credentials, wherever they are.
    (f'{{"auths":{{"registry.example.com":{{"auth":"{b64("bot:" + SECRET)}"}}}}}}', "auths"),
    (
        ".dockerconfigjson: "
        + b64(json.dumps({"auths": {"r": {"username": "bot", "password": SECRET}}})),
        ".dockerconfigjson: ",
    ),
    (f"DOCKER_AUTH_CONFIG={b64(json.dumps({'auths': {'r': {'auth': b64('u:' + SECRET)}}}))}", "="),
    # Webhook URLs.
    (f"https://discord.com/api/webhooks/1234567890/{SECRET}Ab3dEf6hIj9k", "discord.com/api"),
    (f"https://x.webhook.office.com/webhookb2/1234abcd@5678ef/IncomingWebhook/{SECRET}", "office"),
    (f"https://mattermost.example.com/hooks/{SECRET.lower()}", "mattermost.example.com"),
    (f"https://hooks.slack.com/services/T0/B0/{SECRET}", "https://"),
    (f"https://chat.googleapis.com/v1/spaces/AAAA/messages?key=k&token={SECRET}", "spaces/AAAA"),
    # Names that say secret, in any syntax.
    (f"<password>{SECRET}</password>", "<password>"),
    (f'<add key="DbPassword" value="{SECRET}"/>', 'key="DbPassword"'),
    (f'<entry key="jdbc.password">{SECRET}</entry>', '<entry key="jdbc.password">'),
    (f"spring.datasource.password={SECRET}", "spring.datasource.password="),
    (f'$password = "{SECRET}"', "$password = "),
    (f'apiKey := "{SECRET}"', "apiKey := "),
    (f'"client_secret" => "{SECRET}"', '"client_secret" => '),
    (f"pw: {SECRET}", "pw: "),
    (f"X-Vault-Token: {SECRET}", "X-Vault-Token: "),
    (f"PRIVATE-TOKEN: {SECRET}", "PRIVATE-TOKEN: "),
    (f"x-functions-key: {SECRET}", "x-functions-key: "),
    (f"requirepass {SECRET}", "requirepass "),
    (f"https://api.example.com/v1/x?api_key={SECRET}&page=2", "&page=2"),
    (f"https://app.example.com/cb#access_token={SECRET}&expires_in=3600", "expires_in=3600"),
    # Ambiguous names, random-looking values.
    (f"sk: {SECRET}", "sk: "),
    (f'"auth": "{SECRET}"', '"auth": '),
    (f"signature={SECRET}", "signature="),
    (f"using API key {SECRET} for the export", "for the export"),
    (f"token {SECRET} rejected", "rejected"),
    # A password whose value starts with a capital, then a token masked after it (the
    # marker's "[" once read as an object's printed form, "Name [", and kept it).
    (f"password=Q{SECRET} ghp_{'a1B2c3D4e5F6g7H8i9J0' * 2}", "password="),
    (f"password=Q{SECRET} [prod]", "[prod]"),
    # Encodings, nested.
    (f"redirect=https%3A%2F%2Fbob%3A{SECRET}%40db.example.com%2F", "redirect=https%3A%2F%2Fbob"),
    (f"q={quote(json.dumps({'password': SECRET}))}", "q=%7B%22password%22"),
    (f"blob {b64(json.dumps({'db': {'password': SECRET}}))} end", "blob "),
    (f"auth={b64(b64('admin:' + SECRET))}", "auth="),
]


@pytest.mark.parametrize(("text", "kept"), FORMATS)
def test_a_secret_in_any_of_these_formats_is_masked(text: str, kept: str) -> None:
    for mask in (mask_tool_result, mask_alert):
        masked = mask(text)
        assert SECRET not in masked
        assert SECRET.lower() not in masked
        assert kept in masked
        assert "[MASKED_" in masked
        assert mask(masked) == masked  # idempotent


EVIDENCE = [
    # kubectl, Kubernetes events, logs
    'MountVolume.SetUp failed for volume "tls" : secret "payments-tls" not found',
    'Error: secret "db-creds" not found; token "default-token-x7k2p" mounted',
    "  sessionAffinity: None\n  type: ClusterIP",
    "  key: password\n  name: payments-db-credentials",
    "pod-template-hash: 7d9c7d8f6b\n  uid: 4f0e8c9a-1b2c-4d5e-8f90-a1b2c3d4e5f6",
    "image: nginx@sha256:0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9",
    "Successfully pulled image quay.io/app/api:v1.8.2 in 1.2s",
    "2016-09-28 04:30:32, Info  CBS  Session: 30546173_4275933214 initialized by client",
    "INFO  [SessionTracker] - Expiring session 0x14f05578bd80002, timeout of 10000ms exceeded",
    "Processed session termination for sessionid: 0x14f05578bd80002",
    "V WindowManager: Skipping AppWindowToken{df0798e token=Token{78af589 ActivityRecord{3b0}}}",
    "W ActivityManager: Bad activity token: android.os.BinderProxy@2bd79ce",
    "Priority: 20, Token: Token { kind: ContainerToken, service: 10.190.173.170:45454 }",
    "spark://CoarseGrainedScheduler@10.10.34.11:48069",
    '"dependencies": {"jsonwebtoken": "^9.0.0", "bcrypt": "^5.1.0"}',
    "token_env: GITHUB_TOKEN\napi_key_env: OPENAI_API_KEY",
    "service_key: default/Deployment/analytics-exporter",
    "authorization: server message: insufficient_scope: authorization failed",
    "-[NetworkAnalyticsEngine _writeJournalRecord:fromCellFingerprint:key:atLOI:ofKind:]",
    "docker run -p 8080:80 -p 8443:443 nginx",
    "ssh -p 2222 admin@bastion.example.com",
    "mysql -h db -P 3306 -u root -p payments",
    "ldapsearch -x -b dc=example,dc=org uid=bob",
    "https://api.github.com/repos/org/repo/hooks/42",
    "git commit 3f786850e387550fdab836ed7e6dc881de23001b",
    '"id": "call_fllLOBmzkQ1ovvOqdjBnYLy1", "type": "function"',
    f"hello {b64('hello world, nothing to see here')} bye",
    'Readiness probe failed: Get "http://10.0.0.7:8080/healthz": context deadline exceeded',
    "GET /api/v1/sessions?page=2&page_size=25&sort=-created_at 200",
    "key=0|com.tencent.mobileqq|121|null|10111",
    "passwordless login enabled; password policy: min length 12",
    "The API key was rotated at 2024-01-01T00:00:00Z by ops",
    "Cookie: expired",
]


@pytest.mark.parametrize("text", EVIDENCE)
def test_ordinary_sre_output_is_left_alone(text: str) -> None:
    assert mask_tool_result(text) == text
    assert mask_alert(text) == text


# --- key material without its armour ---------------------------------------------------------


def _keys() -> dict[str, bytes]:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    ed_key = ed25519.Ed25519PrivateKey.generate()
    pem, pkcs8, openssh = (
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.PrivateFormat.OpenSSH,
    )
    none = serialization.NoEncryption()
    return {
        "rsa-pkcs1": rsa_key.private_bytes(
            pem, serialization.PrivateFormat.TraditionalOpenSSL, none
        ),
        "rsa-pkcs8": rsa_key.private_bytes(pem, pkcs8, none),
        "rsa-pkcs8-encrypted": rsa_key.private_bytes(
            pem, pkcs8, serialization.BestAvailableEncryption(b"hunter2")
        ),
        "ec-sec1": ec_key.private_bytes(pem, serialization.PrivateFormat.TraditionalOpenSSL, none),
        "ed25519-pkcs8": ed_key.private_bytes(pem, pkcs8, none),
        "ed25519-openssh": ed_key.private_bytes(pem, openssh, none),
        "rsa-openssh": rsa_key.private_bytes(pem, openssh, none),
    }


KEYS = _keys()


def _body(pem: bytes) -> list[str]:
    return [line for line in pem.decode().splitlines() if not line.startswith("-----")]


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_a_private_key_body_without_its_armour_lines_is_masked(kind: str) -> None:
    lines = _body(KEYS[kind])
    wrapped = "\n".join(lines)
    documents = [
        f"the key follows\n{wrapped}\nend of key",  # the lines as they were
        f"tls.key: {''.join(lines)}",  # one line, in YAML
        json.dumps({"private_key": None, "material": "".join(lines)}),
        json.dumps({"note": "key below", "k": wrapped + "\n"}),  # wrapped inside a string
    ]
    for text in documents:
        masked = mask_tool_result(text)
        for line in lines:
            assert line not in masked, (kind, text[:80])
        assert "[MASKED_" in masked


def test_a_public_certificate_body_is_not_taken_for_a_key() -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "payments.example.com")])
    import datetime

    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    body = "".join(_body(cert.public_bytes(serialization.Encoding.PEM)))
    text = f"ca.crt: {body}"
    assert mask_tool_result(text) == text


# --- nested encodings, to any depth -----------------------------------------------------------


def test_json_inside_json_strings_is_masked_at_every_depth() -> None:
    document: object = {"password": SECRET, "user": "app"}
    for depth in range(6):
        document = {"level": depth, "payload": json.dumps(document)}
        text = json.dumps(document)
        masked = mask_tool_result(text)
        assert SECRET not in masked, depth
        assert json.loads(masked)["level"] == depth  # still valid JSON
        inner = json.loads(masked)
        while "payload" in inner:
            inner = json.loads(inner["payload"])
        assert inner == {"password": "[MASKED_PASSWORD]", "user": "app"}


def test_base64_and_percent_encodings_are_decoded_at_every_depth() -> None:
    text = f"DATABASE_URL=postgres://app:{SECRET}@db/app"
    for _ in range(4):
        text = b64(text)
    assert SECRET not in mask_tool_result(f"config: {text}")
    nested = quote(json.dumps({"cfg": b64(json.dumps({"token": SECRET}))}))
    masked = mask_tool_result(f"GET /cb?state={nested} HTTP/1.1")
    assert SECRET not in masked
    assert masked.startswith("GET /cb?state=")
    assert masked.endswith(" HTTP/1.1")


@pytest.mark.parametrize(
    "make",
    [
        lambda n: '"\\' * (n // 2),  # an escape that never ends
        lambda n: '"a\\"' * (n // 4),
        lambda n: "Cookie: " + "a=b; " * (n // 5),
        lambda n: "curl -b " * (n // 8),
        lambda n: "%41" * (n // 3),
        lambda n: "mysql -p" * (n // 8),
        lambda n: "QUJD" * (n // 4),
        lambda n: ("QUJD" * 16 + "\n") * (n // 65),
        lambda n: "/hooks/a" * (n // 8),
        lambda n: "token " * (n // 6),
        lambda n: "passpass" * (n // 8),
        lambda n: "machine a login b password " * (n // 27),
        lambda n: "<password>" * (n // 10),
        lambda n: 'key="a" ' * (n // 8),
        lambda n: "://a:b/c" * (n // 8),
        lambda n: "acme_" + "Ab3" * (n // 3),
        lambda n: "\\u0041" * (n // 6),
    ],
)
def test_the_new_passes_stay_linear_on_hostile_input(make) -> None:
    assert_linear(make)
