"""`arc-ref proxy`'s flags as one options class (`arc_ref.options`: each default, bound and help written once).

Apart from `arc_ref.frontends.proxy` so that `arc-ref`'s parser reads them without the extra 'proxy' (httpx,
starlette, uvicorn) installed; `arc_ref.frontends.proxy.settings_from` turns them into the proxy's settings and
`arc_ref.frontends.proxy.prepare` checks what can only be checked against the world (the upstream, the
tokenizer's files, the store directory) before the proxy listens.
"""

from __future__ import annotations

import argparse

from attrs import frozen

from arc_ref.config import MAX_CONFIG_INTEGER, PRESETS
from arc_ref.options import add_option_flags, int_option, option, options_from_args
from arc_ref.tools import DEFAULT_MAX_HIDDEN_ROUNDS, DEFAULT_MAX_READ_ROUNDS

PROXY_OWNER = "proxy"
UPSTREAM_KEY_ENV = "ARC_UPSTREAM_API_KEY"
CLIENT_KEYS_ENV = "ARC_PROXY_CLIENT_KEYS"
METRICS_KEYS_ENV = "ARC_PROXY_METRICS_KEYS"
DEFAULT_MAX_BODY_MB = 32  # a whole agent history; ARC's own limit on one observation is 64 MiB
MAX_BODY_MB = 4096
MAX_HIDDEN_ROUNDS = 1024
BODIES_IN_FLIGHT_PER_BODY = 4  # --bodies-in-flight-mb by default: this many bodies of --max-body-mb (review h40 F6)
DEFAULT_BODIES_IN_FLIGHT_MB = BODIES_IN_FLIGHT_PER_BODY * DEFAULT_MAX_BODY_MB
DEFAULT_UPSTREAM_TIMEOUT_S = 600  # one upstream call, generation included
MAX_UPSTREAM_TIMEOUT_S = 7 * 86400
DEFAULT_RUNNING_LEASE_S = 15  # a running request's row in arc_running (ProxySettings.running_lease_s)
MAX_RUNNING_LEASE_S = 3600
DEFAULT_BODY_MEMORY_MB = 64  # the request bodies kept so that a body is decoded from its new messages on
MAX_BODY_MEMORY_MB = 2**20
DEFAULT_MAX_CONVERSATIONS = 256
MAX_CONVERSATIONS = 10**6
DEFAULT_IDLE_SECONDS = 600  # an agent's turn takes seconds to minutes; one idle 10 minutes has most likely ended
MAX_IDLE_SECONDS = 30 * 86400
DEFAULT_DB_CONNECTIONS = 16  # a request holds one only to read and to commit (arc_ref.persist.postgres_conversations)
MAX_DB_CONNECTIONS = 10000
LATE_SYSTEM_REFUSED = "refuse"
LATE_SYSTEM_AS_USER = "user"


@frozen
class ProxyOptions:
    """The knobs of ``arc-ref proxy`` (its flags derive from them)."""

    upstream: str | None = option(None, metavar="URL",
                                  help="the served model's base URL, e.g. http://host:8000/v1 (required)")
    tokenizer: str | None = option(None, metavar="hf-dir:DIR",
                                   help="the served model's directory (its tokenizer and chat template; required)")
    context_limit: int | None = int_option(None, minimum=2, maximum=MAX_CONFIG_INTEGER, metavar="L",
                                           help="the served window in tokens (default: the upstream's max_model_len,"
                                                " GET /models)")
    store: str | None = option(None, metavar="DIR|URL",
                               help="a directory (every conversation a durable store there), or postgresql://...:"
                                    " one database shared by any number of proxy instances")
    host: str = option("127.0.0.1", help="the address to listen on (127.0.0.1: this machine only; the proxy has"
                                         " no client authentication, see the README)")
    port: int = int_option(8100, minimum=0, maximum=65535, help="the port to listen on")
    preset: str = option("paper", choices=tuple(sorted(PRESETS)), help="the configuration the budgets start from")
    set: tuple[str, ...] = option((), append=True, converter=tuple, metavar="KEY=VALUE",
                                  help="a configuration value (spec/parameters.md); a budget given here is kept,"
                                       " the others derived from the window and each conversation's prefix")
    max_hidden_rounds: int = int_option(DEFAULT_MAX_HIDDEN_ROUNDS, minimum=0, maximum=MAX_HIDDEN_ROUNDS, metavar="N",
                                        help="upstream calls answered by ARC alone, showing the model nothing new"
                                             " in the request, before the reply goes back")
    max_read_rounds: int = int_option(DEFAULT_MAX_READ_ROUNDS, minimum=0, maximum=MAX_HIDDEN_ROUNDS, metavar="N",
                                      help="upstream calls answered by ARC alone that show the model a chunk or"
                                           " catalog page not shown before in the request (a long output read chunk"
                                           " by chunk), beyond --max-hidden-rounds")
    max_body_mb: int = int_option(DEFAULT_MAX_BODY_MB, minimum=1, maximum=MAX_BODY_MB, metavar="MIB",
                                  help="the largest request body in MiB; a larger one is answered 413")
    bodies_in_flight_mb: int | None = int_option(None, minimum=1, maximum=MAX_BODY_MB * 1024, metavar="MIB",
                                                 recorded=False,
                                                 help="request bodies over 1 MiB held at once, in MiB (each counted"
                                                      " from before it is read until its request ends): one that"
                                                      " finds them spent waits, unread, up to 30 s, then 503;"
                                                      " at least --max-body-mb (default: 4 x --max-body-mb)")
    upstream_timeout: int = int_option(DEFAULT_UPSTREAM_TIMEOUT_S, minimum=1, maximum=MAX_UPSTREAM_TIMEOUT_S,
                                       metavar="S", recorded=False,
                                       help="seconds one upstream call may take, the model's generation included;"
                                            " past them the request is answered 504")
    body_memory_mb: int = int_option(DEFAULT_BODY_MEMORY_MB, minimum=0, maximum=MAX_BODY_MEMORY_MB, metavar="MIB",
                                     recorded=False,
                                     help="memory for the request bodies decoded last, so that a body resending a"
                                          " history is decoded from its new messages on (0: every body decoded"
                                          " whole); counted over what they hold, resident may be more")
    max_conversations: int = int_option(DEFAULT_MAX_CONVERSATIONS, minimum=1, maximum=MAX_CONVERSATIONS, metavar="N",
                                        help="conversations kept in memory, the least recently used leaving first"
                                             " (with --store reopened from it on their next request)")
    idle_seconds: int = int_option(DEFAULT_IDLE_SECONDS, minimum=1, maximum=MAX_IDLE_SECONDS, metavar="S",
                                   help="a conversation without a request for this long leaves memory (with --store"
                                        " reopened from it on its next request)")
    db_connections: int = int_option(DEFAULT_DB_CONNECTIONS, minimum=1, maximum=MAX_DB_CONNECTIONS, metavar="N",
                                     help="with --store postgresql://...: connections to the database at most (a"
                                          " request holds one while it reads its conversation and while it commits,"
                                          " not while the model answers), closed after a minute idle; every"
                                          " instance's N together must stay below the server's max_connections")
    running_lease: int = int_option(DEFAULT_RUNNING_LEASE_S, minimum=1, maximum=MAX_RUNNING_LEASE_S, metavar="S",
                                    recorded=False,
                                    help="with --store postgresql://...: the lease of a running request's row in"
                                         " arc_running, renewed every third of it while the request runs; a client's"
                                         " retry on another instance waits for the first attempt, at most this long"
                                         " after that attempt's instance died")
    upstream_api_key: str | None = option(None, metavar="KEY", recorded=False, aliases=("--upstream-key",),
                                          help=f"the upstream's key (or ${UPSTREAM_KEY_ENV}); without it the"
                                               " client's Authorization goes to the upstream")
    late_system: str = option(LATE_SYSTEM_REFUSED, choices=(LATE_SYSTEM_REFUSED, LATE_SYSTEM_AS_USER),
                              help="a system or developer message after the task (Aider's 'reminder: sys'): refused"
                                   " (400 bad_message), or shown to the model as a user message of its text")
    client_keys: str | None = option(None, metavar="FILE", recorded=False,
                                     help=f"a file of the keys clients must give (Authorization: Bearer KEY), one per"
                                          f" line (or ${CLIENT_KEYS_ENV}, comma-separated): each key's conversations"
                                          " and /arc/rounds its own; default: no client authentication")
    metrics_keys: str | None = option(None, metavar="FILE", recorded=False,
                                      help=f"a file of the keys that may read GET /metrics and GET /arc/stats (every"
                                           f" client's counters), one per line (or ${METRICS_KEYS_ENV},"
                                           " comma-separated): then only they may; default: any client without"
                                           " --client-keys, none with it")


def add_proxy_flags(parser: argparse.ArgumentParser) -> None:
    add_option_flags(parser, PROXY_OWNER, ProxyOptions)


def proxy_options(arguments: argparse.Namespace) -> ProxyOptions:
    """The options the command line gave (a ConfigError when out of bounds)."""
    options: ProxyOptions = options_from_args(PROXY_OWNER, ProxyOptions, arguments)
    return options


__all__ = ["CLIENT_KEYS_ENV", "METRICS_KEYS_ENV", "LATE_SYSTEM_AS_USER", "LATE_SYSTEM_REFUSED", "BODIES_IN_FLIGHT_PER_BODY", "DEFAULT_BODIES_IN_FLIGHT_MB",
           "DEFAULT_BODY_MEMORY_MB", "DEFAULT_UPSTREAM_TIMEOUT_S",
           "DEFAULT_DB_CONNECTIONS", "DEFAULT_IDLE_SECONDS", "DEFAULT_MAX_BODY_MB", "DEFAULT_MAX_CONVERSATIONS",
           "PROXY_OWNER", "ProxyOptions", "UPSTREAM_KEY_ENV", "add_proxy_flags", "proxy_options"]
