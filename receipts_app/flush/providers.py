"""Flush providers chosen from Django settings at call time.

``OPENSQUILLA_FLUSH_PROVIDER`` is ``"none"`` (the default: no provider, so every flush ends
``ok_archive_only`` exactly like an upstream gateway without a flush model) or ``"openai"``
(any OpenAI-compatible ``/chat/completions`` endpoint). Settings are imported inside
``select_flush_provider`` so the rest of the package never needs Django.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from .correlation import current_provider_request_correlation
from .types import ProviderCompletionError

__all__ = [
    "CompletionResponse",
    "OpenAICompatibleProvider",
    "ProviderCompletionError",
    "correlation_disabled",
    "select_flush_provider",
]


@dataclass(frozen=True)
class CompletionResponse:
    content: str
    model: str = ""
    usage: dict[str, Any] = field(default_factory=dict)


def _wire_message(message: Any) -> dict[str, str]:
    if isinstance(message, Mapping):
        return {"role": str(message["role"]), "content": str(message.get("content") or "")}
    return {"role": str(message.role), "content": str(message.content or "")}


def _content_text(content: Any) -> str | None:
    """Message content as text; some servers send a list of ``{"type": "text"}`` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, Mapping) and part.get("type") in {None, "text"}
        )
    return None


class OpenAICompatibleProvider:
    """``await complete(messages=..., max_tokens=...)`` over an OpenAI-style HTTP API.

    Every failure (HTTP status, timeout, connection error, unreadable body) raises
    ``ProviderCompletionError`` with a short ``code``, which the flush files as
    ``provider_failed_archived``.

    With ``send_correlation`` the flush's provider request correlation goes out as the
    ``X-OpenSquilla-*`` headers upstream uses (headers, not the body's ``metadata``: OpenAI
    refuses ``metadata`` unless ``store`` is on, and other servers may reject unknown body
    fields, while every server ignores a header it does not know).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
        send_correlation: bool = True,
    ) -> None:
        if not base_url:
            raise ValueError("base_url is required")
        if not model:
            raise ValueError("model is required")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key
        self._timeout = timeout
        self._transport = transport
        self._send_correlation = send_correlation

    def __repr__(self) -> str:
        # Never let the API key reach logs through a repr.
        return f"OpenAICompatibleProvider(base_url={self.base_url!r}, model={self.model!r})"

    async def complete(self, messages: Sequence[Any], max_tokens: int) -> CompletionResponse:
        headers = {"Content-Type": "application/json"}
        # Local servers (llama.cpp, vLLM) often run without a key; send no header then.
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        correlation = current_provider_request_correlation()
        if self._send_correlation and correlation is not None:
            headers.update(correlation.headers())
        body = {
            "model": self.model,
            "messages": [_wire_message(m) for m in messages],
            "max_tokens": int(max_tokens),
        }
        try:
            # A client per call: the flush is rare and may run on a fresh loop per task.
            async with httpx.AsyncClient(
                timeout=self._timeout, transport=self._transport
            ) as client:
                response = await client.post(
                    f"{self.base_url}/chat/completions", json=body, headers=headers
                )
                response.raise_for_status()
                payload = response.json()
        # The messages name the host and status only: bodies may echo the prompt.
        except httpx.HTTPStatusError as exc:
            status = exc.response.status_code
            raise ProviderCompletionError(
                f"HTTP {status} from {self.base_url}", code=f"http_{status}"
            ) from exc
        except httpx.TimeoutException as exc:
            raise ProviderCompletionError(f"request timed out: {exc}", code="timeout") from exc
        except httpx.HTTPError as exc:
            raise ProviderCompletionError(f"transport error: {exc}", code="transport") from exc
        except ValueError as exc:
            raise ProviderCompletionError("response is not JSON", code="invalid_response") from exc

        try:
            choice = payload["choices"][0]
            text = _content_text(choice["message"]["content"])
        except (KeyError, IndexError, TypeError) as exc:
            raise ProviderCompletionError(
                "response has no choices[0].message.content", code="invalid_response"
            ) from exc
        if text is None:
            raise ProviderCompletionError("message content is not text", code="invalid_response")
        usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        return CompletionResponse(content=text, model=str(payload.get("model") or ""), usage=usage)


def select_flush_provider(agent_id: str) -> OpenAICompatibleProvider | None:
    """The ``provider_selector`` for ``SessionFlushService``, read from settings each call.

    Reading at call time lets ``override_settings`` and a settings reload take effect
    without rebuilding the service. Raises ``ImproperlyConfigured`` for an unknown kind
    or an ``openai`` provider without a base URL or model.
    """
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    kind = str(getattr(settings, "OPENSQUILLA_FLUSH_PROVIDER", "none") or "none").strip().lower()
    if kind == "none":
        return None
    if kind != "openai":
        raise ImproperlyConfigured(
            f"OPENSQUILLA_FLUSH_PROVIDER must be 'none' or 'openai', not {kind!r}"
        )
    base_url = str(getattr(settings, "OPENSQUILLA_FLUSH_BASE_URL", "") or "")
    model = str(getattr(settings, "OPENSQUILLA_FLUSH_MODEL", "") or "")
    if not base_url or not model:
        raise ImproperlyConfigured(
            "OPENSQUILLA_FLUSH_BASE_URL and OPENSQUILLA_FLUSH_MODEL are required for 'openai'"
        )
    return OpenAICompatibleProvider(
        base_url=base_url,
        model=model,
        api_key=str(getattr(settings, "OPENSQUILLA_FLUSH_API_KEY", "") or ""),
        timeout=float(getattr(settings, "OPENSQUILLA_FLUSH_TIMEOUT", 120.0) or 120.0),
        send_correlation=not correlation_disabled(),
    )


def correlation_disabled() -> bool:
    """Upstream's privacy switch: no request correlation is built or sent when it is on.

    Read at call time (``OPENSQUILLA_PRIVACY_DISABLE_NETWORK_OBSERVABILITY``), so flipping
    it takes effect on the next flush, as upstream re-checks it on every repair run.
    """
    from django.conf import settings

    return bool(getattr(settings, "OPENSQUILLA_PRIVACY_DISABLE_NETWORK_OBSERVABILITY", False))
