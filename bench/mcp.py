"""MCP servers on a real deployment (daphne + qcluster, SQLite, the scripted demo):

1. **Memory and speed per concurrent investigation**, with a server process per agent
   execution (``TARSY_MCP_SHARED=0``, the old way) and with each worker's shared
   servers (the default), for two chains: the demo's one agent, and three replicas of
   it plus a synthesis (parallel agents on the same server). For 1, 4 and 8
   investigations submitted at once, with as many workers: the qcluster's whole process
   tree (its workers and their MCP server processes) is sampled every 100 ms; the
   figure is its peak RSS / N. Two rounds per setting on one cluster (after it is
   up): the first round of fresh workers, then a second (shared servers are already
   running; per-execution ones start again). Also: the most MCP server processes at
   once, wall time for the round, and time from submission to each session's first
   timeline item.
2. **A worker's first session, before and after warming.** A Gemini provider on the
   LangChain backend against the fake Gemini API (a local process speaking its wire
   format). A fresh deployment per trial; once its cluster reports for duty, one
   session: time from the POST to its first timeline item, with
   ``TARSY_WARM_BACKENDS=0`` (the worker imports LangChain on its first session) and
   ``=1`` (the qcluster imported it before forking).

Usage: .venv/bin/python bench/mcp.py [--rounds 2] [--first-trials 5] [--sizes 1,4,8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

import yaml

from bench.stats import load_average, percentile
from tests.e2e.harness import ROOT, demo_provider, deployment, fake_gemini
from tests.e2e.test_faults import _epoch
from tests.llm.fakes import gemini as g

ALERT = "alert: PodCrashLooping\nnamespace: payments\ndeployment: payments-api"
MODEL = "gemini-2.5-flash"


# --- process-tree memory ------------------------------------------------------------------------


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def tree_rss_mb(root: int) -> float:
    total_kb = 0
    for pid in _tree(root):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except OSError:
            continue
    return total_kb / 1024


def server_processes(root: int) -> int:
    count = 0
    for pid in _tree(root):
        try:
            if b"demo_mcp" in Path(f"/proc/{pid}/cmdline").read_bytes():
                count += 1
        except OSError:
            continue
    return count


# --- part 1 -------------------------------------------------------------------------------------


def submit(tarsy, token: str, alert_type: str = "kubernetes") -> tuple[str, float]:
    body = {"data": ALERT, "alert_type": alert_type}
    status, body = tarsy.api("POST", "/api/v1/alerts", token, body)
    assert status == 202, body
    return body["session_id"].replace("-", ""), time.monotonic()


def first_items(tarsy, keys: list[str]) -> dict[str, float]:
    """Each session's first timeline item's creation time (database clock, epoch s)."""
    marks = ",".join("%s" for _ in keys)
    rows = tarsy.query(
        "SELECT session_id, MIN(created_at) FROM alert_sessions_timelineevent "
        f"WHERE session_id IN ({marks}) GROUP BY session_id",
        tuple(keys),
    )
    return {key: _epoch(created) for key, created in rows if created}


def wait_for_workers(tarsy, token: str) -> None:
    """Until a cluster reports for duty (the qcluster has warmed up and forked)."""
    deadline = time.monotonic() + 120
    while True:
        _, health = tarsy.api("GET", "/health", token)
        if health["checks"]["worker_pool"]["status"] == "healthy":
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no worker cluster\n{tarsy.log_tail()}")
        time.sleep(0.1)


def concurrent_round(tarsy, token: str, size: int, alert_type: str) -> dict:
    qcluster = tarsy.processes[list(tarsy.commands).index("qcluster")].pid
    wait_for_workers(tarsy, token)
    time.sleep(0.5)
    idle = tree_rss_mb(qcluster)
    wall_started = time.monotonic()
    epoch_started = time.time()
    submitted = [submit(tarsy, token, alert_type) for _ in range(size)]
    submit_epoch = {key: epoch_started + (at - wall_started) for key, at in submitted}
    keys = [key for key, _ in submitted]
    peak, most_servers = idle, 0
    while True:
        peak = max(peak, tree_rss_mb(qcluster))
        most_servers = max(most_servers, server_processes(qcluster))
        marks = ",".join("%s" for _ in keys)
        rows = tarsy.query(
            f"SELECT status FROM alert_sessions_alertsession WHERE id IN ({marks})", tuple(keys)
        )
        if all(status in ("completed", "failed", "timed_out") for (status,) in rows):
            break
        if time.monotonic() - wall_started > 300:
            raise RuntimeError(f"round of {size} did not finish\n{tarsy.log_tail()}")
        time.sleep(0.1)
    wall = time.monotonic() - wall_started
    assert all(status == "completed" for (status,) in rows), rows
    firsts = first_items(tarsy, keys)
    return {
        "per_session_mb": peak / size,
        "idle_mb": idle,
        "peak_mb": peak,
        "servers": most_servers,
        "wall_s": wall,
        "first_item_s": [firsts[key] - submit_epoch[key] for key in keys],
    }


def replicas_config(tmp: Path) -> Path:
    """The bundled tarsy.yaml plus a chain of three replicas of the demo agent."""
    config = yaml.safe_load((ROOT / "config" / "tarsy.yaml").read_text())
    config["agent_chains"]["replicas"] = {
        "alert_types": ["Replicas"],
        "stages": [{"name": "investigation", "agents": ["KubernetesAgent"], "replicas": 3}],
    }
    path = tmp / "tarsy.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


SCENARIOS = {"one agent": "kubernetes", "3 replicas": "Replicas"}


def memory_and_speed(sizes: list[int], rounds: int) -> None:
    print("\n== 1. per concurrent investigation: per-execution servers vs shared ==")
    print(
        f"{'chain':<11}{'servers':<14}{'N':>3}{'round':>6}{'peak MB/inv':>12}{'idle MB':>9}"
        f"{'MCP procs':>10}{'wall s':>8}{'first item s (median/p95)':>28}"
    )
    results: dict[tuple[str, str, int], list[dict]] = {}
    for scenario, alert_type in SCENARIOS.items():
        for size in sizes:
            for shared in ("0", "1"):
                label = "shared" if shared == "1" else "per-execution"
                with tempfile.TemporaryDirectory() as tmp:
                    env = {
                        "TARSY_WORKERS": str(size),
                        "TARSY_MAX_CONCURRENT_SESSIONS": str(size),
                        "TARSY_MCP_SHARED": shared,
                        "TARSY_CONFIG": str(replicas_config(Path(tmp))),
                    }
                    with deployment(
                        Path(tmp), provider=demo_provider(chunk_delay=0.02), extra_env=env
                    ) as tarsy:
                        token = tarsy.api_token()
                        for index in range(rounds):
                            result = concurrent_round(tarsy, token, size, alert_type)
                            results.setdefault((scenario, label, size), []).append(result)
                            firsts = result["first_item_s"]
                            print(
                                f"{scenario:<11}{label:<14}{size:>3}{index + 1:>6}"
                                f"{result['per_session_mb']:>12.1f}{result['idle_mb']:>9.0f}"
                                f"{result['servers']:>10}{result['wall_s']:>8.1f}"
                                f"{statistics.median(firsts):>18.2f} / "
                                f"{percentile(firsts, 0.95):.2f}"
                            )
    print("\nratios shared / per-execution (medians over rounds):")

    def median_of(rows, key):
        return statistics.median(r[key] for r in rows)

    def median_first(rows):
        return statistics.median(v for r in rows for v in r["first_item_s"])

    for scenario in SCENARIOS:
        for size in sizes:
            old = results[(scenario, "per-execution", size)]
            new = results[(scenario, "shared", size)]
            print(
                f"  {scenario}, N={size}: peak MB/investigation "
                f"{median_of(new, 'per_session_mb'):.0f} / {median_of(old, 'per_session_mb'):.0f}"
                f" = {median_of(new, 'per_session_mb') / median_of(old, 'per_session_mb'):.2f};"
                f" MCP processes {median_of(new, 'servers'):.0f} / {median_of(old, 'servers'):.0f};"
                f" wall {median_of(new, 'wall_s') / median_of(old, 'wall_s'):.2f};"
                f" first item {median_first(new) / median_first(old):.2f}"
            )


# --- part 2 -------------------------------------------------------------------------------------


def gemini_replies() -> list[dict]:
    def answer(text: str) -> dict:
        return {
            "chunks": [
                g.response(
                    g.text(text), finish_reason="STOP", usage_metadata=g.usage(50, 10), model=MODEL
                )
            ],
            "delay": 0.0,
        }

    return [answer("The pod runs out of memory."), answer("It ran out of memory.")]


def write_config(tmp: Path) -> Path:
    config = yaml.safe_load((ROOT / "config" / "tarsy.yaml").read_text())
    config["defaults"]["llm_backend"] = "langchain"
    path = tmp / "tarsy.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def first_session(warm: str, trials: int) -> list[float]:
    latencies = []
    for _ in range(trials):
        with tempfile.TemporaryDirectory() as tmp:
            tmp_path = Path(tmp)
            with fake_gemini(tmp_path, gemini_replies()) as gemini:
                provider = {
                    "name": "gemini",
                    "type": "google",
                    "model": MODEL,
                    "api_key_env": "BENCH_GEMINI_KEY",
                    "base_url": gemini.url,
                    "is_default": True,
                }
                env = {
                    "TARSY_CONFIG": str(write_config(tmp_path)),
                    "BENCH_GEMINI_KEY": "bench-key",
                    "TARSY_WARM_BACKENDS": warm,
                    "TARSY_WORKERS": "1",
                }
                with deployment(tmp_path, provider=provider, extra_env=env) as tarsy:
                    token = tarsy.api_token()
                    wait_for_workers(tarsy, token)
                    epoch = time.time()
                    key, _ = submit(tarsy, token)
                    deadline = time.monotonic() + 120
                    while not (first := first_items(tarsy, [key])):
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"no timeline item\n{tarsy.log_tail()}")
                        time.sleep(0.02)
                    latencies.append((first[key] - epoch) * 1000)
    return latencies


def warming(trials: int) -> None:
    print(
        "\n== 2. a worker's first session: POST → first timeline item (LangChain + fake Gemini) =="
    )
    cold = first_session("0", trials)
    warm = first_session("1", trials)
    for label, values in (("not warmed (TARSY_WARM_BACKENDS=0)", cold), ("warmed (default)", warm)):
        print(
            f"  {label:<38} n={len(values)} median={statistics.median(values):7.0f} ms  "
            f"p95={percentile(values, 0.95):7.0f} ms  max={max(values):7.0f} ms"
        )
    print(
        f"  ratio warmed / not warmed (medians): {statistics.median(warm) / statistics.median(cold):.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--first-trials", type=int, default=5)
    parser.add_argument("--sizes", default="1,4,8")
    args = parser.parse_args()
    print(f"bench/mcp.py · {load_average()}")
    memory_and_speed([int(s) for s in args.sizes.split(",")], args.rounds)
    warming(args.first_trials)
    print(f"\n{load_average()}")


if __name__ == "__main__":
    main()
