from __future__ import annotations

import pytest

from sessions_app import services
from sessions_app.keys import agent_id_for_session_key, canonicalize_session_key

pytestmark = pytest.mark.django_db


def test_keys_are_canonicalised_on_write_and_lookup():
    created = services.create_session("  agent:Ops:discord:group:1  ")
    assert created.session_key == "agent:ops:discord:group:1"
    assert created.agent_id == "ops"
    assert services.get_session("agent:OPS:discord:group:1").pk == created.pk
    with pytest.raises(ValueError, match="already exists"):
        services.create_session("agent:ops:discord:group:1")


@pytest.mark.parametrize("bad", ["", "   ", None, "agent:main:\x00x"])
def test_malformed_keys_are_refused(bad):
    with pytest.raises(ValueError):
        services.create_session(bad)


def test_append_to_missing_session_and_bad_role_write_nothing():
    with pytest.raises(KeyError, match="Session not found"):
        services.append_message("agent:main:none", role="user", content="x")
    session = services.create_session("agent:main:webchat:a")
    with pytest.raises(ValueError, match="role"):
        services.append_message(session.session_key, role="robot", content="x")
    assert services.get_transcript(session.session_id) == []


def test_transcript_order_and_reasoning_only_on_assistant():
    session = services.create_session("webchat:default")
    services.append_message("webchat:default", role="user", content="q", reasoning_content="r")
    services.append_message("webchat:default", role="assistant", content={"b": 1, "a": 2})
    entries = services.get_transcript(session.session_id)
    assert [e.role for e in entries] == ["user", "assistant"]
    assert entries[0].reasoning_content is None
    assert entries[1].content == '{"a": 2, "b": 1}'
    assert entries[0].id < entries[1].id


def test_agent_of_key():
    assert agent_id_for_session_key(canonicalize_session_key("agent:My Bot!:x")) == "my-bot"
    assert agent_id_for_session_key("subagent:agent:ops:subagent:r1") == "ops"
    assert agent_id_for_session_key("cron:nightly") is None
