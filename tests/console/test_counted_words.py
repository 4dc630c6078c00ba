"""Counts read as English on the session memory panel: "1 entry", not "1 entries"."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import make_session

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "messages, words", [(1, "the current 1 entry exactly"), (2, "the current 2 entries exactly")]
)
def test_the_uncovered_transcript_counts_its_entries_in_english(viewer_client, messages, words):
    session = make_session(f"agent:main:webchat:count-{messages}", messages=messages)
    page = viewer_client.get(reverse("receipts:session_memory") + f"?key={session.session_key}")
    assert words in page.content.decode()
