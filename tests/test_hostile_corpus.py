"""Every input of ``tests/hostile_corpus.py`` through every entry point that parses outside
text — the masking of alerts and tool results, the alert's display, Markdown rendering,
the bounded loaders — in a child process: a segfault or a hang is a failed test naming
the input, not a dead pytest.

Checked for each input: the child survives, it finishes in ``TIME_LIMIT``, no planted
Secret value comes out of the masking (nor of the page showing the masked alert), and
nothing the input did not hold becomes unstorable (a NUL, a lone surrogate).

Covers agents/masking, web/markdown.py and web/templatetags/tarsy.py; it sits at
the top of tests/ because it crosses those layers, like the corpus it runs.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests import hostile_corpus

ROOT = Path(__file__).resolve().parents[1]
# Seconds for one input through every entry point. The slowest take about 2 s alone on
# the 2-core CI box; the rest is for a box shared with other work.
TIME_LIMIT = 30.0


def _entry_points() -> dict[str, Any]:
    import yaml

    from masking import mask_alert, mask_tool_result
    from masking.bounded import load_json, load_yaml_all, storable
    from web.markdown import render
    from web.templatetags.tarsy import alert_format

    def bounded_yaml(text: str) -> str:
        try:
            return repr(load_yaml_all(text, max_chars=len(text)))[:1000]
        except (ValueError, yaml.YAMLError) as exc:  # a refusal or invalid YAML
            return type(exc).__name__

    def bounded_json(text: str) -> str:
        try:
            return repr(load_json(text))[:1000]
        except ValueError as exc:
            return type(exc).__name__

    return {
        # What an alert, a chat question and a runbook go through before they are stored.
        "mask_alert": mask_alert,
        # A tool result is made storable by the MCP client before it is masked.
        "mask_tool_result": lambda text: mask_tool_result(storable(text)),
        # The session page shows the alert as stored: masked.
        "alert_format": lambda text: json.dumps(alert_format(mask_alert(text))),
        # A model may repeat anything; its text is rendered as Markdown.
        "markdown": lambda text: str(render(text)),
        "load_yaml_all": bounded_yaml,
        "load_json": bounded_json,
    }


def child() -> None:
    """Runs in the child: the names of inputs on stdin, one JSON line out per event."""
    import django

    django.setup()
    from masking.bounded import unstorable

    entry_points = _entry_points()
    for line in sys.stdin:
        name = line.rstrip("\n")
        print(json.dumps({"start": name}), flush=True)
        if name == os.environ.get("TARSY_HOSTILE_CORPUS_CRASH"):
            os.kill(os.getpid(), signal.SIGSEGV)  # the harness's own test
        text = hostile_corpus.CORPUS[name]
        report: dict[str, Any] = {"done": name, "seconds": {}, "problems": []}
        for entry, function in entry_points.items():
            started = time.monotonic()
            try:
                out = function(text)
            except Exception as exc:
                report["problems"].append(f"{entry} raised {type(exc).__name__}: {exc!s:.200}")
                continue
            finally:
                report["seconds"][entry] = round(time.monotonic() - started, 3)
            if entry in ("mask_alert", "mask_tool_result", "alert_format"):
                leaked = [value for value in hostile_corpus.FORBIDDEN if value in out]
                if leaked:
                    report["problems"].append(f"{entry} let {leaked[0]!r} through")
            if (entry != "mask_alert" or not unstorable(text)) and (problem := unstorable(out)):
                report["problems"].append(f"{entry} returned {problem}")
        print(json.dumps(report), flush=True)


def run_corpus(names: list[str], stderr_path: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """``(reports, failures)`` by input name; a child that dies or hangs is restarted for
    the inputs after the one it was on."""
    reports: dict[str, dict] = {}
    failures: dict[str, str] = {}
    pending = list(names)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tarsy_site.settings"}
    while pending:
        with stderr_path.open("w") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-c", "from tests.test_hostile_corpus import child; child()"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write("".join(f"{name}\n" for name in pending))
        process.stdin.close()
        current, deadline = None, time.monotonic() + 120  # Django's start-up, then per input
        try:
            while True:
                remaining = deadline - time.monotonic()
                ready, _, _ = select.select([process.stdout], [], [], max(remaining, 0))
                if not ready:
                    failures[current or pending[0]] = f"took more than {TIME_LIMIT:g} s"
                    process.kill()
                    break
                line = process.stdout.readline()
                if not line:  # the child is gone
                    code = process.wait()
                    if current is not None:
                        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
                        tail = stderr_path.read_text(errors="replace")[-2000:]
                        failures[current] = f"the child died ({how}):\n{tail}"
                    break
                event = json.loads(line)
                if "start" in event:
                    current, deadline = event["start"], time.monotonic() + TIME_LIMIT
                else:
                    reports[event["done"]] = event
                    pending.remove(event["done"])
                    current = None
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            process.stdout.close()
        pending = [name for name in pending if name not in failures]
    return reports, failures


def test_no_hostile_input_crashes_hangs_or_leaks_through_an_entry_point(tmp_path):
    reports, failures = run_corpus(list(hostile_corpus.CORPUS), tmp_path / "child-stderr.log")
    problems = [f"{name}: {why}" for name, why in failures.items()]
    problems += [
        f"{name}: {problem}" for name, report in reports.items() for problem in report["problems"]
    ]
    assert not problems, "\n".join(problems)
    assert set(reports) == set(hostile_corpus.CORPUS)
    slowest = sorted(
        ((sum(r["seconds"].values()), name, r["seconds"]) for name, r in reports.items()),
        reverse=True,
    )[:5]
    print("slowest inputs:", *(f"{s:.2f} s {name} {parts}" for s, name, parts in slowest), sep="\n")


def test_a_crash_in_the_child_is_a_failure_that_names_the_input(tmp_path, monkeypatch):
    # The harness itself: an input that kills its child must be reported, and the inputs
    # after it still run. SIGSEGV is what libyaml's composer did on the finding's input.
    monkeypatch.setenv("TARSY_HOSTILE_CORPUS_CRASH", "kills its child")
    names = ["json nul escape", "kills its child", "json lone surrogate escape"]
    reports, failures = run_corpus(names, tmp_path / "child-stderr.log")
    assert set(failures) == {"kills its child"}
    assert "signal SIGSEGV" in failures["kills its child"]
    assert set(reports) == {"json nul escape", "json lone surrogate escape"}
