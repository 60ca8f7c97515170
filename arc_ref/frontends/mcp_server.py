"""`arc-ref mcp STORE`: ARC's store and recall as MCP tools over a durable store (stdio transport).

Any MCP-capable agent can keep its tool outputs in ARC and read them back exactly, in chunks (A5):

- ``store_observation(action, observation, returncode=None)``: store an output verbatim under a fresh id (A1,
  A2); the id is minted by the store, never taken from the caller; a return code null or left out is unknown
  (shown ``rc=?``, as the core's None: spec/rendering.md 7);
- ``recall(id)``: the first chunk of an observation, exact; ``recall_next(id)``: the next chunk (the
  cursor is kept in the store, so it survives a restart of the server);
- ``recall_meta(id)``: the observation's stub (size, chunks, return code, command, previews);
- ``catalog_page(page=None)``: one page of the catalog of every stored observation (the last one by default).

Each call is one event of the store (an observation, or an agent turn holding the matching ARC command),
committed before the result is returned, so the log shows every store and recall. The text of a result is
what ARC's own agent would read, except that notes, pages and stubs name this server's tools (``recall(ID)``,
``catalog_page(page=N)``) where ARC's agent reads its commands; the structured content carries the fields
(the exact ``payload`` of a chunk among them). A chunk is a chunk of the observation's shown form S(O) (spec/rendering.md 7.1: a
control string of the chat format or tokenizer in it carries a U+2060 after its first character, a U+2060 is
doubled); the payloads of every chunk, concatenated, with ``arc_ref.escape.unshow`` applied, are the stored
output byte for byte (``arc-ref export`` gives it too). A call the core refuses or that names no stored id is an error result, with the
core's message (for a mistyped id, the nearest stored id).

Limits (review h59 F7): ``store_observation`` refuses an output of more than ``max_observation_bytes`` bytes of
UTF-8 (`arc-ref mcp --max-observation-bytes`, 8 MiB by default, at most the 32 MiB row limit) before the store
tokenizes it; a line of input longer than `longest_line` is answered -32600 and dropped without being held whole
(`read_line`). A call cancelled while it runs is not stopped: a store cancelled so may still commit (it shows in
``catalog_page``), though its answer is never sent.
"""

from __future__ import annotations

import collections
import json
import re
import sys
from typing import IO, Annotated, Any, TypedDict

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.shared.message import SessionMessage
from pydantic import Field
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import (INVALID_PARAMS, PROTOCOL_VERSION_META_KEY, CallToolResult, GetPromptRequestParams,
                       GetPromptResult, JSONRPCError, JSONRPCMessage, JSONRPCNotification, JSONRPCRequest,
                       JSONRPCResponse, TextContent, ToolAnnotations, jsonrpc_message_adapter)

from arc_ref.catalog import page_count
from arc_ref.config import first_lone_surrogate
from arc_ref.errors import ArcError
from arc_ref.json_limits import MAX_LINE_BYTES, MAX_OBSERVATION_BYTES
from arc_ref.machine import AgentResult, AgentTurn, Observe, ObserveResult
from arc_ref.persist.postgres import Store
from arc_ref.recall import chunk_count
from arc_ref.text import ASCII_WHITESPACE
from arc_ref.trace import TraceError, UnreadableValue, strict_json

SHOWN_FORM = (
    "A chunk's payload is the output as shown to a model: a chat-format control string in it (like <|im_end|>)"
    " carries a U+2060 WORD JOINER after its first character, so that it cannot act, and a U+2060 of the output is"
    " doubled. To get the stored bytes back, join the payloads of every chunk in order, then turn each doubled"
    " U+2060 into one and drop each U+2060 left alone."
)
"""What a client must know to rebuild the exact output from the payloads (`arc_ref.escape.unshow`, spec 7.1)."""

INSTRUCTIONS = (
    "ARC keeps tool outputs verbatim under short ids (like §00012-1829489005) and gives them back exactly, in chunks."
    " Call store_observation with a command and its output to keep it; later, recall(id) returns its first"
    " chunk and recall_next(id) each further one; recall_meta(id) tells its size before you read it;"
    " catalog_page lists every stored output, a page at a time. " + SHOWN_FORM
)


def instructions(store: Store) -> str:
    """The server's instructions: `INSTRUCTIONS`, and the tokenizer its sizes are counted in (review h59 F8: no
    result said which, and a client budgeting another model's context could not tell)."""
    config = store.state.config
    return (f"{INSTRUCTIONS} Sizes in tokens are counted with this store's tokenizer, {config.tokenizer} (a chunk"
            f" holds at most {config.chunk_tokens} of its tokens); another model's tokenizer counts differently.")



ObsId = Annotated[str, Field(description="an id given by store_observation or shown in the catalog, e.g. §00012-1829489005")]
Action = Annotated[str, Field(description="the command or tool call that produced the output (shown in its stub)")]
Output = Annotated[str, Field(description="the output, kept verbatim")]
ReturnCode = Annotated[int | None, Field(strict=True, description="the command's exit status (0: success), an"
                                       " integer; null or left out: unknown (shown rc=?)")]
Page = Annotated[int | None, Field(strict=True, description="a page number, 1 = the oldest outputs (default: the last page)")]


class StoredObservation(TypedDict):
    id: str  # the id minted by the store (A1)
    index: int  # j: its position among the stored observations
    tokens: int  # n_j, in the store's tokenizer
    tokenizer: str  # the store's tokenizer, which counts tokens (review h59 F8)
    chunks: int  # m_j: recall chunks
    seq: int  # the event's row in the store


class RecalledChunk(TypedDict):
    id: str
    chunk: int  # 1-based (0 for an empty observation)
    chunks: int
    payload: Annotated[str, Field(description="this chunk of the output's shown form (see the server's"
                                  " instructions: joined and with its U+2060 undone, the stored output, byte for byte)")]
    more: bool  # recall_next has a further chunk


class ObservationMeta(TypedDict):
    id: str
    stub: str  # z_j, the line the catalog shows
    tokens: int
    tokenizer: str
    chunks: int
    characters: int
    returncode: int | None  # None: stored without an exit status (a proxy's tool result)
    action: str  # the command's signature as the stub shows it (escaped, clipped to signature_chars)


class CatalogPage(TypedDict):
    page: int  # 0 when the catalog is empty (pages 0)
    pages: int
    stored: int
    text: str  # the page as ARC's agent sees it


def _one_id(argument: str) -> str:
    """An id is one word; anything else would be read as further commands by the core's parser."""
    words = argument.strip(ASCII_WHITESPACE).split()
    if len(words) != 1 or any(char in argument for char in "\n\r"):
        raise ToolError(f"an id is one word like §00012-1829489005, got {argument[:60]!r}")
    return words[0]


# ARC's command words as this server's tools (review h24 F10: its notes and pages named commands a model connected
# over MCP cannot call, "_recall-start ID reads it again", "catalog-first lists them")
_TOOL_OF_WORD = {"_recall": "recall", "_recall-start": "recall", "_recall-next": "recall_next",
                 "_recall_meta": "recall_meta", "catalog-page": "catalog_page"}
_NOTE_WORD = re.compile(r"\A(_recall-start|_recall-next|_recall_meta|_recall|catalog-page)(?=[ :])")
_READ_AGAIN = re.compile(r"; _recall-start (\S+) reads it again\Z")
_STUB_RECALL = re.compile(r" \| _recall (\S+)$", re.MULTILINE)  # the last field of a stub line (not a preview)
_PAGE_COMMANDS = "; catalog-first, catalog-next, catalog-page N]"


def in_tool_terms(note: str) -> str:
    """A core note (an error result) with ARC's command words as this server's tools."""
    note = _NOTE_WORD.sub(lambda found: _TOOL_OF_WORD[found.group(1)], note, count=1)
    note = _READ_AGAIN.sub(r"; recall(\1) reads it again", note)
    return note.replace("; catalog-first lists them", "; catalog_page(page=1) lists them")


def listing_in_tool_terms(text: str) -> str:
    """A catalog page or a stub with the tools that read on: its header's commands and each stub's last field."""
    header, newline, rest = text.partition("\n")
    if header.startswith("[ARC catalog page ") and header.endswith(_PAGE_COMMANDS):
        header = header[: -len(_PAGE_COMMANDS)] + "; catalog_page(page=N) shows another]"
    return _STUB_RECALL.sub(r" | recall(\1)", header + newline + rest)


def _result(text: str, structured: object) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


def utf8_size(text: str) -> int:
    """The length of ``text`` in UTF-8 bytes (a lone surrogate, which no line this server reads carries, counts 3)."""
    return len(text.encode("utf-8", "surrogatepass"))


class ArcTools:
    """The five tools over one open writer store (calls are serialized by the store)."""

    def __init__(self, store: Store, max_observation_bytes: int = MAX_OBSERVATION_BYTES) -> None:
        self.store = store
        self.max_observation_bytes = max_observation_bytes

    def _refuse_oversized(self, observation: str) -> None:
        """An output over this server's limit is refused before the store tokenizes it (review h59 F7: one call of
        30 MB of a single letter took 1.8 GB and 32 s to tokenize, within the 32 MiB row limit)."""
        limit = self.max_observation_bytes
        if len(observation) > limit:  # a character is at least one byte: no need to count them
            said = f"{len(observation):,} characters, more than"
        elif len(observation) * 4 <= limit or (size := utf8_size(observation)) <= limit:
            return
        else:
            said = f"{size:,} bytes of UTF-8, over"
        raise ToolError(f"cannot store this output: it is {said} this server's limit of {limit:,} bytes of UTF-8"
                        f" (arc-ref mcp --max-observation-bytes N, at most {MAX_LINE_BYTES:,}); nothing was stored;"
                        " store it in parts")

    def _command(self, action: str) -> AgentResult:
        try:
            output = self.store.append(AgentTurn("", action)).output
        except ArcError as problem:  # a core refusal or a StoreError
            raise ToolError(str(problem)) from None
        assert isinstance(output, AgentResult)
        return output

    def store_observation(
        self, action: Action, observation: Output, returncode: ReturnCode = None
    ) -> Annotated[CallToolResult, StoredObservation]:
        """Keep a tool's output verbatim in ARC; returns the id to recall it by."""
        self._refuse_oversized(observation)
        try:
            appended = self.store.append(Observe(action, observation, returncode))
        except ArcError as problem:  # a core refusal or a StoreError
            raise ToolError(str(problem)) from None
        output = appended.output
        assert isinstance(output, ObserveResult)
        tokenizer = self.store.state.config.tokenizer
        stored: StoredObservation = {
            "id": output.obs_id, "index": output.index, "tokens": output.tokens, "tokenizer": tokenizer,
            "chunks": output.chunks, "seq": appended.seq,
        }
        text = (f"stored as {output.obs_id}: {output.tokens} tokens ({tokenizer}) in {output.chunks} chunk(s);"
                f" recall({output.obs_id}) reads it back")
        return _result(text, stored)

    def _recall(self, word: str, obs_id: str) -> CallToolResult:
        answered = self._command(f"{word} {_one_id(obs_id)}")
        text = answered.response or ""
        if not answered.recalls:  # unknown id (with the nearest one), or every chunk already returned
            return CallToolResult(content=[TextContent(type="text", text=in_tool_terms(text))], is_error=True)
        recalled = answered.recalls[0]
        if recalled.chunks == 0:  # a note, "_recall §ID: the observation is empty" (review h59: ARC's words)
            text = in_tool_terms(text)
        chunk: RecalledChunk = {
            "id": recalled.obs_id, "chunk": recalled.chunk, "chunks": recalled.chunks,
            "payload": recalled.payload, "more": recalled.chunk < recalled.chunks,
        }
        return _result(text, chunk)

    def recall(self, id: ObsId) -> Annotated[CallToolResult, RecalledChunk]:
        """The first chunk of a stored observation, exact as its shown form (restarts its cursor; joined with
        recall_next's chunks and with each lone U+2060 dropped and each doubled one made single, the stored output)."""
        return self._recall("_recall", id)

    def recall_next(self, id: ObsId) -> Annotated[CallToolResult, RecalledChunk]:
        """The next chunk of a stored observation after the last one returned, exact as its shown form (moves
        its cursor; see recall)."""
        return self._recall("_recall-next", id)

    def recall_meta(self, id: ObsId) -> Annotated[CallToolResult, ObservationMeta]:
        """A stored observation's stub: size in tokens and chunks, return code, command, previews."""
        token = _one_id(id)
        answered = self._command(f"_recall_meta {token}")
        record = self.store.state.lookup(token)
        if record is None:
            return CallToolResult(content=[TextContent(type="text", text=in_tool_terms(answered.response or ""))],
                                  is_error=True)
        meta: ObservationMeta = {
            "id": record.obs_id, "stub": listing_in_tool_terms(record.stub), "tokens": record.n_tokens,
            "tokenizer": self.store.state.config.tokenizer,
            "chunks": chunk_count(record.n_tokens, self.store.state.config.chunk_tokens),
            "characters": record.n_chars,
            "returncode": record.returncode,
            # clipped as the stub shows it (review h24 F15: a 10 MB command came back whole from the cheap call)
            "action": self.store.state.setup.shown_signature(record.signature),
        }
        return _result(meta["stub"], meta)

    def catalog_page(self, page: Page = None) -> Annotated[CallToolResult, CatalogPage]:
        """One page of the catalog of every stored observation (default: the last page)."""
        # The count is that of the state the call is applied to: on a PostgreSQL task another server may have
        # stored since this one last appended, and the command folds it in (review h59: "the catalog is empty", or
        # a page listing 2 outputs under "stored": 1, and a default that was not the last page). The default page
        # is asked again when the first command found more pages than this server had seen (a few times at most).
        for _attempt in range(3):
            state = self.store.state
            target = page_count(state.stored, state.config.page_size) if page is None else page
            answered = self._command(f"catalog-page {target}")
            state = self.store.state
            pages = page_count(state.stored, state.config.page_size)
            if page is not None or target == pages:
                break
        if pages == 0:  # an empty page, as `arc-ref inspect --catalog` shows it (review h24 nit N-e: an error result)
            empty = "the catalog is empty: nothing is stored yet (store_observation keeps an output)"
            nothing: CatalogPage = {"page": 0, "pages": 0, "stored": 0, "text": empty}
            return _result(empty, nothing)
        catalog = state.catalog_message
        if not 1 <= target <= pages or catalog is None:
            return CallToolResult(content=[TextContent(type="text", text=in_tool_terms(answered.response or ""))],
                                  is_error=True)
        shown = listing_in_tool_terms(catalog.content)
        listing: CatalogPage = {"page": target, "pages": pages, "stored": state.stored, "text": shown}
        return _result(shown, listing)


def build_server(store: Store, max_observation_bytes: int = MAX_OBSERVATION_BYTES) -> MCPServer:
    """An MCP server with ARC's five tools over ``store`` (a writer); ``store_observation`` refuses an output of
    more than ``max_observation_bytes`` bytes of UTF-8."""
    tools = ArcTools(store, max_observation_bytes)
    server: MCPServer = MCPServer(name="arc-ref", instructions=instructions(store), log_level="WARNING")
    # No tool is read-only: each call is a row of the store, and recall, recall_next and catalog_page move a cursor
    # (review h24 F4: a host may run read-only tools at once; recall_next after recall then read the wrong chunk)
    def hints(idempotent: bool) -> ToolAnnotations:
        return ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=idempotent,
                               open_world_hint=False)

    server.add_tool(tools.store_observation, name="store_observation", annotations=hints(False))
    server.add_tool(tools.recall, name="recall", annotations=hints(True))
    server.add_tool(tools.recall_next, name="recall_next", annotations=hints(False))
    server.add_tool(tools.recall_meta, name="recall_meta", annotations=hints(True))
    server.add_tool(tools.catalog_page, name="catalog_page", annotations=hints(True))
    # The server has no prompts (prompts/list is empty): the SDK answered prompts/get with error code 0 and wrote a
    # traceback on standard error (review h24, nit N-d); an unknown prompt is invalid params (-32602), as MCP says
    server._lowlevel_server.add_request_handler("prompts/get", GetPromptRequestParams, _no_such_prompt)
    return server


async def _no_such_prompt(context: object, params: GetPromptRequestParams) -> GetPromptResult:
    raise MCPError(INVALID_PARAMS, f"Unknown prompt: {params.name[:60]!r}; this server has no prompts, only tools"
                                   " (tools/list)")


PARSE_ERROR = -32700  # JSON-RPC 2.0: the line is not JSON (or not UTF-8 text)
INVALID_REQUEST = -32600  # JSON-RPC 2.0: JSON, but no message MCP takes


def _error_line(code: int, message: str, request_id: object = None) -> str:
    """A JSON-RPC error response (``id`` null when the line's id cannot be read)."""
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}},
                      ensure_ascii=False)


# A JSON text read as tokens: a string (one that never closes runs to the end), a run of opening or of closing
# brackets, a colon or a comma, a run of anything else (a number, true, false, null, text that is no JSON), a run of
# white space. Possessive, and every position starts a token: one pass reads each character once.
_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+"|".*|[\[{]++|[\]}]++|[:,]|[^\s"\[\]{}:,]++|\s++', re.DOTALL)
_NESTED_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+"|".*|[\[{]++|[\]}]++', re.DOTALL)  # below the top level
_INTEGER_ID = re.compile(r"-?(?:0|[1-9][0-9]{0,4299})")


def readable_id(text: str, cut: bool = False) -> str | int | None:
    """The ``id`` of a JSON-RPC message whose text could not be read whole, read alone: the first ``"id"`` member
    of the top-level object, when its value is a string (text: no lone surrogate) or an integer of at most 4,300
    digits; None where there is none or it cannot be read (JSON-RPC's null id). Linear and without recursion: it
    reads top-level tokens, skips nested values by their strings and brackets, and stops at the id. ``cut``: the
    text is the start of a longer line, so a number that reaches its end may be cut short, and is not taken (a
    string that closes before the end is whole; one that does not is no id)."""
    depth = 0
    position = 0
    key: str | None = None  # a top-level string that a colon would make a member's key
    awaiting = False  # the colon after the key "id" was read: the next token is the id
    while (match := (_TOKEN if depth <= 1 else _NESTED_TOKEN).search(text, position)) is not None:
        token = match.group()
        position = match.end()
        first = token[0]
        if first in "[{":
            if depth == 1 and awaiting:
                return None  # an array or object as the id
            depth += len(token)
        elif first in "]}":
            depth -= len(token)
        elif depth != 1 or first.isspace():
            continue
        elif token == ":":
            awaiting, key = key == '"id"', None
        elif token == ",":
            awaiting, key = False, None
        elif awaiting:
            return None if cut and position == len(text) and first != '"' else _id_value(token)
        else:
            key = token if first == '"' else None
    return None


def _id_value(token: str) -> str | int | None:
    if token.startswith('"'):
        try:
            value = json.loads(token)
        except ValueError:
            return None
        return value if isinstance(value, str) and first_lone_surrogate(value) is None else None
    return int(token) if _INTEGER_ID.fullmatch(token) else None


ENVELOPE_BYTES = 64 * 1024  # room on a line for the rest of a tools/call: the method, the id, the action, ...
ESCAPED_BYTES = 6  # the most bytes JSON text takes for one byte of UTF-8 (U+0001 is \u0001; é, 2 bytes, \u00e9)
DISCARD_BYTES = 1024 * 1024  # the rest of a line too long to read is read and dropped this much at a time


def longest_line(max_observation_bytes: int) -> int:
    """The longest line ``arc-ref mcp`` reads, in bytes before its LF: room for an output of
    ``max_observation_bytes`` however a client escapes it in JSON, never more than a row of the store holds (the
    row limit, `arc_ref.json_limits.MAX_LINE_BYTES`), and `ENVELOPE_BYTES` for the rest of the call."""
    return min(MAX_LINE_BYTES, ESCAPED_BYTES * max_observation_bytes) + ENVELOPE_BYTES


def read_line(stream: IO[bytes], limit: int) -> tuple[bytes, bool]:
    """The next line of ``stream`` (with its LF, when it has one; empty at the end of input) and False, or, for a
    line of more than ``limit`` bytes before its LF, its first `ENVELOPE_BYTES` bytes (where its id can be read)
    and True: the rest of that line is read to its LF and dropped, a piece at a time, so that no more than
    ``limit`` + 1 bytes of it are ever held (review h59 F7: a line of any length was read whole, then parsed)."""
    line = stream.readline(limit + 1)
    if len(line) <= limit or line.endswith(b"\n"):
        return line, False
    head = line[:ENVELOPE_BYTES]
    del line
    while (rest := stream.readline(DISCARD_BYTES)) and not rest.endswith(b"\n"):
        pass
    return head, True


def too_long(head: bytes, limit: int) -> str:
    """The error response answering a line of more than ``limit`` bytes (`read_line`): -32600 under the id read in
    ``head``, the line's start, when it can be read there (null otherwise)."""
    request_id = readable_id(head.decode("utf-8", "surrogateescape"), cut=True)
    return _error_line(INVALID_REQUEST, f"Invalid Request: a line of more than {limit:,} bytes; this server reads a"
                                        " line of up to 6 times arc-ref mcp --max-observation-bytes (at most the"
                                        f" {MAX_LINE_BYTES:,}-byte row limit) plus {ENVELOPE_BYTES:,} bytes; the"
                                        " line was read to its end and dropped, nothing was stored", request_id)


def read_message(line: bytes) -> JSONRPCMessage | str:
    """One line of standard input as an MCP message, or the error response answering it.

    The SDK's stdio reader replaces invalid UTF-8 with U+FFFD and drops, without an answer, any line its
    parser refuses (a lone-surrogate escape, an integer past 4,300 digits, deep nesting, a batch): the client
    then waits forever. Here every such line is answered, and bytes are never replaced. A line of JSON text
    that holds a value no reader takes (`UnreadableValue`), or that is not UTF-8 text, is answered under its id
    when the id can be read (`readable_id`): JSON-RPC leaves the id null only where it could not be read.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as bad:
        # the id is still read where it can be: each byte that is not UTF-8 becomes a lone surrogate
        # (surrogateescape), which `readable_id` never takes as part of an id
        return _error_line(PARSE_ERROR, f"Parse error: not UTF-8 text (invalid byte at offset {bad.start});"
                                        " nothing was stored", readable_id(line.decode("utf-8", "surrogateescape")))
    try:
        value: Any = strict_json(text)
    except UnreadableValue as problem:
        return _error_line(INVALID_REQUEST, f"Invalid Request: {problem}; nothing was stored", readable_id(text))
    except TraceError as problem:
        return _error_line(PARSE_ERROR, f"Parse error: {problem}")
    if isinstance(value, list):
        return _error_line(INVALID_REQUEST, "Invalid Request: a JSON-RPC batch is not supported (MCP sends one"
                                            " message per line); send each message on its own line")
    request_id = value.get("id") if isinstance(value, dict) else None
    if isinstance(value, dict) and "method" in value and "id" in value and not _mcp_id(request_id):
        # the SDK would take it for a notification (it ignores the id) and answer nothing (review h24 F2); the id is
        # echoed where JSON-RPC allows it (a number), else null
        echoed = request_id if isinstance(request_id, float) else None
        return _error_line(INVALID_REQUEST, "Invalid Request: a request's id must be a string or an integer (MCP),"
                                            f" got {json.dumps(request_id)[:40]}; nothing was done", echoed)
    if not _mcp_id(request_id):
        request_id = None
    try:
        return jsonrpc_message_adapter.validate_python(value, by_name=False)
    except Exception as problem:  # pydantic's ValidationError, or its recursion guard on a deep value
        first = str(problem).splitlines()[0][:200] if str(problem) else type(problem).__name__
        return _error_line(INVALID_REQUEST, f"Invalid Request: not a JSON-RPC 2.0 message MCP takes ({first})",
                           request_id)


def _mcp_id(value: object) -> bool:
    """An id MCP takes: a string or an integer (not a boolean, not null)."""
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _modern_envelope(request: JSONRPCRequest) -> bool:
    """Whether a request carries the 2026-07-28 protocol's per-request envelope (``params._meta`` naming the protocol
    version): such a request opens a session without initialize, and the SDK serves it (review h59: a client pinned
    to that protocol was told "not initialized" at every request; the SDK's serve_dual_era_loop reads the same key)."""
    meta = (request.params or {}).get("_meta")
    return isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta


NOT_INITIALIZED = ("Invalid Request: the session is not initialized; send initialize first (and"
                   " notifications/initialized after its answer), or, in the 2026-07-28 protocol, the protocol"
                   f" version in each request's params._meta ({PROTOCOL_VERSION_META_KEY})")
CALL = "tools/call"


async def serve_lines(server: MCPServer, stdin: IO[bytes], stdout: IO[bytes],
                      max_line_bytes: int = longest_line(MAX_OBSERVATION_BYTES)) -> None:
    """Serve ``server`` over newline-delimited JSON-RPC on byte streams, answering every line (`read_message`; a
    line of more than ``max_line_bytes`` bytes is answered -32600 and never held whole: `read_line`).

    Tool calls run one at a time, in the order they came (review h24 F4: pipelined, a recall_next could run before
    the recall sent just before it; the store serializes them anyway): they wait in a queue, and a dispatcher hands
    the next one to the server when the last is answered. Every other line is handed over at once, so a
    ``notifications/cancelled`` is read while calls wait: a call cancelled in the queue never runs, and one
    cancelled while it runs (the server sends it no answer) no longer holds up the queue or the end of input
    (review h24 F11: the end of input waited for its answer forever, holding the store's writer lock).
    """
    incoming_send, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outgoing, outgoing_receive = anyio.create_memory_object_stream[SessionMessage](0)
    lock = anyio.Lock()
    awaiting: set[str | int] = set()  # ids of requests read and not yet answered (nor cancelled)
    queued: collections.deque[JSONRPCRequest] = collections.deque()  # tool calls not yet handed to the server
    running: list[str | int] = []  # the tool call handed to the server and not yet answered (nor cancelled)
    state = {"initialized": False, "read_all": False}
    changed = [anyio.Event()]  # set (and replaced) when the queue, the running call or the input's end changes

    def wake() -> None:
        changed[0].set()
        changed[0] = anyio.Event()

    def write_line(text: str) -> None:
        stdout.write(text.encode("utf-8") + b"\n")
        stdout.flush()

    async def emit(text: str) -> None:
        async with lock:
            await anyio.to_thread.run_sync(write_line, text)

    def cancelled(message: JSONRPCNotification) -> None:
        """A client's cancel: the request is no longer awaited; a queued call is dropped (it never runs)."""
        request_id = (message.params or {}).get("requestId")
        awaiting.discard(request_id)
        for call in list(queued):
            if call.id == request_id:
                queued.remove(call)
        if running and running[0] == request_id:
            running.clear()
        wake()

    async def reader() -> None:
        while True:
            # abandoned on cancel: Ctrl-C ends the server at once, not at the next line (review h24 F9)
            line, overlong = await anyio.to_thread.run_sync(read_line, stdin, max_line_bytes, abandon_on_cancel=True)
            if overlong:
                await emit(too_long(line, max_line_bytes))
                continue
            if not line:  # the client closed its side: answer what it asked, then end
                state["read_all"] = True
                wake()
                while awaiting:
                    await changed[0].wait()
                await incoming_send.aclose()
                return
            if not line.strip():
                continue
            message = read_message(line.rstrip(b"\r\n"))
            if isinstance(message, str):
                await emit(message)
                continue
            if isinstance(message, JSONRPCRequest):
                if message.method == "initialize" or _modern_envelope(message):
                    state["initialized"] = True
                elif not state["initialized"] and message.method != "ping":  # the SDK answered "Invalid request
                    await emit(_error_line(INVALID_REQUEST, NOT_INITIALIZED, message.id))  # parameters" (h24 F3)
                    continue
                awaiting.add(message.id)
                if message.method == CALL:
                    queued.append(message)
                    wake()
                    continue
            elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
                cancelled(message)
            await incoming_send.send(SessionMessage(message))

    async def dispatcher() -> None:
        while True:
            if queued and not running:
                call = queued.popleft()
                running.append(call.id)
                await incoming_send.send(SessionMessage(call))
            elif state["read_all"] and not queued and not awaiting:
                return
            else:
                await changed[0].wait()

    async def writer() -> None:
        async with outgoing_receive:
            async for session_message in outgoing_receive:
                await emit(session_message.message.model_dump_json(by_alias=True, exclude_unset=True))
                if isinstance(session_message.message, (JSONRPCResponse, JSONRPCError)):
                    awaiting.discard(session_message.message.id)
                    if running and running[0] == session_message.message.id:
                        running.clear()
                    wake()

    lowlevel = server._lowlevel_server
    async with anyio.create_task_group() as group:
        group.start_soon(reader)
        group.start_soon(dispatcher)
        group.start_soon(writer)
        await lowlevel.run(incoming, outgoing, lowlevel.create_initialization_options())
        await outgoing.aclose()


def serve(store: Store, max_observation_bytes: int = MAX_OBSERVATION_BYTES) -> None:
    """Serve the tools on standard input/output until the client disconnects (every line answered)."""
    anyio.run(serve_lines, build_server(store, max_observation_bytes), sys.stdin.buffer, sys.stdout.buffer,
              longest_line(max_observation_bytes))
