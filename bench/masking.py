"""How well does masking generalise? Recall on secrets written by other projects, false
positives on ordinary SRE output, and time on adversarial input.

- **Recall**: the pattern tests of trufflehog's detectors and detect-secrets' plugins
  (bench/masking_corpora.py). A case counts as masked when none of its secrets survives
  ``mask_tool_result`` (for detect-secrets' ``should_flag`` cases, which do not name the
  secret: when masking changed the line).
- **False positives**: lines of ordinary SRE output that masking changed: loghub's system
  logs, holmesgpt's kubectl/log/Prometheus fixtures, Prometheus' metric test data and
  TARSy's own golden files. A changed line is a false positive unless it really holds a
  secret (``--show`` prints them to check).

Which corpora masking was developed against and which were held out is printed beside
each figure: the rules were written from the vendors' and tools' documentation, checked
against detect-secrets' cases and loghub's and holmesgpt's output (their misses and
changed lines were read and acted on), and measured once on trufflehog's cases,
Prometheus' data and TARSy's files without looking at what they missed first.
- **Time**: per document (median, p95) and adversarial 1 MiB inputs (must stay linear).

The corpora are other projects' repositories, read at their HEAD; none of their files is
in this repository. Clone them anywhere and pass the paths (or keep the defaults):

    git clone https://github.com/trufflesecurity/trufflehog
    git clone https://github.com/Yelp/detect-secrets
    git clone https://github.com/logpai/loghub
    git clone https://github.com/robusta-dev/holmesgpt
    git clone https://github.com/prometheus/prometheus
    git clone https://github.com/codeready-toolchain/tarsy

Usage: .venv/bin/python bench/masking.py [--trufflehog PATH] [--detect-secrets PATH]
       [--loghub PATH] [--holmesgpt PATH] [--prometheus PATH] [--tarsy PATH]
       [--show N] [--misses N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tarsy_site.settings")

import django

django.setup()

from bench import masking_corpora as corpora  # noqa: E402
from bench.stats import load_average, percentile  # noqa: E402
from masking import mask_tool_result  # noqa: E402

MIRRORS = Path("/work/.mirror")


def _default(name: str) -> Path:
    return MIRRORS / name / "repo"


def recall(name: str, cases: list[corpora.SecretCase], misses: int) -> None:
    masked = 0
    missed: list[tuple[corpora.SecretCase, str]] = []
    for case in cases:
        out = mask_tool_result(case.text)
        hit = all(s not in out for s in case.secrets) if case.secrets else out != case.text
        masked += hit
        if not hit:
            missed.append((case, out))
    files = {case.source.split("#")[0].split(":")[0] for case in cases}
    print(
        f"recall  {name:<24} {masked:>5} / {len(cases):<5} cases masked = "
        f"{100 * masked / len(cases):5.1f} %  ({len(files)} test files)"
    )
    for case, out in missed[:misses]:
        print(f"    missed {case.source}: {case.secrets} in {out[:300]!r}")


def false_positives(name: str, documents: list[corpora.Document], show: int) -> list[float]:
    lines = changed = changed_docs = 0
    times: list[float] = []
    examples: list[tuple[str, str, str]] = []
    for document in documents:
        start = time.perf_counter()
        out = mask_tool_result(document.text)
        times.append((time.perf_counter() - start) * 1000)
        before, after = document.text.splitlines(), out.splitlines()
        lines += len(before)
        if out == document.text:
            continue
        changed_docs += 1
        if len(before) != len(after):
            changed += len(before)  # a change of shape: count every line as changed
            examples.append((document.source, "(lines joined or split)", out[:200]))
            continue
        for old, new in zip(before, after, strict=True):
            if old != new:
                changed += 1
                examples.append((document.source, old, new))
    print(
        f"false+  {name:<24} {changed:>5} / {lines:<6} lines changed = "
        f"{100 * changed / max(lines, 1):6.3f} %  "
        f"({changed_docs} of {len(documents)} documents)"
    )
    for source, old, new in examples[:show]:
        print(f"    {source}\n      - {old[:240]}\n      + {new[:240]}")
    return times


ADVERSARIAL = {
    "one line of 'a'": "a" * (1 << 20),
    "password=password=…": "password=" * ((1 << 20) // 9),
    '"\\"\\"… (escapes)': '"\\' * (1 << 19),
    "base64 run": "QUJD" * (1 << 18),
    "base64 lines": ("QUJD" * 16 + "\n") * (1 << 14),
    "://a:b://a:b…": "://a:b" * ((1 << 20) // 6),
    "key: [[[[": "kind: Secret\ndata: " + "[" * (1 << 20),
    "--password --password": "--password " * ((1 << 20) // 11),
    "%41%41… (percent)": "%41" * ((1 << 20) // 3),
    "Cookie: a=b; a=b;…": "Cookie: " + "a=b; " * ((1 << 20) // 5),
}


def adversarial() -> None:
    for name, text in ADVERSARIAL.items():
        start = time.perf_counter()
        mask_tool_result(text)
        elapsed = time.perf_counter() - start
        print(f"time    {name:<28} {len(text) / 2**20:5.2f} MiB in {elapsed * 1000:8.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trufflehog", type=Path, default=_default("trufflesecurity+trufflehog"))
    parser.add_argument("--detect-secrets", type=Path, default=_default("Yelp+detect-secrets"))
    parser.add_argument("--loghub", type=Path, default=_default("logpai+loghub"))
    parser.add_argument("--holmesgpt", type=Path, default=_default("robusta-dev+holmesgpt"))
    parser.add_argument("--prometheus", type=Path, default=_default("prometheus+prometheus"))
    parser.add_argument("--tarsy", type=Path, default=_default("codeready-toolchain+tarsy"))
    parser.add_argument("--show", type=int, default=0, help="print N changed lines per corpus")
    parser.add_argument("--misses", type=int, default=0, help="print N missed cases per corpus")
    args = parser.parse_args()

    print(load_average())
    recall("trufflehog [held out]", corpora.trufflehog_cases(args.trufflehog), args.misses)
    recall("detect-secrets [dev]", corpora.detect_secrets_cases(args.detect_secrets), args.misses)
    times = false_positives("loghub [dev]", corpora.loghub_documents(args.loghub), args.show)
    times += false_positives(
        "holmesgpt [dev]", corpora.holmesgpt_documents(args.holmesgpt), args.show
    )
    times += false_positives(
        "prometheus [held out]", corpora.prometheus_documents(args.prometheus), args.show
    )
    times += false_positives("tarsy [held out]", corpora.tarsy_documents(args.tarsy), args.show)
    print(
        f"time    per document (n={len(times)})  median {percentile(times, 0.5):.2f} ms  "
        f"p95 {percentile(times, 0.95):.2f} ms  max {max(times):.1f} ms"
    )
    adversarial()
    print(load_average())


if __name__ == "__main__":
    main()
