"""Counting prompts as the server counts them: the one counting seam of the evaluation layer.

Every count of a prompt in the evaluation layer goes through one ``TokenCounter``, resolved once per
run (``RunSpec.prompt_counting``, built by ``RunPlan``) and handed to every user: the methods' own budget checks (proactive compaction,
the recent suffix, condensing requests), the scripted backend's L_ctx - G_max check, and the OpenAI
backend's local count (``--count-with local``, or a server without a counting endpoint). ARC's view
is counted by the core itself (``arc_ref.view``) with the same tokenizer and chat format, and its
count equals this one (tests/eval/test_counting.py).

Two counters:

* ``PromptCounter`` (chat formats ``chatml`` / ``qwen3-nothink``, any ``arc_ref`` tokenizer): a
  message is rendered alone (``<|im_start|>role\ncontent<|im_end|>\n``) and counted once; a list
  costs the sum of its messages plus the generation prompt. For ChatML and the tiktoken/byte
  tokenizers the sum equals the count of the whole rendered text, because the role markers start a
  new pre-token at every message boundary. Text mode only (no tools).
* ``TemplateCounter`` (chat format ``template``, tokenizer ``hf-dir:DIR``): the served model's own
  chat template and tokenizer, rendered as vLLM renders a request (``arc_ref.templates``: Hugging
  Face ``apply_chat_template``'s Jinja environment, vLLM's preprocessing of messages and tools) and
  encoded as the server encodes it; tool listings, tool calls and tool results included. A prompt
  ``[system, user, ...]`` is counted per message with the core's exact per-place costs
  (``arc_ref.templates.TemplateFormat``: head + each message's piece in the place it has + tail,
  cached per message, so a call costs O(messages), never a re-encoding of the history); any other
  prompt (a condensing request, a probe) is rendered whole and encoded. Both are exact.

``make_counter`` builds the counter of a tokenizer and chat format; there is no process-wide cache:
the run builds one and hands it on (``MethodSettings.counter``, ``BackendRun.counter``).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, Protocol, Sequence

from arc_ref.chat import DEFAULT_CHAT_FORMAT, get_chat_format
from arc_ref.config import DEFAULT_TEMPLATE_KWARGS, SYSTEM_CONTEXT, TEMPLATE_FORMAT
from arc_ref.counting import joined_tokens
from arc_ref.errors import BudgetViolation, ConfigError
from arc_ref.message import Message as CoreMessage
from arc_ref.message import ToolSpec
from arc_ref.templates import (
    TemplateFormat,
    clear_template_formats,
    compiled_template,
    load_template_source,
    server_conversation,
    server_tools,
    template_format,
)
from arc_ref.tokenizers import HF_DIR_PREFIX, HuggingFaceTokenizer, Tokenizer, get_tokenizer, hf_tokenizer_name
from arc_ref.view import placed_costs
from arc_eval.types import Message

_NO_TOOLS = (
    "chat format {name!r} has no tool calls: tool-calling mode counts prompts with the served model's own chat"
    " template (--tokenizer DIR, the model directory)"
)
DEFAULT_TOKENIZER = "o200k_base"  # the evaluation's default tokenizer (a stand-in for a served model's)
NEUTRAL_TEXT = "x"  # system prompt and goal of the format that prices a message on its own (message_tokens)


class TokenCounter(Protocol):
    """What every part of the evaluation layer counts prompts with (``make_counter``)."""

    @property
    def name(self) -> str: ...

    @property
    def tokenizer_name(self) -> str:
        """The ``arc_ref`` tokenizer name it counts with (``hf-dir:DIR``: a model directory's)."""
        ...

    @property
    def chat_format_name(self) -> str:
        """The chat format it renders with (``template``: the model directory's own chat template)."""
        ...

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def generation_prompt_tokens(self) -> int:
        """Tokens of the generation prompt after the last message."""
        ...

    def message_tokens(self, message: Message, tools: Sequence[ToolSpec] = ()) -> int:
        """Tokens of one message wherever it sits (a served template's largest over its places)."""
        ...

    def content_tokens(self, message: Message) -> int | None:
        """Tokens of the message's content alone, taken from the message's count where that is exact; else None."""
        ...

    def note_content_tokens(self, message: Message, content_tokens: int) -> None:
        """A message whose content's count is already known (``text_tokens``): its own count is derived from it
        where the chat format embeds the content verbatim, and kept for ``count`` (the same figure)."""
        ...

    def count(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        """Prompt tokens of ``messages`` sent with ``tools``, the generation prompt included (exact)."""
        ...

    def render(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> str:
        """The whole prompt text the server renders for ``messages`` and ``tools``."""
        ...

    def text_tokens(self, text: str) -> int:
        """Tokens of a bare text (no role markers), cached."""
        ...

    def clear(self) -> None:
        """Forget every cached count."""
        ...


class PromptCounter:
    """Counts the tokens a server charges for a message list, one cached count per message.

    A message is rendered alone (``<|im_start|>role\\ncontent<|im_end|>\\n`` for ChatML) and
    counted once; a list costs the sum of its messages plus the generation prompt. For ChatML and
    the tiktoken/byte tokenizers the sum equals the count of the whole rendered text, because the
    role markers start a new pre-token at every message boundary.
    """

    def __init__(self, tokenizer: str = DEFAULT_TOKENIZER, chat_format: str = DEFAULT_CHAT_FORMAT,
                 cache_size: int = 8192):
        self.tokenizer = get_tokenizer(tokenizer)
        self.chat_format = get_chat_format(chat_format)
        self.tokenizer_name = tokenizer
        self.chat_format_name = chat_format
        self.name = f"{tokenizer} over {chat_format}"
        self._cache: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._cache_size = cache_size
        self.generation_prompt_tokens = self.tokenizer.count(self.chat_format.generation_prompt)

    def message_tokens(self, message: Message, tools: Sequence[ToolSpec] = ()) -> int:
        """Tokens of one message, role markers included (the same wherever it sits)."""
        if message.tool_calls or message.tool_call_id is not None:
            raise ConfigError(_NO_TOOLS.format(name=self.chat_format.name))
        key = (message.role, message.content)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        tokens = self.tokenizer.count(self.chat_format.render_message(message.role, message.content))
        self._cache[key] = tokens
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return tokens

    def content_tokens(self, message: Message) -> int | None:
        """Tokens of the message's content alone: its message count (cached) less its frame's, where the tokenizer's
        boundary rule vouches for both junctions of the content with the frame (no token crosses them, so the
        message's tokens are the frame's and the content's); None where it does not, or the format has no frame."""
        frame = self.chat_format.frame(message.role)
        if message.tool_calls or message.tool_call_id is not None or frame is None:
            return None
        before, after = frame
        content = message.content
        if not content:
            return 0
        splits = self.tokenizer.splits_between
        if not (splits(before[-1], content[0]) and splits(content[-1], after[0])):
            return None
        return self.message_tokens(message) - self.tokenizer.count(before) - self.tokenizer.count(after)

    def note_content_tokens(self, message: Message, content_tokens: int) -> None:
        """Keep the count of a message whose content's count is known, summed from the frame and the content
        (``arc_ref.counting.joined_tokens``: the content is not encoded again where the tokenizer's boundary
        rule vouches for the junctions, only the few characters at an edge it does not vouch for)."""
        key = (message.role, message.content)
        frame = self.chat_format.frame(message.role)
        if message.tool_calls or message.tool_call_id is not None or frame is None or key in self._cache:
            return
        before, after = frame
        self._cache[key] = joined_tokens(self.tokenizer, ((before, None), (message.content, content_tokens),
                                                          (after, None)))
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def clear(self) -> None:
        """Forget every cached count (benchmarks measure cold caches with it)."""
        self._cache.clear()

    def count(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        """Prompt tokens of ``messages`` with the generation prompt appended."""
        if tools:
            raise ConfigError(_NO_TOOLS.format(name=self.chat_format.name))
        return sum(self.message_tokens(message) for message in messages) + self.generation_prompt_tokens

    def render(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> str:
        """The whole prompt text: every message, then the generation prompt."""
        if tools or any(message.tool_calls or message.tool_call_id is not None for message in messages):
            raise ConfigError(_NO_TOOLS.format(name=self.chat_format.name))
        return self.chat_format.render((message.role, message.content) for message in messages)

    def text_tokens(self, text: str) -> int:
        """Tokens of a bare text (no role markers), cached like messages (retrieved memory repeats)."""
        key = ("", text)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        tokens = self.tokenizer.count(text)
        self._cache[key] = tokens
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return tokens


class TemplateCounter:
    """Counts prompts with a model directory's own tokenizer and chat template, exactly as vLLM serves it.

    ``tokenizer`` is ``hf-dir:DIR``; ``template_kwargs`` are the ``chat_template_kwargs`` every
    request carries (the backends send ``{"enable_thinking": false}``). See the module docstring for
    how a prompt is counted.
    """

    def __init__(self, tokenizer: str, template_kwargs: tuple[tuple[str, Any], ...] = DEFAULT_TEMPLATE_KWARGS,
                 cache_size: int = 8192) -> None:
        if not tokenizer.startswith(HF_DIR_PREFIX):
            raise ConfigError(
                f"chat format {TEMPLATE_FORMAT!r} renders a model directory's own chat template: it needs the"
                f" tokenizer 'hf-dir:DIR' (or --tokenizer DIR), got {tokenizer!r}"
            )
        loaded = get_tokenizer(tokenizer)
        assert isinstance(loaded, HuggingFaceTokenizer)
        self.tokenizer: HuggingFaceTokenizer = loaded
        self.tokenizer_name = tokenizer
        self.chat_format_name = TEMPLATE_FORMAT
        self.name = f"{tokenizer} with its chat template"
        self.directory = tokenizer[len(HF_DIR_PREFIX):]
        self.template_kwargs = tuple(template_kwargs)
        self.source = load_template_source(self.directory)
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._cache_size = cache_size
        neutral = self._format(NEUTRAL_TEXT, NEUTRAL_TEXT, (), "text")  # a template the core cannot split fails here
        self.generation_prompt_tokens = neutral.tail_tokens

    def _format(self, system: str, goal: str, tools: Sequence[ToolSpec], action_mode: str) -> TemplateFormat:
        """The core's format for a prefix (shared with ARC's own tasks: the same cache key gives the same object)."""
        return template_format(self.tokenizer, self.directory, self.template_kwargs, tuple(tools), system, goal,
                               action_mode)

    def render(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> str:
        """What the server renders: the template over vLLM's reading of the request (``arc_ref.templates``)."""
        return self.render_request([message.as_json() for message in messages], tools)

    def render_request(self, messages: Sequence[Any], tools: Sequence[ToolSpec] = (),
                       template_kwargs: tuple[tuple[str, Any], ...] | None = None) -> str:
        """The same for OpenAI JSON messages (a server's view of a request), with the request's own template kwargs
        when given (``arc_ref.templates.request_template_kwargs``), else this counter's."""
        source = self.source.tool_source if (tools and self.source.tool_source is not None) else self.source.source
        kwargs = self.template_kwargs if template_kwargs is None else template_kwargs
        template = compiled_template(source, self.source.special_tokens, kwargs, self.directory)
        return template.render(server_conversation(messages), server_tools(tuple(tools)), True)

    def count(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        """Exact prompt tokens: per message in its place for ``[system, user, ...]``, else the whole rendering."""
        if (len(messages) > 2 and messages[0].role == "system" and messages[1].role == "user"
                and not any(_reads_as_tool_result(message) for message in messages)):
            try:
                return self._count_placed(messages, tools)
            except BudgetViolation:  # a message in a place the format does not price: render the whole
                pass
        return self.tokenizer.count(self.render(messages, tools))

    def _count_placed(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> int:
        fmt = self._format(messages[0].content, messages[1].content, tools, "tools" if tools else "text")
        priced = [
            CoreMessage("system", messages[0].content, fmt.head_tokens + fmt.system_piece_tokens,
                        placed=((SYSTEM_CONTEXT, fmt.head_tokens + fmt.system_piece_tokens),)),
            CoreMessage("user", messages[1].content, max(cost for _, cost in fmt.goal_costs), placed=fmt.goal_costs),
        ]
        for message in messages[2:]:
            placed = fmt.placed_costs(message.role, message.content, message.tool_calls, message.tool_call_id)
            priced.append(CoreMessage(message.role, message.content, max(cost for _, cost in placed),
                                      message.tool_calls, message.tool_call_id, placed))
        return sum(placed_costs(priced)) + fmt.tail_tokens

    def message_tokens(self, message: Message, tools: Sequence[ToolSpec] = ()) -> int:
        """The message's largest cost over the places a view can give it (a bound for budgeting; counts are exact)."""
        tool_mode = bool(tools) or message.role == "tool" or bool(message.tool_calls)
        fmt = self._format(NEUTRAL_TEXT, NEUTRAL_TEXT, tools, "tools" if tool_mode else "text")
        placed = fmt.placed_costs(message.role, message.content, message.tool_calls, message.tool_call_id)
        return max(cost for _, cost in placed)

    def text_tokens(self, text: str) -> int:
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        tokens = self.tokenizer.count(text)
        self._cache[text] = tokens
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return tokens

    def content_tokens(self, message: Message) -> int | None:
        """None: a served template may rewrite the content, so a message's count does not give its content's."""
        return None

    def note_content_tokens(self, message: Message, content_tokens: int) -> None:
        """Nothing to keep: a served template may rewrite the content and prices it by place (``count``)."""

    def clear(self) -> None:
        """Forget every cached count, the core's formats of prefixes included."""
        self._cache.clear()
        clear_template_formats()


def _reads_as_tool_result(message: Message) -> bool:
    """A user message that Qwen's templates (Qwen2.5, Qwen3, QwQ) take for a tool result rather than a query: its
    whole content is one ``<tool_response>`` block. The per-place costs (spec/rendering.md section 3.1) count any
    user message as a query, so such a prompt is rendered whole. No message the evaluation builds has this form
    (every observation, memory and note starts with its own header); a task's goal could."""
    content = message.content
    return message.role == "user" and content.startswith("<tool_response>") and content.endswith("</tool_response>")


def model_directory(tokenizer: str) -> str | None:
    """The model directory a tokenizer option names (``hf-dir:DIR``, or a path: a directory, or one that is not
    there, so that its counter says so rather than that no tokenizer has that name), else None."""
    if tokenizer.startswith(HF_DIR_PREFIX):
        return tokenizer[len(HF_DIR_PREFIX):]
    looks_like_a_path = ":" not in tokenizer and ("/" in tokenizer or os.sep in tokenizer)  # hf:PATH is a name
    return tokenizer if os.path.isdir(tokenizer) or looks_like_a_path else None


def resolve_counting(tokenizer: str, chat_format: str = "auto", tokenizer_json: str | None = None) -> tuple[str, str]:
    """The ``arc_ref`` tokenizer name and chat format that options name: the one place they are resolved.

    A model directory (``DIR`` or ``hf-dir:DIR``) gives its own tokenizer and, with the chat format ``auto``,
    its own chat template (rendered as vLLM renders it); ``tokenizer_json`` gives that file's tokenizer over
    the chat format (ChatML for ``auto``)."""
    directory = model_directory(tokenizer)
    if tokenizer_json:
        name = hf_tokenizer_name(tokenizer_json)
    elif directory is not None:
        name = f"{HF_DIR_PREFIX}{directory}"
    else:
        name = tokenizer
    if chat_format == "auto":
        chat_format = TEMPLATE_FORMAT if name.startswith(HF_DIR_PREFIX) else DEFAULT_CHAT_FORMAT
    return name, chat_format


def make_counter(tokenizer: str = DEFAULT_TOKENIZER, chat_format: str = DEFAULT_CHAT_FORMAT) -> TokenCounter:
    """The counter of a tokenizer and chat format (``template``: the model directory's own chat template); the
    run builds one and hands it on (an unknown tokenizer or format, or a template the core cannot split, fails
    here, clearly)."""
    if chat_format == TEMPLATE_FORMAT:
        return TemplateCounter(tokenizer)
    return PromptCounter(tokenizer, chat_format)


def default_counter() -> TokenCounter:
    """A counter with the defaults (``DEFAULT_TOKENIZER`` over ``DEFAULT_CHAT_FORMAT``), for a component built alone."""
    return make_counter()
