"""The words agents start from."""

from __future__ import annotations

from agents.config_types import MCPServerConfig, ResolvedAgentConfig
from llm.types import ConversationMessage, Role

PREAMBLE = (
    "You are {agent}, an agent of TARSy, an AI site-reliability engineer. You investigate "
    "alerts with the tools you are given and report what you find."
)

FORCED_CONCLUSION = (
    "You have reached the limit of {limit} investigation steps. Do not call any more tools. "
    "Write your final analysis now from what you have found: what is broken, the evidence, "
    "the most likely root cause, and the recommended next steps. Say what remains uncertain."
)


def initial_messages(
    *,
    agent: ResolvedAgentConfig,
    servers: list[MCPServerConfig],
    alert_type: str,
    alert_data: str,
    runbook: str,
    previous_stages: str,
) -> list[ConversationMessage]:
    system = [PREAMBLE.format(agent=agent.agent_name)]
    if agent.custom_instructions:
        system.append(agent.custom_instructions)
    for server in servers:
        if server.instructions:
            system.append(f"## Tools from {server.id}\n{server.instructions}")
    user = []
    if previous_stages:
        user.append(f"## Findings of earlier stages\n\n{previous_stages}")
    user.append(f"## Alert\n\nType: {alert_type}\n\n{alert_data}")
    if runbook:
        user.append(f"## Runbook\n\n{runbook}")
    user.append("Investigate this alert.")
    return [
        ConversationMessage(Role.SYSTEM, "\n\n".join(system)),
        ConversationMessage(Role.USER, "\n\n".join(user)),
    ]


def forced_conclusion(limit: int) -> ConversationMessage:
    return ConversationMessage(Role.USER, FORCED_CONCLUSION.format(limit=limit))
