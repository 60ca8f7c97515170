"""`arc-ref proxy --store DIR`: the start on a store of many conversations, and memory per idle conversation.

    python benchmarks/bench_proxy_store.py start [--conversations 100,300] [--tree DIR ...]
    python benchmarks/bench_proxy_store.py memory [--conversations 200] [--idle-seconds 5] [--tree DIR]
    python benchmarks/bench_proxy_store.py hold [--conversations 4,40]

``start``: N conversations (4 requests each: a tool call, its output, a text reply, one more user turn) are
written to a store by one proxy, which is stopped; then a fresh proxy of each ``--tree`` (default: this checkout;
repeat it to compare, e.g. main before a change, interleaved in one run) is started on that store and timed until
it listens (and one with an empty store, the same way, for the start's fixed part), with the files it holds open.
The store is written by the last tree's proxy; a fake upstream runs in this process.

``memory``: N conversations kept in memory (``--max-conversations`` above N), then idle: RSS with none, with the
N in memory, and after ``--idle-seconds`` (the option of a checkout that has it) sent them out of memory; each
figure is divided by N. ``hold``: what holding a stored conversation costs each request (opened, locked, caught
up, closed) for conversations of 4 and 40 requests, against reading it whole. Speed and memory figures are printed, never asserted (tests/proxy asserts behaviour).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.proxy_cases import BASH_TOOL, Proxy, chat, completion, fake_upstream, task  # noqa: E402
from arc_ref.frontends.proxy_options import MAX_IDLE_SECONDS  # noqa: E402
from arc_ref.options import integer_parser  # noqa: E402
from benchmarks.servers import SERVERS, run  # noqa: E402  (the proxies, stopped however the run ends)

REPO = Path(__file__).resolve().parent.parent


def reply_for(body: dict[str, Any]) -> tuple[int, bytes]:
    """A tool call when the last message is the task, else a text reply; no usage: the fake counts no prompt (a made-up
    prompt_tokens had the proxy warn on every run that its count differed from the server's)."""
    last = body["messages"][-1]
    if last.get("role") == "user" and "Task" in str(last.get("content")) and body.get("tools"):
        calls = [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]
        reply = completion("", calls)
    else:
        reply = completion("done")
    del reply["usage"]
    return 200, json.dumps(reply).encode()


def converse(url: str, number: int) -> None:
    """One conversation of 4 requests (its store: the config, 7 events and their marks)."""
    messages = task(number, f"List the files of directory {number}.")
    for turn in range(4):
        status, body, _ = chat(url, messages, tools=[BASH_TOOL])
        if status != 200:
            raise SystemExit(f"conversation {number}, request {turn + 1}: {status} {body[:200]}")
        next_messages(messages, json.loads(body)["choices"][0]["message"], number)


def next_messages(messages: list[dict[str, Any]], message: dict[str, Any], number: int) -> None:
    """The reply, then the tool's output (a listing of about 4 KB) or the user's next question."""
    messages.append(message)
    if message.get("tool_calls"):
        listing = "".join(f"-rw-r--r-- 1 user user {size:6d} file-{number}-{size}.txt\n" for size in range(80))
        messages.append({"role": "tool", "tool_call_id": "c1", "content": listing})
    else:
        messages.append({"role": "user", "content": f"And directory {number}'s hidden files? " * 10})


def heap_figures(upstream_url: str, store: Path, count: int) -> str:
    """In this process, with tracemalloc: the Python heap a conversation takes in memory and after it left."""
    import asyncio
    import gc
    import tracemalloc

    import httpx

    from arc_ref.frontends.proxy import KnownMessages, Proxy, ProxySettings
    from benchmarks.proxy_cases import QWEN3

    settings = ProxySettings(upstream=upstream_url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384, store=store,
                             max_conversations=count + 10)

    async def run() -> tuple[int, int, int, int, int]:
        async with httpx.AsyncClient() as client:
            proxy = Proxy(settings, client)

            async def one(number: int) -> None:
                messages = task(number, f"List the files of directory {number}.")
                for _ in range(4):
                    reply = await proxy.complete({"model": "fake", "messages": list(messages),
                                                  "tools": [BASH_TOOL]}, None)
                    next_messages(messages, reply.completion["choices"][0]["message"], number)

            await one(0)
            gc.collect()
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
            for number in range(1, count + 1):
                await one(number)
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
            proxy.conversations.evict(now=time.monotonic() + 10**9)  # all idle
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
            for number in range(count + 1, 2 * count + 1):  # as many again: the process-wide caches are full
                await one(number)
            proxy.conversations.evict(now=time.monotonic() + 10**9)
            gc.collect()
            again = tracemalloc.get_traced_memory()[0]
            proxy.rounds.clear()  # the /arc/rounds log (the last 10,000 rounds) and the known-message memo
            proxy.known = KnownMessages()  # (bounded), emptied: what is left is per conversation
            gc.collect()
            emptied = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            await proxy.close()
            return base, held, after, again, emptied

    base, held, after, again, emptied = asyncio.run(run())
    return (f"Python heap (tracemalloc, in this process): {count} conversations in memory {(held - base) / 2**20:.1f}"
            f" MiB ({(held - base) / count / 1024:.1f} KiB each, with the caches they filled), after they left"
            f" {(after - base) / 2**20:.1f} MiB (process-wide caches: at most 64 chat formats, the count memo, the"
            f" known messages; the rounds log); {count} more, then out of memory:"
            f" +{(again - after) / count / 1024:.2f} KiB per conversation, of which"
            f" {(again - emptied) / count / 1024:.2f} KiB in the rounds log and the known-message memo (bounded);"
            f" the heap then {(emptied - base) / 2**20:.2f} MiB over the start")


def start_figures(trees: list[Path], counts: list[int]) -> None:
    """Per count: the conversations written by the last tree's proxy, then each tree's proxy started on them in
    turn (interleaved, one run), and each tree's start on an empty store."""
    with fake_upstream() as upstream, tempfile.TemporaryDirectory() as scratch:
        upstream.reply = reply_for
        base: dict[Path, float] = {}
        for tree in trees:
            empty = Proxy(tree, upstream.url, "--store", f"{scratch}/empty-{len(base)}", wait=False)
            try:
                empty.wait_listening(600)
                base[tree] = empty.listening_after or float("nan")
            finally:
                empty.stop()
            print(f"tree {tree}: an empty store: listening after {base[tree]:.2f} s", flush=True)
        store = Path(scratch) / "store"
        written = 0
        for count in counts:
            writer = Proxy(trees[-1], upstream.url, "--store", str(store), "--max-conversations",
                           str(max(counts) + 1))
            try:
                for number in range(written + 1, count + 1):
                    converse(writer.url, number)
            finally:
                writer.stop()
            written = count
            files = sum(1 for _ in store.rglob("*") if _.is_file())
            for tree in trees:
                restart = Proxy(tree, upstream.url, "--store", str(store), wait=False)
                try:
                    listening = restart.wait_listening(900)
                    held, rss = restart.open_files(), restart.rss_mib()
                finally:
                    restart.stop()
                seconds = restart.listening_after or float("nan")
                print(f"tree {tree}: {count} stored conversations ({files} files): listening after {seconds:.2f} s"
                      f" ({seconds - base[tree]:+.2f} s over its empty store), {held} open files, RSS {rss:.0f} MiB"
                      f"{'' if listening else ' (did not listen)'}", flush=True)


def memory_figures(tree: Path, count: int, idle_seconds: int) -> None:
    with fake_upstream() as upstream, tempfile.TemporaryDirectory() as scratch:
        upstream.reply = reply_for
        proxy = Proxy(tree, upstream.url, "--store", f"{scratch}/store", "--max-conversations", str(count + 10),
                      "--idle-seconds", str(idle_seconds))
        try:
            converse(proxy.url, 0)  # the caches every conversation shares (tokenizer, template) filled
            time.sleep(idle_seconds + 2)
            baseline = proxy.rss_mib()
            started = time.monotonic()
            for number in range(1, count + 1):
                converse(proxy.url, number)
            held = proxy.rss_mib()
            took = time.monotonic() - started
            time.sleep(idle_seconds + 3)
            chat(proxy.url, task(0, "List the files of directory 0."), tools=[BASH_TOOL])  # a request: eviction ran
            time.sleep(1)
            evicted = proxy.rss_mib()
        finally:
            code, error = proxy.stop()
            if code not in (0, None, -15) and error:  # why it ended, above the line of the request that failed
                print(error[-2000:], file=sys.stderr)
        print(f"tree {tree}: {count} conversations of 4 requests ({took:.1f} s), --idle-seconds {idle_seconds}:"
              f" RSS {baseline:.1f} MiB before them, {held:.1f} MiB with them in memory"
              f" ({(held - baseline) / count * 1024:.1f} KiB each), {evicted:.1f} MiB after they were idle"
              f" {idle_seconds} s ({(evicted - baseline) / count * 1024:.1f} KiB each)", flush=True)
        if tree == REPO:
            upstream.requests = collections.deque(maxlen=1)  # type: ignore[assignment]  # the fake keeps no body
            upstream.headers = collections.deque(maxlen=1)  # type: ignore[assignment]  # nor headers
            print(heap_figures(upstream.url, Path(scratch) / "heap", count), flush=True)


def hold_figures(turns: list[int], repeat: int = 30) -> None:
    """In this process: what holding a stored conversation costs a request (its store opened and locked, the rows
    and marks since the last request caught up, closed after) for conversations of ``turns`` requests, against
    reading it whole (a conversation out of memory, or another process's)."""
    import asyncio

    import httpx

    from arc_ref.frontends.proxy import Proxy, ProxySettings
    from benchmarks.proxy_cases import QWEN3

    with fake_upstream() as upstream, tempfile.TemporaryDirectory() as scratch:
        upstream.reply = reply_for
        settings = ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384,
                                 store=Path(scratch) / "store")

        async def run() -> None:
            async with httpx.AsyncClient() as client:
                proxy = Proxy(settings, client)
                for count in turns:
                    messages = task(count, f"List the files of directory {count}.")
                    key = ""
                    for _ in range(count):
                        reply = await proxy.complete({"model": "fake", "messages": list(messages),
                                                      "tools": [BASH_TOOL]}, None)
                        key = reply.conversation
                        next_messages(messages, reply.completion["choices"][0]["message"], count)
                    conversations = proxy.conversations
                    caught_up, whole = [], []
                    for _ in range(repeat):
                        started = time.perf_counter()
                        async with conversations.held(key):
                            pass
                        caught_up.append(time.perf_counter() - started)
                        conversations.by_key.pop(key)  # out of memory: the next hold reads it whole
                        started = time.perf_counter()
                        async with conversations.held(key):
                            pass
                        whole.append(time.perf_counter() - started)
                    rows = conversations.by_key[key].seq
                    print(f"a conversation of {count} requests ({rows} rows): held by a request (opened, locked,"
                          f" caught up, closed) {sorted(caught_up)[repeat // 2] * 1000:.1f} ms median; read whole"
                          f" (out of memory) {sorted(whole)[repeat // 2] * 1000:.1f} ms median", flush=True)
                await proxy.close()

        asyncio.run(run())


MOST_CONVERSATIONS = 1_000_000


def counts(text: str) -> list[int]:
    """The argparse ``type`` of --conversations: comma-separated counts, each 1 to MOST_CONVERSATIONS."""
    parse = integer_parser(1, MOST_CONVERSATIONS)
    return [parse(part) for part in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("start", "memory", "hold"))
    parser.add_argument("--conversations", type=counts, default=None,
                        help=f"start, hold: comma-separated counts (100,300; 4,40); memory: one count (200); each 1 to"
                             f" {MOST_CONVERSATIONS}")
    parser.add_argument("--idle-seconds", type=integer_parser(1, MAX_IDLE_SECONDS), default=5,
                        help=f"memory: the proxy's --idle-seconds (1 to {MAX_IDLE_SECONDS})")
    parser.add_argument("--tree", type=Path, action="append", default=None,
                        help="a checkout whose `arc-ref proxy` is measured (repeat: start compares them, interleaved;"
                             " the last writes the store); default: this one")
    args = parser.parse_args()
    trees = [tree.resolve() for tree in (args.tree or [REPO])]
    for tree in trees:
        if not (tree / "arc_ref" / "__init__.py").is_file():
            parser.error(f"--tree {str(tree)!r} is not a checkout of arc-ref (no arc_ref/__init__.py there)")
    if args.what == "memory" and args.conversations is not None and len(args.conversations) != 1:
        parser.error("memory takes one --conversations count")
    if args.what == "start":
        start_figures(trees, args.conversations or [100, 300])
    elif args.what == "hold":
        hold_figures(args.conversations or [4, 40])
    else:
        memory_figures(trees[-1], (args.conversations or [200])[0], args.idle_seconds)
    return 0


if __name__ == "__main__":
    SERVERS.stop_on_signals()
    raise SystemExit(run(main, "bench_proxy_store"))
