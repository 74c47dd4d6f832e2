from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from html.parser import HTMLParser

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from sessions import services
from sessions.models import AgentExecution, AlertSession, LLMInteraction, MCPInteraction
from sessions.selectors.trace import INLINE_RESULT_CHARS, LLM_BODY_FIELDS, session_trace
from tests.conftest import running_session

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"

REQUEST = [
    {
        "role": "system",
        "content": "You are KubernetesAgent.\n\nUse the tools.",
        "tool_calls": [],
        "tool_call_id": "",
        "tool_name": "",
    },
    {
        "role": "user",
        "content": "\nalert: PodCrashLooping\nnamespace: payments  ",
        "tool_calls": [],
        "tool_call_id": "",
        "tool_name": "",
    },
    {
        "role": "assistant",
        "content": "Let me look at the pods.",
        "tool_calls": [
            {"id": "call-1", "name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}}
        ],
        "tool_call_id": "",
        "tool_name": "",
    },
    {
        "role": "tool",
        "content": "payments-api-7d9 CrashLoopBackOff",
        "tool_calls": [],
        "tool_call_id": "call-1",
        "tool_name": "kubernetes.get_pods",
    },
]


@pytest.fixture
def client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@dataclass
class Recorded:
    session: AlertSession
    lease: services.Lease
    stage_index: int = 0
    executions: list[AgentExecution] = field(default_factory=list)

    def stage(self, name: str, **fields):
        stage = services.stage_start(lease=self.lease, name=name, index=self.stage_index, **fields)
        self.stage_index += 1
        return stage

    def agent(self, stage, name: str, *, index: int = 1, parent=None) -> AgentExecution:
        execution = services.execution_start(
            lease=self.lease,
            stage=stage,
            agent_name=name,
            agent_index=index,
            llm_backend="langchain",
            llm_provider="openai-main",
            model_name="gpt-test",
            parent_execution=parent,
            task="look at the pods" if parent else "",
        )
        self.executions.append(execution)
        return execution

    def llm(self, execution: AgentExecution, **fields) -> LLMInteraction:
        defaults = {
            "interaction_type": "iteration",
            "provider": "openai-main",
            "backend": "langchain",
            "model_name": "gpt-test",
            "request_messages": REQUEST,
            "tools": ["kubernetes.get_pods"],
            "response_text": "The pods crash.",
            "input_tokens": 1200,
            "output_tokens": 345,
            "thinking_tokens": 67,
            "total_tokens": 1612,
            "duration_ms": 2345,
            "estimated_cost_usd": Decimal("0.012345"),
        }
        return services.llm_interaction_create(
            lease=self.lease, execution=execution, **{**defaults, **fields}
        )

    def mcp(self, execution: AgentExecution, **fields) -> MCPInteraction:
        defaults = {
            "interaction_type": "tool_call",
            "server_name": "kubernetes",
            "tool_name": "get_pods",
            "arguments": {"namespace": "payments"},
            "result": "payments-api-7d9 CrashLoopBackOff",
            "duration_ms": 87,
        }
        return services.mcp_interaction_create(
            lease=self.lease, execution=execution, **{**defaults, **fields}
        )


def recorded(**fields) -> Recorded:
    session, lease = running_session(**fields)
    return Recorded(session, lease)


def trace_url(session_id) -> str:
    return f"/sessions/{session_id}/trace/"


# --- reading HTML ---------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    parent: Element | None = None
    children: list[Element | str] = field(default_factory=list)

    def text(self) -> str:
        parts = [c if isinstance(c, str) else c.text() for c in self.children]
        text = "".join(parts)
        # A browser drops the one newline that follows <pre>, as the templates expect.
        return text.removeprefix("\n") if self.tag == "pre" else text

    def all(self, tag: str = "", class_: str = "") -> list[Element]:
        found = []
        for child in self.children:
            if isinstance(child, str):
                continue
            classes = child.attrs.get("class", "").split()
            if (not tag or child.tag == tag) and (not class_ or class_ in classes):
                found.append(child)
            found += child.all(tag, class_)
        return found

    def one(self, tag: str = "", class_: str = "") -> Element:
        (found,) = self.all(tag, class_)
        return found

    def by_id(self, id_: str) -> Element:
        (found,) = [e for e in self.all() if e.attrs.get("id") == id_]
        return found

    def ancestor_ids(self) -> list[str]:
        ids, node = [], self.parent
        while node is not None:
            if "id" in node.attrs:
                ids.append(node.attrs["id"])
            node = node.parent
        return ids


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.root = self.current = Element("#root", {})

    def handle_starttag(self, tag, attrs) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs}, parent=self.current)
        self.current.children.append(element)
        if tag not in VOID:
            self.current = element

    def handle_endtag(self, tag) -> None:
        node = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.current = node.parent

    def handle_data(self, data) -> None:
        self.current.children.append(data)


def parse(response) -> Element:
    builder = _TreeBuilder()
    builder.feed(response.content.decode())
    return builder.root


# --- the page -------------------------------------------------------------------------


def test_interactions_are_grouped_by_stage_and_agent_with_sub_agents_nested(client):
    run = recorded()
    investigation = run.stage("Investigation", parallel_type="multi_agent")
    workload = run.agent(investigation, "WorkloadAgent")
    change = run.agent(investigation, "ChangeAgent", index=2)
    helper = run.agent(investigation, "LogReader", parent=workload)
    summary_stage = run.stage("Executive Summary", stage_type="exec_summary")
    summarizer = run.agent(summary_stage, "ExecSummary")
    first = run.llm(workload)
    tool = run.mcp(workload)
    second = run.llm(change)
    nested = run.llm(helper)
    last = run.llm(summarizer, interaction_type="executive_summary")

    page = parse(client.get(trace_url(run.session.id)))

    def place(element_id: str) -> list[str]:
        return [i for i in page.by_id(element_id).ancestor_ids() if i.startswith("trace-")]

    agent = "trace-execution-{}".format
    stage = "trace-stage-{}".format
    assert place(f"llm-{first.id}") == [agent(workload.id), stage(investigation.id)]
    assert place(f"mcp-{tool.id}") == [agent(workload.id), stage(investigation.id)]
    assert place(f"llm-{second.id}") == [agent(change.id), stage(investigation.id)]
    assert place(f"llm-{nested.id}") == [
        agent(helper.id),
        agent(workload.id),
        stage(investigation.id),
    ]
    assert place(f"llm-{last.id}") == [agent(summarizer.id), stage(summary_stage.id)]
    stages = [s.attrs["id"] for s in page.all("section", "trace-stage")]
    assert stages == [stage(investigation.id), stage(summary_stage.id)]
    # In the order they happened: the model call, then the tool it asked for.
    entries = [e.attrs["id"] for e in page.by_id(agent(workload.id)).all("details", "trace-entry")]
    assert entries == [f"llm-{first.id}", f"mcp-{tool.id}", f"llm-{nested.id}"]


def test_an_llm_interaction_shows_its_summary_and_loads_its_body_when_opened(client):
    run = recorded()
    interaction = run.llm(run.agent(run.stage("Investigation"), "KubernetesAgent"))

    response = client.get(trace_url(run.session.id))

    line = parse(response).by_id(f"llm-{interaction.id}")
    summary = " ".join(line.one("summary").text().split())
    assert "iteration" in summary
    assert "openai-main · langchain · gpt-test" in summary
    assert "1200 in / 345 out / 67 thinking = 1612 tokens" in summary
    assert "2345 ms" in summary
    assert "$0.012345" in summary
    assert "error" not in summary
    assert line.attrs["hx-get"] == f"/sessions/{run.session.id}/trace/llm/{interaction.id}/"
    assert line.attrs["hx-trigger"] == "toggle once"
    assert line.attrs["hx-target"] == f"#llm-{interaction.id}-body"
    # The conversation is not on the page: it loads when the line is opened.
    assert "Use the tools." not in response.content.decode()
    assert "The pods crash." not in response.content.decode()


def test_the_page_shows_the_session_totals(client):
    run = recorded()
    execution = run.agent(run.stage("Investigation"), "KubernetesAgent")
    run.llm(execution)
    run.llm(execution, estimated_cost_usd=Decimal("0.000005"))
    run.mcp(execution)

    page = parse(client.get(trace_url(run.session.id)))

    assert page.by_id("trace-counts").text() == "2 LLM interactions, 1 MCP interaction"
    usage = page.by_id("trace-usage").text()
    assert "2400 in / 690 out / 134 thinking = 3224 tokens" in usage
    assert "est. $0.012350" in usage


def test_the_request_messages_appear_exactly_as_the_provider_received_them(client):
    run = recorded()
    interaction = run.llm(run.agent(run.stage("Investigation"), "KubernetesAgent"))

    response = client.get(f"/sessions/{run.session.id}/trace/llm/{interaction.id}/")

    assert response.status_code == 200
    messages = parse(response).all("li", "trace-message")
    shown = [(m.attrs["data-role"], m.one("pre", "message-content").text()) for m in messages]
    assert shown == [(m["role"], m["content"]) for m in REQUEST]
    tool_message = messages[3]
    assert tool_message.one("code", "tool-call-id").text() == "call-1"
    assert tool_message.one("code", "tool-name").text() == "kubernetes.get_pods"


def test_the_body_shows_thinking_response_tool_calls_and_the_tools_offered(client):
    run = recorded()
    interaction = run.llm(
        run.agent(run.stage("Investigation"), "KubernetesAgent"),
        thinking="The pods restart; logs first.",
        tool_calls=[
            {
                "id": "call-2",
                "name": "kubernetes.get_pod_logs",
                "arguments": {"name": "payments-api-7d9", "previous": True},
            }
        ],
    )

    body = parse(client.get(f"/sessions/{run.session.id}/trace/llm/{interaction.id}/"))

    assert body.one("pre", "thinking").text() == "The pods restart; logs first."
    assert body.one("pre", "response-text").text() == "The pods crash."
    assert body.one("details", "trace-tools").one("p").text() == "kubernetes.get_pods"
    response_calls = body.one("section", "trace-response").all("div", "trace-tool-call")
    assert [c.one("code", "tool-name").text() for c in response_calls] == [
        "kubernetes.get_pod_logs"
    ]
    arguments = response_calls[0].one("pre", "arguments").text()
    assert arguments == '{\n  "name": "payments-api-7d9",\n  "previous": true\n}'
    # The assistant message of the request carries its own tool call, arguments and all.
    assistant = body.all("li", "trace-message")[2]
    assert assistant.one("pre", "arguments").text() == '{\n  "namespace": "payments"\n}'


def test_a_tool_call_shows_its_server_tool_arguments_result_and_duration(client):
    run = recorded()
    execution = run.agent(run.stage("Investigation"), "KubernetesAgent")
    listing = run.mcp(
        execution,
        interaction_type="tool_list",
        tool_name="",
        arguments={},
        result="",
        available_tools=["get_pods", "get_pod_logs"],
    )
    call = run.mcp(execution)

    page = parse(client.get(trace_url(run.session.id)))

    line = page.by_id(f"mcp-{call.id}")
    summary = " ".join(line.one("summary").text().split())
    assert "kubernetes.get_pods" in summary
    assert "87 ms" in summary
    assert line.one("pre", "arguments").text() == '{\n  "namespace": "payments"\n}'
    # A short result is shown in place: nothing to load.
    assert line.one("pre", "result").text() == "payments-api-7d9 CrashLoopBackOff"
    assert "hx-get" not in line.attrs
    assert page.by_id(f"mcp-{listing.id}").one("p").text() == "get_pods, get_pod_logs"


def test_a_large_tool_result_loads_when_opened(client):
    run = recorded()
    large = "line of pod logs\n" * (INLINE_RESULT_CHARS // 10)
    call = run.mcp(run.agent(run.stage("Investigation"), "KubernetesAgent"), result=large)

    response = client.get(trace_url(run.session.id))

    assert "line of pod logs" not in response.content.decode()
    line = parse(response).by_id(f"mcp-{call.id}")
    url = f"/sessions/{run.session.id}/trace/mcp/{call.id}/"
    assert line.attrs["hx-get"] == url
    assert line.attrs["hx-trigger"] == "toggle once"
    assert line.attrs["hx-target"] == f"#mcp-{call.id}-result"
    assert f"{len(large)} chars" in line.one("summary").text()
    assert parse(client.get(url)).one("pre", "result").text() == large


def test_errors_are_shown(client):
    run = recorded()
    execution = run.agent(run.stage("Investigation"), "KubernetesAgent")
    failed = run.llm(
        execution,
        response_text="",
        error_code="rate_limited",
        error_message="429 Too Many Requests: quota exceeded for gpt-test",
    )
    tool = run.mcp(execution, is_error=True, result="namespace 'payment' not found")

    page = parse(client.get(trace_url(run.session.id)))

    line = page.by_id(f"llm-{failed.id}")
    assert "failed" in line.attrs["class"].split()
    assert "error rate_limited" in line.one("summary").text()
    assert line.one("p", "error").text() == "429 Too Many Requests: quota exceeded for gpt-test"
    body = parse(client.get(f"/sessions/{run.session.id}/trace/llm/{failed.id}/"))
    assert body.one("p", "error").text() == (
        "rate_limited 429 Too Many Requests: quota exceeded for gpt-test"
    )
    tool_line = page.by_id(f"mcp-{tool.id}")
    assert "failed" in tool_line.attrs["class"].split()
    assert "Error" in [h.text() for h in tool_line.all("h3")]
    assert tool_line.one("pre", "result").text() == "namespace 'payment' not found"


def test_llm_and_mcp_content_is_escaped(client):
    run = recorded()
    execution = run.agent(run.stage("Investigation"), "KubernetesAgent")
    hostile = [{**m, "content": f"{m['content']} {SCRIPT} {IMG}"} for m in REQUEST]
    interaction = run.llm(
        execution,
        request_messages=hostile,
        response_text=SCRIPT,
        thinking=IMG,
        tool_calls=[{"id": IMG, "name": SCRIPT, "arguments": {"q": IMG}}],
        error_message=SCRIPT,
    )
    small = run.mcp(execution, arguments={"q": SCRIPT}, result=f"{SCRIPT} {IMG}")
    large = run.mcp(execution, result=f"{SCRIPT} {IMG} " + "x" * INLINE_RESULT_CHARS)

    responses = [
        client.get(trace_url(run.session.id)),
        client.get(f"/sessions/{run.session.id}/trace/llm/{interaction.id}/"),
        client.get(f"/sessions/{run.session.id}/trace/mcp/{large.id}/"),
    ]

    for response in responses:
        html = response.content.decode()
        assert SCRIPT not in html
        assert IMG not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "&lt;img src=x onerror=alert(1)&gt;" in html
    # Escaped, and still shown as written.
    body = parse(responses[1])
    assert body.all("pre", "message-content")[1].text() == hostile[1]["content"]
    assert parse(responses[0]).by_id(f"mcp-{small.id}").one("pre", "result").text() == (
        f"{SCRIPT} {IMG}"
    )


def test_the_page_makes_as_many_queries_for_20_interactions_as_for_2(client):
    def session_with(interactions: int) -> AlertSession:
        run = recorded()
        stage = run.stage("Investigation")
        parent = run.agent(stage, "KubernetesAgent")
        child = run.agent(stage, "LogReader", parent=parent)
        for n in range(interactions // 2):
            run.llm(parent if n % 2 else child)
            run.mcp(child if n % 2 else parent, result="x" * (INLINE_RESULT_CHARS * (n % 2 + 1)))
        return run.session

    def queries(session: AlertSession) -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(trace_url(session.id)).status_code == 200
        return [q["sql"] for q in captured.captured_queries]

    few, many = queries(session_with(2)), queries(session_with(20))

    assert len(few) == len(many)
    # The bodies stay in the database until an interaction is opened.
    llm_query = next(q for q in many if 'FROM "alert_sessions_llminteraction"' in q)
    assert "request_messages" not in llm_query
    assert "response_text" not in llm_query


def test_the_page_leaves_conversations_and_large_results_in_the_database():
    run = recorded()
    execution = run.agent(run.stage("Investigation"), "KubernetesAgent")
    run.llm(execution)
    run.mcp(execution, result="x" * (INLINE_RESULT_CHARS + 1))
    run.mcp(execution, result="short")

    (node,) = session_trace(run.session).stages[0].executions
    llm, large, small = (entry.interaction for entry in node.items)

    assert set(LLM_BODY_FIELDS) <= llm.get_deferred_fields()
    assert "result" in large.get_deferred_fields()
    assert large.result_if_small is None
    assert small.result_if_small == "short"


# --- access ---------------------------------------------------------------------------


def test_an_interaction_of_another_session_is_not_found(client):
    run, other = recorded(), recorded()
    llm = other.llm(other.agent(other.stage("Investigation"), "KubernetesAgent"))
    mcp = other.mcp(other.executions[0])

    assert client.get(f"/sessions/{run.session.id}/trace/llm/{llm.id}/").status_code == 404
    assert client.get(f"/sessions/{run.session.id}/trace/mcp/{mcp.id}/").status_code == 404
    assert client.get(f"/sessions/{other.session.id}/trace/llm/{llm.id}/").status_code == 200


def test_an_unknown_session_is_not_found(client):
    run = recorded()
    llm = run.llm(run.agent(run.stage("Investigation"), "KubernetesAgent"))
    unknown = uuid.uuid4()

    assert client.get(trace_url(unknown)).status_code == 404
    assert client.get(f"/sessions/{unknown}/trace/llm/{llm.id}/").status_code == 404
    assert client.get(f"/sessions/{unknown}/trace/mcp/1/").status_code == 404


def test_the_trace_requires_login():
    run = recorded()
    llm = run.llm(run.agent(run.stage("Investigation"), "KubernetesAgent"))
    mcp = run.mcp(run.executions[0])
    anonymous = Client()

    for url in (
        trace_url(run.session.id),
        f"/sessions/{run.session.id}/trace/llm/{llm.id}/",
        f"/sessions/{run.session.id}/trace/mcp/{mcp.id}/",
    ):
        response = anonymous.get(url)
        assert response.status_code == 302
        assert response.url.startswith("/login/")


def test_the_session_page_links_to_its_trace(client):
    run = recorded()

    page = parse(client.get(f"/sessions/{run.session.id}/"))

    assert page.by_id("trace-link").attrs["href"] == trace_url(run.session.id)
