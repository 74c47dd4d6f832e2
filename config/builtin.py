"""The instructions of the agents every configuration has (synthesis, executive summary,
chat, scoring); a tarsy.yaml agent of the same name replaces them. The words agents build
on top of these are in ``agents/prompts.py``."""

from __future__ import annotations

import os

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

# TARSy's built-in agents and MCP server, under TARSy's names and in TARSy's words
# (``pkg/config/builtin.go``): configurations written for TARSy name them.
KUBERNETES_SERVER = "kubernetes-server"
KUBERNETES_INSTRUCTIONS = ""
KUBERNETES_SERVER_INSTRUCTIONS = """For Kubernetes operations:
- **IMPORTANT: In multi-cluster environments** (when the 'configuration_contexts_list' tool \
is available):
  * ALWAYS start by calling 'configuration_contexts_list' to see all available contexts and \
their server URLs
  * Use this information to determine which context to target before performing any operations
  * This prevents working on the wrong cluster and helps you understand the environment
- Be careful with cluster-scoped resource listings in large clusters
- Always prefer namespaced queries when possible
- If you get "server could not find the requested resource" error, check if you're using the \
namespace parameter correctly:
  * Cluster-scoped resources (Namespace, Node, ClusterRole, PersistentVolume) should NOT have \
a namespace parameter
  * Namespace-scoped resources (Pod, Deployment, Service, ConfigMap) REQUIRE a namespace \
parameter"""

GENERAL_WORKER_INSTRUCTIONS = """You are GeneralWorker, a general-purpose agent.
Complete the assigned task thoroughly and concisely."""

WEB_RESEARCHER_DESCRIPTION = (
    "Public web and URL research: GitHub/GitLab repos, documentation sites, vendor runbooks, "
    "issue trackers, CVEs, release notes, image or dependency lookups, and external HTTP(S) "
    "hostnames exposed via OpenShift Routes. Use when the alert, runbook, or task references a "
    "specific HTTPS URL or needs live internet search — Kubernetes and other MCP tools cannot "
    "fetch arbitrary public web pages. Prefer dispatching here over guessing from memory when "
    "external sources would verify versions, upstream bugs, or repo layout."
)
WEB_RESEARCHER_INSTRUCTIONS = """You complete assigned research using native tools only \
(no cluster access).

- Use the native tool name url_context for URLs (not load_context or other aliases).
- Use url_context when the task names one or more URLs (repos, docs, READMEs, issues, \
advisories, OpenShift Route hostnames, etc.).
- Use google_search for broad queries (CVEs, known outages, version compatibility, error \
strings, etc.).

Report findings with sources. Be thorough but concise. Cite only what appears in tool results \
and grounding — if a tool returns nothing useful, say so explicitly; never invent file paths, \
manifest contents, or metrics."""

CODE_EXECUTOR_INSTRUCTIONS = """You solve computational tasks by writing and executing Python \
code.
Show your work. Report results clearly."""


def kubernetes_server() -> dict:
    """TARSy's ``kubernetes-server``, as a tarsy.yaml entry: the read-only
    kubernetes-mcp-server, on ``$KUBECONFIG`` when it is set (else its own default)."""
    args = ["-y", "kubernetes-mcp-server@0.0.54", "--read-only", "--disable-destructive"]
    if os.environ.get("KUBECONFIG"):
        args += ["--kubeconfig", "{{.KUBECONFIG}}"]
    return {
        "transport": {"type": "stdio", "command": "npx", "args": args},
        "instructions": KUBERNETES_SERVER_INSTRUCTIONS,
        "data_masking": {
            "enabled": True,
            "pattern_groups": ["kubernetes"],
            "patterns": ["certificate", "token", "email"],
        },
        "summarization": {"enabled": True, "summary_max_token_limit": 1000},
    }


# TARSy's built-in chain: alert type ``kubernetes`` (its default), one stage.
KUBERNETES_CHAIN = {
    "alert_types": ["kubernetes"],
    "description": "Single-stage Kubernetes analysis",
    "stages": [{"name": "analysis", "agents": [{"name": "KubernetesAgent"}]}],
}


def _gemini(model: str, *, url_context: bool = True) -> dict:
    tools = ("google_search", "url_context") if url_context else ("google_search",)
    return {"type": "google", "model": model, "api_key_env": "GOOGLE_API_KEY", "tools": tools}


# TARSy's built-in LLM providers (``initBuiltinLLMProviders``): a configuration may name them
# without defining them. A provider of llm-providers.yaml or of Django admin with the same
# name replaces one.
BUILTIN_PROVIDERS: dict[str, dict] = {
    "google-default": _gemini("gemini-3.7-flash"),
    "google-image-flash": _gemini("gemini-3.1-flash-image", url_context=False),
    "gemini-3-flash": _gemini("gemini-3-flash-preview"),
    "gemini-3.1-pro": _gemini("gemini-3.1-pro-preview"),
    "gemini-3.1-flash": _gemini("gemini-3.1-flash-lite"),
    "gemini-3.7-flash": _gemini("gemini-3.7-flash"),
    "gemini-3.6-flash": _gemini("gemini-3.6-flash"),
    "gemini-3.5-flash": _gemini("gemini-3.5-flash"),
    "gemini-2.5-flash": _gemini("gemini-2.5-flash"),
    "gemini-2.5-pro": _gemini("gemini-2.5-pro"),
    "openai-default": {"type": "openai", "model": "gpt-5.2", "api_key_env": "OPENAI_API_KEY"},
    "anthropic-default": {
        "type": "anthropic",
        "model": "claude-sonnet-5",
        "api_key_env": "ANTHROPIC_API_KEY",
    },
    "xai-default": {"type": "xai", "model": "grok-4.6", "api_key_env": "XAI_API_KEY"},
    "vertexai-default": {
        "type": "vertexai",
        "model": "claude-sonnet-5",
        "project_env": "GOOGLE_CLOUD_PROJECT",
        "location_env": "GOOGLE_CLOUD_LOCATION",
    },
}
