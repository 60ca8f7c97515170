"""Served-model chat templates: render and count a conversation exactly as vLLM does (A4's Serialize).

A model directory in Hugging Face layout (``tokenizer.json``, ``tokenizer_config.json`` with ``chat_template``,
or ``chat_template.jinja``) gives the chat format ``template``: the model's own Jinja chat template, rendered
the way vLLM renders it (Hugging Face ``apply_chat_template``) and encoded with the model's own tokenizer.
The rules are stated for a port in spec/rendering.md section 3.1.

Why ``jinja2`` and not ``transformers``: ``transformers`` renders with ``jinja2`` itself, in an environment
that is fully stated in its source (``utils/chat_template_utils.py``); reproducing that environment here
(below, ``_environment``) keeps the core light (no ``transformers``, ``huggingface_hub``, ``safetensors`` or
``numpy`` at run time) and lets the core split the rendering per message (``ChatTemplate.render_parts``),
which ``apply_chat_template`` cannot do. A test checks byte equality with ``transformers``' own
``apply_chat_template`` on random conversations, with and without tools
(tests/core/test_templates.py).

What vLLM does before the template sees a request (vllm/entrypoints/chat_utils.py, ``parse_chat_messages``
and ``_postprocess_messages``; the chat serving code), reproduced by ``server_conversation`` and
``server_tools``:
- a message's ``content`` that is ``None`` becomes ``""``; a list of text parts is joined with ``"\\n"``;
- an assistant message keeps ``tool_calls`` (an empty list is dropped); each call's ``arguments`` string is
  parsed with ``json.loads`` (a string that is not valid JSON, or whose value is not a JSON object, becomes
  ``{}``), so templates print it again with ``tojson``: ``{"id":"§1"}`` is rendered ``{"id": "§1"}``;
- a tool message keeps ``tool_call_id``; ``name`` is kept when it is a string;
- each tool is passed as its pydantic dump: ``{"type": "function", "function": {"name", "description",
  "parameters"}}`` in that order, a missing description or parameters being ``null``;
- the template gets ``messages``, ``tools`` (``None`` without tools), ``add_generation_prompt``, the
  tokenizer's special tokens (``eos_token``...) and the ``chat_template_kwargs`` of the request
  (``{"enable_thinking": false}`` from the eval layer);
- the rendered text is encoded with ``add_special_tokens=False``: added tokens in the text are matched.
The Jinja environment is ``transformers``': an ``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and
``lstrip_blocks``, the ``loopcontrols`` extension and a ``generation`` block tag that renders its body, a
``tojson`` filter that is ``json.dumps(x, ensure_ascii=False, indent=None, separators=None,
sort_keys=False)`` (no HTML escaping), ``raise_exception``, ``dict`` and an underscore-refusing ``namespace``.
``strftime_now`` would read the clock, which the core may not: a template calling it is refused while
rendering, with a message naming ``date_string``.

Per-message costs (spec/rendering.md section 3.1). The rendering is split per message by instrumenting the
template's one loop over ``messages`` (``render_parts``): head (before the loop), one piece per message
(what one iteration writes), tail (after the loop: the generation prompt). A message's piece may depend on
its position (Qwen3 writes a ``<think>`` block on the last assistant turn, groups consecutive tool results
in one user turn): its *context* is (role before it, role after it or None, whether a user message follows).
`TemplateFormat.placed_costs` counts a message's piece in every context the view can give it, by rendering
it in probe conversations that realise those contexts; the budgets use the largest, the view sums the counts
of the contexts it actually gives (exact, not a bound). Counting pieces separately is exact because every
boundary between pieces falls beside an added token (checked when the format is built), and Hugging Face
tokenizers split the text at added tokens before anything else.

Each text is counted once (spec/rendering.md section 3.1, "Counting each text once"): a piece is its added
tokens and the texts between them, each counted once and remembered; a content the piece holds verbatim is
counted apart from the context's wrapper, once for all contexts, its known parts (a stored observation's n_j)
not at all; the tools listing is serialized once; a tool message's costs hold for every call id when the
template never read its ``tool_call_id`` (`_WatchedMessage`), so the tool-result reserve is rendered once.
What still needs a rendering is each new message, once per probe conversation of its role (3 for an assistant
turn, 2 for a tool result, 6 for a user message in tool mode): the template is arbitrary code, and a piece is
known only by running it in a conversation that gives the message its context. No count renders a whole view;
the replay does so only for a view line's text.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
from collections import OrderedDict
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import jinja2
import jinja2.compiler
import jinja2.ext
import jinja2.nodes
import jinja2.runtime
import jinja2.sandbox
import attrs
from attrs import frozen

from arc_ref.chat import parse_template_kwargs
from arc_ref.counting import EDGE_WINDOW, SPLIT_FROM, Part, joined_tokens
from arc_ref.errors import BudgetViolation, ConfigError
from arc_ref.message import Context, ToolCall, ToolSpec, openai_message, shared_context
from arc_ref.openai_wire import ShapeError, content_parts
from arc_ref.tokenizers import HuggingFaceTokenizer, read_regular_file

TEMPLATE_FILE_LIMIT = 2**20  # bytes of chat_template.jinja; published templates are a few kB
CONFIG_FILE_LIMIT = 16 * 2**20  # bytes of tokenizer_config.json (some carry thousands of added tokens)
# The named special tokens (transformers 5, what vLLM 0.32 renders with); `additional_special_tokens` and a list of
# `extra_special_tokens` are not template variables, model-specific ones are (`_special_token_variables`).
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
FILLER = "x"  # content of the neighbours in probe conversations


class TemplateRefused(ConfigError):
    """A template the core cannot render or split exactly (the message says why).

    Its code is ``invalid_event``: met by a transition, it is the conversation that the template refuses (met
    while a configuration is built, the front end refuses the configuration as a whole)."""

    code = "invalid_event"


# --- the Jinja environment of transformers' apply_chat_template ------------------------------------


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: transformers tracks assistant spans with it; renders its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller: Callable[[], str]) -> str:
        return caller()


# Mapping types whose instances have no attribute of their own (no __dict__, no __getattr__): reading a name
# that is not an attribute of the type raises AttributeError, and the sandbox then reads the item. Their
# attribute names, per type.
_ITEM_TYPES: dict[type, frozenset[str]] = {dict: frozenset(dir(dict))}


class SerializedTool(dict[str, Any]):
    """A tool as the template sees it (a dict), carrying its ``tojson`` text: the tools listing is serialized
    once per format, not in every rendering (``json.dumps`` of this dict is the same text). The text sits in
    a slot whose name starts with ``_``, which the sandbox refuses to a template, as it refuses it on a dict."""

    __slots__ = ("_text",)

    def __init__(self, tool: Mapping[str, Any]) -> None:
        super().__init__(tool)
        self._text = json.dumps(self, ensure_ascii=False)


_ITEM_TYPES[SerializedTool] = frozenset(dir(SerializedTool))


class _KnownJSON(threading.local):
    """Per thread, the ``tojson`` texts known for objects of the rendering in progress, by ``id`` beside the object
    itself (`TemplateFormat._plan_costs`: a probed tool call's arguments, a new dict in each occurrence, serialized
    once per probed message). The objects stay the plain dicts the server passes (a subclass would show a template
    other attribute names); the sandbox lets no template change them while it renders."""

    texts: dict[int, tuple[Any, str]] | None = None


_KNOWN_JSON = _KnownJSON()


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    if not ensure_ascii and indent is None and separators is None and not sort_keys:
        if type(x) is SerializedTool:
            return x._text
        known = _KNOWN_JSON.texts
        if known:
            entry = known.get(id(x))
            if entry is not None and entry[0] is x:
                return entry[1]
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> str:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(format: str) -> str:
    raise jinja2.exceptions.TemplateError(
        "the template reads the clock (strftime_now); the core has no clock: pass the date as a template"
        " keyword (for example date_string) in template_kwargs"
    )


class _TemplateDict:
    """``dict(...)`` for templates without access to the dict type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """``namespace(...)`` refusing underscore-prefixed attributes (as transformers does)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - same signature trick as jinja's Namespace
        self, rest = args[0], args[1:]
        attributes = dict(*rest, **kwargs)
        for name in attributes:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attributes)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"chat templates cannot store underscore-prefixed attributes on a namespace, got {name!r}"
            )


_LOOP_NUMBERS = frozenset(("index", "index0", "revindex", "revindex0", "first", "last", "length", "depth", "depth0"))
# jinja's wrap_str_format wraps only a bound method: types.MethodType and types.BuiltinMethodType (neither can be
# subclassed: the type test is isinstance's), taken from two bound methods (a core module imports no ``types``)
_BUILTIN_METHOD: type = type("".startswith)
_METHOD_TYPES: tuple[type, ...] = (type(_TemplateDict().fromkeys), _BUILTIN_METHOD)
_ABSENT = object()
_LOOP_CONTEXT = jinja2.runtime.LoopContext
_DICT_NAMES = _ITEM_TYPES[dict]
_object_attribute = object.__getattribute__  # a namespace's own dict read past its __getattribute__


class _Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """transformers' sandbox (`ImmutableSandboxedEnvironment`), its attribute lookup taking short cuts that change
    no outcome: ``message.role`` on a plain mapping reads the item without first raising AttributeError (on a
    plain dict without raising KeyError when the key is absent), whether an attribute is safe, which for this
    sandbox depends only on the object's type and the name (``is_internal_attribute``, ``modifies_known_mutable``),
    is decided once per type and name, the loop's counters (``loop.index0``, ``loop.last``...: ints and bools,
    safe) are read as they are, ``ns.name`` (a name without a leading ``_``) is read from the namespace's own
    dict as its ``__getattribute__`` reads it, and ``wrap_str_format`` is called only on a bound method."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._safe: dict[tuple[type, str], bool] = {}

    def getattr(self, obj: Any, attribute: str) -> Any:
        kind = type(obj)
        if kind is dict:  # the commonest object (``message.role``): tested first
            if attribute not in _DICT_NAMES:  # an item type's read (below), for a plain dict
                try:  # dict.get and obj[...] find the same item; a plain dict has no __missing__
                    value = obj.get(attribute, _ABSENT)
                    return self.undefined(obj=obj, name=attribute) if value is _ABSENT else value
                except (TypeError, LookupError):
                    return self.undefined(obj=obj, name=attribute)
        elif kind is _LOOP_CONTEXT and attribute in _LOOP_NUMBERS:
            return getattr(obj, attribute)  # an int or a bool: nothing to wrap, and safe for this sandbox
        else:
            names = _ITEM_TYPES.get(kind)
            if names is not None and attribute not in names:
                try:
                    return obj[attribute]
                except (TypeError, LookupError):
                    return self.undefined(obj=obj, name=attribute)
        if kind is _TemplateNamespace and type(attribute) is str and attribute[:1] != "_":
            # Namespace.__getattribute__ reads such a name from its dict (AttributeError when absent); a namespace
            # has no __getitem__, so the fallback below would give undefined
            value = _object_attribute(obj, "_Namespace__attrs").get(attribute, _ABSENT)
            if value is _ABSENT:
                return self.undefined(obj=obj, name=attribute)
        else:
            try:
                value = getattr(obj, attribute)
            except AttributeError:
                try:
                    return obj[attribute]
                except (TypeError, LookupError):
                    pass
                return self.undefined(obj=obj, name=attribute)
        if type(value) in _METHOD_TYPES:
            fmt = self.wrap_str_format(value)
            if fmt is not None:
                return fmt
        safe = self._safe.get((kind, attribute))
        if safe is None:
            safe = self._safe[(kind, attribute)] = self.is_safe_attribute(obj, attribute, value)
        if safe:
            return value
        return self.unsafe_undefined(obj, attribute)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - jinja's names
        """A call from the template: for a method of a plain string (``content.startswith``: jinja 3.1 calls even an
        unwrapped ``str.format`` as it is) and for ``namespace(...)``, jinja's own steps written out, since such a
        callable is safe (it holds no ``unsafe_callable`` or ``alters_data``) and takes no context (no
        ``jinja_pass_arg``, on it or on its ``__call__``); any other callable goes through jinja's checks."""
        kind: Any = type(__obj)
        if __obj is _TemplateNamespace or (kind is _BUILTIN_METHOD and type(__obj.__self__) is str):
            kwargs.pop("_block_vars", None)
            kwargs.pop("_loop_vars", None)
            # (Context.call also turns a StopIteration into an undefined: no str method and no namespace(...)
            # raises one)
            return __obj(*args, **kwargs)
        return super().call(__context, __obj, *args, **kwargs)


# str's methods a template may call as they are (the sandbox wraps only format and format_map: `_Sandbox.getattr`)
_STR_METHODS = frozenset(name for name in dir(str) if not name.startswith("_")) - {"format", "format_map"}


class _InlineReads(jinja2.compiler.CodeGenerator):
    """The sandbox's code generator, writing the commonest reads of a chat template inline, each guarded by a type
    test, so that the compiled template does not call the sandbox for them; any other object (a subclass too) takes
    the sandbox's own call, on the same objects, evaluated once and in the same order. What each inline read gives is
    what the sandbox gives for it (`_Sandbox.getattr`, `call`; jinja's ``SandboxedEnvironment.getitem``):

    - ``x.name`` on a plain dict, ``name`` not a dict attribute and without a leading ``_``: the item, when the dict
      holds it (``dict.get``; an absent one takes the sandbox's path: undefined);
    - ``loop.index0`` and the loop's other counters (`_LOOP_NUMBERS`) on jinja's ``LoopContext``: the attribute;
    - ``x[i]`` on a plain list with an int index (not a bool) within its length: the item;
    - ``x.method(args)`` on a plain str, ``method`` one of str's (not format, format_map, nor ``_...``) and every
      argument a constant or a name, passed by position: the method's result.

    Measured (issue 28): the renders of a new conversation of bench_proxy's shape on Qwen3's template, replayed,
    8.5% faster. `tests/core/test_templates.py` compares each with the sandbox's own rendering on templates that read
    every kind of object there."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._temporaries = 0

    def _temporary(self) -> str:
        """A new local name (jinja's own are ``l_N_...``, ``t_N`` and ``_loop_vars``/``_block_vars``)."""
        self._temporaries += 1
        return f"_arc_{self._temporaries}"

    @jinja2.compiler.optimizeconst
    def visit_Getattr(self, node: jinja2.nodes.Getattr, frame: jinja2.compiler.Frame) -> None:
        name = node.attr
        loop = name in _LOOP_NUMBERS
        item = not name.startswith("_") and name not in _DICT_NAMES
        if self.environment.is_async or not (loop or item):
            super().visit_Getattr(node, frame)
            return
        obj, value = self._temporary(), self._temporary()
        self.write(f"({obj}.{name} if type({obj} := " if loop else f"({value} if type({obj} := ")
        self.visit(node.node, frame)
        if loop:
            self.write(") is LoopContext else ")
            if item:
                self.write(f"{value} if type({obj}) is dict and ({value} := {obj}.get({name!r}, missing)) is not"
                           " missing else ")
        else:
            self.write(f") is dict and ({value} := {obj}.get({name!r}, missing)) is not missing else ")
        self.write(f"environment.getattr({obj}, {name!r}))")

    @jinja2.compiler.optimizeconst
    def visit_Getitem(self, node: jinja2.nodes.Getitem, frame: jinja2.compiler.Frame) -> None:
        if self.environment.is_async or isinstance(node.arg, jinja2.nodes.Slice):
            super().visit_Getitem(node, frame)
            return
        obj, index = self._temporary(), self._temporary()
        self.write(f"({obj}[{index}] if (type({obj} := ")  # both evaluated, the object first (a sum of two bools)
        self.visit(node.node, frame)
        self.write(f") is list) + (type({index} := ")
        self.visit(node.arg, frame)
        self.write(f") is int) == 2 and -len({obj}) <= {index} < len({obj}) else environment.getitem({obj}, {index}))")

    def visit_Call(self, node: jinja2.nodes.Call, frame: jinja2.compiler.Frame, forward_caller: bool = False) -> None:
        method = node.node
        if (self.environment.is_async or forward_caller or not isinstance(method, jinja2.nodes.Getattr)
                or method.attr not in _STR_METHODS or node.kwargs or node.dyn_args is not None
                or node.dyn_kwargs is not None
                or not all(isinstance(arg, (jinja2.nodes.Const, jinja2.nodes.Name)) for arg in node.args)):
            super().visit_Call(node, frame, forward_caller=forward_caller)
            return
        # the arguments are written twice (one branch runs): constants and names only, so nothing is evaluated twice
        obj = self._temporary()
        self.write(f"({obj}.{method.attr}(")
        self._arguments(node, frame)
        self.write(f") if type({obj} := ")
        self.visit(method.node, frame)
        self.write(f") is str else environment.call(context, environment.getattr({obj}, {method.attr!r})")
        if node.args:
            self.write(", ")
            self._arguments(node, frame)
        if frame.loop_frame:
            self.write(", _loop_vars=_loop_vars")
        if frame.block_frame:
            self.write(", _block_vars=_block_vars")
        self.write("))")

    def _arguments(self, node: jinja2.nodes.Call, frame: jinja2.compiler.Frame) -> None:
        for number, argument in enumerate(node.args):
            if number:
                self.write(", ")
            self.visit(argument, frame)


# The inline reads write code into what jinja 3.1's generator writes (its visit_Getattr, visit_Getitem and
# visit_Call, the names a compiled template imports: LoopContext, missing): under another jinja its own generator stays.
INLINE_READS_JINJA = "3.1."
if jinja2.__version__.startswith(INLINE_READS_JINJA):
    _Sandbox.code_generator_class = _InlineReads


def _environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env


# --- what vLLM hands to the template ---------------------------------------------------------------


def _content_text(content: Any) -> str:
    """A message's text as vLLM hands it to a "string" content-format template: its text parts joined by newlines
    (the proxy's messages carry one string; `_as_text_parts` wraps it for an "openai" one)."""
    try:
        return "\n".join(content_parts(content, as_server=True))
    except ShapeError as bad:
        if bad.rule == "part":
            raise ValueError(f"content part {bad.value!r} is not text; the core renders text conversations only") \
                from None
        raise ValueError("message content must be a string, a list of text parts or null,"
                         f" got {type(content).__name__}") from None


def server_arguments(arguments: Any) -> dict[str, Any]:
    """A tool call's ``arguments`` as vLLM passes them to the template: a JSON string is parsed, and whatever is
    not then a non-empty JSON object (bad JSON, a JSON string, list, number, true, false or null, an empty value)
    is {} (vLLM 0.32's ``_postprocess_messages``)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return {}
    return arguments if isinstance(arguments, dict) else {}


def server_conversation(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages as vLLM hands them to ``apply_chat_template`` (text content only)."""
    conversation: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        converted: dict[str, Any] = {"role": role, "content": _content_text(message.get("content"))}
        if role == "assistant":
            calls = message.get("tool_calls")
            if calls:
                converted["tool_calls"] = [
                    {**call, "function": {**call["function"], "arguments": server_arguments(call["function"].get("arguments"))}}
                    for call in calls
                ]
            reasoning = message.get("reasoning", message.get("reasoning_content"))
            if reasoning is not None:
                converted["reasoning"] = reasoning
                converted["reasoning_content"] = reasoning
        elif role == "tool" and "tool_call_id" in message:
            converted["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            converted["name"] = message["name"]
        conversation.append(converted)
    return conversation


def server_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]] | None:
    """The ``tools`` vLLM passes to the template: each tool's pydantic dump (None fields kept); None when empty."""
    if not tools:
        return None
    return [tool.server_dump() for tool in tools]


RENDERING_DEFAULTS = (("add_generation_prompt", True), ("continue_final_message", False), ("documents", None),
                      ("chat_template", None), ("truncate_prompt_tokens", None), ("add_special_tokens", False))
"""A request's fields that change vLLM's rendering or its tokens, at the values the core counts with (a prompt
cut to ``truncate_prompt_tokens`` from its start loses the view's head; ``add_special_tokens`` adds a BOS token
where the tokenizer's post-processor has one)."""


def request_template_kwargs(request: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The ``chat_template_kwargs`` vLLM renders a chat request with, sorted by name (vLLM 0.32,
    ``ChatCompletionRequest.build_chat_params``): the request's own ``chat_template_kwargs`` (none when absent:
    Qwen3's ``enable_thinking`` is then undefined, not false), ``reasoning_effort`` when set, and, when the request
    sets ``reasoning_effort`` but not ``enable_thinking``, ``enable_thinking = reasoning_effort != "none"``.
    A server started with ``--default-chat-template-kwargs`` adds its own under these (not visible in a request).
    ConfigError for a request the core cannot render as vLLM does (another template, documents, no generation
    prompt, a continued final message, a truncated prompt, special tokens added, prompt token ids given in
    ``kv_transfer_params``, kwargs that are not an object of scalars)."""
    for name, default in RENDERING_DEFAULTS:
        if name in request and request[name] != default and request[name] is not None:
            raise ConfigError(f"{name}={json.dumps(request[name])[:40]}: the proxy counts prompts rendered with"
                              f" the served template and {name}={json.dumps(default)} only")
    transfer = request.get("kv_transfer_params")
    if isinstance(transfer, Mapping) and "prompt_token_ids" in transfer:
        raise ConfigError("kv_transfer_params.prompt_token_ids: the server would take these ids as the prompt, not"
                          " the view the proxy counted")
    given = request.get("chat_template_kwargs")
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise ConfigError(f"chat_template_kwargs must be an object, got {json.dumps(given)[:40]}")
    kwargs = dict(parse_template_kwargs(dict(given)))
    effort = request.get("reasoning_effort")
    if effort is not None:
        if not isinstance(effort, str):
            raise ConfigError(f"reasoning_effort must be a string, got {json.dumps(effort)[:40]}")
        kwargs["reasoning_effort"] = effort
        kwargs.setdefault("enable_thinking", effort != "none")
    return tuple(sorted(kwargs.items()))


# --- loading a model directory ----------------------------------------------------------------------


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _added_token_text(value: Any) -> str | None:
    """A string, or the content of an object tokenizer_config.json marks ``"__type": "AddedToken"``: the values
    transformers 5 takes as a model-specific special token (another object is not one)."""
    if isinstance(value, Mapping) and value.get("__type") != "AddedToken":
        return None
    return _token_text(value)


def _names_variable(source: str, name: str) -> bool:
    """Whether a template's text names the variable ``name`` as a whole word (``bos_token``, not ``add_bos_token``).
    The word's text is looked for first: the pattern, which begins with a look-behind, is tried at every position
    of the text (~90 us over Qwen3's template, three names a new conversation's prefix)."""
    return name in source and re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", source) is not None


def _read_json_object(path: str, what: str) -> dict[str, Any]:
    """The JSON object of a model directory's file (``what``: its description in an error)."""
    raw = read_regular_file(path, CONFIG_FILE_LIMIT, os.path.basename(path))
    try:
        loaded = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as bad:
        raise ConfigError(f"{what} {path!r} is not valid JSON: {bad}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{what} {path!r} must hold a JSON object")
    return loaded


def _template_files(directory: str) -> dict[str, str]:
    """chat_template.jinja ("default") and additional_chat_templates/NAME.jinja, read as transformers reads them."""
    named: dict[str, str] = {}
    template_path = os.path.join(directory, "chat_template.jinja")
    if os.path.exists(template_path):
        named["default"] = _read_text(template_path)
    extra_dir = os.path.join(directory, "additional_chat_templates")
    if os.path.isdir(extra_dir):
        for file_name in sorted(os.listdir(extra_dir)):
            if file_name.endswith(".jinja"):
                named[file_name[: -len(".jinja")]] = _read_text(os.path.join(extra_dir, file_name))
    return named


def _template_entries(config: Mapping[str, Any]) -> dict[str, str]:
    """tokenizer_config.json's ``chat_template``: one template ("default") or a list of named ones."""
    named: dict[str, str] = {}
    entry = config.get("chat_template")
    if isinstance(entry, str):
        named["default"] = entry
    elif isinstance(entry, list):
        for item in entry:
            if isinstance(item, Mapping) and isinstance(item.get("name"), str) and isinstance(item.get("template"), str):
                named[item["name"]] = item["template"]
    return named


def _special_token_variables(directory: str, config: dict[str, Any], sources: Sequence[str]) -> list[tuple[str, Any]]:
    """The special tokens a template sees by name, as transformers 5 (vLLM 0.32's renderer) builds them
    (spec/rendering.md section 3.1): in the legacy layout (no ``added_tokens_decoder``) special_tokens_map.json's
    entries over the config's; the seven named tokens; every other key ending in ``_token`` whose value is a string
    or an AddedToken, and the entries of an ``extra_special_tokens`` object over them. ConfigError where the
    template names a named token that the config leaves out (the server would give its tokenizer class's default:
    the class comes from tokenizer_config.json or from config.json's model_type, and the core does not guess it)."""
    config = dict(config)
    map_path = os.path.join(directory, "special_tokens_map.json")
    if "added_tokens_decoder" not in config and os.path.exists(map_path):
        for key, value in _read_json_object(map_path, "special tokens map").items():
            if key == "extra_special_tokens":  # only an object names tokens; a list leaves the config's object
                if not isinstance(value, Mapping):
                    continue
                if isinstance(config.get(key), Mapping):
                    value = {**config[key], **value}
            elif key.endswith("_token") and key not in SPECIAL_TOKEN_KEYS and isinstance(config.get(key), str):
                continue  # the config's own string was taken first and stays
            elif isinstance(value, Mapping):
                value = {**value, "__type": "AddedToken"}  # transformers makes every object an AddedToken here
            config[key] = value
    special: dict[str, Any] = {}
    for key in SPECIAL_TOKEN_KEYS:
        if key not in config:
            if any(_names_variable(source, key) for source in sources):
                raise ConfigError(
                    f"chat format 'template': the template reads {key}, which {directory!r}/tokenizer_config.json"
                    " does not set: the server then gives the default of the tokenizer class it resolves (from"
                    f" tokenizer_config.json or config.json), which arc-ref does not guess (set \"{key}\" in"
                    " tokenizer_config.json, null for none)")
            continue
        text = _token_text(config.get(key))
        if text is not None:
            special[key] = text
    for key, value in config.items():
        if key.endswith("_token") and key not in SPECIAL_TOKEN_KEYS:
            text = _added_token_text(value)
            if text is not None:
                special[key] = text
    extra = config.get("extra_special_tokens")
    if isinstance(extra, Mapping):
        for key, value in extra.items():
            text = _added_token_text(value)
            if isinstance(key, str) and text is not None:
                special[key] = text
    return list(special.items())


@frozen
class TemplateSource:
    """The chat template of a model directory and the special-token variables the template sees."""

    directory: str
    source: str | None  # the default template; None where there is only a "tool_use" one
    tool_source: str | None  # a named "tool_use" template, used when tools are passed (transformers' rule)
    special_tokens: tuple[tuple[str, Any], ...]


def load_template_source(directory: str) -> TemplateSource:
    """Find the template as transformers 5 does: template files (chat_template.jinja,
    additional_chat_templates/) when there are any, else tokenizer_config.json's entry; and the special tokens it
    sees (`_special_token_variables`)."""
    config_path = os.path.join(directory, "tokenizer_config.json")
    config: dict[str, Any] = {}
    if os.path.exists(config_path):
        config = _read_json_object(config_path, "tokenizer config")
    named = _template_files(directory) or _template_entries(config)
    if "default" not in named and "tool_use" not in named:
        raise ConfigError(
            f"chat format 'template': {directory!r} has no chat template (neither chat_template.jinja nor a"
            " chat_template entry in tokenizer_config.json)"
        )
    if config.get("split_special_tokens") is True:
        raise ConfigError(
            f"chat format 'template': {directory!r}/tokenizer_config.json sets split_special_tokens: the server"
            " would encode the template's special tokens as plain text, which the core does not count")
    sources = [source for source in (named.get("default"), named.get("tool_use")) if source is not None]
    special = _special_token_variables(directory, config, sources)
    return TemplateSource(directory, named.get("default"), named.get("tool_use"), tuple(special))


def _read_text(path: str) -> str:
    try:
        return read_regular_file(path, TEMPLATE_FILE_LIMIT, "chat template").decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"chat template {path!r} is not UTF-8 text") from None


# --- rendering, whole and split per message --------------------------------------------------------

_MARK_VARIABLE = "arc_ref_piece_mark"
_END_VARIABLE = "arc_ref_loop_end"
# Candidate marker characters: NUL, then noncharacters; one that occurs in no input marks the split points.
_MARK_CHARACTERS = "\x00" + "".join(chr(point) for point in range(0xFDD0, 0xFDF0))


def _message_loops(tree: jinja2.nodes.Template) -> list[jinja2.nodes.For]:
    return [
        loop for loop in tree.find_all(jinja2.nodes.For)
        if isinstance(loop.iter, jinja2.nodes.Name) and loop.iter.name == "messages"
    ]


def _insert_after(tree: jinja2.nodes.Node, target: jinja2.nodes.Node, new: jinja2.nodes.Node) -> bool:
    for field in tree.fields:
        value = getattr(tree, field, None)
        if isinstance(value, list):
            for position, child in enumerate(value):
                if child is target:
                    value.insert(position + 1, new)
                    return True
            for child in value:
                if isinstance(child, jinja2.nodes.Node) and _insert_after(child, target, new):
                    return True
        elif isinstance(value, jinja2.nodes.Node) and _insert_after(value, target, new):
            return True
    return False


# --- vLLM's content format: text content as a string, or as a list of text parts ------------------------


def _without_wrappers(node: jinja2.nodes.Node | None) -> jinja2.nodes.Node | None:
    """``node`` without the filters, tests and slices around it (``messages|reverse``, ``messages[1:]``)."""
    while node is not None:
        if isinstance(node, (jinja2.nodes.Filter, jinja2.nodes.Test)):
            node = node.node
        elif isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
            node = node.node
        else:
            return node
    return None


def _loads_name(node: jinja2.nodes.Node | None, name: str) -> bool:
    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == name


def _reads_variable(node: jinja2.nodes.Node, name: str, key: str | None = None) -> bool:
    """``node`` is the variable ``name`` (``key`` None) or its item ``key`` (``name.key``, ``name['key']``), under
    filters, tests and slices."""
    inner = _without_wrappers(node)
    if key is None:
        return _loads_name(inner, name)
    if isinstance(inner, jinja2.nodes.Getitem):
        return isinstance(inner.arg, jinja2.nodes.Const) and inner.arg.value == key and _loads_name(inner.node, name)
    if isinstance(inner, jinja2.nodes.Getattr):
        return inner.attr == key and _loads_name(inner.node, name)
    return False


def _plain_target(node: jinja2.nodes.Node) -> str | None:
    return node.name if isinstance(node, jinja2.nodes.Name) else None


def _message_list_names(tree: jinja2.nodes.Template) -> list[str] | None:
    """``messages`` and every variable set from it, transitively (``{% set loop_messages = messages[1:] %}``); None
    when one is set into a target that is not a plain name (vLLM's detection stops there)."""
    names, pending = ["messages"], ["messages"]
    while pending:
        current = pending.pop(0)
        for assign in tree.find_all(jinja2.nodes.Assign):
            if _reads_variable(assign.node, current):
                alias = _plain_target(assign.target)
                if alias is None:
                    return None
                if alias not in names:
                    names.append(alias)
                    pending.append(alias)
    return names


def _loops_over_content(tree: jinja2.nodes.Template) -> bool | None:
    """Whether the template loops over a message's content: ``for part in message.content`` (``message`` a loop
    variable over a message list), over a macro's parameter that a call passes a message's content, or over a
    variable named ``content`` outside a macro; None where vLLM's detection stops (a target that is not a plain
    name)."""
    lists = _message_list_names(tree)
    if lists is None:
        return None
    targets = [_plain_target(loop.target) for loop in tree.find_all(jinja2.nodes.For)
               if any(_reads_variable(loop.iter, name) for name in lists)]
    messages = [name for name in targets if name is not None]
    if len(messages) != len(targets):
        return None

    def reads_content(node: jinja2.nodes.Node) -> bool:
        return any(_reads_variable(node, name, "content") for name in messages)

    calls = list(tree.find_all(jinja2.nodes.Call))
    loops_in_macros: set[int] = set()
    content_parameters: dict[int, set[str]] = {}
    for macro in tree.find_all(jinja2.nodes.Macro):
        arguments = [argument.name for argument in macro.args]
        given: set[str] = set()
        for call in calls:
            if not (isinstance(call.node, jinja2.nodes.Name) and call.node.name == macro.name):
                continue
            given.update(arguments[position] for position, value in enumerate(call.args)
                         if position < len(arguments) and reads_content(value))
            given.update(keyword.key for keyword in call.kwargs
                         if keyword.key in arguments and reads_content(keyword.value))
        for loop in macro.find_all(jinja2.nodes.For):
            loops_in_macros.add(id(loop))
            if given:
                content_parameters[id(loop)] = given
    for loop in tree.find_all(jinja2.nodes.For):
        over_name = loop.iter.name if isinstance(loop.iter, jinja2.nodes.Name) else None
        if (reads_content(loop.iter)
                or (over_name is not None and over_name in content_parameters.get(id(loop), ()))
                or (over_name == "content" and id(loop) not in loops_in_macros)):
            return _plain_target(loop.target) is not None or None
    return False


def content_format(tree: jinja2.nodes.Template) -> str:
    """"openai" when vLLM 0.32 hands this template each text content as a list of text parts, else "string"
    (vLLM's ``_detect_content_format``, its server option left at "auto": spec/rendering.md section 3.1)."""
    return "openai" if _loops_over_content(tree) else "string"


def _as_text_parts(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as vLLM passes it to an "openai" content-format template: the string content of every
    message but a tool's as one text part (tool results stay strings); a probed message keeps its read notes."""
    shown: list[dict[str, Any]] = []
    for message in conversation:
        content = dict.get(message, "content")
        if dict.get(message, "role") == "tool" or not isinstance(content, str):
            shown.append(message)
            continue
        plain = dict(dict.items(message))
        plain["content"] = [{"type": "text", "text": content}]
        shown.append(_WatchedMessage(plain, message._reads) if isinstance(message, _WatchedMessage) else plain)
    return shown


UNSET_KEYWORD_VALUES = (None, "auto")
"""Template keywords with these values are left out, so the template finds them undefined (vLLM 0.32 merges a
request's ``chat_template_kwargs`` over its defaults with ``merge_kwargs``, which drops them)."""


class ChatTemplate:
    """One compiled chat template, whole and instrumented (a mark before each message and after the loop)."""

    def __init__(self, source: str, special_tokens: Mapping[str, Any], template_kwargs: Mapping[str, Any],
                 name: str) -> None:
        self.name = name
        env = _environment()
        try:
            self._whole = env.from_string(source)
            tree = env.parse(source)
        except jinja2.exceptions.TemplateError as bad:
            raise TemplateRefused(f"chat template of {name!r} does not compile: {bad}") from None
        assigned = [node for node in tree.find_all(jinja2.nodes.Assign)
                    if isinstance(node.target, jinja2.nodes.Name) and node.target.name == "messages"]
        loops = _message_loops(tree)
        if assigned or len(loops) != 1 or loops[0].test is not None or loops[0].recursive:
            raise TemplateRefused(
                f"chat template of {name!r} is not supported: the core splits a rendering at the iterations of the"
                " template's one loop 'for message in messages' over the unchanged list (found"
                f" {len(loops)} such loop(s){', and an assignment to messages' if assigned else ''})"
            )
        self.content_format = content_format(tree)
        loop = loops[0]
        loop.body.insert(0, jinja2.nodes.Output([jinja2.nodes.Name(_MARK_VARIABLE, "load")]))
        if not _insert_after(tree, loop, jinja2.nodes.Output([jinja2.nodes.Name(_END_VARIABLE, "load")])):
            raise TemplateRefused(f"chat template of {name!r}: cannot place a mark after its message loop")
        self._split = env.from_string(tree)
        for compiled in (self._whole, self._split):
            # its globals a plain dict of the same items: jinja gives a template a ChainMap over the environment's
            # (unchanged after this), which every rendering copies key by key in Python (two passes per rendering)
            compiled.globals = dict(compiled.globals)
        self._variables = {**dict(special_tokens), **{name: value for name, value in template_kwargs.items()
                                                      if value not in UNSET_KEYWORD_VALUES}}
        fixed = source + "".join(_strings(self._variables))
        self._mark_candidates = "".join(char for char in _MARK_CHARACTERS if char not in fixed)

    def _variables_for(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                       add_generation_prompt: bool) -> dict[str, Any]:
        if self.content_format == "openai":
            conversation = _as_text_parts(conversation)
        return {**self._variables, "messages": conversation, "tools": tools,
                "documents": None, "add_generation_prompt": add_generation_prompt}

    def render(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               add_generation_prompt: bool = True) -> str:
        """The text the server renders for a (server-side) conversation."""
        try:
            return str(self._whole.render(**self._variables_for(conversation, tools, add_generation_prompt)))
        except jinja2.exceptions.TemplateError as bad:
            raise TemplateRefused(f"chat template of {self.name!r} refused the conversation: {bad}") from None

    def render_parts(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     add_generation_prompt: bool = True, tools_text: str | None = None,
                     mark: str | None = None) -> tuple[str, list[str], str]:
        """(head, one piece per message, tail): their concatenation is ``render(...)``.

        ``tools_text``: every string of ``tools`` joined (a caller rendering many times with the same tools);
        ``mark``: a split mark already chosen (`marker`) for every string of the conversation and the tools.
        """
        if mark is None:
            listing = tools_text if tools_text is not None else "".join(_strings(tools))
            mark = self.marker(_strings(conversation), listing)
        piece_mark, end_mark = mark + "P" + mark, mark + "E" + mark
        variables = self._variables_for(conversation, tools, add_generation_prompt)
        try:
            text = str(self._split.render(**variables, **{_MARK_VARIABLE: piece_mark, _END_VARIABLE: end_mark}))
        except jinja2.exceptions.TemplateError as bad:
            raise TemplateRefused(f"chat template of {self.name!r} refused the conversation: {bad}") from None
        split = split_rendering(text, mark, len(conversation))
        if isinstance(split, int):
            raise TemplateRefused(
                f"chat template of {self.name!r}: its message loop ran {split} times for"
                f" {len(conversation)} messages; the core cannot split its rendering per message"
            )
        return split

    def marker(self, texts: Iterable[str], tools_text: str) -> str:
        """A character that occurs in none of ``texts`` (the conversation's strings), not in ``tools_text`` and
        not in the template: it cannot come out of the template except where the instrumented loop writes it."""
        strings = [tools_text, *texts]
        for char in self._mark_candidates:
            if not any(char in text for text in strings):
                return char
        raise TemplateRefused("every split-mark character occurs in the conversation; cannot split it per message")



def split_rendering(text: str, mark: str, messages: int) -> tuple[str, list[str], str] | int:
    """(head, one piece per message, tail) of an instrumented rendering ``text`` (`ChatTemplate.render_parts`: the
    piece mark ``mark + "P" + mark`` before each message, the end mark ``mark + "E" + mark`` after the loop), or
    the times the loop ran (the pieces found less one) when the text does not split into ``messages`` pieces:
    no end mark, an end mark before the last, or another count of piece marks.

    The same as splitting at the last end mark, then at every piece mark, and looking for another end mark in
    what precedes it (two scans of the text for a three-character mark: ~5 us a rendering of 8 KB); when ``mark``
    is one character and the text before the last end mark holds it only in exactly ``messages`` piece marks (one
    split at the character: its pieces alternate with "P"), those are the pieces, and an end mark stands there only
    as "E" alone between two piece marks (its first character is then a piece mark's last; for the marks "P" and
    "E" the pieces hold neither letter, so none is found, nor is one there)."""
    body, ends, tail = text.rpartition(mark + "E" + mark)
    parts: list[str] | None = None
    if len(mark) == 1:
        segments = body.split(mark)
        if len(segments) == 2 * messages + 1 and segments[1::2].count("P") == messages:
            parts = segments[0::2]
            end_inside = "E" in parts[1:-1]
    if parts is None:
        parts = body.split(mark + "P" + mark)
        end_inside = mark + "E" + mark in body
    if not ends or end_inside or len(parts) != messages + 1:
        return len(parts) - 1
    return parts[0], parts[1:], tail


def compiled_template(source: str, special_tokens: tuple[tuple[str, Any], ...],
                      template_kwargs: tuple[tuple[str, Any], ...], name: str) -> ChatTemplate:
    """A compiled template, shared by every task that renders it (compiling costs tens of milliseconds)."""
    return _compiled_template(source, special_tokens, template_kwargs, name, kwargs_key(template_kwargs))


@functools.lru_cache(maxsize=16)
def _compiled_template(source: str, special_tokens: tuple[tuple[str, Any], ...],
                       template_kwargs: tuple[tuple[str, Any], ...], name: str,
                       typed_kwargs: tuple[tuple[str, str, str], ...]) -> ChatTemplate:
    return ChatTemplate(source, dict(special_tokens), dict(template_kwargs), name)


def kwargs_key(template_kwargs: Iterable[tuple[str, Any]]) -> tuple[tuple[str, str, str], ...]:
    """Template keywords as a cache key tells them apart: each value's type and repr beside it, since Python finds
    ``False == 0 == 0.0`` and ``0.0 == -0.0`` (equal keys) where a template does not (``enable_thinking is false``
    is not true of 0: Qwen3's empty think block, 4 tokens)."""
    return tuple((name, type(value).__name__, repr(value)) for name, value in template_kwargs)


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


# --- the chat format "template": per-message costs by context ---------------------------------------


ACTION_MODES = ("text", "tools")


@functools.lru_cache(maxsize=16)
def possible_contexts(role: str, action_mode: str) -> tuple[Context, ...]:
    """Every context a message of ``role`` after the prefix F can have in a view (spec/rendering.md section 3.1).

    Text mode: S, G, U and H hold user and assistant messages in any order. Tool mode: S, G, U are user
    messages before H; H holds assistant turns, each followed by the tool results answering its calls, and
    user messages after the goal (a unit of their own, never between a call and its result). Built once per role
    and mode (each message's costs look them up).
    """
    afters: tuple[str | None, ...]
    if action_mode == "text":
        befores: tuple[str, ...] = ("user", "assistant")
        afters = ("user", "assistant", None)
    elif role == "user":
        befores, afters = ("user", "assistant", "tool"), ("user", "assistant", None)
    elif role == "assistant":
        befores, afters = ("user", "assistant", "tool"), ("user", "assistant", "tool", None)
    else:
        befores, afters = ("assistant", "tool"), ("user", "assistant", "tool", None)
    contexts: list[Context] = []
    for before in befores:
        for after in afters:
            if after == "user":
                contexts.append(shared_context(before, after, True))
            elif after is None:
                contexts.append(shared_context(before, after, False))
            else:
                contexts.extend((shared_context(before, after, False), shared_context(before, after, True)))
    return tuple(contexts)


def goal_contexts(action_mode: str) -> tuple[Context, ...]:
    """Contexts of the goal (the second message, after the system prompt)."""
    return (shared_context("system", "user", True), shared_context("system", "assistant", False),
            shared_context("system", None, False), shared_context("system", "assistant", True))


def _filler(role: str) -> dict[str, Any]:
    return {"role": role, "content": FILLER}


@functools.lru_cache(maxsize=64)
def probe_plans(contexts: tuple[Context, ...], role: str) -> tuple[tuple[Context | str, ...], ...]:
    """Probe conversations (after the prefix [system, goal]) that realise every context once.

    Each plan is a sequence of filler roles (str) and occurrences of the probed message of ``role`` (its
    Context). The contexts with a user message after them come first, followed by one user filler. Then the
    others, with no user message after them: only the first of a plan may follow a user message (the goal, or
    that filler), one that ends the conversation closes its plan, and a probed user message closes its plan
    at once (a later occurrence of it would be a user message after it). A filler written after one
    occurrence also serves as the role before the next when the roles agree (fewer messages to render).
    """
    plans: list[tuple[Context | str, ...]] = []
    current: list[Context | str] = []
    last = "user"  # the goal
    pending_user = [c for c in contexts if c.user_after]
    while pending_user:
        ctx = next((c for c in pending_user if c.before == last), pending_user[0])
        pending_user.remove(ctx)
        assert ctx.before is not None and ctx.after is not None
        if ctx.before != last:
            current.append(ctx.before)
        current += [ctx, ctx.after]
        last = ctx.after
    if current and last != "user":
        current.append("user")
        last = "user"
    pending = [c for c in contexts if not c.user_after]
    may_follow_user = last == "user"
    while pending:
        placeable = [c for c in pending if c.before != "user" or may_follow_user]
        if not placeable:
            plans.append(tuple(current))
            current, last, may_follow_user = [], "user", True
            continue
        # middle ones before one that ends the plan; one needing the user before it while it may; then chained
        placeable.sort(key=lambda c: (c.after is None, c.before != "user", c.before != last))
        ctx = placeable[0]
        pending.remove(ctx)
        assert ctx.before is not None
        if ctx.before != last or (ctx.before == "user" and not may_follow_user):
            current.append(ctx.before)
        current.append(ctx)
        may_follow_user = False
        last = role
        if ctx.after is not None:
            current.append(ctx.after)
            last = ctx.after
        if ctx.after is None or role == "user":
            plans.append(tuple(current))
            current, last, may_follow_user = [], "user", True
    if current:
        plans.append(tuple(current))
    return tuple(plans)


class _LRU:
    """A small bounded cache of computed costs (pure: the same key always maps to the same value); thread-safe."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            return None

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            if len(self._items) > self._size:
                self._items.popitem(last=False)


MEMO_TEXT_CHARS = 4096
"""A text between added tokens up to this long has its count remembered for every task of the tokenizer; a longer
one (a tool result, a summary) only while one message's pieces are counted (`TemplateFormat.placed_costs`)."""
MEMO_TOTAL_CHARS = 1 << 21  # characters of remembered texts per tokenizer (about 4 MiB of keys at most)


class _TextCounts:
    """Token counts of texts without an added token, remembered per tokenizer (LRU, bounded in characters)."""

    def __init__(self, tokenizer: HuggingFaceTokenizer, chars: int) -> None:
        self._count = tokenizer.count
        self._limit = chars
        self._chars = 0
        self._items: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        with self._lock:
            known = self._items.get(text)
            if known is not None:
                self._items.move_to_end(text)
                return known
        known = self._count(text)  # outside the lock: conversations count in parallel
        with self._lock:
            if text not in self._items:
                self._items[text] = known
                self._chars += len(text)
                while self._chars > self._limit:
                    dropped, _ = self._items.popitem(last=False)
                    self._chars -= len(dropped)
        return known


@functools.lru_cache(maxsize=None)
def text_counts(tokenizer: HuggingFaceTokenizer) -> _TextCounts:
    """The one memo of a tokenizer's counts of short texts, shared by every task (a wrapper such as
    ``"user\n"`` or ``"\n</tool_response>"`` is counted once per process)."""
    return _TextCounts(tokenizer, MEMO_TOTAL_CHARS)


class _AddedTokens:
    """Where added tokens touch a cut: a cut between two parts is exact when one side touches an added token."""

    def __init__(self, tokens: Sequence[str]) -> None:
        alternatives = "|".join(re.escape(token) for token in sorted(tokens, key=len, reverse=True)) or "(?!)"
        self._starts = re.compile(f"(?:{alternatives})")
        self.tokens = tuple(tokens)

    def cut_safe(self, left: str, right: str) -> bool:
        """``left`` ends with an added token or ``right`` starts with one (checked on every probe's cuts; the same
        test is written out in `TemplateFormat._check_pieces`' loop)."""
        return right.startswith(self.tokens) or left.endswith(self.tokens)

    def matches(self, text: str) -> Iterator[re.Match[str]]:
        """The added tokens in ``text``, leftmost first and longest at a place (no two overlap: refused)."""
        return self._starts.finditer(text)


def added_tokens_cut_safe(tokens: Sequence[str]) -> str | None:
    """None when no added token can match across a cut beside another added token; else the offending pair
    (found once per set of tokens: every conversation of a proxy builds a chat format with the same ones)."""
    return _added_tokens_cut_safe(tuple(tokens))


@functools.lru_cache(maxsize=16)
def _added_tokens_cut_safe(tokens: tuple[str, ...]) -> str | None:
    for u in tokens:
        for t in tokens:
            for k in range(1, len(u)):
                head, rest = u[:k], u[k:]
                if t.startswith(rest) or rest.startswith(t) or t.endswith(head) or head.endswith(t):
                    return f"{u!r} overlaps {t!r}"
    return None


_WHOLE = "*"  # a read of a whole probed message (iterated, dumped, compared or printed), not of one key
_ANY_CALL_ID = object()  # the cache key of a tool message's costs that hold for every tool_call_id


class _WatchedMessage(dict[str, Any]):
    """A probed message as the template sees it (a dict), noting which of its keys the template reads.

    Rendering is deterministic (no clock, no randomness), so a value the template never read cannot have
    changed what it wrote: a tool message whose ``tool_call_id`` was never read costs the same whatever its
    call id (`TemplateFormat.placed_costs` then reuses its costs, the tool-result reserve above all). Every way
    a template reaches a dict's values goes through a method noted here: an item or ``get`` (that key);
    iterating, ``keys``/``values``/``items`` (which ``tojson`` and ``dictsort`` use), printing or comparing
    (the whole). The notes sit in a slot whose name starts with ``_``, refused to templates by the sandbox."""

    __slots__ = ("_reads",)

    def __init__(self, message: Mapping[str, Any], reads: set[str]) -> None:
        super().__init__(message)
        self._reads = reads

    def __getitem__(self, key: str) -> Any:
        self._reads.add(key)
        return dict.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        self._reads.add(key)
        return dict.get(self, key, default)

    def _whole(self) -> None:
        self._reads.add(_WHOLE)

    def __iter__(self) -> Iterator[str]:
        self._whole()
        return dict.__iter__(self)

    def __reversed__(self) -> Iterator[str]:
        self._whole()
        return dict.__reversed__(self)

    def keys(self) -> Any:
        self._whole()
        return dict.keys(self)

    def values(self) -> Any:
        self._whole()
        return dict.values(self)

    def items(self) -> Any:
        self._whole()
        return dict.items(self)

    def copy(self) -> dict[str, Any]:
        self._whole()
        return dict(dict.items(self))

    def __repr__(self) -> str:
        self._whole()
        return dict.__repr__(self)

    def __eq__(self, other: object) -> bool:
        self._whole()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        self._whole()
        return dict.__ne__(self, other)

    def __or__(self, other: Any) -> Any:
        self._whole()
        return dict.__or__(self, other)

    def __ror__(self, other: Any) -> Any:
        self._whole()
        return dict.__ror__(self, other)

    __hash__ = None


_ITEM_TYPES[_WatchedMessage] = frozenset(dir(_WatchedMessage))


@attrs.define
class _Probe:
    """One message's shared state across its probe conversations (`TemplateFormat._probe`)."""

    message: dict[str, Any]  # in OpenAI chat format (`server_conversation` gives each occurrence its own copy)
    content: str
    mark: str
    split: tuple[str, int, str] | None
    local: dict[str, int]
    reads: set[str]  # the message's keys the template read (`_WatchedMessage`), over every rendered probe
    pieces: dict[str, int] = attrs.field(factory=dict)  # tokens of each distinct piece of the message counted so far
    # the message as the server passes it when every value is a string (no tool calls): `server_conversation` gives
    # every call a new dict of the same string objects (role, content, tool_call_id, name as they are; a lone text
    # joined is itself), so each occurrence is a copy of this one (`_WatchedMessage` copies its items)
    flat_server: dict[str, Any] | None = None
    # a message with tool calls: its server form once, and each call's arguments serialized as ``tojson`` writes them
    # (None where they are not a JSON object given as a string); each occurrence is built from them (`_occurrence`)
    server: dict[str, Any] | None = None
    argument_texts: tuple[str | None, ...] = ()
    # whether the template's reads of the message are noted (`_WatchedMessage`): only a tool message's with a call
    # id are used (`placed_costs`); any other message is passed as the plain dict the server passes
    watched: bool = True


class TemplateFormat:
    """The chat format ``template``: a model directory's own chat template, counted with its tokenizer.

    Built once per task (`arc_ref.config.make_setup`) for a prefix (system, goal), the tools listing sent with
    every request and the template keywords. ``placed_costs`` is the only per-message work: one rendering per
    probe conversation of the message (section 3.1), its pieces counted as one token per added token plus the
    texts between them, each text counted once (remembered: `text_counts`), and a part of the content whose
    count is already known (a stored observation's n_j) not counted again.
    """

    name = "template"
    positional = True

    def __init__(self, tokenizer: HuggingFaceTokenizer, source: TemplateSource, template_kwargs: Mapping[str, Any],
                 tools: Sequence[ToolSpec], system: str, goal: str, action_mode: str) -> None:
        self.tokenizer = tokenizer
        self.tools = tuple(tools)
        self.template_kwargs = dict(template_kwargs)
        if action_mode not in ACTION_MODES:
            raise ConfigError(f"action_mode must be one of {', '.join(ACTION_MODES)}, got {action_mode!r}")
        self.action_mode = action_mode
        flags = tokenizer.added_token_flags()
        stripping = [text for text, lstrip, rstrip in flags if lstrip or rstrip]
        if stripping:
            raise TemplateRefused(
                f"chat format 'template' with tokenizer {tokenizer.name!r}: added tokens {stripping[:3]} strip the"
                " whitespace beside them, so per-message counts would not add up"
            )
        self.added = tuple(sorted((text for text, _, _ in flags), key=len, reverse=True))
        self._added = _AddedTokens(self.added)
        overlap = added_tokens_cut_safe(self.added)
        if overlap is not None:
            raise TemplateRefused(
                f"chat format 'template' with tokenizer {tokenizer.name!r}: added token {overlap}, so a match"
                " could span two messages and per-message counts would not add up"
            )
        # added tokens matched as written (not single-word, not on normalized text): a text is then counted as
        # one token per added token plus the texts between them; otherwise each text is counted whole
        self._split_at_added = tokenizer.added_tokens_match_as_written()
        self._texts = text_counts(tokenizer)
        chosen = source.tool_source if (self.tools and source.tool_source is not None) else source.source
        if chosen is None:
            raise ConfigError(
                f"chat format 'template': {source.directory!r} has only a 'tool_use' chat template, which the server"
                " uses only for a request with tools")
        self.template = compiled_template(chosen, source.special_tokens, tuple(self.template_kwargs.items()),
                                          source.directory)
        dumped = server_tools(self.tools)
        self._server_tools: list[dict[str, Any]] | None = (
            None if dumped is None else [SerializedTool(tool) for tool in dumped])
        self._tools_text = "".join(_strings(self._server_tools))
        self._prefix = [{"role": "system", "content": system}, {"role": "user", "content": goal}]
        self._prefix_strings = tuple(_strings(self._prefix))
        self._cache = _LRU(4096)  # placed costs of messages whose content is at most MEMO_TEXT_CHARS long
        self._last_large: tuple[Any, tuple[tuple[Context, int], ...]] | None = None  # ... and of the last longer one
        self._partial = _LRU(16)  # per message: costs by probe conversation that `placed_cost_at` rendered, and
        # the keys the template read there
        self._listing_tokens: int | None = None
        # the renderings of plain conversations while the format is built, by messages and mark (`_pieces`)
        self._setup_renders: dict[tuple[Any, ...], list[str]] | None = {}
        head, pieces, tail = self.template.render_parts(self._prefix, self._server_tools, True, self._tools_text)
        self.head = head
        self.tail = tail
        self.head_tokens = self._count(head)
        self.tail_tokens = self._count(tail)
        self.system_piece_tokens = self._count(pieces[0])
        self._check_boundary(head, pieces[0] or pieces[1], "the head and the first message")
        prefix_key = _plain_key(self._prefix, self.template.marker(self._prefix_strings, self._tools_text))
        if prefix_key is not None:  # the goal's context with nothing after it renders this conversation again
            self._setup_renders[prefix_key] = pieces
        self.goal_costs = self._prefix_goal_costs()
        # every role in every context once, so that a template that cannot render ARC's views is refused now
        self.placed_costs("user", FILLER)
        self.placed_costs("assistant", FILLER)
        if action_mode == "tools":
            probe_call = ToolCall("call_0", tools[0].name if tools else "f", "{}")
            self.placed_costs("assistant", FILLER, (probe_call,))
            self.placed_costs("tool", FILLER, (), "call_0")
        self._setup_renders = None

    # -- rendering -------------------------------------------------------------------------------------

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
        """Exactly what the server renders for OpenAI ``messages`` with this format's tools and keywords."""
        return self.template.render(server_conversation(messages), self._server_tools, add_generation_prompt)

    def openai_tools(self) -> list[dict[str, Any]] | None:
        """The ``tools`` of a request (OpenAI JSON), or None in text mode."""
        return [tool.openai() for tool in self.tools] or None

    # -- counting --------------------------------------------------------------------------------------

    def tool_listing_tokens(self) -> int:
        """Tokens the tools listing adds to B (A4): the head and system turn with the tools, less without them
        (rendered once per format)."""
        if not self.tools:
            return 0
        if self._listing_tokens is None:
            head, pieces, _ = self.template.render_parts(self._prefix, None)
            self._listing_tokens = (self.head_tokens + self.system_piece_tokens - self._count(head)
                                    - self._count(pieces[0]))
        return self._listing_tokens

    def _count(self, text: str, local: dict[str, int] | None = None) -> int:
        """tokens(text): one token per added token plus the count of each text between them.

        The encoder matches added tokens first and encodes the texts between them apart (the assumption this
        format makes at every message boundary; stripping or overlapping added tokens are refused when the
        format is built). Each text between them is counted once: up to MEMO_TEXT_CHARS it is remembered for
        every task of the tokenizer (`text_counts`), a longer one in ``local`` (one message's pieces, which
        share it: a tool result sits between the same ``<tool_response>`` tokens in every context).
        """
        if not self._split_at_added:
            return self._between(text, local)
        total = 0
        start = 0
        for match in self._added.matches(text):
            if match.start() > start:
                total += self._between(text[start:match.start()], local)
            total += 1
            start = match.end()
        if start < len(text):
            total += self._between(text[start:] if start else text, local)
        return total

    def _between(self, text: str, local: dict[str, int] | None) -> int:
        if len(text) <= MEMO_TEXT_CHARS:
            return self._texts.count(text)
        if local is None:
            return self.tokenizer.count(text)
        known = local.get(text)
        if known is None:
            known = local[text] = self.tokenizer.count(text)
        return known

    def _content_split(self, content: str, parts: Sequence[Part] | None,
                       local: dict[str, int]) -> tuple[str, int, str] | None:
        """(lead, tokens of the core, trail) with content = lead + core + trail, where the core starts and ends at
        junctions inside the content that the tokenizer's boundary rule vouches for, or None when there are none.

        Whatever text stands around the content, tokens(before + content + after) = tokens(before + lead) +
        tokens(core) + tokens(trail + after): the core is counted once for every context of the message, from
        the known counts of ``parts`` where there are (a stored observation's n_j: `arc_ref.counting`)."""
        splits = self.tokenizer.splits_between
        size = len(content)
        first = next((p for p in range(1, min(SPLIT_FROM, size - 1) + 1) if splits(content[p - 1], content[p])), 0)
        last = next((p for p in range(size - 1, max(size - 1 - SPLIT_FROM, first), -1)
                     if splits(content[p - 1], content[p])), 0)
        if not first or not last:
            return None
        core: list[Part] = []
        offset = 0
        for text, known in parts or ((content, None),):
            begin, end = offset, offset + len(text)
            offset = end
            if end <= first or begin >= last:
                continue
            cut_from, cut_to = max(first, begin) - begin, min(last, end) - begin
            if known is not None:  # the cuts are vouched: the rest's count is the known one less the edges'
                known -= (self._count(text[:cut_from], local) if cut_from else 0) + (
                    self._count(text[cut_to:], local) if cut_to < len(text) else 0)
            core.append((text[cut_from:cut_to], known))
        core_tokens = joined_tokens(self.tokenizer, core, lambda text: self._count(text, local))
        return content[:first], core_tokens, content[last:]

    def _piece_tokens(self, piece: str, content: str, split: tuple[str, int, str] | None,
                      local: dict[str, int]) -> int:
        """tokens(piece) of a message with ``content`` split as `_content_split` gives it: where the piece holds the
        content verbatim, the text before the core, the core's count and the text after it; else the whole piece."""
        if split is not None:
            at = piece.find(content)
            if at >= 0:
                lead, core_tokens, trail = split
                return (self._count(piece[:at] + lead, local) + core_tokens
                        + self._count(trail + piece[at + len(content):], local))
        return self._count(piece, local)

    def _check_boundary(self, left: str, right: str, where: str) -> None:
        if left and right and not self._added.cut_safe(left, right):
            raise TemplateRefused(
                f"chat template of {self.template.name!r}: {where} meet without an added token between them"
                f" ({left[-12:]!r} | {right[:12]!r}), so per-message counts would not add up"
            )

    def _prefix_goal_costs(self) -> tuple[tuple[Context, int], ...]:
        costs: list[tuple[Context, int]] = []
        goal = self._prefix[1]
        for ctx in goal_contexts(self.action_mode):
            conversation = [self._prefix[0], goal]
            if ctx.after is not None:
                conversation.append(_filler(ctx.after))
            if ctx.user_after and ctx.after != "user":
                conversation.append(_filler("user"))
            pieces = self._pieces(conversation)
            self._check_pieces(conversation, pieces)
            costs.append((ctx, self._count(pieces[1])))
        return tuple(costs)

    def _pieces(self, conversation: list[dict[str, Any]], mark: str | None = None) -> list[str]:
        """The pieces of ``conversation`` rendered with the format's tools (its head and tail checked). While the
        format is built, a conversation of plain messages (role and content only) rendered with the same mark
        before is not rendered again: its goal's contexts and the filler probes meet 4 times (rendering is
        deterministic; a message whose keys the template reads matters only with a tool_call_id, never plain)."""
        renders = self._setup_renders
        if renders is None:
            return self._rendered_pieces(conversation, mark)
        if mark is None:
            mark = self.template.marker(_strings(conversation), self._tools_text)
        key = _plain_key(conversation, mark)
        if key is None:
            return self._rendered_pieces(conversation, mark)
        pieces = renders.get(key)
        if pieces is None:
            pieces = renders[key] = self._rendered_pieces(conversation, mark)
        return pieces

    def _rendered_pieces(self, conversation: list[dict[str, Any]], mark: str | None) -> list[str]:
        head, pieces, tail = self.template.render_parts(conversation, self._server_tools, True, self._tools_text,
                                                        mark)
        if head != self.head or tail != self.tail:
            raise TemplateRefused(
                f"chat template of {self.template.name!r}: the text before or after its message loop depends on"
                " messages after the first, so per-message counts would not add up"
            )
        return pieces

    def _check_pieces(self, conversation: list[dict[str, Any]], pieces: list[str]) -> None:
        shown = [self.head] + [piece for piece in pieces if piece] + [self.tail]
        tokens = self._added.tokens
        for left, right in zip(shown, shown[1:]):
            # `_AddedTokens.cut_safe`, written out: two Python calls fewer per cut (~1,600 cuts a new conversation
            # of the proxy); `_check_boundary` refuses with the same test. The right side is tested first: the two
            # tests are pure, so their order changes no outcome, and a piece starts with an added token at 94% of
            # a new conversation's cuts (the chat turn's opening token), where one ends with one at 6%
            if not (right.startswith(tokens) or left.endswith(tokens)):
                self._check_boundary(left, right, "two messages")

    def _cached(self, key: tuple[Any, ...]) -> tuple[tuple[Context, int], ...] | None:
        if len(key[1]) <= MEMO_TEXT_CHARS:
            found: tuple[tuple[Context, int], ...] | None = self._cache.get(key)
            return found
        last = self._last_large
        return last[1] if last is not None and last[0] == key else None

    def _remember(self, key: tuple[Any, ...], costs: tuple[tuple[Context, int], ...]) -> None:
        if len(key[1]) <= MEMO_TEXT_CHARS:
            self._cache.put(key, costs)
        else:
            self._last_large = (key, costs)

    def placed_costs(self, role: str, content: str, tool_calls: tuple[ToolCall, ...] = (),
                     tool_call_id: str | None = None,
                     parts: Sequence[Part] | None = None) -> tuple[tuple[Context, int], ...]:
        """Tokens of the message's piece in every context a view can give it (exact per context).

        ``parts``: the content as a concatenation of texts with their counts where known (`Setup.message`);
        the result is the same with or without them, only a known count is not counted again. A tool
        message's costs are kept for every call id when the template never read its ``tool_call_id``
        (`_WatchedMessage`): the tool-result reserve is rendered once per task, not once per call. A probe
        conversation already rendered for the same message by `placed_cost_at` is not rendered again.
        """
        key = (role, content, tool_calls, tool_call_id)
        cached = self._known(key)
        if cached is not None:
            return cached
        probe = self._probe(role, content, tool_calls, tool_call_id, parts)
        contexts = possible_contexts(role, self.action_mode)
        done, reads = self._partial_costs(key)
        costs: dict[Context, int] = {}
        for number, plan in enumerate(probe_plans(contexts, role)):
            costs.update(done.get(number) or self._plan_costs(probe, plan))
        result = tuple((ctx, costs[ctx]) for ctx in contexts)
        self._remember(key, result)
        reads = reads | probe.reads
        if tool_call_id is not None and "tool_call_id" not in reads and _WHOLE not in reads:
            self._remember((role, content, tool_calls, _ANY_CALL_ID), result)
        return result

    def placed_cost_at(self, context: Context, role: str, content: str, tool_calls: tuple[ToolCall, ...] = (),
                       tool_call_id: str | None = None, parts: Sequence[Part] | None = None) -> int:
        """Tokens of the message's piece in one ``context``: exactly ``placed_costs``' count there, from the one
        probe conversation of ``placed_costs`` that gives the message this context (the same conversation,
        rendered and counted the same way), rendered alone unless the message's costs are known. For a message
        that may be thrown away unseen (a fold copy the cost rule declines, `arc_ref.machine`)."""
        contexts = possible_contexts(role, self.action_mode)
        if context not in contexts:
            raise BudgetViolation(f"a {role} message has no count for its place {context} in the view")
        key = (role, content, tool_calls, tool_call_id)
        cached = self._known(key)
        if cached is not None:
            return next(cost for ctx, cost in cached if ctx == context)
        plans = probe_plans(contexts, role)
        number = next(number for number, plan in enumerate(plans) if context in plan)
        done, reads = self._partial_costs(key)
        if number not in done:
            probe = self._probe(role, content, tool_calls, tool_call_id, parts)
            done = {**done, number: self._plan_costs(probe, plans[number])}
            self._partial.put(key, (done, reads | probe.reads))
        return next(cost for ctx, cost in done[number] if ctx == context)

    def _partial_costs(self, key: tuple[Any, ...]) -> tuple[dict[int, tuple[tuple[Context, int], ...]], frozenset[str]]:
        """The message's costs by probe conversation rendered so far by `placed_cost_at`, and the keys read there."""
        found: tuple[dict[int, tuple[tuple[Context, int], ...]], frozenset[str]] | None = self._partial.get(key)
        return found or ({}, frozenset())

    def _known(self, key: tuple[Any, ...]) -> tuple[tuple[Context, int], ...] | None:
        cached = self._cached(key)
        if cached is None and key[3] is not None:
            cached = self._cached((*key[:3], _ANY_CALL_ID))
        return cached

    def _probe(self, role: str, content: str, tool_calls: tuple[ToolCall, ...], tool_call_id: str | None,
               parts: Sequence[Part] | None) -> _Probe:
        """What every probe conversation of one message shares: the message as the server passes it, the split
        mark, the content's core counted once (`_content_split`) and the counts of its long texts."""
        message = openai_message(role, content, tool_calls, tool_call_id)
        server = server_conversation([message])[0]
        mark = self.template.marker((*self._prefix_strings, *_strings(server), FILLER), self._tools_text)
        local: dict[str, int] = {}
        split = self._content_split(content, parts, local) if len(content) > 2 * EDGE_WINDOW else None
        flat = server if all(type(value) is str for value in server.values()) else None
        texts: tuple[str | None, ...] = ()
        if flat is None and type(message.get("content")) is str and "tool_calls" in server:
            texts = tuple(
                json.dumps(call["function"]["arguments"], ensure_ascii=False)
                if type(call["function"]["arguments"]) is dict and type(sent["function"].get("arguments")) is str
                else None
                for call, sent in zip(server["tool_calls"], message["tool_calls"]))
        return _Probe(message, content, mark, split, local, set(), flat_server=flat,
                      server=server if texts else None, argument_texts=texts, watched=tool_call_id is not None)

    @staticmethod
    def _occurrence(probe: _Probe, known_json: dict[int, tuple[Any, str]]) -> dict[str, Any]:
        """One occurrence of the probed message in a probe conversation, as `server_conversation` gives it: new dicts
        and lists (a new arguments object parsed from its string) around the same strings; each call's arguments
        noted in ``known_json`` with their ``tojson`` text (`_KnownJSON`)."""
        if probe.flat_server is not None:
            return dict(probe.flat_server)
        server = probe.server
        if server is None:
            return server_conversation([probe.message])[0]
        calls = []
        for call, sent, text in zip(server["tool_calls"], probe.message["tool_calls"], probe.argument_texts):
            arguments = server_arguments(sent["function"].get("arguments"))
            if text is not None:
                known_json[id(arguments)] = (arguments, text)
            calls.append({**call, "function": {**call["function"], "arguments": arguments}})
        return {**server, "tool_calls": calls}

    def _plan_costs(self, probe: _Probe, plan: tuple[Context | str, ...]) -> tuple[tuple[Context, int], ...]:
        """The message's cost in each context of one probe conversation (`probe_plans`): one rendering."""
        server = list(self._prefix)
        where: list[tuple[int, Context]] = []
        known_json: dict[int, tuple[Any, str]] = {}
        for item in plan:
            if isinstance(item, Context):
                where.append((len(server), item))
                occurrence = self._occurrence(probe, known_json)
                server.append(_WatchedMessage(occurrence, probe.reads) if probe.watched else occurrence)
            else:
                server.append(_filler(item))
        outer, _KNOWN_JSON.texts = _KNOWN_JSON.texts, known_json
        try:
            pieces = self._pieces(server, probe.mark)
        finally:
            _KNOWN_JSON.texts = outer
        self._check_pieces(server, pieces)
        return tuple((ctx, self._probe_piece_tokens(probe, pieces[position])) for position, ctx in where)

    def _probe_piece_tokens(self, probe: _Probe, piece: str) -> int:
        """tokens(piece) of the probed message (`_piece_tokens`), each distinct piece counted once per message: the
        template writes the same piece in most of its places (a pure function of the piece's text, the content
        and its split, which the probe fixes)."""
        known = probe.pieces.get(piece)
        if known is None:
            known = probe.pieces[piece] = self._piece_tokens(piece, probe.content, probe.split, probe.local)
        return known


def _plain_key(conversation: Sequence[dict[str, Any]], mark: str) -> tuple[Any, ...] | None:
    """(mark, role, content, role, content...) of a conversation whose messages hold a role and a content and
    nothing else (read without noting a read: `_WatchedMessage`); None otherwise."""
    key: list[Any] = [mark]
    for message in conversation:
        if len(message) != 2:
            return None
        role, content = dict.get(message, "role"), dict.get(message, "content")
        if not isinstance(role, str) or not isinstance(content, str):
            return None
        key += (role, content)
    return tuple(key)


def template_format(tokenizer: HuggingFaceTokenizer, directory: str, template_kwargs: tuple[tuple[str, Any], ...],
                    tools: tuple[ToolSpec, ...], system: str, goal: str, action_mode: str) -> TemplateFormat:
    """The chat format ``template`` of a model directory for one task prefix (shared by equal configurations:
    keywords equal by type and repr, `kwargs_key`)."""
    return _template_format(tokenizer, directory, template_kwargs, tools, system, goal, action_mode,
                            kwargs_key(template_kwargs))


@functools.lru_cache(maxsize=64)
def _template_format(tokenizer: HuggingFaceTokenizer, directory: str, template_kwargs: tuple[tuple[str, Any], ...],
                     tools: tuple[ToolSpec, ...], system: str, goal: str, action_mode: str,
                     typed_kwargs: tuple[tuple[str, str, str], ...]) -> TemplateFormat:
    return TemplateFormat(tokenizer, load_template_source(directory), dict(template_kwargs), tools, system, goal,
                          action_mode)


def clear_template_formats() -> None:
    """Forget every cached chat format of a task prefix (the evaluation layer's ``clear``)."""
    _template_format.cache_clear()
