"""One error root in arc_ref (issue 29 item 2): every error class of arc_ref is an ArcError that names itself
(``code``) and says how a front end answers it (``exit_status_hint``, ``http_status_hint``), as h11's errors
carry their status hint; the front ends map by those, never by a class name."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import arc_ref
from arc_ref.errors import ArcError, CapacityExceeded, ConfigError
from arc_ref.frontends import exit_status
from arc_ref.persist import StoreCorrupt, StoreError, StoreLocked

ROOT = Path(__file__).resolve().parent.parent


def _arc_ref_modules() -> list[str]:
    return [info.name for info in pkgutil.walk_packages(arc_ref.__path__, "arc_ref.")]


def _error_classes() -> list[type[BaseException]]:
    """Every exception class defined in a module of arc_ref (the optional front ends skip when absent); warning
    categories (arc_ref.session.CountsDifferWarning) are not errors: nothing raises or maps them."""
    found = []
    for name in _arc_ref_modules():
        try:
            module = importlib.import_module(name)
        except ImportError:  # an extra that is not installed (mcp, proxy): its module is not checked here
            continue
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, BaseException) and not issubclass(value, Warning)
                    and value.__module__ == name):
                found.append(value)
    return found


def test_every_error_class_of_arc_ref_has_the_one_root() -> None:
    classes = _error_classes()
    names = {cls.__name__ for cls in classes}
    assert {"TraceError", "StoreError", "SnapshotRefused", "SessionError", "TemplateRefused", "CommandFailed",
            "LineTooLong", "OutputFailed"} <= names
    outside = sorted(cls.__qualname__ for cls in classes if not issubclass(cls, ArcError))
    assert outside == [], f"errors of arc_ref outside the one root ArcError: {outside}"


def test_every_error_carries_a_code_and_its_status_hints() -> None:
    table = {status.code for status in exit_status.EXIT_STATUSES}
    for cls in _error_classes():
        assert isinstance(cls.code, str) and re.fullmatch(r"[a-z_]+", cls.code), cls  # type: ignore[attr-defined]
        assert cls.exit_status_hint in table, cls  # type: ignore[attr-defined]
        assert 400 <= cls.http_status_hint <= 599, cls  # type: ignore[attr-defined]


def test_codes_name_their_class() -> None:
    """A class states its own code; only TemplateRefused shares one on purpose (a conversation its template
    refuses is refused as an event: the proxy's answer before the codes were written down)."""
    own = {}
    for cls in _error_classes():
        if "code" in vars(cls) and isinstance(vars(cls)["code"], str):
            own.setdefault(vars(cls)["code"], []).append(cls.__name__)
    shared = {code: sorted(names) for code, names in own.items() if len(names) > 1}
    assert shared == {"invalid_event": ["InvalidEvent", "TemplateRefused"]}


def test_a_command_maps_an_error_by_its_hint_not_its_class() -> None:
    assert exit_status.status_of(StoreLocked("held")) is exit_status.USAGE
    assert exit_status.status_of(CapacityExceeded("full")) is exit_status.USAGE
    assert exit_status.status_of(exit_status.CommandFailed(exit_status.IO, "closed")) is exit_status.IO
    assert exit_status.status_of(LookupError("no page 9")) is exit_status.INSPECT_FAILED
    assert exit_status.status_of(RuntimeError("a bug")) is exit_status.INTERNAL

    class NewKind(ArcError):  # an error a front end has never heard of: its hint decides
        code = "new_kind"
        exit_status_hint = exit_status.IO.code

    assert exit_status.status_of(NewKind("x")) is exit_status.IO


def test_the_proxy_answers_an_error_by_its_code() -> None:
    """The proxy's refusal code is the error's own code: no table of class names."""
    pytest.importorskip("httpx")
    pytest.importorskip("starlette")
    from arc_ref.frontends import proxy

    source = (ROOT / "arc_ref" / "frontends" / "proxy.py").read_text(encoding="utf-8")
    assert "__name__" not in source and "_code(" not in source
    refused = proxy.Refused(CapacityExceeded.code, "full")
    assert refused.code == "capacity" and refused.body()["error"]["code"] == "capacity"
    assert refused.http_status_hint == 400
    upstream = proxy.UpstreamError(503, b"{}", "application/json")
    assert upstream.http_status_hint == 503 and upstream.code == "upstream" and isinstance(upstream, ArcError)


def test_store_errors_are_arc_errors_with_their_own_codes() -> None:
    assert issubclass(StoreError, ArcError) and issubclass(StoreCorrupt, StoreError)
    assert (StoreError.code, StoreCorrupt.code, StoreLocked.code) == ("store", "store_corrupt", "store_locked")
    assert ConfigError.code == "configuration"
