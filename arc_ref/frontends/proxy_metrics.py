"""`arc-ref proxy`'s ``GET /metrics``: its counters in Prometheus's text exposition format, version 0.0.4, written
here (no client library): ``# HELP`` and ``# TYPE`` before each family, label values escaped as the format says
(backslash, double quote, line feed), histograms as cumulative ``_bucket{le=...}`` lines with ``+Inf``, ``_sum`` and
``_count``.

`ProxyMetrics` is what the proxy counts for them besides the counters it kept before (`Proxy.stats`): each a few
integer additions per request or per upstream call, nothing per message, nothing that grows with a conversation's
history (issue 28 measures the proxy's CPU per request). Every label takes a bounded set of values (HTTP statuses,
the proxy's error kinds, ARC's tool names): no conversation, client or model name is ever a label.
"""

from __future__ import annotations

import bisect
import math
import threading
from typing import Any, Iterable, Mapping, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
ROUNDS_BUCKETS = (1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0)  # upstream calls of one request
FILL_BUCKETS = (0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)  # a view's tokens over its budget K

Labels = Sequence[tuple[str, str]]


class Histogram:
    """Observations counted in fixed buckets (each value in the first whose upper bound is at least it), with their
    sum; rendered cumulative."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)


def escape_label(value: str) -> str:
    """A label value as the text format writes it between double quotes."""
    return value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def escape_help(text: str) -> str:
    """A HELP text as the text format writes it (backslash and line feed escaped)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def number(value: float) -> str:
    """A sample value: an integer as such, a float as Python writes it, infinities and NaN as the format spells them."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


class Exposition:
    """The text of one scrape, family by family (each name once, its samples together)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {escape_help(help_text)}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: float, labels: Labels = ()) -> None:
        shown = ",".join(f'{label}="{escape_label(text)}"' for label, text in labels)
        self.lines.append(f"{name}{{{shown}}} {number(value)}" if shown else f"{name} {number(value)}")

    def counter(self, name: str, help_text: str, value: float) -> None:
        self.family(name, "counter", help_text)
        self.sample(name, value)

    def gauge(self, name: str, help_text: str, value: float) -> None:
        self.family(name, "gauge", help_text)
        self.sample(name, value)

    def labelled(self, name: str, kind: str, help_text: str, samples: Iterable[tuple[Labels, float]]) -> None:
        self.family(name, kind, help_text)
        for labels, value in sorted(samples):
            self.sample(name, value, labels)

    def histogram(self, name: str, help_text: str, histogram: Histogram) -> None:
        self.family(name, "histogram", help_text)
        running = 0
        for bound, count in zip(histogram.bounds, histogram.counts):
            running += count
            self.sample(f"{name}_bucket", running, (("le", repr(float(bound))),))
        running += histogram.counts[-1]
        self.sample(f"{name}_bucket", running, (("le", "+Inf"),))
        self.sample(f"{name}_sum", histogram.total)
        self.sample(f"{name}_count", running)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class ProxyMetrics:
    """What a proxy counts for ``GET /metrics`` (besides `Proxy.stats`'s counters): its chat requests by outcome and
    their time, its upstream calls by status and their time, the rounds, tokens and budgets of its views, ARC's own
    work (folds, the calls of its tools), conversations made and forked. Counted on the event loop, but the folds,
    which the core reports in worker threads (`fold`, under a lock)."""

    def __init__(self) -> None:
        self.requests: dict[tuple[int, str, bool], int] = {}  # (status, kind, streamed) -> requests
        self.request_seconds = Histogram(DURATION_BUCKETS)
        self.upstream_calls: dict[tuple[int, bool], int] = {}  # (status as /arc/rounds records it, hidden) -> calls
        self.upstream_seconds = Histogram(DURATION_BUCKETS)
        self.upstream_failures: dict[str, int] = {}  # error type -> calls that got no answer or no completion
        self.rounds_per_request = Histogram(ROUNDS_BUCKETS)
        self.budget_fill = Histogram(FILL_BUCKETS)
        self.view_tokens_sent = 0  # the proxy's count of every view sent upstream
        self.usage_prompt_tokens = 0  # the upstream's usage, summed over its completions
        self.usage_completion_tokens = 0
        self.usage_cached_tokens = 0
        self.arc_tool_calls: dict[str, int] = {}  # ARC's tool -> calls the model made of it
        self.round_limit_replies = 0  # replies whose model still called only ARC's tools past the hidden rounds' limits
        self.conversations_new = 0
        self.conversations_forked = 0
        self.compactions = 0  # core steps that folded entries of H into S
        self.folded_entries = 0
        self._fold_lock = threading.Lock()

    def request(self, status: int, kind: str, streamed: bool, seconds: float) -> None:
        key = (status, kind, streamed)
        self.requests[key] = self.requests.get(key, 0) + 1
        self.request_seconds.observe(seconds)

    def usage(self, usage: Mapping[str, Any], prompt_tokens: int | None, cached_tokens: int | None) -> None:
        """An upstream completion's usage (its prompt and cached tokens as read already)."""
        completion_tokens = usage.get("completion_tokens")
        if prompt_tokens is not None and prompt_tokens > 0:  # (a counter never goes down: no negative count)
            self.usage_prompt_tokens += prompt_tokens
        if type(completion_tokens) is int and completion_tokens > 0:
            self.usage_completion_tokens += completion_tokens
        if cached_tokens:  # (never negative: `cached_tokens`)
            self.usage_cached_tokens += cached_tokens

    def fold(self, entries: int) -> None:
        """(Any thread.) One step of the core folded ``entries`` entries."""
        with self._fold_lock:
            self.compactions += 1
            self.folded_entries += entries

    def write(self, out: Exposition) -> None:
        out.labelled("arc_requests_total", "counter", "Chat completion requests answered, by HTTP status, kind"
                     " (ok, the proxy's error kind, upstream: the upstream's own error passed back, client_gone: the"
                     " client left first) and whether a stream was asked for (a stream's error after its first"
                     " keepalive is an error event under status 200)",
                     [((("status", str(status)), ("kind", kind), ("stream", "true" if streamed else "false")), count)
                      for (status, kind, streamed), count in self.requests.items()])
        out.histogram("arc_request_duration_seconds", "Time from a chat request's arrival to its answer (a stream's:"
                      " to its last event)", self.request_seconds)
        out.labelled("arc_upstream_calls_total", "counter", "Upstream chat calls, by status as GET /arc/rounds"
                     " records it (0: no answer, cancelled) and hidden (a round ARC made after answering the model's"
                     " calls of its own tools, never seen by the client)",
                     [((("status", str(status)), ("hidden", "true" if hidden else "false")), count)
                      for (status, hidden), count in self.upstream_calls.items()])
        out.labelled("arc_upstream_failures_total", "counter", "Upstream chat calls that got no answer"
                     " (upstream_unreachable, upstream_timeout) or one that is not a chat completion"
                     " (upstream_malformed): arc_upstream_calls_total counts them under 502 or 504 with the server's"
                     " own answers", [((("error", error),), count) for error, count in self.upstream_failures.items()])
        out.histogram("arc_upstream_duration_seconds", "Time of each upstream chat call, the generation included",
                      self.upstream_seconds)
        out.histogram("arc_upstream_rounds_per_request", "Upstream calls of each answered chat request (1 + its"
                      " hidden rounds)", self.rounds_per_request)
        out.counter("arc_round_limit_replies_total", "Replies whose model still called only ARC's tools when the"
                    " hidden rounds' limits were reached (sent back with no call)", self.round_limit_replies)
        out.counter("arc_view_tokens_sent_total", "Prompt tokens sent upstream as the proxy counts them (each call's"
                    " view)", self.view_tokens_sent)
        out.histogram("arc_view_budget_fill_ratio", "Each upstream call's view tokens over its budget K (1.0: no"
                      " headroom left)", self.budget_fill)
        out.counter("arc_upstream_prompt_tokens_total", "usage.prompt_tokens of the upstream's completions",
                    self.usage_prompt_tokens)
        out.counter("arc_upstream_completion_tokens_total", "usage.completion_tokens of the upstream's completions",
                    self.usage_completion_tokens)
        out.counter("arc_upstream_cached_tokens_total", "usage.prompt_tokens_details.cached_tokens of the upstream's"
                    " completions (where the server reports them)", self.usage_cached_tokens)
        out.labelled("arc_tool_calls_total", "counter", "Calls of ARC's own tools the model made, answered by the"
                     " proxy (recall and catalog commands)",
                     [((("tool", tool),), count) for tool, count in self.arc_tool_calls.items()])
        out.counter("arc_compactions_total", "Steps of ARC's core that folded the oldest recent entries into the"
                    " summary (the proactive trigger: the view would pass K, or the cost rule says folding pays)",
                    self.compactions)
        out.counter("arc_folded_entries_total", "Entries those compactions folded", self.folded_entries)
        out.labelled("arc_conversations_created_total", "counter", "Conversations this instance made: new (a history"
                     " it did not know) or fork (an edited, regenerated or concurrent history)",
                     [((("how", "new"),), self.conversations_new), ((("how", "fork"),), self.conversations_forked)])


__all__ = ["CONTENT_TYPE", "Exposition", "Histogram", "ProxyMetrics", "escape_help", "escape_label"]
