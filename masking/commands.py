"""Passwords on the command lines of database and remote-shell clients, which say
"password" with a letter: ``mysql -pS3cret``, ``sshpass -p x ssh``, ``redis-cli -a x``,
``sqlcmd -P x``, ``ldapsearch -w x``, ``smbclient -U user%x``, ``xfreerdp /p:x``…
(long options such as ``--password=x`` are masked by name, in assignments.py).

Also the files that hold a password without naming it with a separator: ``.netrc``
lines, ``.pgpass`` lines, SQL's ``IDENTIFIED BY 'x'`` / ``PASSWORD 'x'``, openssl's
``pass:x``, ``curl -u user:x``.
"""

from __future__ import annotations

import re

from masking.names import is_placeholder

MASKED = "[MASKED_PASSWORD]"

# Program → how it takes a password on its command line: "-p" followed by the value
# (attached or not), "-p" attached only (mysql: a lone -p prompts), or user%password.
_SEPARATE = "separate"
_ATTACHED = "attached"
_PERCENT = "percent"
_PASSWORD_FLAGS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("-p", _ATTACHED, ("mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow")),
    ("-p", _ATTACHED, ("mysqlcheck", "mysqlpump", "mysqlsh", "mariadb", "mariadb-dump")),
    ("-p", _SEPARATE, ("sshpass", "mongo", "mongosh", "mongodump", "mongorestore")),
    ("-p", _SEPARATE, ("mongoexport", "mongoimport", "mongostat", "mongotop", "rdesktop")),
    ("-p", _SEPARATE, ("ncftp", "7z", "7za")),
    ("-p", _SEPARATE, ("docker", "podman", "buildah", "skopeo", "helm", "oras", "nerdctl")),
    ("-a", _SEPARATE, ("redis-cli", "keydb-cli", "valkey-cli")),
    ("-P", _SEPARATE, ("sqlcmd", "bcp", "osql", "isql", "ipmitool", "zip")),
    ("-w", _SEPARATE, ("ldapsearch", "ldapadd", "ldapmodify", "ldapdelete", "ldapwhoami")),
    ("-w", _SEPARATE, ("ldappasswd", "ldapcompare", "ldapmodrdn", "ldapexop")),
    ("-c", _SEPARATE, ("snmpwalk", "snmpget", "snmpbulkwalk", "snmpset")),
    ("-U", _PERCENT, ("smbclient", "rpcclient", "smbmap", "smbget", "smbcacls", "net")),
    ("/p:", _ATTACHED, ("xfreerdp", "wlfreerdp", "sdl-freerdp")),
)
_PROGRAMS = {
    program: (flag, style) for flag, style, programs in _PASSWORD_FLAGS for program in programs
}
# A path before the name (/usr/bin/mysql) ends in "/", which the look-behind lets pass.
_PROGRAM_RE = re.compile(
    r"(?<![\w.-])(?P<program>"
    + "|".join(re.escape(p) for p in sorted(_PROGRAMS, key=len, reverse=True))
    + r")(?=[ \t])"
)
# A command runs to the end of its line or to the next command of a pipeline or list.
_COMMAND_END_RE = re.compile(r"\r?\n|\|\|?|&&|;|\)")
_TOKEN_RE = re.compile(r"""'[^'\n]*'|"(?:[^"\\\n]|\\.)*"|[^\s'"]+""")
# Options of the same programs that take a value which is not the password: skipped with
# it, so "-P 3306" of mysql or "-p 8080:80" of docker run… is never read as one.
_SNMP_V3 = {"-A", "-X"}


def _mask_command(program: str, args: str) -> str:
    flag, style = _PROGRAMS[program]
    out: list[str] = []
    position = 0
    tokens = list(_TOKEN_RE.finditer(args))
    for i, token in enumerate(tokens):
        text = token.group()
        value: tuple[int, int] | None = None
        if style == _ATTACHED and text.startswith(flag) and len(text) > len(flag):
            value = (token.start() + len(flag), token.end())
        elif style == _SEPARATE and (
            text == flag or (program.startswith("snmp") and text in _SNMP_V3)
        ):
            if program in ("docker", "podman", "nerdctl", "buildah") and not _is_login(tokens):
                continue  # docker run -p 8080:80 publishes a port
            if i + 1 < len(tokens):
                value = tokens[i + 1].span()
        elif style == _SEPARATE and text.startswith(flag) and len(text) > len(flag) == 2:
            if program in ("sshpass", "7z", "7za"):
                value = (token.start() + 2, token.end())  # sshpass -px, 7z -px
        elif style == _PERCENT and text == flag and i + 1 < len(tokens):
            user = tokens[i + 1]
            if "%" in user.group():
                cut = user.group().index("%") + 1
                value = (user.start() + cut, user.end() - (user.group()[-1] in "'\""))
        if value is None or value[0] < position:
            continue
        secret = args[value[0] : value[1]]
        if is_placeholder(secret) or not secret.strip("'\""):
            continue
        quote = secret[0] if secret[0] in "'\"" and secret[-1] == secret[0] else ""
        out += [args[position : value[0]], f"{quote}{MASKED}{quote}"]
        position = value[1]
    return "".join(out) + args[position:] if out else args


def _is_login(tokens: list[re.Match[str]]) -> bool:
    return any(t.group() == "login" for t in tokens[:4])


def _commands(text: str) -> str:
    out: list[str] = []
    position = 0
    while match := _PROGRAM_RE.search(text, position):
        end = _COMMAND_END_RE.search(text, match.end())
        stop = end.start() if end else len(text)
        out += [
            text[position : match.end()],
            _mask_command(match["program"], text[match.end() : stop]),
        ]
        position = stop
    return "".join(out) + text[position:] if out else text


# machine db.example.com login app password hunter2
_NETRC_RE = re.compile(
    r"(?P<key>\bmachine[ \t]+\S+(?:[ \t]+(?:login|account|port)[ \t]+\S+)*[ \t]+password[ \t]+)"
    r"(?P<value>\S+)"
)
# hostname:port:database:username:password (~/.pgpass), one entry a line
_PGPASS_RE = re.compile(
    r"^(?P<key>[\w.*-]+:(?:\d+|\*):[\w*-]+:[\w.*@-]+:)(?P<value>[^\s:]\S*)$", re.M
)
# CREATE USER x IDENTIFIED BY 'pw' / ALTER ROLE x WITH PASSWORD 'pw'
_SQL_RE = re.compile(
    r"""(?P<key>\b(?:IDENTIFIED[ \t]+(?:WITH[ \t]+\w+[ \t]+)?BY(?:[ \t]+PASSWORD)?|PASSWORD)[ \t]+)"""
    r"""(?P<value>'(?:[^'\n]|'')*'|"[^"\n]*")""",
    re.I,
)
# openssl … -passin pass:x / -passout pass:x / -pass pass:x / -k x
_OPENSSL_RE = re.compile(r"(?P<key>(?<![\w-])-pass(?:in|out)?[ \t]+pass:)(?P<value>\S+)")
# curl -u user:password / --user user:password
_CURL_USER_RE = re.compile(r"(?P<key>(?<!\S)(?:-u|--user)[ \t]+[^\s:'\"]+:)(?P<value>[^\s'\"]+)")


def _replace(m: re.Match[str]) -> str:
    value = m.group("value")
    if is_placeholder(value):
        return m.group(0)
    quote = value[0] if value[0] in "'\"" and len(value) > 1 else ""
    return f"{m.group('key')}{quote}{MASKED}{quote}"


def mask_commands(text: str) -> str:
    text = _commands(text)
    for pattern in (_NETRC_RE, _PGPASS_RE, _SQL_RE, _OPENSSL_RE, _CURL_USER_RE):
        text = pattern.sub(_replace, text)
    return text
