"""The words agents start from, and how what one agent found reaches the next."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from config.types import ACTION, AgentConfig, MCPServerConfig
from llm.demo_script import (
    FINDINGS_TO_MERGE,
    INVESTIGATION_TO_SUMMARISE,
    TOOL_OUTPUT_TO_SUMMARISE,
)
from llm.types import ConversationMessage, Role

PREAMBLE = (
    "You are {agent}, an agent of TARSy, an AI site-reliability engineer. You investigate "
    "alerts with the tools you are given and report what you find."
)

ACTION_PREAMBLE = (
    "You may take actions that change running systems. Before any change: state what you "
    "will do and why, prefer the smallest reversible step, never delete data or scale a "
    "workload to zero, and stop to report instead of acting when the evidence is not "
    "conclusive. After each change, verify its effect with a read-only tool."
)

FORCED_CONCLUSION = (
    "You have reached the limit of {limit} investigation steps. Do not call any more tools. "
    "Write your final analysis now from what you have found: what is broken, the evidence, "
    "the most likely root cause, and the recommended next steps. Say what remains uncertain."
)
BUDGET_CONCLUSION = (
    "The investigation's budget is spent ({reason}). Do not call any more tools. "
    "Write your final analysis now from what you have found: what is broken, the evidence, "
    "the most likely root cause, and the recommended next steps. Say what remains unverified."
)
# A tool call the budget left unrun still needs its answer in the conversation.
BUDGET_SKIPPED_TOOL = "Not run: the investigation's budget is spent ({reason})."

# Failure patterns the judge is told to watch for; its TAGS line uses these terms only.
SCORING_FAILURE_TAGS = (
    ("premature_conclusion", "reached a diagnosis before gathering enough evidence"),
    ("missed_available_tool", "a relevant tool was available but not used"),
    ("unsupported_confidence", "stated high confidence the evidence does not carry"),
    ("incomplete_evidence", "stopped gathering evidence before covering what mattered"),
    ("hallucinated_evidence", "cited evidence that is not in the investigation"),
    ("wrong_conclusion", "the diagnosis is wrong or contradicted by the evidence gathered"),
)

SCORING_EVALUATION_REQUEST = """Evaluate the investigation above.

First assess it along these dimensions, two to four sentences each, citing evidence:
1. **Investigation outcome**: is the conclusion correct, supported and actionable? Were other explanations considered?
2. **Evidence gathering**: was enough evidence collected, and verified rather than assumed?
3. **Tool use**: were the available tools used well? Were obvious ones missed? Were results read correctly?
4. **Reasoning**: does the conclusion follow from the evidence? Was contradicting evidence addressed?
5. **Completeness**: was the problem explored enough, without wasted loops?

Then write an overall judgement and a score from 0 to 100. The outcome sets the range:
- 60-100: correct, well-supported conclusion (80-100 when the process was also efficient);
- 35-59: partially correct or weakly supported conclusion;
- 0-34: wrong or unsupported conclusion.
The other dimensions place the score within its range.

Failure patterns to name when they apply (describe any other problem in your own words):
{failure_tags}

End your answer with exactly these two lines, and nothing after them:
TAGS: <the failure patterns above that apply, comma-separated, or none>
SCORE: <a whole number from 0 to 100>"""

SCORING_CORRECTION = (
    "Your answer could not be read: {problem}. Write your evaluation again and end it with "
    "exactly these two lines, and nothing after them:\n"
    "TAGS: <failure patterns, comma-separated, or none>\n"
    "SCORE: <a whole number from 0 to 100>"
)

SCORING_TOOL_REPORT_REQUEST = """{heading}

Now report on the tools, from what you saw in this investigation. Two parts:

### Part 1: Missing tools
Tools that do not exist but would have helped: for each, a name, what it would do, and which step of this investigation it would have helped.

### Part 2: Existing tool improvements
Tools from the available-tools list that were hard to use or to find: unclear arguments (the agent guessed or retried), results hard to read, a description that hid the tool's relevance, or arguments the agent could not discover. For each: the tool's name, what to change, and what you observed.

Write "None." under a part with nothing to report."""


@dataclass(frozen=True)
class Finding:
    """What one agent of a stage ended with, as the next step reads it."""

    stage: str
    agent: str
    status: str
    text: str  # its final analysis, or why it failed


def system_prompt(
    *,
    agent_name: str,
    agent_type: str,
    custom_instructions: str,
    servers: Sequence[MCPServerConfig] = (),
    sub_agents: Sequence[AgentConfig] = (),
    skills: Sequence[str] = (),
    memories: str = "",
) -> str:
    """``skills``: the sections of agents/skills.py, after the tools' instructions;
    ``memories``: agents/memory.py's lessons, last (TARSy's tier 4)."""
    parts = [PREAMBLE.format(agent=agent_name)]
    if agent_type == ACTION:
        parts.append(ACTION_PREAMBLE)
    if custom_instructions:
        parts.append(custom_instructions)
    parts += [
        f"## Tools from {server.id}\n{server.instructions}"
        for server in servers
        if server.instructions
    ]
    parts += skills
    if sub_agents:
        parts.append(orchestration_section(sub_agents))
    if memories:
        parts.append(memories)
    return "\n\n".join(parts)


def orchestration_section(sub_agents: Sequence[AgentConfig]) -> str:
    catalog = "\n".join(f"- **{agent.name}**: {agent.description}" for agent in sub_agents)
    return (
        "## Sub-agents\n"
        "You can hand focused tasks to other agents with `orchestrator.dispatch_agent(name, "
        "task)`; they run at the same time as you, each with its own tools. Write each task "
        "so that it stands alone: what to look at and what to report. Results arrive "
        "automatically as messages when each sub-agent finishes; never poll. You cannot give "
        "your final answer while sub-agents are still running: wait for them, or stop one "
        "with `orchestrator.cancel_agent(execution_id)`. `orchestrator.list_agents()` shows "
        "them and their state.\n\nAgents you may dispatch:\n" + catalog
    )


def investigation_messages(
    *,
    system: str,
    alert_type: str,
    alert_data: str,
    runbook: str,
    previous: str,
) -> list[ConversationMessage]:
    user = []
    if previous:
        user.append(f"## Findings of earlier stages\n\n{previous}")
    user.append(f"## Alert\n\nType: {alert_type}\n\n{alert_data}")
    if runbook:
        user.append(runbook_section(runbook))
    user.append("Investigate this alert.")
    return [
        ConversationMessage(Role.SYSTEM, system),
        ConversationMessage(Role.USER, "\n\n".join(user)),
    ]


def runbook_section(runbook: str) -> str:
    """The runbook, for every agent that investigates or weighs the investigation."""
    return f"## Runbook\n\n{runbook}"


def sub_agent_messages(
    *,
    system: str,
    alert_type: str,
    alert_data: str,
    task: str,
    dispatched_by: str,
    runbook: str = "",
) -> list[ConversationMessage]:
    user = (
        f"## Task from {dispatched_by}\n\n{task}\n\n"
        f"## The alert being investigated\n\nType: {alert_type}\n\n{alert_data}\n\n"
        + (f"{runbook_section(runbook)}\n\n" if runbook else "")
        + "Do the task with your tools and report what you found."
    )
    return [ConversationMessage(Role.SYSTEM, system), ConversationMessage(Role.USER, user)]


def synthesis_messages(
    *,
    system: str,
    alert_type: str,
    alert_data: str,
    findings: Sequence[Finding],
    runbook: str = "",
) -> list[ConversationMessage]:
    user = (
        f"## Alert\n\nType: {alert_type}\n\n{alert_data}\n\n"
        + (f"{runbook_section(runbook)}\n\n" if runbook else "")
        + f"{FINDINGS_TO_MERGE}\n\n{format_findings(findings)}\n\n"
        "Write the merged analysis."
    )
    return [ConversationMessage(Role.SYSTEM, system), ConversationMessage(Role.USER, user)]


def exec_summary_messages(
    *, system: str, alert_type: str, final_analysis: str
) -> list[ConversationMessage]:
    user = (
        f"Alert type: {alert_type}\n\n{INVESTIGATION_TO_SUMMARISE}\n\n{final_analysis}\n\n"
        "Write the executive summary."
    )
    return [ConversationMessage(Role.SYSTEM, system), ConversationMessage(Role.USER, user)]


TOOL_SUMMARY_INSTRUCTIONS = (
    "You condense the output of one tool call for an SRE agent investigating an alert. "
    "The agent will read your summary instead of the output, so keep every fact that may "
    "matter to the investigation: errors and warnings (quoted exactly, with how often they "
    "occur), the names of failing resources, counts, timestamps and anything unusual. Drop "
    "repetition and what is plainly healthy. Do not speculate about causes. Use at most "
    "{max_tokens} tokens."
)


def tool_summary_messages(
    *,
    alert_type: str,
    alert_data: str,
    reasoning: str,
    tool_name: str,
    arguments: dict,
    output: str,
    max_tokens: int,
) -> list[ConversationMessage]:
    """The investigation's context (the alert, the agent's latest reasoning) and the output."""
    context = f"## Alert\n\nType: {alert_type}\n\n{alert_data}\n\n"
    if reasoning:
        context += f"## What the agent was looking for\n\n{reasoning}\n\n"
    user = (
        f"{context}## Tool call\n\n{tool_name} with arguments {arguments}\n\n"
        f"{TOOL_OUTPUT_TO_SUMMARISE}\n\n{output}\n\nWrite the summary."
    )
    system = TOOL_SUMMARY_INSTRUCTIONS.format(max_tokens=max_tokens)
    return [ConversationMessage(Role.SYSTEM, system), ConversationMessage(Role.USER, user)]


def format_findings(findings: Sequence[Finding]) -> str:
    """Each agent's result under a heading naming its stage and agent."""
    blocks = []
    for finding in findings:
        state = "" if finding.status == "completed" else f" — {finding.status}"
        blocks.append(
            f"### Stage '{finding.stage}', agent '{finding.agent}'{state}\n\n{finding.text}"
        )
    return "\n\n".join(blocks)


def sub_agent_result(
    *, name: str, execution_id: int, status: str, text: str
) -> ConversationMessage:
    if status == "completed":
        head = f"[Sub-agent completed] {name} (execution {execution_id})"
    else:
        head = f"[Sub-agent {status}] {name} (execution {execution_id})"
    return ConversationMessage(Role.USER, f"{head}:\n\n{text}")


def forced_conclusion(limit: int) -> ConversationMessage:
    return ConversationMessage(Role.USER, FORCED_CONCLUSION.format(limit=limit))


def budget_conclusion(reason: str) -> ConversationMessage:
    return ConversationMessage(Role.USER, BUDGET_CONCLUSION.format(reason=reason))
