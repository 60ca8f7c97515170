"""HTTP to an OpenAI-compatible server's replicas: clients, routing, timeouts and retries (the OpenAI backend's
transport; `arc_eval.backends.openai_backend`).

Replicas. With several base URLs a call goes to the replica chosen by a CRC-32 of ``tags["task_id"]``, so one
trajectory stays on one replica and the server's prefix cache keeps serving its growing prompt; calls without a
task id go round-robin. A retry moves to the next replica. Base URLs may be given with or without the trailing
``/v1``.

Retries. Refused or dropped connections, timeouts, 5xx and 429 are retried with exponential backoff and jitter,
on the next replica; then `BackendUnavailable`. A 5xx that names a configuration fault (`faults`) and every
other answer return at once. Timeouts are bounded per attempt (connect, first byte, whole request) and per call
(``call_budget_s``): `retry_policy()` states the budget. The check before the first task (``preflight``) tries
at most ``PREFLIGHT_RETRIES`` times more, pausing at most ``PREFLIGHT_MAX_PAUSE_S``, and says each failed attempt.
"""

from __future__ import annotations

import asyncio
import os
import random
import ssl
import sys
import time
import zlib
from typing import Any, Mapping, Protocol

import httpx
from attrs import frozen

from arc_eval.backends.faults import configuration_fault, refusal_message, retry_hint
from arc_eval.errors import InvalidInput
from arc_eval.types import BackendReplyError, BackendRequestError, BackendUnavailable
from arc_ref.openai_wire import error_message as body_message

# The check before the first task (issue 19): a server that is down fails in seconds, a line per attempt.
PREFLIGHT_RETRIES = 2
PREFLIGHT_MAX_PAUSE_S = 1.0
PROBE_TIMEOUT_CAP_S = 60.0  # a probe (GET /v1/models, a 1-token completion) waits at most this long per attempt
# The bounds of the connection's numbers (issue 31): a timeout of a day at most (an answer later than that is a hung
# server's); 100 retries at most (each backs off up to 30 s: 50 minutes for one call).
MAX_TIMEOUT_S = 86_400.0
MAX_RETRIES = 100

Route = tuple[int, int]  # (replica, client shard) of a call


class ConnectionOptions(Protocol):
    """The connection's options a `Transport` reads (`OpenAIOptions` has them: declared here, so that the transport
    does not import the backend that builds it)."""

    @property
    def base_urls(self) -> tuple[str, ...]: ...
    @property
    def api_key(self) -> str | None: ...
    @property
    def connect_timeout_s(self) -> float: ...
    @property
    def first_byte_timeout_s(self) -> float | None: ...
    @property
    def request_timeout_s(self) -> float: ...
    @property
    def max_retries(self) -> int: ...


@frozen
class TransportTuning:
    """What the command line does not set: the backoff, the connection pools and the budgets' defaults."""

    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    max_connections: int = 512
    client_shards: int = 32
    call_budget_s: float | None = None  # None: two whole requests and the longest backoff
    probe_timeout_s: float | None = None  # None: the request timeout, at most PROBE_TIMEOUT_CAP_S


def api_urls(base_url: str) -> dict[str, str]:
    """Endpoints of one replica; `base_url` with or without its trailing `/v1`."""
    base = base_url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise InvalidInput(f"base URL must start with http:// or https://, got {base_url!r}")
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    api = root + "/v1"
    return {
        "chat": api + "/chat/completions",
        "models": api + "/models",
        "tokenize": root + "/tokenize",
        "apply_template": root + "/apply-template",  # llama.cpp
    }


def error_message(response: httpx.Response) -> str:
    """The `message` of an OpenAI error object (vLLM nests it under `error`), else the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:2000]
    message = body_message(body)
    return response.text[:2000] if message is None else message


def json_of(response: httpx.Response, url: str) -> Any:
    """The answer's JSON; a `BackendReplyError` when it is not JSON."""
    try:
        return response.json()
    except ValueError:
        raise BackendReplyError(f"{url}: the answer is not JSON: {response.text[:200]!r}") from None


def refused(url: str, response: httpx.Response) -> BackendRequestError:
    """A refusal as the error the run stops with: its cause and the fix (`faults.refusal_message`)."""
    return BackendRequestError(refusal_message(url, response.status_code, error_message(response)),
                               response.status_code)


class Transport:
    """The HTTP side of an OpenAI backend: one client per shard (made in the running event loop), the replicas'
    endpoints, routing, and ``send`` with its timeouts and retries (see the module docstring)."""

    def __init__(self, options: ConnectionOptions, tuning: TransportTuning = TransportTuning(),
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        """``options``' api key None reads ``OPENAI_API_KEY`` (empty: none); its first-byte timeout None is the
        request timeout (a non-streamed answer starts when it is complete)."""
        if not options.base_urls:
            raise InvalidInput("at least one base URL is needed (e.g. http://localhost:8000/v1)")
        if tuning.client_shards < 1:
            raise InvalidInput(f"client_shards must be >= 1, got {tuning.client_shards}")
        self.base_urls = tuple(options.base_urls)
        self.replicas = [api_urls(url) for url in self.base_urls]
        self.connect_timeout_s = options.connect_timeout_s
        self.request_timeout_s = options.request_timeout_s
        self.first_byte_timeout_s = (options.request_timeout_s if options.first_byte_timeout_s is None
                                     else options.first_byte_timeout_s)
        self.max_retries = options.max_retries
        self.backoff_base_s = tuning.backoff_base_s
        self.backoff_max_s = tuning.backoff_max_s
        self.call_budget_s = (2 * options.request_timeout_s + tuning.backoff_max_s if tuning.call_budget_s is None
                              else tuning.call_budget_s)
        if not self.call_budget_s > 0:
            raise InvalidInput(f"call_budget_s must be > 0, got {tuning.call_budget_s}")
        self.probe_timeout_s = (min(PROBE_TIMEOUT_CAP_S, options.request_timeout_s) if tuning.probe_timeout_s is None
                                else tuning.probe_timeout_s)
        if not self.probe_timeout_s > 0:
            raise InvalidInput(f"probe_timeout_s must be > 0, got {self.probe_timeout_s}")
        self.max_connections = tuning.max_connections
        self.client_shards = tuning.client_shards
        self._transport = transport
        key = options.api_key if options.api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        if not (key.isascii() and key.isprintable()):
            raise InvalidInput("the API key must be printable ASCII (it travels in an HTTP header)")
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._round_robin = 0
        self._clients: dict[int, httpx.AsyncClient] = {}
        self._ssl_context: ssl.SSLContext | None = None
        self._clients_loop: asyncio.AbstractEventLoop | None = None
        self.retries = 0

    def url(self, replica: int, endpoint: str) -> str:
        return self.replicas[replica][endpoint]

    def _client(self, shard: int = 0) -> httpx.AsyncClient:
        """The HTTP client of `shard`, created in the running event loop.

        Calls are spread over `client_shards` clients by task id: httpcore's pool scans every
        connection of a client on each request (quadratic in the requests in flight; measured
        2.7 s of client CPU for 64 concurrent warm requests on one client), so small pools keep
        the client's cost flat when N trajectories are in flight.
        """
        loop = asyncio.get_running_loop()
        if self._clients_loop is not loop:
            self._clients = {}  # clients are bound to the loop that made them
            self._clients_loop = loop
        client = self._clients.get(shard)
        if client is None:
            limits = httpx.Limits(
                max_connections=self.max_connections,
                max_keepalive_connections=self.max_connections,
            )
            if self._ssl_context is None:
                # one context for every shard: building one loads the CA bundle (tens of ms)
                self._ssl_context = httpx.create_ssl_context()
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(
                    connect=self.connect_timeout_s,
                    read=self.first_byte_timeout_s,
                    write=self.request_timeout_s,
                    pool=self.request_timeout_s,
                ),
                limits=limits,
                headers=self._headers,
                transport=self._transport,
                verify=self._ssl_context,
            )
            self._clients[shard] = client
        return client

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    def route(self, tags: Mapping[str, Any]) -> Route:
        """(replica, client shard) of a call: by task id when there is one, else round-robin."""
        task_id = tags.get("task_id")
        if task_id is not None:
            key = zlib.crc32(str(task_id).encode("utf-8"))
        else:
            self._round_robin += 1
            key = self._round_robin
        return key % len(self.replicas), key % self.client_shards

    def _backoff(self, attempt: int) -> float:
        delay: float = min(self.backoff_max_s, self.backoff_base_s * (2**attempt))
        return delay * random.uniform(0.5, 1.0)

    def retry_policy(self) -> str:
        """The timeouts and the retry budget, in words (printed at the start of a run)."""
        return (
            f"timeouts per attempt: connect {self.connect_timeout_s:g} s, first byte "
            f"{self.first_byte_timeout_s:g} s, whole request {self.request_timeout_s:g} s; up to "
            f"{self.max_retries} retries (refused or dropped connections, timeouts, HTTP 5xx and "
            f"429; backoff {self.backoff_base_s:g}-{self.backoff_max_s:g} s, next replica); one call "
            f"gives up after {self.call_budget_s:g} s at most, and the run then stops (resumable)"
        )

    async def send(
        self,
        endpoint: str,
        payload: Mapping[str, Any] | None,
        route: Route,
        *,
        timeout_s: float | None = None,
        retries: int | None = None,
        preflight: bool = False,
    ) -> tuple[httpx.Response, float]:
        """POST `payload` (GET when None) with retries on refused or dropped connections,
        timeouts, 5xx and 429; other answers return. Returns the response and the wall time of
        the attempt that produced it.

        A 5xx that names a configuration fault (`faults.configuration_fault`) is returned at once.
        Every attempt is cut at `timeout_s` (the whole request), and no attempt starts once the
        call's budget is spent. ``preflight`` (the check before the first task): at most
        ``PREFLIGHT_RETRIES`` retries, pauses of at most ``PREFLIGHT_MAX_PAUSE_S``, and a line on stderr per
        failed attempt, so a server that is down fails in seconds, saying so (issue 19).
        """
        last_error = "no attempt made"
        replica, shard = route
        limit = self.request_timeout_s if timeout_s is None else timeout_s
        attempts = (self.max_retries if retries is None else retries) + 1
        if preflight:
            attempts = min(attempts, PREFLIGHT_RETRIES + 1)
        budget_end = time.monotonic() + max(self.call_budget_s, limit)
        url = self.replicas[replica][endpoint]
        made = 0
        for attempt in range(attempts):
            url = self.replicas[(replica + attempt) % len(self.replicas)][endpoint]
            remaining = budget_end - time.monotonic()
            if remaining <= 0:
                break
            made += 1
            started = time.perf_counter()
            client = self._client(shard)
            request = client.post(url, json=payload) if payload is not None else client.get(url)
            try:
                response = await asyncio.wait_for(request, timeout=min(limit, remaining))
            except (asyncio.TimeoutError, httpx.TimeoutException) as failure:
                waited = time.perf_counter() - started
                kind = "connect" if isinstance(failure, httpx.ConnectTimeout) else "answer"
                last_error = f"no {kind} within {waited:.3g} s"
            except httpx.TransportError as failure:
                last_error = f"{type(failure).__name__}: {failure}"
            else:
                status = response.status_code
                if status < 500 and status != 429:
                    return response, time.perf_counter() - started
                message = error_message(response)
                if configuration_fault(status, message) is not None:
                    return response, time.perf_counter() - started
                last_error = f"HTTP {status}: {message[:300]}"
            if attempt < attempts - 1:
                pause = self._backoff(attempt)
                if preflight:
                    pause = min(pause, PREFLIGHT_MAX_PAUSE_S)
                if time.monotonic() + pause >= budget_end:
                    break
                if preflight:
                    print(f"arc-eval: {url}: attempt {made}/{attempts}: {last_error}; retrying in {pause:.1f} s",
                          file=sys.stderr, flush=True)
                self.retries += 1
                await asyncio.sleep(pause)
        hint = retry_hint(last_error)
        raise BackendUnavailable(
            f"{url}: gave up after {made} attempt{'s' if made != 1 else ''}; last error: "
            f"{last_error}. "
            + (f"Fix: {hint}." if hint else "Fix: check that the server is up and answering "
               "(its log), then rerun the same command to continue.")
        )
