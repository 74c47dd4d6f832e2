"""A session's trace in TARSy's shapes (TARSY-API §1.11): every LLM and MCP call, by
stage and agent (sub-agents under the agent that dispatched them), and one call whole."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django.http import HttpRequest, JsonResponse
from ninja import Router

from api.rest import schemas
from api.rest.common import ApiRejected, iso, respond
from sessions.models import AlertSession, LLMInteraction, MCPInteraction
from sessions.selectors.timeline import ExecutionNode
from sessions.selectors.trace import TraceEntry, request_messages, session_trace

router = Router(tags=["trace"])

ERRORS = {401: schemas.Error, 404: schemas.Error}


def _opt(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if value not in (None, "", 0, [], {})}


def llm_item(call: LLMInteraction) -> dict[str, Any]:
    return {
        "id": str(call.id),
        "interaction_type": call.interaction_type,
        "model_name": call.model_name,
        **_opt(
            {
                "input_tokens": call.input_tokens,
                "output_tokens": call.output_tokens,
                "total_tokens": call.total_tokens,
                "duration_ms": call.duration_ms,
                "error_message": call.error_message,
            }
        ),
        "created_at": iso(call.created_at),
    }


def mcp_item(call: MCPInteraction) -> dict[str, Any]:
    return {
        "id": str(call.id),
        "interaction_type": call.interaction_type,
        "server_name": call.server_name,
        **_opt(
            {
                "tool_name": call.tool_name,
                "duration_ms": call.duration_ms,
                "error_message": call.result if call.is_error else "",
            }
        ),
        "created_at": iso(call.created_at),
    }


def _execution(node: ExecutionNode[TraceEntry]) -> dict[str, Any]:
    entries = [entry.interaction for entry in node.items]
    data: dict[str, Any] = {
        "execution_id": str(node.execution.id),
        "agent_name": node.execution.agent_name,
        "llm_interactions": [llm_item(i) for i in entries if isinstance(i, LLMInteraction)],
        "mcp_interactions": [mcp_item(i) for i in entries if isinstance(i, MCPInteraction)],
    }
    if node.children:
        data["sub_agents"] = [_execution(child) for child in node.children]
    return data


def _interaction(entry: TraceEntry) -> dict[str, Any]:
    call = entry.interaction
    return {"kind": entry.kind, **(llm_item(call) if entry.kind == "llm" else mcp_item(call))}  # type: ignore[arg-type]


@router.get("/sessions/{uuid:session_id}/trace", response={200: dict[str, Any], **ERRORS})
def session_trace_view(request: HttpRequest, session_id: UUID) -> JsonResponse:
    """Every call of the session, by stage and agent (bodies left out: the routes
    below give one call whole)."""
    session = AlertSession.objects.filter(id=session_id).first()
    if session is None:
        raise ApiRejected("resource not found", 404)
    trace = session_trace(session)
    stages = []
    for position, node in enumerate(trace.stages, start=1):
        stage: dict[str, Any] = {
            "stage_id": str(node.stage.id),
            "stage_name": node.stage.name,
            "stage_type": node.stage.stage_type,
        }
        if node.stage.stage_type == "synthesis" and position > 1:
            stage["referenced_stage_id"] = str(trace.stages[position - 2].stage.id)
        stage["executions"] = [_execution(execution) for execution in node.executions]
        stages.append(stage)
    return respond(
        {
            "stages": stages,
            "session_interactions": [_interaction(e) for e in trace.session_entries],
        }
    )


def _conversation_entry(message: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": message.get("role"), "content": message.get("content", "")}
    if message.get("tool_calls"):
        entry["tool_calls"] = [
            {
                "id": tool_call.get("id", ""),
                "name": tool_call.get("name", ""),
                "arguments": json.dumps(tool_call.get("arguments", {}), separators=(",", ":")),
            }
            for tool_call in message["tool_calls"]
        ]
    for key in ("tool_call_id", "tool_name"):
        if message.get(key):
            entry[key] = message[key]
    return entry


def _iteration(call: LLMInteraction) -> int:
    """TARSy's ``iteration``: the call's place among its agent's model calls (1, 2…);
    0 for a tool result's summary, which is not one of the agent's iterations. A
    Reflector's call on the scoring execution is a conversation of its own (1)."""
    if call.interaction_type == "summarization":
        return 0
    earlier = LLMInteraction.objects.filter(execution_id=call.execution_id, id__lte=call.id)
    if call.interaction_type == "memory_extraction":
        return earlier.filter(interaction_type="memory_extraction").count()
    return earlier.exclude(interaction_type__in=("summarization", "memory_extraction")).count()


@router.get(
    "/sessions/{uuid:session_id}/trace/llm/{int:interaction_id}",
    response={200: dict[str, Any], **ERRORS},
)
def llm_interaction_view(
    request: HttpRequest, session_id: UUID, interaction_id: int
) -> JsonResponse:
    """One model call whole: the conversation it was sent (tool-call arguments as JSON
    text, as TARSy sends them) closed by what it answered, as TARSy's is."""
    call = LLMInteraction.objects.filter(id=interaction_id, session_id=session_id).first()
    if call is None:
        raise ApiRejected("interaction not found", 404)
    messages = request_messages(call)
    conversation = [_conversation_entry(message) for message in messages]
    if call.response_text or call.tool_calls:
        # The answer closes the conversation, as TARSy shows it.
        answer = {"role": "assistant", "content": call.response_text, "tool_calls": call.tool_calls}
        conversation.append(_conversation_entry(answer))
    return respond(
        {
            **llm_item(call),
            **_opt({"thinking_content": call.thinking}),
            "llm_request": {
                "provider": call.provider,
                "backend": call.backend,
                "model": call.model_name,
                "tools": call.tools,
                # TARSy's keys: which of the agent's calls this was, and its size.
                "iteration": _iteration(call),
                "messages_count": len(messages),
            },
            "llm_response": {
                "text": call.response_text,
                "tool_calls": call.tool_calls,
                "text_length": len(call.response_text.encode()),  # TARSy counts bytes
                "tool_calls_count": len(call.tool_calls or []),
            },
            "conversation": conversation,
        }
    )


@router.get(
    "/sessions/{uuid:session_id}/trace/mcp/{int:interaction_id}",
    response={200: dict[str, Any], **ERRORS},
)
def mcp_interaction_view(
    request: HttpRequest, session_id: UUID, interaction_id: int
) -> JsonResponse:
    """One tool call whole: its arguments, its result, or the tools a listing found."""
    call = MCPInteraction.objects.filter(id=interaction_id, session_id=session_id).first()
    if call is None:
        raise ApiRejected("interaction not found", 404)
    return respond(
        {
            **mcp_item(call),
            **_opt(
                {
                    "tool_arguments": call.arguments,
                    "tool_result": {"content": call.result, "is_error": call.is_error}
                    if call.interaction_type == "tool_call"
                    else None,
                    "available_tools": call.available_tools,
                }
            ),
        }
    )
