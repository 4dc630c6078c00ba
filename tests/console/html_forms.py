"""Read the forms of a console page the way a browser would submit them.

Tests post exactly what the page offers (hidden inputs included, and inputs that join a form
from elsewhere with ``form="…"``) instead of re-typing the parameters, so a mismatch between
what the page shows and what it sends is caught.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Form:
    attrs: dict[str, str]
    fields: list[tuple[str, str]] = field(default_factory=list)

    def data(self, **overrides: str) -> dict[str, list[str]]:
        """The fields as a test-client payload; ``overrides`` replace (or add) a value."""
        out: dict[str, list[str]] = {}
        for name, value in self.fields:
            out.setdefault(name, []).append(value)
        for name, value in overrides.items():
            out[name] = [value]
        return out


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[Form] = []
        self.by_id: dict[str, Form] = {}
        self._open: Form | None = None
        self._detached: list[tuple[str, str, str]] = []
        self._textarea: tuple[Form | None, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self._open = Form(a)
            self.forms.append(self._open)
            if a.get("id"):
                self.by_id[a["id"]] = self._open
        elif tag in ("input", "select", "textarea") and a.get("name"):
            if a.get("type") in ("checkbox", "radio") and "checked" not in a:
                return
            owner = a.get("form")
            value = a.get("value", "")
            if owner:
                self._detached.append((owner, a["name"], value))
            elif self._open is not None:
                self._open.fields.append((a["name"], value))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._open = None

    def close(self) -> None:
        super().close()
        for owner, name, value in self._detached:
            if owner in self.by_id:
                self.by_id[owner].fields.append((name, value))


def page_forms(html: str) -> list[Form]:
    parser = _Parser()
    parser.feed(html)
    parser.close()
    return parser.forms


def form_by_id(html: str, form_id: str) -> Form:
    return next(f for f in page_forms(html) if f.attrs.get("id") == form_id)


def forms_posting_to(html: str, action: str) -> list[Form]:
    return [f for f in page_forms(html) if f.attrs.get("action") == action]
