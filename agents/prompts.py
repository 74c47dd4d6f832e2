"""The words agents start from, and how what one agent found reaches the next."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agents.config_types import ACTION, AgentConfig, MCPServerConfig
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

SYNTHESIS_INSTRUCTIONS = (
    "Several agents investigated the same alert in parallel. Merge their findings into one "
    "analysis: where they agree, state it once with the strongest evidence; where they "
    "disagree, weigh the evidence and say which is more likely and why; mention what an "
    "agent could not do (it failed) only when it leaves a gap. End with the root cause and "
    "the recommended fix."
)

EXEC_SUMMARY_INSTRUCTIONS = (
    "Write an executive summary of the investigation below for an engineering manager: two "
    "to four sentences in plain words, saying what happened, the root cause, and what to do. "
    "No headings, no lists."
)

CHAT_INSTRUCTIONS = (
    "The investigation below has ended. An SRE asks follow-up questions about it. Answer "
    "from what the investigation found and, when that is not enough, check with your tools. "
    "Be direct; say what you verified and what you infer."
)

SCORING_INSTRUCTIONS = (
    "You judge the quality of an automated incident investigation. Judge the outcome first: "
    "did it reach the correct conclusion, supported by the evidence it gathered?"
)


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
) -> str:
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
    if sub_agents:
        parts.append(orchestration_section(sub_agents))
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
        user.append(f"## Runbook\n\n{runbook}")
    user.append("Investigate this alert.")
    return [
        ConversationMessage(Role.SYSTEM, system),
        ConversationMessage(Role.USER, "\n\n".join(user)),
    ]


def sub_agent_messages(
    *, system: str, alert_type: str, alert_data: str, task: str, dispatched_by: str
) -> list[ConversationMessage]:
    user = (
        f"## Task from {dispatched_by}\n\n{task}\n\n"
        f"## The alert being investigated\n\nType: {alert_type}\n\n{alert_data}\n\n"
        "Do the task with your tools and report what you found."
    )
    return [ConversationMessage(Role.SYSTEM, system), ConversationMessage(Role.USER, user)]


def synthesis_messages(
    *, system: str, alert_type: str, alert_data: str, findings: Sequence[Finding]
) -> list[ConversationMessage]:
    user = (
        f"## Alert\n\nType: {alert_type}\n\n{alert_data}\n\n"
        f"{FINDINGS_TO_MERGE}\n\n{format_findings(findings)}\n\n"
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
