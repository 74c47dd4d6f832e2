"""A read-only MCP server that answers kubectl-style questions about a simulated cluster.

The cluster is a frozen snapshot described by ``data/cluster.json`` (namespaces, workloads,
pods, events) and ``data/logs/<pod>.log`` / ``<pod>.previous.log``. Ages are computed
against the snapshot's ``snapshot_time``, so every answer is deterministic.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

DATA_DIR = Path(__file__).parent / "data"

INSTRUCTIONS = (
    "Read-only access to a Kubernetes cluster (a simulated snapshot). Start broad with "
    "get_pods, get_deployments and get_events for a namespace, then narrow down with "
    "describe_pod and get_pod_logs (previous=true shows the last crashed container's logs)."
)

Namespace = Annotated[str, Field(description="Kubernetes namespace, e.g. 'payments'.")]
PodName = Annotated[str, Field(description="Exact pod name as listed by get_pods.")]


class DemoCluster:
    """Renders the snapshot the way kubectl would; unknown names raise ``ToolError``."""

    def __init__(self, data_dir: Path = DATA_DIR) -> None:
        self.data_dir = data_dir
        snapshot = json.loads((data_dir / "cluster.json").read_text())
        self.name: str = snapshot["cluster"]
        self.now = _parse_time(snapshot["snapshot_time"])
        self.namespaces: dict[str, dict[str, Any]] = snapshot["namespaces"]

    def get_pods(self, namespace: str) -> str:
        ns = self._namespace(namespace)
        rows = [["NAME", "READY", "STATUS", "RESTARTS", "AGE", "NODE"]]
        for pod in ns["pods"]:
            restarts = str(pod["restarts"])
            if finished := pod.get("last_state", {}).get("finished"):
                restarts += f" ({self._age(finished)} ago)"
            ready = f"{int(pod['ready'])}/1"
            age = self._age(pod["created"])
            rows.append([pod["name"], ready, pod["status"], restarts, age, pod["node"]])
        return _table(rows)

    def describe_pod(self, namespace: str, name: str) -> str:
        ns = self._namespace(namespace)
        pod = self._pod(namespace, name)
        workload = ns["workloads"][pod["workload"]]
        container = workload["container"]
        owner = _owner(pod["workload"], workload)
        labels = [f"app={pod['workload']}"]
        if "pod_template_hash" in workload:
            labels.append(f"pod-template-hash={workload['pod_template_hash']}")
        ready = str(pod["ready"])
        lines = [
            f"Name:           {name}",
            f"Namespace:      {namespace}",
            f"Node:           {pod['node']}",
            f"Start Time:     {pod['created']}",
            f"Labels:         {', '.join(labels)}",
            "Status:         Running",
            f"IP:             {pod['ip']}",
            f"Controlled By:  {owner}",
            "Containers:",
            f"  {container['name']}:",
            f"    Image:          {container['image']}",
            f"    Port:           {container['port']}",
            *_state_lines("State", pod["state"]),
            *_state_lines("Last State", pod.get("last_state")),
            f"    Ready:          {ready}",
            f"    Restart Count:  {pod['restarts']}",
            f"    Limits:         {container['limits']}",
            f"    Requests:       {container['requests']}",
            f"    Readiness:      {container['readiness']}",
            "    Environment:" + ("" if container["env"] else "  <none>"),
        ]
        for var, value in container["env"].items():
            if isinstance(value, dict):  # a secretKeyRef: never show the value
                value = f"<set to the key '{value['key']}' in secret '{value['secret']}'>"
            lines.append(f"      {var}:  {value}")
        lines += ["Conditions:", "  Type              Status"]
        conditions = {"Initialized": "True", "Ready": ready, "ContainersReady": ready}
        for kind, status in (conditions | {"PodScheduled": "True"}).items():
            lines.append(f"  {kind:<17} {status}")
        events = [e for e in ns["events"] if e[2] == f"pod/{name}"]
        lines.append("Events:" + ("" if events else "  <none>"))
        if events:
            rows = [["Type", "Reason", "Age", "From", "Message"]]
            for kind, reason, _, source, count, first, last, message in events:
                rows.append([kind, reason, self._event_age(count, first, last), source, message])
            lines.append(_table(rows, indent="  "))
        return "\n".join(lines)

    def get_pod_logs(self, namespace: str, name: str, tail_lines: int, previous: bool) -> str:
        pod = self._pod(namespace, name)
        container = self.namespaces[namespace]["workloads"][pod["workload"]]["container"]["name"]
        path = self.data_dir / "logs" / f"{name}{'.previous' if previous else ''}.log"
        if not path.exists():
            if previous:
                raise ToolError(
                    f'previous terminated container "{container}" in pod "{name}" not found '
                    f"(restart count is {pod['restarts']})"
                )
            return f"(no log output from container {container})"
        lines = path.read_text().splitlines()
        return "\n".join(lines[-tail_lines:])

    def get_events(self, namespace: str) -> str:
        ns = self._namespace(namespace)
        if not ns["events"]:
            return f"No events in namespace {namespace!r} (events are kept for about 1 hour)."
        rows = [["LAST SEEN", "TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE"]]
        for kind, reason, obj, _, count, _, last, message in sorted(
            ns["events"], key=lambda event: event[6]
        ):
            rows.append([self._age(last), kind, reason, obj, str(count), message])
        return _table(rows)

    def get_deployments(self, namespace: str) -> str:
        ns = self._namespace(namespace)
        deployments = {n: w for n, w in ns["workloads"].items() if w["kind"] == "Deployment"}
        if not deployments:
            return f"No deployments in namespace {namespace!r}."
        rows = [["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "IMAGE", "STRATEGY"]]
        details = []
        for name, dep in deployments.items():
            rows.append(
                [
                    name,
                    f"{dep['ready']}/{dep['replicas']}",
                    str(dep["up_to_date"]),
                    str(dep["available"]),
                    self._age(dep["created"]),
                    dep["container"]["image"],
                    dep["strategy"],
                ]
            )
            cause = f" (change-cause: {dep['change_cause']})" if dep["change_cause"] else ""
            details.append(f"{name}: revision {dep['revision']}{cause}")
            for kind, status, reason, message in dep["conditions"]:
                details.append(f"  {kind}={status} {reason}: {message}")
        return _table(rows) + "\n\n" + "\n".join(details)

    def get_secret(self, namespace: str, name: str) -> str:
        secrets = self._namespace(namespace).get("secrets", {})
        if name not in secrets:
            raise ToolError(
                f"secret {name!r} not found in namespace {namespace!r}; secrets in "
                f"{namespace}: {', '.join(secrets) or '(none)'}"
            )
        secret = secrets[name]
        # As `kubectl get secret -o yaml` prints it: the values are base64, i.e. readable.
        lines = ["apiVersion: v1", "data:"]
        lines += [f"  {key}: {value}" for key, value in secret["data"].items()]
        lines += [
            "kind: Secret",
            "metadata:",
            f'  creationTimestamp: "{secret["created"]}"',
            f"  name: {name}",
            f"  namespace: {namespace}",
            f"type: {secret['type']}",
        ]
        return "\n".join(lines)

    def _namespace(self, namespace: str) -> dict[str, Any]:
        if namespace not in self.namespaces:
            raise ToolError(
                f"namespace {namespace!r} not found; namespaces in cluster {self.name}: "
                + ", ".join(sorted(self.namespaces))
            )
        return self.namespaces[namespace]

    def _pod(self, namespace: str, name: str) -> dict[str, Any]:
        pods = self._namespace(namespace)["pods"]
        for pod in pods:
            if pod["name"] == name:
                return pod
        message = f"pod {name!r} not found in namespace {namespace!r}; pods in {namespace}: "
        message += ", ".join(pod["name"] for pod in pods)
        elsewhere = [
            ns for ns, d in self.namespaces.items() if any(p["name"] == name for p in d["pods"])
        ]
        if elsewhere:
            message += f" (a pod with that name exists in namespace {elsewhere[0]!r})"
        raise ToolError(message)

    def _age(self, timestamp: str) -> str:
        return _human_duration(int((self.now - _parse_time(timestamp)).total_seconds()))

    def _event_age(self, count: int, first: str, last: str) -> str:
        if count == 1:
            return self._age(last)
        return f"{self._age(last)} (x{count} over {self._age(first)})"


def create_server(data_dir: Path = DATA_DIR, tools: set[str] | None = None) -> MCPServer:
    """``tools``: serve only these (the "deep" demo gives each of its agents a part)."""
    cluster = DemoCluster(data_dir)
    instructions = (
        f"{INSTRUCTIONS} Cluster {cluster.name}; the snapshot was taken at "
        f"{cluster.now.isoformat().replace('+00:00', 'Z')} and ages are relative to it."
    )
    # WARNING: the SDK logs every request at INFO to stderr, which only adds noise here.
    server = MCPServer("kubernetes-demo", instructions=instructions, log_level="WARNING")

    def tool(fn: Callable[..., str]) -> Callable[..., str]:
        if tools is not None and fn.__name__ not in tools:
            return fn
        # The SDK sends docstrings verbatim; the LLM should not read our line breaks and indents.
        # structured_output=False: the text is the answer; a {"result": ...} copy would double it.
        server.add_tool(
            fn, description=" ".join((fn.__doc__ or "").split()), structured_output=False
        )
        return fn

    @tool
    def get_pods(namespace: Namespace) -> str:
        """List the pods in a namespace (like `kubectl get pods -o wide`): name, ready
        containers, status (e.g. Running, CrashLoopBackOff), restarts, age and node."""
        return cluster.get_pods(namespace)

    @tool
    def describe_pod(namespace: Namespace, name: PodName) -> str:
        """Describe one pod (like `kubectl describe pod`): container image, current and last
        state with exit code and reason, restart count, environment variables (secret
        values are never shown), conditions and the pod's recent events."""
        return cluster.describe_pod(namespace, name)

    @tool
    def get_pod_logs(
        namespace: Namespace,
        name: PodName,
        tail_lines: Annotated[
            int, Field(ge=1, le=1000, description="How many of the last log lines to return.")
        ] = 50,
        previous: Annotated[
            bool,
            Field(
                description="True: logs of the previous, terminated container instance "
                "(useful after a crash); false: the current instance."
            ),
        ] = False,
    ) -> str:
        """Get a pod's container logs (like `kubectl logs --tail`)."""
        return cluster.get_pod_logs(namespace, name, tail_lines, previous)

    @tool
    def get_events(namespace: Namespace) -> str:
        """List the namespace's recent events (like `kubectl get events`), oldest first,
        including Warning events such as BackOff or Unhealthy, with repeat counts."""
        return cluster.get_events(namespace)

    @tool
    def get_secret(
        namespace: Namespace,
        name: Annotated[str, Field(description="Secret name, e.g. from describe_pod's env.")],
    ) -> str:
        """Get a Secret (like `kubectl get secret -o yaml`): its keys, type and metadata.
        Use it to check that a secret an environment variable refers to exists and has
        the key it expects."""
        return cluster.get_secret(namespace, name)

    @tool
    def get_deployments(namespace: Namespace) -> str:
        """List the deployments in a namespace (like `kubectl get deployments -o wide`):
        ready/desired replicas, image, rollout strategy, revision and conditions."""
        return cluster.get_deployments(namespace)

    return server


def _owner(name: str, workload: dict[str, Any]) -> str:
    if workload["kind"] == "Deployment":
        return f"ReplicaSet/{name}-{workload['pod_template_hash']}"
    return f"{workload['kind']}/{name}"


def _state_lines(label: str, state: dict[str, Any] | None) -> list[str]:
    if not state:
        return []
    lines = [f"    {label + ':':<16}{state['state']}"]
    fields = {
        "reason": "Reason",
        "exit_code": "Exit Code",
        "started": "Started",
        "finished": "Finished",
    }
    for key, title in fields.items():
        if key in state:
            lines.append(f"      {title + ':':<14}{state[key]}")
    return lines


def _table(rows: list[list[str]], indent: str = "") -> str:
    """Left-aligned columns, like kubectl's; the last column is not padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        indent + "   ".join([*(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)), row[-1]])
        for row in rows
    )


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _human_duration(seconds: int) -> str:
    """kubectl's age format: 45s, 4m10s, 42m, 3h5m, 3d4h, 50d."""
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"
