"""What reading a TARSy configuration costs, and what TARSy's pipeline scenario costs
end to end (issue 20).

- **Load and check**: each of TARSy's e2e configurations and its deploy example
  (tests/compat/tarsy_configs/) loaded and checked as ``manage.py check`` checks it
  (every LLM use resolved against the configuration's providers), in process, many
  times: median and p95 per configuration, the largest first.
- **``manage.py check``**: the command itself on the pipeline directory (a fresh
  process: Django's start-up included).
- **Pipeline scenario**: ``tests/e2e/test_tarsy_scenarios.py``'s pipeline, a real
  daphne and qcluster from start to the second chat answer (``--scenario``; slow).

Usage: .venv/bin/python bench/compat.py [--runs 50] [--scenario]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Not bench/ itself: bench/mcp.py would stand in for the mcp SDK this loads.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tarsy_site.settings")
os.environ.setdefault("TARSY_DATA_DIR", tempfile.mkdtemp(prefix="tarsy-bench-compat-"))

from bench.stats import load_average, percentile, summary  # noqa: E402

CONFIGS = ROOT / "tests" / "compat" / "tarsy_configs"
EXAMPLE_ENV = {
    "KUBECONFIG": "/etc/kubeconfig",
    "ARGOCD_SERVER": "argocd.example.com",
    "ARGOCD_TOKEN": "bench",
    "CLI_MCP_BEARER_TOKEN": "bench",
    "MONITORING_MCP_URL": "https://monitoring.example.com/mcp",
    "MONITORING_TOKEN": "bench",
}


def load_and_check(runs: int) -> None:
    import django

    django.setup()
    from agents.checks import llm_use_problems, provider_rows_without_database
    from config.loader import load_config

    os.environ.update(EXAMPLE_ENV)
    rows = []
    for directory in sorted(p for p in CONFIGS.iterdir() if p.is_dir()):
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            config = load_config(directory)
            problems = llm_use_problems(config, provider_rows_without_database(config))
            times.append((time.perf_counter() - started) * 1000)
        assert not problems, (directory.name, problems)
        rows.append((directory.name, times))
    rows.sort(key=lambda row: -percentile(row[1], 0.5))
    every = [t for _, times in rows for t in times]
    print(summary(f"all {len(rows)} configurations", every, aim=100))
    for name, times in rows[:5]:
        print(summary(f"  {name}", times, aim=100))


def manage_check(runs: int) -> None:
    times = []
    env = {**os.environ, "TARSY_CONFIG": str(CONFIGS / "pipeline")}
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, check=True,
            capture_output=True,
        )  # fmt: skip
        times.append(time.perf_counter() - started)
    print(summary("manage.py check (pipeline directory)", times, aim=5, unit="s"))


def scenario(runs: int) -> None:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "tests/e2e/test_tarsy_scenarios.py", "-k", "pipeline_stages"],
            cwd=ROOT, check=True, capture_output=True,
        )  # fmt: skip
        times.append(time.perf_counter() - started)
    print(summary("pipeline scenario (pytest, start to end)", times, aim=60, unit="s"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--scenario", action="store_true")
    args = parser.parse_args()
    print(load_average())
    load_and_check(args.runs)
    manage_check(max(3, args.runs // 10))
    if args.scenario:
        scenario(3)
    print(load_average())


if __name__ == "__main__":
    main()
