from __future__ import annotations

import functools
import os
import platform
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from _pytest.nodeid import coerce_node_id  # pytest 9: what node ids are made of
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from llm.models import LLMProvider, ProviderType
from sessions.auth import api_token_create
from sessions.models import AlertSession, SessionStatus
from sessions.services import Lease
from tests import sqlite_template


@pytest.fixture(autouse=True)
def fresh_mcp_hub():
    """Each test starts the MCP servers it uses: no server outlives its test."""
    yield
    from agents.tools import mcp_hub

    if mcp_hub._hub is not None:
        mcp_hub._hub.close()
        mcp_hub._hub = None


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite the golden files of the chain scenarios (tests/agents/golden/)",
    )


def running_session(**fields) -> tuple[AlertSession, Lease]:
    """A session some worker is running, and that worker's lease (no task, no queue)."""
    token = uuid.uuid4()
    defaults = {
        "alert_type": "kubernetes",
        "alert_data": "d",
        "chain_id": "kubernetes-investigation",
        "status": SessionStatus.IN_PROGRESS,
        "worker_id": "test-worker",
        "heartbeat_at": timezone.now(),
        "started_at": timezone.now(),
    }
    session = AlertSession.objects.create(**{**defaults, **fields, "lease_token": token})
    return session, Lease(session.id, token)


@functools.cache
def password_hash(password: str) -> str:
    """The stored form of ``password`` (Django's PBKDF2, as in production). Hashing takes
    about half a second on the CI box, so each test process hashes once for every user."""
    from django.contrib.auth.hashers import make_password

    return make_password(password)


class LivePieces(list):
    """``sessions.streams.Delta``s, in the order workers sent them."""

    def reached(self, *session_ids) -> bool:
        """Each session's answer has sent its first words. Its item can exist a moment
        before them; a worker stopped in that moment has no text to keep."""
        sent = {piece.session_id for piece in self}
        return all(str(session_id) in sent for session_id in session_ids)


@pytest.fixture
def live_pieces(monkeypatch) -> LivePieces:
    """The streamed text workers hand the relays (``sessions.streams.Delta``s), in order."""
    from sessions import streams

    pieces = LivePieces()
    monkeypatch.setattr(streams, "send", pieces.extend)
    # Noted as they are sent, on PostgreSQL too (where a thread of their own sends them).
    monkeypatch.setattr(streams, "needs_database", lambda: False)
    return pieces


@pytest.fixture
def user(db):
    return get_user_model().objects.create(username="alice", password=password_hash("s3cret-pass"))


@pytest.fixture
def outsider(db):
    return get_user_model().objects.create(
        username="mallory", password=password_hash("s3cret-pass")
    )


@pytest.fixture
def browser_client(user) -> Client:
    """A logged-in browser that enforces CSRF like a real one."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


@pytest.fixture
def api_token(user) -> str:
    return api_token_create(username=user.username)


@pytest.fixture
def demo_provider(db) -> LLMProvider:
    return LLMProvider.objects.create(
        name="demo",
        type=ProviderType.SCRIPTED,
        model="demo-investigator",
        options={"script": "demo", "chunk_delay": 0},
        is_default=True,
    )


@pytest.fixture
def write_script(tmp_path: Path):
    """Write a scripted-provider script and return its path."""

    def write(turns: list[dict], **extra) -> str:
        path = tmp_path / f"script-{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump({"chunk_delay": 0, **extra, "turns": turns}))
        return str(path)

    return write


@pytest.fixture
def scripted_provider(db, write_script):
    """A default scripted provider replaying the given turns."""

    def make(turns: list[dict], **extra) -> LLMProvider:
        return LLMProvider.objects.create(
            name="scripted-test",
            type=ProviderType.SCRIPTED,
            model="script",
            options={"script": write_script(turns, **extra)},
            is_default=True,
        )

    return make


@pytest.fixture
def memory_on(tarsy_config):
    tarsy_config(lambda config: config["defaults"].update(memory={"enabled": True}))


@pytest.fixture
def memory_off(tarsy_config):
    """The bundled configuration turns memory on; these tests need it off."""
    tarsy_config(lambda config: config["defaults"].update(memory={"enabled": False}))


@pytest.fixture
def tarsy_config(settings, tmp_path: Path):
    """Run with a modified copy of the bundled tarsy.yaml: ``tarsy_config(change)``."""
    from config.loader import get_config

    def use(change) -> None:
        config = yaml.safe_load((settings.BASE_DIR / "config" / "tarsy.yaml").read_text())
        change(config)
        path = tmp_path / "tarsy.yaml"
        path.write_text(yaml.safe_dump(config))
        settings.TARSY_CONFIG = str(path)
        get_config.cache_clear()

    yield use
    get_config.cache_clear()


@pytest.fixture
def scripted_summaries(db) -> Callable[[dict], None]:
    """For tests whose model is a fake server: the executive summary that ends every
    session goes to a scripted provider instead, so the fake answers only the agent.
    Call it from a ``tarsy_config`` change."""
    LLMProvider.objects.create(
        name="summaries", type=ProviderType.SCRIPTED, model="demo", options={"chunk_delay": 0}
    )

    def use(config: dict) -> None:
        for chain in config["agent_chains"].values():
            chain["executive_summary_provider"] = "summaries"

    return use


# --- Parallel runs (pytest-xdist, bin/test) ------------------------------------------------
#
# Each xdist worker gets a data directory of its own (TARSY_DATA_DIR): the SQLite wake-up
# ports its event relays announce (sessions/wakeup.py) and whatever child processes write
# there stay apart from the other workers'. pytest-django already gives each worker its own
# test database (``..._gw0``). Settings were read before this file loads, so the worker's
# directory is set both in Django's settings (this process) and in the environment (the
# processes the tests start).
from django.conf import settings as _settings  # noqa: E402

sqlite_template.SHARED_DIR = _settings.DATA_DIR  # the run's: the workers' are inside it
if _xdist_worker := os.environ.get("PYTEST_XDIST_WORKER"):
    _settings.DATA_DIR = _settings.DATA_DIR / f"pytest-{_xdist_worker}"
    _settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
    os.environ["TARSY_DATA_DIR"] = str(_settings.DATA_DIR)


@pytest.fixture(scope="session")
def django_db_setup(
    request, django_test_environment, django_db_blocker, django_db_modify_db_settings
):
    """pytest-django's set-up, except that an SQLite test database is copied from a
    migrated template instead of migrated in every process (tests/sqlite_template.py)."""
    from django.db import connections
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        if connections["default"].vendor == "sqlite":
            settings_dict = connections["default"].settings_dict
            config = sqlite_template.set_up_test_database(settings_dict, setup_databases)
        else:
            config = setup_databases(verbosity=0, interactive=False)
    yield
    with django_db_blocker.unblock():
        try:
            teardown_databases(config, verbosity=0)
        except Exception as exc:  # as pytest-django does: the tests have run
            request.node.warn(pytest.PytestWarning(f"could not drop the test database: {exc!r}"))


TESTS = Path(__file__).resolve().parent
# Tests that start real processes: daphne and qcluster deployments, Chromium, MCP servers
# (over stdio or HTTP), fake model APIs as processes, child interpreters. They take
# seconds each and are marked ``real_process``; ``bin/test --fast`` runs everything else.
# An entry is a directory or module under tests/, or ``module::test`` (every
# parametrization). A full run names any other test that starts a process at its end.
REAL_PROCESS = (
    "e2e/",
    "test_hostile_corpus.py",
    "agents/test_chains.py",
    "agents/test_controller.py",
    "agents/test_steering_delivery.py",
    "agents/test_budget.py",
    "agents/test_kubernetes_mcp_server.py",
    "agents/test_mcp_client.py",
    "agents/test_mcp_hub.py",
    "agents/test_mcp_transports.py",
    "agents/test_tool_results.py",
    "agents/test_toolbox.py",
    "agents/test_with_real_sdks.py",
    "agents/test_skills.py::test_an_agent_loads_a_skill_and_shows_its_required_ones",
    "agents/test_memory_runs.py",
    "agents/test_feedback_reflector.py",
    "agents/test_chat.py::test_the_demo_provider_answers_a_question_with_what_it_found_and_sees_now",
    "compat/test_rest_compat.py::test_active_and_filter_options",
    "compat/test_rest_compat.py::test_cancel",
    "compat/test_rest_compat.py::test_chat_score_and_review_of_a_session_that_ran",
    "compat/test_rest_compat.py::test_every_filter_and_sort_of_the_list_is_taken",
    "compat/test_rest_compat.py::test_filters_select_what_they_say",
    "compat/test_rest_compat.py::test_summary_and_status",
    "compat/test_rest_compat.py::test_the_detail_has_stages_and_executions",
    "compat/test_tarsy_configs.py::test_manage_py_check_passes_a_tarsy_directory_and_names_a_misspelled_key",
    "compat/test_tarsy_configs.py::test_the_environment_wins_over_the_queue_block",
    "compat/test_rest_compat.py::test_the_list_has_tarsys_envelope_and_items",
    "compat/test_rest_compat.py::test_the_timeline_is_a_bare_array_with_empty_keys_omitted",
    "compat/test_rest_compat.py::test_the_trace_lists_every_call_by_stage_and_agent",
    "compat/test_rest_compat.py::test_timeline_metadata_uses_tarsys_keys",
    "compat/test_rest_compat.py::test_usage_summary_as_tarsy_shapes_it",
    "llm/test_google_native.py::test_fake_runs_standalone_from_a_script",
    "sessions/test_trace_storage.py::test_over_twenty_steps_each_call_stores_the_same_bytes_and_reads_back_whole",
    "sessions/test_chat.py::test_a_cancelled_session_takes_questions_too",
    "sessions/test_chat.py::test_a_chat_turn_is_found_by_search",
    "sessions/test_chat.py::test_a_failed_answer_fails_its_message_and_stage_not_the_session",
    "sessions/test_chat.py::test_a_failed_session_takes_questions_and_its_failure_is_in_the_context",
    "sessions/test_chat.py::test_a_question_is_answered_with_a_tool_call_and_a_streamed_answer",
    "sessions/test_chat.py::test_a_worker_whose_answer_was_reaped_stops_at_once_and_writes_nothing_more",
    "sessions/test_chat.py::test_after_a_worker_restart_the_next_answer_reads_the_earlier_turns_from_the_database",
    "sessions/test_chat.py::test_an_answer_over_the_session_timeout_ends_timed_out_and_keeps_what_it_said",
    "sessions/test_chat.py::test_cancel_stops_a_running_answer_within_a_second_and_keeps_what_it_said",
    "sessions/test_chat.py::test_the_answer_is_labelled_as_the_answer_on_load_and_live",
    "sessions/test_chat.py::test_the_answer_re_delivered_to_another_worker_does_nothing_the_second_time",
    "sessions/test_leases.py::test_a_worker_that_lost_its_session_stops_and_writes_nothing",
    "sessions/test_leases.py::test_a_worker_whose_cluster_died_ends_its_session_with_the_reason",
    "sessions/test_mcp_selection.py::test_a_tool_outside_the_selection_is_refused_by_the_toolbox",
    "sessions/test_mcp_selection.py::test_the_agent_gets_only_the_selected_tools",
    "sessions/test_mcp_selection.py::test_the_selection_replaces_the_agents_servers",
    "sessions/test_metrics.py::test_a_session_run_by_the_scripted_provider_is_reported",
    "sessions/test_scoring.py::test_the_demo_judge_scores_a_demo_investigation_end_to_end",
    "sessions/test_scoring.py::test_the_scoring_model_calls_are_on_the_trace_page",
    "sessions/test_setup.py::test_two_set_ups_at_once_on_a_fresh_database_both_succeed",
    "sessions/test_shutdown.py::test_an_answer_queued_again_is_written_again_in_its_stage",
    "sessions/test_shutdown.py::test_at_the_deadline_a_chat_answer_ends_failed_saying_why",
    "sessions/test_shutdown.py::test_at_the_deadline_a_running_session_ends_failed_saying_why",
    "sessions/test_shutdown.py::test_at_the_deadline_with_requeue_a_running_session_goes_back_to_the_queue",
    "sessions/test_shutdown.py::test_the_second_run_comes_after_the_interrupted_one_and_the_counters_count_it",
    "sessions/test_tasks.py::test_running_a_session_twice_does_nothing_the_second_time",
    "sessions/test_tasks.py::test_the_demo_provider_investigates_the_demo_cluster_for_real",
    "test_outside_fields.py::test_the_worker_masks_tool_results_and_provider_errors",
    "worker/test_supervision.py",
    "worker/test_engine.py::test_sessions_handed_to_one_worker_run_at_once",
    "worker/test_engine.py::test_a_full_worker_leaves_the_next_session_waiting_for_room",
    "worker/test_engine.py::test_a_worker_full_of_sessions_still_answers_questions",
    "worker/test_engine.py::test_a_duplicate_task_of_a_running_session_does_nothing",
    "worker/test_engine.py::test_a_cancel_stops_its_session_within_a_second_and_leaves_the_others",
    "worker/test_engine.py::test_a_lost_lease_fences_only_its_session",
    "worker/test_engine.py::test_at_the_deadline_every_session_of_the_worker_ends_failed_saying_why",
    "worker/test_engine.py::test_at_the_deadline_with_requeue_every_session_goes_back_to_the_queue",
    "worker/test_engine.py::test_when_the_cluster_dies_every_session_of_the_worker_ends_failed",
)

# Tests that take over half a second each in-process: the linear-time guards (each masks
# mebibytes several times), the property tests with thousands of examples, the large
# scrapes and searches, and the tests of live sockets (they wait for what the relay sends,
# and for quiet after it). Marked ``slow``; ``bin/test --fast`` leaves them out too.
SLOW = (
    "compat/test_ws_protocol.py",
    "sessions/test_consumers.py",
    "sessions/test_live_path.py",
    "tarsy_site/test_websocket.py::test_a_socket_closes_when_its_users_password_changes",
    "sessions/test_api_search.py",
    "sessions/test_admin.py::test_every_admin_list_and_record_renders",
    "sessions/test_setup.py",
    "test_outside_fields.py",
    "agents/test_chat.py::test_the_context_holds_the_alert_each_stages_result_and_the_earlier_turns",
    "agents/test_masking.py::test_deep_nesting_neither_raises_nor_lets_secrets_through",
    "agents/test_masking.py::test_documents_at_the_yaml_parsing_limit_are_handled",
    "agents/test_masking.py::test_hostile_inputs_are_masked_in_linear_time",
    "agents/test_masking.py::test_a_mebibyte_of_logs_is_masked",
    "agents/test_masking.py::test_a_mebibyte_secret_list_is_masked",
    "agents/test_masking.py::test_large_secret_list_yaml_is_masked_by_the_text_fallback",
    "agents/test_masking.py::test_planted_secrets_never_survive_any_document",
    "agents/test_masking_formats.py::test_the_new_passes_stay_linear_on_hostile_input",
    "agents/test_bounded.py::test_the_yaml_bound_is_never_below_what_libyaml_or_pyyaml_reach",
    "agents/test_bounded.py::test_the_json_depth_is_exact",
    "sessions/test_metrics.py::test_a_scrape_of_20000_calls_and_2000_sessions_takes_well_under_a_second",
    "sessions/test_markdown.py::test_the_linear_text_join_renders_what_the_library_renders",
    "sessions/test_api_input.py::test_json_data_is_measured_as_sent_not_as_re_indented",
    "sessions/test_api.py::test_it_accepts_data_of_exactly_one_mib",
    "compat/test_openapi_fuzz.py::test_no_input_gives_a_server_error",
)


def _listed(entries: tuple[str, ...], where: str, name: str) -> bool:
    return any(
        where.startswith(entry) if "::" not in entry else entry == f"{where}::{name}"
        for entry in entries
    )


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items) -> None:
    shared_e2e_database = bool(os.environ.get("TARSY_E2E_DATABASE_URL"))
    for item in items:
        # schemathesis (4.x under pytest 9) gives every operation's test the same node id,
        # so pytest-xdist, which schedules by node id, ran one of the 21 and dropped the
        # rest. The item's name has the operation: the node id gets it too.
        if not item.nodeid.endswith(f"::{item.name}") and item.parent is not None:
            item._id = item.parent.id.child(item.name)  # pytest 9: a NodeId
        where = item.path.resolve().relative_to(TESTS).as_posix()
        name = getattr(item, "originalname", item.name)
        if _listed(REAL_PROCESS, where, name):
            item.add_marker(pytest.mark.real_process)
        if _listed(SLOW, where, name):
            item.add_marker(pytest.mark.slow)
        # A module-scoped fixture (a deployment, a pool of MCP servers) is built once per
        # worker that runs the module's tests: keep such modules on one worker.
        info = getattr(item, "_fixtureinfo", None)
        if info is not None and any(
            definition.scope == "module" and not definition.argname.startswith("_")
            for definitions in info.name2fixturedefs.values()
            for definition in definitions
        ):
            item.add_marker(pytest.mark.xdist_group(where))
        # Deployments on one shared database empty it first: one at a time.
        if shared_e2e_database and where.startswith("e2e/"):
            item.add_marker(pytest.mark.xdist_group("e2e-shared-database"))
    seen: set[str] = set()
    twice = [item.nodeid for item in items if item.nodeid in seen or seen.add(item.nodeid)]
    if twice:  # pytest-xdist would run one of each and drop the rest, silently
        raise pytest.UsageError(f"tests with the same node id: {sorted(set(twice))}")


class _Scheduling:
    """How pytest-xdist hands out the tests, run after every other collection hook."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items) -> None:
        # The browser tests first: they take a minute or two each, and a parallel run
        # would otherwise end waiting on one started last. They use no test database, so
        # moving them ahead leaves pytest-django's order of the others alone.
        items.sort(key=lambda item: not item.path.resolve().is_relative_to(TESTS / "e2e"))
        if not (os.environ.get("PYTEST_XDIST_WORKER") and config.getvalue("loadgroup")):
            return
        # --dist loadgroup keeps a group on one worker by reading "@group" at the end of
        # its tests' node ids. pytest-xdist 3.8 writes it to ``item._nodeid``, which
        # pytest 9 no longer reads (the id is ``item._id``), so no group held: the
        # scale-out module built its deployment on two workers at once. Written here.
        for item in items:
            groups = sorted(
                str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                for mark in item.iter_markers("xdist_group")
            )
            if groups and "@" not in item.nodeid:
                item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(groups)}")
            if groups and "@" not in item.nodeid:
                raise pytest.UsageError(f"cannot put {item.nodeid} in its xdist group")


def pytest_configure(config) -> None:
    config.pluginmanager.register(_Scheduling(), "tarsy-scheduling")


# Which tests start processes, seen as they run (the audit events of the standard
# library), so that a test missing from REAL_PROCESS is named at the end of the run.
# The OpenAI SDK asks platform.platform() for its headers, which runs ``uname -p`` once
# per process: ask first, so the test that happens to make the first client is not
# taken for one that starts processes.
platform.processor()
_SPAWNS = {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec"}
_running: list[str | None] = [None]
_spawned: set[str] = set()


def _audit(event: str, _args) -> None:
    if event in _SPAWNS and _running[0] is not None:
        _spawned.add(_running[0])


sys.addaudithook(_audit)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running[0] = item.nodeid
    try:
        return (yield)
    finally:
        _running[0] = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if (
        call.when == "teardown"
        and item.nodeid in _spawned
        and item.get_closest_marker("real_process") is None
    ):
        report.user_properties.append(("unmarked_real_process", True))
    return report


_unmarked: list[str] = []


def pytest_runtest_logreport(report) -> None:  # in the main process, xdist or not
    if any(name == "unmarked_real_process" for name, _ in report.user_properties):
        _unmarked.append(report.nodeid)


def pytest_terminal_summary(terminalreporter) -> None:
    if _unmarked:
        terminalreporter.section("tests that start processes but are not real_process")
        for nodeid in _unmarked:
            terminalreporter.line(nodeid)
        terminalreporter.line("add them to REAL_PROCESS in tests/conftest.py (bin/test --fast)")
