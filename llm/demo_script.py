"""The demo investigation: a scripted model that really reads its tool results.

It lists pods and events in the alert's namespace, picks the pod that is failing,
reads its logs and description, and writes an analysis quoting what it found — so a
new user sees a genuine loop of thinking, tool calls and results against the bundled
demo cluster, with no API key.

An agent given only the events and rollout tools (the "deep" chain's second agent)
reads those instead. A synthesis step merges the findings it is given, and the
executive summary condenses the analysis, both from what the request contains.
"""

from __future__ import annotations

import json
import re
from typing import Any

from llm.scripted import ScriptTurn
from llm.tool_names import tool_parts
from llm.types import GenerateRequest, Role
from masking.bounded import load_json

DEFAULT_NAMESPACE = "payments"
_NAMESPACE = re.compile(r"namespace[\"']?\s*[:=]\s*[\"']?([a-z0-9][-a-z0-9]*)", re.IGNORECASE)
_POD_NAME = re.compile(r"\b([a-z0-9]+(?:-[a-z0-9]+)+)\b")
_FAILING = re.compile(r"CrashLoopBackOff|Error|OOMKilled|ImagePull|Failed", re.IGNORECASE)
_LOG_PROBLEM = re.compile(
    r"\b(WARN|ERROR|FATAL|CRITICAL)\b|panic|refused|denied|not set|missing", re.IGNORECASE
)
# A line saying something is absent names a cause; the errors after it are symptoms.
_CAUSE = re.compile(r"not set|missing|not found|no such|denied", re.IGNORECASE)
_TRACEBACK = re.compile(r"^(Traceback|File |raise |\s)")


def _namespace(request: GenerateRequest) -> str:
    for message in request.messages:
        if message.role == Role.USER and (match := _NAMESPACE.search(message.content)):
            return match.group(1)
    return DEFAULT_NAMESPACE


def _tool_results(request: GenerateRequest) -> dict[str, str]:
    """Latest result per tool (short name, e.g. 'get_pods')."""
    results: dict[str, str] = {}
    for message in request.messages:
        if message.role == Role.TOOL:
            results[tool_parts(message.tool_name)[1]] = message.content
    return results


def _failing_pod(pods_text: str) -> str | None:
    try:
        data: Any = load_json(pods_text)  # a tool's output: maybe anything
    except ValueError:  # not JSON, or too deep or large (bounded.UnsafeInput)
        data = None
    if isinstance(data, dict):
        data = data.get("pods") or data.get("items")
    if isinstance(data, list):
        for pod in data:
            if isinstance(pod, dict) and _FAILING.search(json.dumps(pod)):
                name = pod.get("name") or pod.get("metadata", {}).get("name")
                if name:
                    return str(name)
    for line in pods_text.splitlines():
        if _FAILING.search(line) and (match := _POD_NAME.search(line)):
            return match.group(1)
    return None


def _tool(request: GenerateRequest, short_name: str) -> str | None:
    for tool in request.tools:
        if tool_parts(tool.name)[1] == short_name:
            return tool.name
    return None


def _evidence(text: str, limit: int = 4) -> list[str]:
    lines = [
        line.strip()
        for line in text.splitlines()
        if _LOG_PROBLEM.search(line) and not _TRACEBACK.match(line)
    ]
    causes = [line for line in lines if _CAUSE.search(line)]
    return causes[:1] + [line for line in lines if line not in causes][-(limit - 1) :]


# Headings of the single-shot prompts (agents/prompts.py imports these).
FINDINGS_TO_MERGE = "## Findings to merge"
INVESTIGATION_TO_SUMMARISE = "## Investigation to summarise"
TOOL_OUTPUT_TO_SUMMARISE = "## Tool output to summarise"
INVESTIGATION_TO_SCORE = "## Investigation to score"
TOOL_REPORT_REQUEST = "## Tool report"
INVESTIGATION_TO_LEARN_FROM = "## Investigation to learn from"
# Heads the reviewer's feedback in the feedback Reflector's prompt (agents/memory.py).
FEEDBACK_TO_LEARN_FROM = "## Reviewer feedback to learn from"
# Heads the question in a follow-up chat's prompt (agents/chat.py).
CHAT_QUESTION = "## Follow-up question"


def demo_turn(request: GenerateRequest) -> ScriptTurn:
    if (single_shot := single_shot_turn(request)) is not None:
        return single_shot
    if (chat := chat_turn(request)) is not None:
        return chat
    namespace = _namespace(request)
    results = _tool_results(request)
    step = sum(1 for m in request.messages if m.role == Role.ASSISTANT)
    can_use_tools = bool(request.tools)
    if can_use_tools and _tool(request, "get_pods") is None and _tool(request, "get_events"):
        return _rollout_turn(request, namespace, results, step)

    if step == 0 and can_use_tools:
        calls: list[tuple[str, dict[str, Any]]] = [
            (name, {"namespace": namespace})
            for name in (_tool(request, "get_pods"), _tool(request, "get_events"))
            if name
        ]
        return ScriptTurn(
            thinking=(
                f"The alert points at namespace {namespace}. Before guessing, I want the "
                "current state of its pods and the recent cluster events: a crash loop, "
                "a failed probe or a scheduling problem will show up there."
            ),
            text=f"I'll start by listing the pods and recent events in `{namespace}`.",
            tool_calls=tuple(calls),
        )

    pod = _failing_pod(results.get("get_pods", ""))
    if step == 1 and can_use_tools and pod:
        calls = []
        if logs_tool := _tool(request, "get_pod_logs"):
            calls.append((logs_tool, {"namespace": namespace, "name": pod, "previous": True}))
        if describe_tool := _tool(request, "describe_pod"):
            calls.append((describe_tool, {"namespace": namespace, "name": pod}))
        return ScriptTurn(
            thinking=(
                f"Pod {pod} is the one failing. Its previous container's logs should say why "
                "it exits, and its description will show the exit code, restarts and the "
                "configuration it runs with."
            ),
            text=f"`{pod}` is failing. Next I'm reading its logs and its description.",
            tool_calls=tuple(calls),
        )
    return ScriptTurn(thinking=_closing_thought(pod), text=_analysis(namespace, pod, results))


def _closing_thought(pod: str | None) -> str:
    if pod is None:
        return "No pod in the namespace looks unhealthy, so I'll report what I checked."
    return (
        f"The logs of {pod} and its description agree, so I can name the root cause and "
        "the fix without more tool calls."
    )


def _analysis(namespace: str, pod: str | None, results: dict[str, str]) -> str:
    if pod is None:
        return (
            f"## Summary\nNo failing pod was found in namespace `{namespace}`.\n\n"
            "## What I checked\n- Pods: all reported as running.\n"
            "- Events: nothing that explains the alert.\n\n"
            "## Next steps\nCheck whether the alert's namespace is right, and whether it "
            "has already recovered."
        )
    log_lines = _evidence(results.get("get_pod_logs", ""))
    describe_lines = [
        line.strip()
        for line in results.get("describe_pod", "").splitlines()
        if re.search(r"reason|exit code|restart|state", line, re.IGNORECASE)
    ][:5]
    event_lines = [
        line.strip()
        for line in results.get("get_events", "").splitlines()
        if pod.rsplit("-", 2)[0] in line
        and re.search(r"warning|back-?off|fail", line, re.IGNORECASE)
    ][:3]
    cause = log_lines[0] if log_lines else "the container exits shortly after starting"
    parts = [
        "## Summary",
        f"Pod `{pod}` in namespace `{namespace}` is crash-looping: its container starts, "
        "fails and is restarted with growing back-off.",
        "",
        "## Evidence",
    ]
    parts += [f"- Log: `{line}`" for line in log_lines] or ["- Logs: no error lines found."]
    parts += [f"- Pod: {line}" for line in describe_lines]
    parts += [f"- Event: {line}" for line in event_lines]
    parts += [
        "",
        "## Root cause",
        f"The application fails at start-up: {cause}",
        "",
        "## Recommended fix",
        "Restore what the start-up depends on (the configuration or dependency named in "
        "the error above), then restart the deployment and confirm the pods become Ready.",
    ]
    return "\n".join(parts)


# --- the events-and-rollouts agent ---------------------------------------------------------


def _rollout_turn(
    request: GenerateRequest, namespace: str, results: dict[str, str], step: int
) -> ScriptTurn:
    if step == 0:
        calls = [
            (name, {"namespace": namespace})
            for name in (_tool(request, "get_events"), _tool(request, "get_deployments"))
            if name
        ]
        return ScriptTurn(
            thinking=(
                f"My part is the history of namespace {namespace}: what changed recently. "
                "Warning events and the deployments' rollout state will show whether a "
                "release lines up with the alert."
            ),
            text=f"I'll read the recent events and the rollout state in `{namespace}`.",
            tool_calls=tuple(calls),
        )
    warnings = [
        line.strip()
        for line in results.get("get_events", "").splitlines()
        if re.search(r"\bWarning\b", line)
    ][:3]
    rollout = [
        line.strip()
        for line in results.get("get_deployments", "").splitlines()
        if re.search(r"revision|Available=False|Progressing=False|change-cause", line)
    ][:4]
    parts = ["## Summary", f"Recent changes in namespace `{namespace}` line up with the alert.", ""]
    parts += ["## Events"] + ([f"- `{line}`" for line in warnings] or ["- No warning events."])
    parts += ["", "## Rollouts"] + ([f"- {line}" for line in rollout] or ["- No rollout found."])
    parts += [
        "",
        "## Assessment",
        "The failures began with the latest rollout: a rollback to the previous revision "
        "is the fastest mitigation while the release is fixed.",
    ]
    return ScriptTurn(
        thinking="The warnings start right after the latest rollout; that is the change to suspect.",
        text="\n".join(parts),
    )


# --- synthesis and executive summary --------------------------------------------------------


def single_shot_turn(request: GenerateRequest) -> ScriptTurn | None:
    """The demo's answer to a synthesis or executive-summary request; None for others."""
    if request.tools:
        return None
    prompt = next((m.content for m in reversed(request.messages) if m.role == Role.USER), "")
    if FEEDBACK_TO_LEARN_FROM in prompt:
        return _feedback_reflection(prompt)
    if INVESTIGATION_TO_LEARN_FROM in prompt:
        return _reflection(prompt)
    if TOOL_REPORT_REQUEST in prompt or INVESTIGATION_TO_SCORE in prompt:
        return _scoring(request, report=TOOL_REPORT_REQUEST in prompt)
    if FINDINGS_TO_MERGE in prompt:
        return _synthesis(prompt.split(FINDINGS_TO_MERGE, 1)[1])
    if INVESTIGATION_TO_SUMMARISE in prompt:
        return _summary(prompt.split(INVESTIGATION_TO_SUMMARISE, 1)[1])
    if TOOL_OUTPUT_TO_SUMMARISE in prompt:
        return _tool_summary(prompt.split(TOOL_OUTPUT_TO_SUMMARISE, 1)[1])
    return None


def _reflection(prompt: str) -> ScriptTurn:
    """The demo's memory Reflector: it confirms the first similar lesson it is shown, or
    else keeps one lesson: the alert's first line, and the analysis's first sentence."""
    known = re.findall(r"^- memory_id (\S+) \[", prompt, re.M)
    if known:
        answer: dict[str, Any] = {"create": [], "reinforce": [{"memory_id": known[0]}]}
        return ScriptTurn(text=json.dumps(answer))
    kind, first = _alert_head(prompt)
    analysis = prompt.partition("### Final analysis of the session\n\n")[2]
    analysis = analysis.partition("\n### ")[0]
    sentence = next(
        (
            s.strip()
            for s in re.split(r"(?<=[.!?])\s+", re.sub(r"[#*`]", "", analysis))
            if s.strip()
        ),
        "",
    )[:300]
    if not sentence:
        return ScriptTurn(text=json.dumps({"create": []}))
    lesson = {
        "content": f"For a {kind} alert like '{first}': {sentence}",
        "category": "episodic",
        "valence": "positive",
    }
    return ScriptTurn(text=json.dumps({"create": [lesson]}))


def _alert_head(prompt: str, lines: int = 1) -> tuple[str, str]:
    """The alert type and the first ``lines`` lines of the alert in an investigation's
    text (joined by commas)."""
    alert = prompt.partition("### Alert\n\n")[2].strip().splitlines()
    kind = alert[0].removeprefix("Type: ").strip() if alert else "unknown"
    head = [line.strip() for line in alert[1:] if line.strip()][:lines]
    return kind, ", ".join(head)[:160]


def _feedback_reflection(prompt: str) -> ScriptTurn:
    """The demo's feedback Reflector: the reviewer's first sentence becomes a lesson
    about alerts of this type, to avoid when the rating says the session was wrong."""
    feedback = prompt.partition(FEEDBACK_TO_LEARN_FROM)[2].partition("<feedback>\n")[2]
    feedback = feedback.partition("\n</feedback>")[0]
    sentence = next((s.strip() for s in re.split(r"(?<=[.!?])\s+", feedback) if s.strip()), "")
    if not sentence:
        return ScriptTurn(text=json.dumps({"create": []}))
    # Two lines of the alert: with the local embedder, a like alert must share its words.
    kind, first = _alert_head(prompt, lines=2)
    lesson = {
        "content": f"For a {kind} alert like '{first}', a reviewer said: {sentence[:300]}",
        "category": "procedural",
        "valence": "negative" if "Rating: inaccurate" in prompt else "positive",
    }
    return ScriptTurn(text=json.dumps({"create": [lesson]}))


def _tool_summary(output: str) -> ScriptTurn:
    """What a summariser keeps of a long output: its size, and the lines that say
    something is wrong (each distinct one once, with how often it came)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    problems: dict[str, int] = {}
    for line in lines:
        if _LOG_PROBLEM.search(line):
            problems[line] = problems.get(line, 0) + 1
    kept = sorted(problems.items(), key=lambda item: -item[1])[:10]
    text = [f"The output has {len(lines)} lines."]
    if kept:
        text.append("Lines that report problems:")
        text += [f"- {line} ({count} times)" if count > 1 else f"- {line}" for line, count in kept]
    else:
        text.append("No line reports an error or a warning.")
    return ScriptTurn(text="\n".join(text))


_FINDING_RE = re.compile(r"^### Stage '[^']*', agent '([^']+)'(.*)$", re.M)


def _synthesis(findings: str) -> ScriptTurn:
    heads = list(_FINDING_RE.finditer(findings))
    lines, causes = [], []
    for index, head in enumerate(heads):
        end = heads[index + 1].start() if index + 1 < len(heads) else len(findings)
        body = findings[head.end() : end].strip()
        if head.group(2).strip():
            lines.append(f"- **{head.group(1)}** could not finish: {_first_line(body)}")
            continue
        lines.append(f"- **{head.group(1)}**: {_first_line(_section(body, 'Summary') or body)}")
        causes.append(_section(body, "Root cause") or _section(body, "Assessment"))
    cause = next((c for c in causes if c), "the findings do not agree on a single cause")
    text = "\n".join(
        [
            "## Merged analysis",
            *lines,
            "",
            "## Root cause",
            cause,
            "",
            "## Recommended fix",
            "Roll back to the previous revision to restore service, then restore what the "
            "new release needs at start-up before rolling forward again.",
        ]
    )
    return ScriptTurn(
        thinking=f"{len(heads)} agents reported. I'll keep what each found and state the cause once.",
        text=text,
    )


def _summary(analysis: str) -> ScriptTurn:
    summary = _first_line(_section(analysis, "Summary") or _section(analysis, "Merged analysis"))
    summary = re.sub(r"^\**[\w .#-]+\*\*:\s*", "", summary)  # "**WorkloadAgent**: …"
    cause = _first_line(_section(analysis, "Root cause") or "")
    fix = _first_line(_section(analysis, "Recommended fix") or "").split(". ")[0]
    sentences = [s for s in (summary, f"The root cause: {cause}" if cause else "", fix) if s]
    text = " ".join(s if s.endswith(".") else f"{s}." for s in sentences)
    return ScriptTurn(text=text or "The investigation found no clear cause.")


def _section(text: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return match.group(1).strip() if match else ""


def _first_line(text: str) -> str:
    """The first line that says something (not a heading)."""
    for line in text.splitlines():
        line = line.strip().lstrip("-* ").strip()
        if line and not line.startswith("#"):
            return line
    return ""


# --- scoring -------------------------------------------------------------------------------


def _scoring(request: GenerateRequest, *, report: bool) -> ScriptTurn:
    """The demo judge: it rates the investigation from what the prompt shows (a root
    cause stated, the tools used out of those available), ending with the lines the
    scoring parses; asked for the tool report, it names the tools left unused."""
    investigation = next(
        (m.content for m in request.messages if INVESTIGATION_TO_SCORE in m.content), ""
    )
    used = sorted(set(re.findall(r"^Tool call `([^`]+)`", investigation, re.M)))
    available_part = investigation.rpartition("### Tools that were available")[2]
    unused = [t for t in re.findall(r"^- (\S+)$", available_part, re.M) if t not in used]
    if report:
        return ScriptTurn(text=_tool_report(unused))
    concluded = bool(re.search(r"root cause", investigation, re.IGNORECASE))
    tags = ["missed_available_tool"] if unused else []
    if concluded and len(used) >= 2:
        score = 70 + min(20, 5 * len(used)) - (5 if unused else 0)
        outcome = "It names a root cause and backs it with what its tools returned."
    elif concluded:
        score, outcome = 50, "It names a root cause on thin evidence."
        tags.append("incomplete_evidence")
    else:
        score, outcome = 25, "It reaches no supported conclusion."
        tags.append("incomplete_evidence")
    tools = ", ".join(f"`{t}`" for t in used) or "no tools"
    text = "\n".join(
        [
            "## Investigation outcome",
            outcome,
            "",
            "## Evidence gathering and tool use",
            f"It called {tools}."
            + (f" Left unused: {', '.join(f'`{t}`' for t in unused)}." if unused else ""),
            "",
            "## Overall",
            f"A demo rating (scripted, not a model's judgement): {score}/100.",
            "",
            f"TAGS: {', '.join(tags) or 'none'}",
            f"SCORE: {score}",
        ]
    )
    return ScriptTurn(thinking="I'll check the conclusion first, then the evidence.", text=text)


def _tool_report(unused: list[str]) -> str:
    improvements = [
        f"- `{tool}` was available but not used; its description could say when it helps."
        for tool in unused
    ]
    return "\n".join(
        [
            "### Part 1: Missing tools",
            "None.",
            "",
            "### Part 2: Existing tool improvements",
            *(improvements or ["None."]),
        ]
    )


# --- follow-up chat -------------------------------------------------------------------------


def chat_turn(request: GenerateRequest) -> ScriptTurn | None:
    """The demo's answer to a follow-up question: it looks at the pods as they are now,
    then answers from what the investigation found and what it just saw. None for
    requests that are not a chat."""
    prompt = next((m.content for m in request.messages if m.role == Role.USER), "")
    if CHAT_QUESTION not in prompt:
        return None
    context, question = prompt.split(CHAT_QUESTION, 1)
    namespace = _namespace(request)
    pods_tool = _tool(request, "get_pods")
    step = sum(1 for m in request.messages if m.role == Role.ASSISTANT)
    if step == 0 and pods_tool:
        return ScriptTurn(
            thinking=(
                "The investigation has ended, so the cluster may have changed since. I'll "
                f"look at the pods in {namespace} again before answering."
            ),
            text=f"Let me check the pods in `{namespace}` as they are now.",
            tool_calls=((pods_tool, {"namespace": namespace}),),
        )
    return ScriptTurn(
        thinking="I have what the investigation found and the current state; I can answer.",
        text=_chat_answer(context, _first_line(question), namespace, _tool_results(request)),
    )


def _chat_answer(context: str, question: str, namespace: str, results: dict[str, str]) -> str:
    found = _first_line(_section(context, "Summary") or _section(context, "Merged analysis"))
    cause = _first_line(_section(context, "Root cause"))
    fix = _first_line(_section(context, "Recommended fix"))
    outcome = _first_line(_section(context, "Outcome"))
    parts = [f"You asked: *{question}*", "", "## What the investigation found"]
    if found or cause:
        parts += [found, "", f"Root cause: {cause}" if cause else ""]
    else:
        parts.append(f"It reached no conclusion. {outcome}")
    if "get_pods" in results:
        failing = [
            line.strip() for line in results["get_pods"].splitlines() if _FAILING.search(line)
        ]
        parts += ["", f"## The pods in `{namespace}` now"]
        parts += [f"- `{line}`" for line in failing[:5]] or [
            f"- No pod in `{namespace}` is failing."
        ]
    if fix:
        parts += ["", "## What to do", fix]
    return "\n".join(part for part in parts if part is not None).strip()
