"""The instructions of the agents every configuration has (synthesis, executive summary,
chat, scoring); a tarsy.yaml agent of the same name replaces them. The words agents build
on top of these are in ``agents/prompts.py``."""

from __future__ import annotations

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
    "You judge the quality of automated incident investigations done by TARSy's agents. "
    "Judge the outcome first: did the investigation reach the correct conclusion, supported "
    "by the evidence it gathered? Then judge the path: was it thorough and efficient? A wrong "
    "conclusion never earns a high score, however methodical the steps that led to it. Every "
    "claim you make must point at something in the investigation (a tool call, a result, an "
    "agent's words, or an action that is missing)."
)
