"""The OpenAI-compatible flush provider against a real local HTTP server.

The stub is a ``ThreadingHTTPServer`` on 127.0.0.1 that answers from a script, so these
tests exercise real sockets, real JSON and real timeouts, but never leave the machine.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from receipts_app import flush_runtime, repair
from receipts_app.flush import FlushReceipt, Message, SessionFlushService
from receipts_app.flush.correlation import ProviderRequestCorrelation
from receipts_app.flush.memory_save import MemorySaveHandler, MemorySaveToolRegistry
from receipts_app.flush.providers import (
    OpenAICompatibleProvider,
    ProviderCompletionError,
    select_flush_provider,
)

KEY = "agent:main:webchat:s1"
CORRELATION_HEADERS = (
    "x-opensquilla-session-id",
    "x-opensquilla-turn-id",
    "x-opensquilla-execution-id",
    "x-opensquilla-call-kind",
)


@dataclass
class Reply:
    status: int = 200
    body: str = ""
    delay: float = 0.0


@dataclass
class StubServer:
    base_url: str
    replies: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def chat_reply(self, content: str) -> None:
        body = {
            "model": "stub-1",
            "choices": [{"message": {"role": "assistant", "content": content}}],
        }
        self.replies.append(Reply(body=json.dumps(body)))


@pytest.fixture
def stub() -> Iterator[StubServer]:
    state = StubServer(base_url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            state.requests.append(
                {
                    "path": self.path,
                    "authorization": self.headers.get("Authorization"),
                    "headers": {name.lower(): value for name, value in self.headers.items()},
                    "json": json.loads(self.rfile.read(length)),
                }
            )
            reply = state.replies.pop(0) if state.replies else Reply(status=500)
            time.sleep(reply.delay)
            payload = reply.body.encode("utf-8")
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (the timeout test)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.block_on_close = False
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def _service(workspace: Path, provider: Any, rows: list[dict[str, Any]]) -> SessionFlushService:
    async def writer(_receipt: FlushReceipt, **row: Any) -> None:
        rows.append(row)

    return SessionFlushService(
        provider_selector=lambda _agent: provider,
        tool_registry=MemorySaveToolRegistry(),
        tool_handler=MemorySaveHandler(lambda _agent: workspace),
        receipt_writer=writer,
        archive_workspace_resolver=lambda _agent: workspace,
    )


def _provider(stub: StubServer, **kwargs: Any) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(
        base_url=stub.base_url, model="flush-model", api_key="sk-test-key", **kwargs
    )


TRANSCRIPT = [
    Message(role="user", content="I moved to Lyon last week."),
    Message(role="assistant", content="Noted, welcome to Lyon."),
]


async def test_success_writes_memory_and_a_flush_row(stub: StubServer, tmp_path: Path) -> None:
    stub.chat_reply(
        json.dumps(
            {
                "slug": "moving",
                "candidates": [
                    {
                        "kind": "fact",
                        "render_text": "The user lives in Lyon",
                        "source_message": 1,
                        "source_date": "2026-05-29",
                        "confidence": 0.9,
                    }
                ],
            }
        )
    )
    rows: list[dict[str, Any]] = []

    receipt = await _service(tmp_path, _provider(stub), rows).execute(TRANSCRIPT, KEY)

    assert receipt.result_status == "ok_candidates_written"
    assert [(r["scope"], r["status"]) for r in rows] == [
        ("preimage", "preimage_saved"),
        ("flush", "flush_appended"),
    ]
    note = (tmp_path / receipt.flushed_paths[0]).read_text(encoding="utf-8")
    assert "- The user lives in Lyon" in note
    request = stub.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["authorization"] == "Bearer sk-test-key"
    assert request["json"]["model"] == "flush-model"
    assert request["json"]["max_tokens"] == 3072
    assert "I moved to Lyon last week." in request["json"]["messages"][0]["content"]


async def test_garbage_json_is_repaired_once_then_archived(
    stub: StubServer, tmp_path: Path
) -> None:
    stub.chat_reply('{"candidates": [ {"kind": ')
    stub.chat_reply('{"candidates": nope')
    rows: list[dict[str, Any]] = []

    receipt = await _service(tmp_path, _provider(stub), rows).execute(TRANSCRIPT, KEY)

    assert receipt.result_status == "parse_failed_archived"
    assert len(stub.requests) == 2
    repair = stub.requests[1]["json"]["messages"][0]["content"]
    assert repair.startswith("Repair the failed OpenSquilla session-flush extraction response")
    assert '{"candidates": [ {"kind": ' in repair
    assert rows[-1]["reason"] == "parse_failed_archived"


async def test_http_500_is_provider_failed(stub: StubServer, tmp_path: Path) -> None:
    stub.replies.append(Reply(status=500, body='{"error": "boom"}'))
    rows: list[dict[str, Any]] = []

    receipt = await _service(tmp_path, _provider(stub), rows).execute(TRANSCRIPT, KEY)

    assert receipt.result_status == "provider_failed_archived"
    assert (receipt.raw_reason, receipt.raw_error_code) == ("llm_error", "http_500")
    assert len(stub.requests) == 1
    assert [(r["scope"], r["reason"]) for r in rows] == [
        ("preimage", "preimage"),
        ("repair", "provider_failed_archived"),
    ]


async def test_slow_server_times_out_as_provider_failed(stub: StubServer, tmp_path: Path) -> None:
    stub.replies.append(Reply(body="{}", delay=1.5))
    rows: list[dict[str, Any]] = []
    service = _service(tmp_path, _provider(stub), rows)

    started = time.monotonic()
    receipt = await service.execute(TRANSCRIPT, KEY, timeout=0.3)

    assert time.monotonic() - started < 1.4
    assert (receipt.raw_reason, receipt.result_status) == ("timeout", "provider_failed_archived")
    assert rows[-1]["reason"] == "provider_failed_archived"


async def test_http_client_timeout_is_a_provider_completion_error(stub: StubServer) -> None:
    stub.replies.append(Reply(body="{}", delay=1.0))

    with pytest.raises(ProviderCompletionError) as caught:
        await _provider(stub, timeout=0.2).complete(messages=TRANSCRIPT, max_tokens=10)

    assert caught.value.code == "timeout"


@pytest.mark.parametrize(
    "body",
    ["not json at all", "{}", '{"choices": []}', '{"choices": [{"message": {"content": 5}}]}'],
)
async def test_malformed_bodies_are_provider_errors(stub: StubServer, body: str) -> None:
    stub.replies.append(Reply(body=body))

    with pytest.raises(ProviderCompletionError) as caught:
        await _provider(stub).complete(messages=TRANSCRIPT, max_tokens=10)

    assert caught.value.code == "invalid_response"


async def test_content_parts_are_joined(stub: StubServer) -> None:
    parts = [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}]
    stub.replies.append(Reply(body=json.dumps({"choices": [{"message": {"content": parts}}]})))

    response = await _provider(stub).complete(
        messages=[{"role": "user", "content": "x"}], max_tokens=5
    )

    assert response.content == "hello"


async def test_connection_refused_is_a_provider_error() -> None:
    provider = OpenAICompatibleProvider(base_url="http://127.0.0.1:9/v1", model="m")

    with pytest.raises(ProviderCompletionError) as caught:
        await provider.complete(messages=TRANSCRIPT, max_tokens=5)

    assert caught.value.code == "transport"


def test_repr_hides_the_api_key() -> None:
    provider = OpenAICompatibleProvider(base_url="http://x/v1", model="m", api_key="sk-secret")

    assert "sk-secret" not in repr(provider)


def test_settings_default_selects_no_provider(settings: Any) -> None:
    settings.OPENSQUILLA_FLUSH_PROVIDER = "none"

    assert select_flush_provider("main") is None


def test_settings_openai_builds_the_client(settings: Any) -> None:
    settings.OPENSQUILLA_FLUSH_PROVIDER = "openai"
    settings.OPENSQUILLA_FLUSH_BASE_URL = "http://127.0.0.1:1/v1/"
    settings.OPENSQUILLA_FLUSH_MODEL = "m-1"
    settings.OPENSQUILLA_FLUSH_API_KEY = "k"

    provider = select_flush_provider("main")

    assert isinstance(provider, OpenAICompatibleProvider)
    assert (provider.base_url, provider.model) == ("http://127.0.0.1:1/v1", "m-1")


@pytest.mark.parametrize(
    "overrides",
    [
        {"OPENSQUILLA_FLUSH_PROVIDER": "anthropic"},
        {"OPENSQUILLA_FLUSH_PROVIDER": "openai", "OPENSQUILLA_FLUSH_BASE_URL": ""},
    ],
)
def test_settings_misconfiguration_is_loud(settings: Any, overrides: dict[str, str]) -> None:
    settings.OPENSQUILLA_FLUSH_MODEL = "m-1"
    settings.OPENSQUILLA_FLUSH_BASE_URL = "http://127.0.0.1:1/v1"
    for name, value in overrides.items():
        setattr(settings, name, value)

    with pytest.raises(ImproperlyConfigured):
        select_flush_provider("main")


async def test_settings_selector_without_provider_archives_only(
    settings: Any, tmp_path: Path
) -> None:
    settings.OPENSQUILLA_FLUSH_PROVIDER = "none"
    rows: list[dict[str, Any]] = []
    service = _service(tmp_path, None, rows)
    service._provider_selector = select_flush_provider

    receipt = await service.execute(TRANSCRIPT, KEY)

    assert (receipt.raw_reason, receipt.result_status) == ("no_provider", "ok_archive_only")
    assert rows[-1]["status"] == "repair_pending"


# --- provider request correlation ----------------------------------------------------------


def correlation_of(request: dict[str, Any]) -> dict[str, str]:
    return {
        name: request["headers"][name] for name in CORRELATION_HEADERS if name in request["headers"]
    }


CANDIDATE_REPLY = json.dumps(
    {
        "slug": "moving",
        "candidates": [
            {
                "kind": "fact",
                "render_text": "The user lives in Lyon",
                "source_message": 1,
                "source_date": "2026-05-29",
                "confidence": 0.9,
            }
        ],
    }
)


async def test_every_request_of_a_flush_carries_its_correlation(
    stub: StubServer, tmp_path: Path
) -> None:
    # A garbage answer makes the flush call twice (extraction, then repair): both carry it.
    stub.chat_reply('{"candidates": [ {"kind": ')
    stub.chat_reply(CANDIDATE_REPLY)
    correlation = ProviderRequestCorrelation(
        session_id="sess-1", turn_id="maintenance_abc", execution_id="exec-1"
    )

    receipt = await _service(tmp_path, _provider(stub), []).execute(
        TRANSCRIPT, KEY, turn_id="maintenance_abc", provider_request_correlation=correlation
    )

    assert receipt.result_status == "ok_candidates_written"
    assert [correlation_of(r) for r in stub.requests] == 2 * [
        {
            "x-opensquilla-session-id": "sess-1",
            "x-opensquilla-turn-id": "maintenance_abc",
            "x-opensquilla-execution-id": "exec-1",
            "x-opensquilla-call-kind": "auxiliary.session_flush",
        }
    ]


async def test_a_flush_without_correlation_sends_no_correlation_headers(
    stub: StubServer, tmp_path: Path
) -> None:
    stub.chat_reply(CANDIDATE_REPLY)

    await _service(tmp_path, _provider(stub), []).execute(TRANSCRIPT, KEY)

    assert correlation_of(stub.requests[0]) == {}


async def test_an_unsafe_id_sends_no_partial_correlation(stub: StubServer, tmp_path: Path) -> None:
    stub.chat_reply(CANDIDATE_REPLY)
    correlation = {"session_id": "sess 1\r\nX-Evil: 1", "turn_id": "t", "execution_id": "e"}

    await _service(tmp_path, _provider(stub), []).execute(
        TRANSCRIPT, KEY, provider_request_correlation=correlation
    )

    assert correlation_of(stub.requests[0]) == {}


@pytest.fixture
def openai_settings(settings: Any, stub: StubServer, tmp_path: Path) -> Path:
    settings.OPENSQUILLA_FLUSH_PROVIDER = "openai"
    settings.OPENSQUILLA_FLUSH_BASE_URL = stub.base_url
    settings.OPENSQUILLA_FLUSH_MODEL = "flush-model"
    settings.OPENSQUILLA_MEMORY_WORKSPACE = str(tmp_path / "mem-{agent}")
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None
    settings.OPENSQUILLA_PRIVACY_DISABLE_NETWORK_OBSERVABILITY = False
    return tmp_path / "mem-main"


@pytest.mark.django_db
def test_a_session_flush_sends_the_live_session_and_its_own_turn(
    stub: StubServer, openai_settings: Path
) -> None:
    from tests.factories import make_session

    session = make_session(messages=2)
    stub.chat_reply(CANDIDATE_REPLY)

    receipt = flush_runtime.flush_session(session.session_key)

    sent = correlation_of(stub.requests[0])
    assert sent["x-opensquilla-session-id"] == session.session_id
    # No turn id was given: the correlation names the flush's own, as its receipts do.
    assert sent["x-opensquilla-turn-id"] == receipt.turn_id == "flush:1-2"
    assert sent["x-opensquilla-call-kind"] == "auxiliary.session_flush"
    assert len(sent["x-opensquilla-execution-id"]) == 32


@pytest.mark.django_db
def test_the_privacy_switch_sends_nothing(
    stub: StubServer, openai_settings: Path, settings: Any
) -> None:
    from tests.factories import make_session

    settings.OPENSQUILLA_PRIVACY_DISABLE_NETWORK_OBSERVABILITY = True
    session = make_session(messages=2)
    stub.chat_reply(CANDIDATE_REPLY)

    flush_runtime.flush_session(session.session_key, turn_id="cmp_1")

    assert correlation_of(stub.requests[0]) == {}


@pytest.mark.django_db
def test_a_repair_sends_the_rows_session_and_a_maintenance_turn(
    stub: StubServer, openai_settings: Path
) -> None:
    from tests.factories import make_receipt

    archive = openai_settings / "memory" / ".raw_fallbacks" / "raw.md"
    archive.parent.mkdir(parents=True)
    archive.write_text("# Raw flush (timeout)\n\nuser: I moved to Lyon.\n", encoding="utf-8")
    row = make_receipt(
        session_key=KEY,
        session_id="sess-repair",
        scope="repair",
        status="repair_pending",
        reason="provider_failed_archived",
        target_path="memory/.raw_fallbacks/raw.md",
    )
    stub.chat_reply(CANDIDATE_REPLY)

    results = repair.run_memory_repair_once("main", limit=5, import_legacy=False)

    assert [r["status"] for r in results] == ["repaired"]
    assert results[0]["receiptId"] == row.receipt_id
    sent = correlation_of(stub.requests[0])
    assert sent["x-opensquilla-session-id"] == "sess-repair"
    assert sent["x-opensquilla-turn-id"].startswith("maintenance_")
    assert sent["x-opensquilla-call-kind"] == "auxiliary.session_flush"
