"""GET /metrics: the proxy's counters in Prometheus's text exposition format (0.0.4), read here by a strict parser
of that format (no client library): the requests by outcome, the upstream calls and their time, ARC's own work,
and who may read them (as /arc/stats: every client's activity)."""

from __future__ import annotations

import contextlib
import json
import math
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.proxy.harness import BASH_TOOL, QWEN3, needs_qwen3, serve_app

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.frontends.proxy import ProxySettings, StartRefused  # noqa: E402
from arc_ref.frontends.proxy_app import build_app  # noqa: E402
from arc_ref.frontends.proxy_metrics import Exposition, Histogram  # noqa: E402
from benchmarks.proxy_cases import FakeUpstream, completion, fake_upstream, task  # noqa: E402

WINDOW = 16384
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# --- a strict reader of the text format, version 0.0.4 ----------------------------------------------------------

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_HELP = re.compile(rf"# HELP ({_NAME}) (.*)")
_TYPE = re.compile(rf"# TYPE ({_NAME}) (counter|gauge|histogram|summary|untyped)")
_SAMPLE = re.compile(rf"({_NAME})(?:\{{(.*)\}})? (\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
_ESCAPE = re.compile(r"\\([\\\"n])")

Labels = tuple[tuple[str, str], ...]


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda found: "\n" if found.group(1) == "n" else found.group(1), text)


def _labels(text: str | None, line: str) -> Labels:
    """A sample's labels, each name once; AssertionError when they are not written as the format says."""
    if text is None:
        return ()
    labels: list[tuple[str, str]] = []
    at = 0
    while at < len(text):
        found = _LABEL.match(text, at)
        assert found is not None, f"bad labels: {line!r}"
        labels.append((found.group(1), _unescape(found.group(2))))
        at = found.end()
        if at < len(text):
            assert text[at] == ",", f"bad labels: {line!r}"
            at += 1
            assert at < len(text), f"a trailing comma: {line!r}"  # (allowed by the format; never written here)
    names = [name for name, _ in labels]
    assert len(names) == len(set(names)), f"a label twice: {line!r}"
    return tuple(labels)


def parse(text: str) -> dict[str, dict[str, Any]]:
    """Every family of an exposition: {name: {"type", "help", "samples": {(sample name, labels): value}}}, after
    checking it strictly: one HELP then one TYPE per family, before its samples, which follow together and are
    named after it (histograms: _bucket, _sum, _count); no sample twice; numbers as the format writes them; a
    counter's name ends in _total and it is never negative; each histogram's buckets rise to +Inf, cumulative,
    with _count that of +Inf and a _sum."""
    assert text.endswith("\n"), "the text ends with a line feed"
    families: dict[str, dict[str, Any]] = {}
    current: str | None = None
    helped: str | None = None
    for line in text[:-1].split("\n"):
        assert line and line == line.strip(), f"an empty or padded line: {line!r}"
        if line.startswith("#"):
            helps, types = _HELP.fullmatch(line), _TYPE.fullmatch(line)
            assert helps or types, f"a comment that is neither HELP nor TYPE: {line!r}"
            if helps:
                name = helps.group(1)
                assert name not in families and name != helped, f"{name} declared twice"
                assert "\\" not in re.sub(r"\\[\\n]", "", helps.group(2)), f"a bad escape in HELP: {line!r}"
                helped, current = name, None
                families[name] = {"help": _unescape(helps.group(2)), "type": None, "samples": {}}
            else:
                assert types is not None
                name = types.group(1)
                assert name == helped and families[name]["type"] is None, f"TYPE {name} not right after its HELP"
                families[name]["type"] = types.group(2)
                current = name
            continue
        sample = _SAMPLE.fullmatch(line)
        assert sample is not None, f"not a sample: {line!r}"
        assert current is not None, f"a sample before its family's TYPE: {line!r}"
        name, labels = sample.group(1), _labels(sample.group(2), line)
        kind = families[current]["type"]
        allowed = {f"{current}_bucket", f"{current}_sum", f"{current}_count"} if kind == "histogram" else {current}
        assert name in allowed, f"{name} is not a sample of the family {current} ({kind}) above it"
        assert re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|[+-]Inf|NaN", sample.group(3)), line
        value = float(sample.group(3))
        samples = families[current]["samples"]
        assert (name, labels) not in samples, f"a sample twice: {line!r}"
        samples[(name, labels)] = value
    for name, family in families.items():
        assert family["type"] is not None, f"{name} has no TYPE"
        if family["type"] == "counter":
            assert name.endswith("_total"), f"the counter {name} does not end in _total"
            assert all(value >= 0 for value in family["samples"].values()), name
        if family["type"] == "histogram":
            _check_histogram(name, family["samples"])
    return families


def _check_histogram(name: str, samples: dict[tuple[str, Labels], float]) -> None:
    series: dict[Labels, list[tuple[float, float]]] = {}
    for (sample, labels), value in samples.items():
        if sample == f"{name}_bucket":
            assert labels and labels[-1][0] == "le", f"{name}_bucket{labels}: le last"
            series.setdefault(labels[:-1], []).append((float(labels[-1][1]), value))
    assert series, f"{name} has no buckets"
    for others, buckets in series.items():
        bounds = [bound for bound, _ in buckets]
        counts = [count for _, count in buckets]
        assert bounds == sorted(bounds) and len(set(bounds)) == len(bounds), f"{name}: bounds not rising"
        assert bounds[-1] == math.inf, f"{name}: no +Inf bucket"
        assert counts == sorted(counts), f"{name}: buckets not cumulative: {counts}"
        assert samples[(f"{name}_count", others)] == counts[-1], f"{name}_count is not the +Inf bucket"
        assert (f"{name}_sum", others) in samples, f"{name} has no _sum"


def value(families: dict[str, dict[str, Any]], name: str, **labels: str) -> float:
    """A sample's value (0 when the family has no such sample yet)."""
    for family in families.values():
        for (sample, sample_labels), found in family["samples"].items():
            if sample == name and dict(sample_labels) == labels:
                return float(found)
    assert any(name == family or name.startswith(family + "_") for family in families), f"no family for {name}"
    return 0.0


def total(families: dict[str, dict[str, Any]], family: str, **labels: str) -> float:
    """The sum of a family's samples whose labels include ``labels``."""
    return sum(found for (_, sample_labels), found in families[family]["samples"].items()
               if labels.items() <= dict(sample_labels).items())


def test_the_reader_refuses_what_the_format_does_not_allow() -> None:
    """The parser these tests rely on is strict: each case below is refused (and the right text passes)."""
    good = ('# HELP a_total A "quoted" \\\\ and \\n.\n# TYPE a_total counter\na_total{k="x\\"y\\\\z\\n"} 1\n'
            "# HELP h H.\n# TYPE h histogram\n"
            'h_bucket{le="1.0"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3.5\nh_count 2\n')
    families = parse(good)
    assert value(families, "a_total", k='x"y\\z\n') == 1 and families["a_total"]["help"] == 'A "quoted" \\ and \n.'
    bad = [
        good.rstrip("\n"),  # no final line feed
        good.replace("# TYPE a_total counter\n", ""),  # no TYPE
        good.replace('a_total{k="x\\"y\\\\z\\n"} 1', 'a_total{k="x"y"} 1'),  # an unescaped quote
        good.replace('a_total{k="x\\"y\\\\z\\n"} 1', 'a_total{k="x\\ty"} 1'),  # an escape the format lacks
        good.replace("a_total{", "b_total{"),  # a sample of no family declared above it
        good.replace("h_bucket{le=\"+Inf\"} 2", "h_bucket{le=\"+Inf\"} 0"),  # not cumulative
        good.replace("h_count 2", "h_count 3"),  # _count not the +Inf bucket
        good.replace('h_bucket{le="+Inf"} 2\n', ""),  # no +Inf
        good.replace("# HELP a_total", "# HELP a").replace("TYPE a_total", "TYPE a").replace("a_total{", "a{"),
        good + "a_total 2\n",  # a family's samples apart
        good.replace(" 3.5", " three"),
    ]
    for number, text in enumerate(bad):
        with pytest.raises(AssertionError):
            parse(text)
            pytest.fail(f"case {number} was read: {text!r}")


def test_label_values_and_help_are_escaped_and_histograms_are_cumulative() -> None:
    out = Exposition()
    out.family("arc_x_total", "counter", "back\\slash and\nline")
    out.sample("arc_x_total", 3, (("kind", 'a"b\\c\nd'),))
    histogram = Histogram((0.1, 1.0))
    for seconds in (0.05, 0.1, 0.5, 2.0, 3.0):
        histogram.observe(seconds)
    out.histogram("arc_y_seconds", "y", histogram)
    text = out.text()
    assert '# HELP arc_x_total back\\\\slash and\\nline\n' in text
    assert 'arc_x_total{kind="a\\"b\\\\c\\nd"} 3\n' in text
    families = parse(text)
    assert value(families, "arc_x_total", kind='a"b\\c\nd') == 3
    assert [value(families, "arc_y_seconds_bucket", le=le) for le in ("0.1", "1.0", "+Inf")] == [2, 3, 5]
    assert value(families, "arc_y_seconds_count") == 5 and value(families, "arc_y_seconds_sum") == pytest.approx(5.65)


# --- against a proxy -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def proxy(upstream: FakeUpstream, window: int = WINDOW, **settings: Any) -> Iterator[str]:
    """`arc-ref proxy` in front of ``upstream``; its root URL (no /v1)."""
    configured = ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=window, **settings)
    with serve_app(build_app(configured)) as base_url:
        yield base_url.removesuffix("/v1")


def post(root: str, messages: list[dict[str, Any]], headers: dict[str, str] | None = None,
         **extra: Any) -> httpx.Response:
    return httpx.post(f"{root}/v1/chat/completions", json={"model": "fake", "messages": messages, **extra},
                      headers=headers, timeout=120)


def scrape(root: str, headers: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    response = httpx.get(f"{root}/metrics", headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == CONTENT_TYPE
    return parse(response.text)


@needs_qwen3
def test_calls_that_got_no_completion_are_told_from_the_servers_own_502() -> None:
    """arc_upstream_calls_total counts the server's own 502 and a call it never answered alike (status 502, as GET
    /arc/rounds records both); arc_upstream_failures_total names the calls that got no answer or no completion, by
    error type, and not the server's answers (review h54 F9)."""
    with fake_upstream() as upstream, proxy(upstream) as root:
        before = scrape(root)
        upstream.reply = lambda body: (502, b'{"error": {"message": "bad gateway"}}')
        assert post(root, task(1)).status_code == 502
        upstream.reply = lambda body: "cut"
        assert post(root, task(2)).status_code == 502
        upstream.reply = lambda body: (200, b'{"not": "a completion"}')
        assert post(root, task(3)).status_code == 502
        upstream.reply = lambda body: (200, json.dumps(completion("fine")).encode())
        assert post(root, task(4)).status_code == 200
        after = scrape(root)
    assert before["arc_upstream_failures_total"]["samples"] == {}
    assert {dict(labels)["error"]: found for (_, labels), found in after["arc_upstream_failures_total"]["samples"].items()
            } == {"upstream_unreachable": 1, "upstream_malformed": 1}
    assert after["arc_upstream_failures_total"]["type"] == "counter"
    assert {dict(labels)["status"]: found for (_, labels), found in after["arc_upstream_calls_total"]["samples"].items()
            } == {"502": 3, "200": 1}


@needs_qwen3
def test_requests_are_counted_by_outcome_and_timed_with_their_upstream_calls() -> None:
    """A 200, a refusal (400, the upstream not asked), the upstream's own error passed back (500), the upstream
    gone (502) and a stream: each counted once under its status and kind, the request histogram's _count the
    requests, the upstream histogram's the calls; the fake upstream says 10 prompt tokens and 1 completion token
    for each completion (so each count differs from the proxy's)."""
    with fake_upstream() as upstream, proxy(upstream) as root:
        before = scrape(root)
        assert post(root, task(1)).status_code == 200
        assert post(root, task(2), n=3).status_code == 400
        upstream.reply = lambda body: (500, b'{"error": {"message": "boom"}}')
        assert post(root, task(3)).status_code == 500
        upstream.reply = lambda body: "cut"
        assert post(root, task(4)).status_code == 502
        upstream.reply = lambda body: (200, json.dumps(completion("streamed")).encode())
        assert post(root, task(5), stream=True).status_code == 200
        after = scrape(root)
        stats = httpx.get(f"{root}/arc/stats", timeout=60).json()
    assert total(before, "arc_requests_total") == 0 and value(before, "arc_request_duration_seconds_count") == 0
    expected = {("200", "ok", "false"): 1, ("400", "unsupported", "false"): 1, ("500", "upstream", "false"): 1,
                ("502", "upstream_unreachable", "false"): 1, ("200", "ok", "true"): 1}
    assert {tuple(dict(labels)[name] for name in ("status", "kind", "stream")): found
            for (_, labels), found in after["arc_requests_total"]["samples"].items()} == expected
    assert value(after, "arc_request_duration_seconds_count") == 5
    assert value(after, "arc_request_duration_seconds_sum") > 0
    assert {dict(labels)["status"]: found for (_, labels), found in after["arc_upstream_calls_total"]["samples"].items()
            } == {"200": 2, "500": 1, "502": 1}  # the refusal asked nothing
    assert total(after, "arc_upstream_calls_total", hidden="true") == 0
    assert value(after, "arc_upstream_duration_seconds_count") == 4
    assert value(after, "arc_upstream_prompt_tokens_total") == 20
    assert value(after, "arc_upstream_completion_tokens_total") == 2
    assert value(after, "arc_view_tokens_sent_total") > 0 and value(after, "arc_view_budget_fill_ratio_count") == 4
    assert value(after, "arc_counts_differing_total") == stats["counts_differing"] == 2
    assert value(after, "arc_upstream_rounds_per_request_count") == 2  # the two answered requests, one round each
    assert value(after, "arc_conversations_created_total", how="new") == 4  # the refused one made none
    assert value(after, "arc_conversations_in_memory") == stats["conversations_in_memory"] == 4
    assert value(after, "arc_upstream_calls_logged") == stats["upstream_calls_logged"] == 4


@needs_qwen3
def test_a_stream_answered_after_its_keepalive_is_counted_when_it_ends() -> None:
    """A stream whose status went out with its first keepalive: counted under 200, ok or the error's kind."""
    with fake_upstream() as upstream, proxy(upstream, keepalive_s=0.2) as root:
        upstream.delay_s = 0.6
        with httpx.stream("POST", f"{root}/v1/chat/completions", timeout=60,
                          json={"model": "fake", "messages": task(1), "stream": True}) as response:
            assert response.status_code == 200 and [line for line in response.iter_lines() if line]
        upstream.reply = lambda body: "cut"
        with httpx.stream("POST", f"{root}/v1/chat/completions", timeout=60,
                          json={"model": "fake", "messages": task(2), "stream": True}) as response:
            assert response.status_code == 200 and [line for line in response.iter_lines() if line]
        families = scrape(root)
    assert total(families, "arc_requests_total", kind="ok", stream="true") == 1
    assert total(families, "arc_requests_total", kind="upstream_unreachable", stream="true") == 1
    assert value(families, "arc_request_duration_seconds_count") == 2


@needs_qwen3
def test_a_plain_request_whose_client_left_before_its_answer_is_counted_client_gone() -> None:
    """A request (no stream) whose client left while the upstream answered (an SDK's timeout: its retry comes
    next): its answer reaches nobody, so it is counted client_gone, not ok (review h51: it was counted 200 ok, and
    with the retry's own 200 one turn of the agent counted two answered requests)."""
    import socket
    import threading
    from urllib.parse import urlsplit

    asked, release = threading.Event(), threading.Event()

    def held(body: dict[str, Any]) -> tuple[int, bytes]:
        asked.set()
        release.wait(60)
        return 200, json.dumps(completion("late")).encode()

    with fake_upstream() as upstream, proxy(upstream) as root:
        upstream.reply = held
        address = urlsplit(root)
        payload = json.dumps({"model": "fake", "messages": task(1)}).encode()
        client = socket.create_connection((address.hostname or "127.0.0.1", address.port or 80))
        client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n"
                       b"content-length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
        try:
            assert asked.wait(60), "the upstream was never asked"
        finally:
            client.close()  # the client leaves while the upstream is still answering
        families = scrape(root)  # a request the server reads after the close: the proxy has seen it
        release.set()
        for _ in range(600):
            families = scrape(root)
            if total(families, "arc_requests_total") >= 1:
                break
            threading.Event().wait(0.1)
    assert {tuple(dict(labels)[name] for name in ("status", "kind", "stream")): found
            for (_, labels), found in families["arc_requests_total"]["samples"].items()} == {
        ("200", "client_gone", "false"): 1}


def _arc_command_then_done(body: dict[str, Any]) -> tuple[int, bytes]:
    """The fake model: a call of catalog-first when no ARC answer is in the view yet, else a bash call (a tool
    output then comes back), so each request has one hidden round."""
    answered = any(message.get("role") == "tool" and message.get("tool_call_id", "").startswith("arc-")
                   for message in body["messages"][-2:])
    if answered:
        number = len(body["messages"])
        calls = [{"id": f"c{number}", "type": "function", "function": {"name": "bash",
                                                                       "arguments": '{"command": "ls"}'}}]
        return 200, json.dumps(completion("", calls)).encode()
    calls = [{"id": f"arc-{len(body['messages'])}", "type": "function",
              "function": {"name": "catalog-first", "arguments": "{}"}}]
    return 200, json.dumps(completion("", calls)).encode()


@needs_qwen3
def test_arc_s_own_work_is_counted_hidden_rounds_tool_calls_and_folds() -> None:
    """An agent loop whose tool outputs pass the recent budget: the model calls catalog-first in each request
    (answered by ARC in a hidden round), and the core folds the oldest entries."""
    with fake_upstream() as upstream, proxy(upstream, window=4096) as root:
        upstream.reply = _arc_command_then_done
        messages = task(1)
        for turn in range(6):
            response = post(root, messages, tools=[BASH_TOOL])
            assert response.status_code == 200, response.text
            message = response.json()["choices"][0]["message"]
            messages.append(message)
            for call in message["tool_calls"]:
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": "\n".join(f"line {turn}.{row}: {'x' * 40}" for row in range(20))})
        families = scrape(root)
    assert value(families, "arc_tool_calls_total", tool="catalog-first") == 6
    assert total(families, "arc_upstream_calls_total", hidden="true") == 6
    assert total(families, "arc_upstream_calls_total", hidden="false") == 6
    assert value(families, "arc_upstream_rounds_per_request_count") == 6
    assert value(families, "arc_upstream_rounds_per_request_bucket", le="1.0") == 0
    assert value(families, "arc_upstream_rounds_per_request_bucket", le="2.0") == 6
    assert value(families, "arc_compactions_total") >= 1
    assert value(families, "arc_folded_entries_total") >= value(families, "arc_compactions_total")
    assert value(families, "arc_messages_read_total") > 0


# --- who may read them ------------------------------------------------------------------------------------------


@needs_qwen3
@pytest.mark.parametrize("keys, sent, status", [
    ({}, None, 200),  # no keys at all: as /arc/stats, anyone who reaches the port
    ({"client_keys": frozenset({"client"})}, None, 401),
    ({"client_keys": frozenset({"client"})}, "client", 403),  # one client would read every other's activity
    ({"metrics_keys": frozenset({"scraper"})}, None, 401),
    ({"metrics_keys": frozenset({"scraper"})}, "scraper", 200),
    ({"metrics_keys": frozenset({"scraper"})}, "other", 401),
    ({"client_keys": frozenset({"client"}), "metrics_keys": frozenset({"scraper"})}, "client", 401),
    ({"client_keys": frozenset({"client"}), "metrics_keys": frozenset({"scraper"})}, "scraper", 200),
])
def test_metrics_are_served_to_whoever_may_read_arc_stats(keys: dict[str, frozenset[str]], sent: str | None,
                                                          status: int) -> None:
    """/metrics and /arc/stats count every client's requests: without --metrics-keys, served as /arc/stats was
    (anyone without --client-keys, no client with them); with --metrics-keys only to those keys, which are not
    client keys (a scraper's key sends no chat request)."""
    headers = {"authorization": f"Bearer {sent}"} if sent is not None else None
    with fake_upstream() as upstream, proxy(upstream, **keys) as root:
        metrics = httpx.get(f"{root}/metrics", headers=headers, timeout=60)
        stats = httpx.get(f"{root}/arc/stats", headers=headers, timeout=60)
        chat = post(root, task(1), headers=headers)
    assert (metrics.status_code, stats.status_code) == (status, status), (metrics.text, stats.text)
    if status == 200:
        parse(metrics.text)
    else:
        assert metrics.json()["error"]["type"] == ("forbidden" if status == 403 else "unauthorized")
    if "client_keys" in keys and sent == "scraper":
        assert chat.status_code == 401  # a metrics key is not a client key


def test_metrics_keys_come_from_a_file_or_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from arc_ref.frontends.cli import _parse_setting
    from arc_ref.frontends.proxy import settings_from
    from arc_ref.frontends.proxy_options import METRICS_KEYS_ENV, add_proxy_flags, proxy_options

    if QWEN3 is None:
        pytest.skip("the Qwen3 tokenizer files are absent")

    def settings(*extra: str) -> ProxySettings:
        parser = argparse.ArgumentParser()
        add_proxy_flags(parser)
        arguments = parser.parse_args(["--upstream", "http://127.0.0.1:9/v1", "--tokenizer", f"hf-dir:{QWEN3}",
                                       *extra])
        return settings_from(proxy_options(arguments), _parse_setting)

    monkeypatch.delenv(METRICS_KEYS_ENV, raising=False)
    assert settings().metrics_keys == frozenset()
    listed = tmp_path / "metrics-keys"
    listed.write_text("# the scrapers\nscrape-a\n\nscrape-b\n", encoding="utf-8")
    assert settings("--metrics-keys", str(listed)).metrics_keys == {"scrape-a", "scrape-b"}
    monkeypatch.setenv(METRICS_KEYS_ENV, "env-a, env-b")
    assert settings().metrics_keys == {"env-a", "env-b"}
    with pytest.raises(StartRefused, match="--metrics-keys .* cannot be read"):
        settings("--metrics-keys", str(tmp_path / "absent"))
    assert "env-a" not in repr(settings())  # (keys are never shown)


@needs_qwen3
def test_with_postgresql_the_instance_s_own_counters_are_there_too(pg_url: str) -> None:
    """SharedProxy (--store postgresql://...): /arc/stats' counters of its cache, its database and its forks as
    families, beside the requests'; a request answered twice in turn (the same history again: a fork)."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'arc-ref[postgres]')")
    with fake_upstream() as upstream, proxy(upstream, database=pg_url) as root:
        assert post(root, task(1)).status_code == 200
        assert post(root, [*task(1), {"role": "assistant", "content": "ok"},
                           {"role": "user", "content": "Again."}]).status_code == 200
        assert post(root, task(1)).status_code == 200  # its history moved on: forked at its first mark
        families = scrape(root)
        stats = httpx.get(f"{root}/arc/stats", timeout=60).json()
    assert total(families, "arc_requests_total", status="200", kind="ok") == 3
    assert value(families, "arc_conversations_in_memory") == stats["conversations_cached"] >= 1
    assert value(families, "arc_database_round_trips_total") == stats["database_round_trips"] > 0
    assert value(families, "arc_database_connections_max") == stats["database_connections_max"]
    for name, key in (("arc_rows_folded_total", "rows_folded"), ("arc_store_retries_total", "store_retries"),
                      ("arc_forks_at_commit_total", "forks_at_commit"),
                      ("arc_cut_commits_found_total", "cut_commits_found"),
                      ("arc_upstream_replies_kept_total", "upstream_replies_kept"),
                      ("arc_client_retries_answered_total", "client_retries_answered")):
        assert value(families, name) == stats[key], name
    assert value(families, "arc_conversations_created_total", how="new") == 1
    assert value(families, "arc_conversations_created_total", how="fork") == 1
    assert "arc_conversations_opened_total" not in families  # (the file store's)


@needs_qwen3
def test_with_postgresql_every_arc_stats_counter_has_its_family(pg_url: str) -> None:
    """The README's rule (review h51): each /arc/stats counter is in /metrics under its arc_ name, a counter's ending
    in _total (PostgreSQL's conversations_cached is arc_conversations_in_memory), with the same value. Before,
    client_retries_waited_elsewhere (added by h45 beside h49's families) had none: an operator's dashboard could not
    see the retries that waited for an attempt on another instance."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'arc-ref[postgres]')")
    with fake_upstream() as upstream, proxy(upstream, database=pg_url) as root:
        assert post(root, task(1)).status_code == 200
        families = scrape(root)
        stats = httpx.get(f"{root}/arc/stats", timeout=60).json()
    renamed = {"conversations_cached": "arc_conversations_in_memory"}
    missing = [key for key in stats
               if renamed.get(key, f"arc_{key}") not in families and f"arc_{key}_total" not in families]
    assert not missing, f"/arc/stats counters without a family in /metrics: {missing}"
    for key in stats:
        name = renamed.get(key) or (f"arc_{key}_total" if f"arc_{key}_total" in families else f"arc_{key}")
        if key not in ("database_round_trips", "database_connections_idle"):  # (the scrape itself moves these)
            assert value(families, name) == stats[key], name


@needs_qwen3
def test_the_404_of_another_path_names_metrics_among_the_paths_served() -> None:
    with fake_upstream() as upstream, proxy(upstream) as root:
        missing = httpx.get(f"{root}/prometheus", timeout=60)
        wrong_method = httpx.post(f"{root}/metrics", timeout=60)
    assert missing.status_code == 404 and "GET /metrics" in missing.json()["error"]["message"]
    assert wrong_method.status_code == 405 and "GET" in wrong_method.headers.get("allow", "")


@needs_qwen3
def test_a_fault_of_the_proxy_s_own_is_counted_as_a_500(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception no handler expects (a bug) is Starlette's 500: counted, kind internal_error, so that an alert
    on 5xx sees it."""
    from arc_ref.frontends.proxy import Proxy

    async def broken(self: Proxy, body: dict[str, Any], explicit: str | None, retry: bool = False) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Proxy, "complete", broken)
    with fake_upstream() as upstream, proxy(upstream) as root:
        assert post(root, task(1)).status_code == 500
        families = scrape(root)
    assert value(families, "arc_requests_total", status="500", kind="internal_error", stream="false") == 1
    assert value(families, "arc_request_duration_seconds_count") == 1
