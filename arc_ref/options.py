"""Options written once: each knob's default, bounds, choices and help in one field, everything else derived.

A program's (or a component's) knobs are one frozen attrs class whose fields are made with ``option`` (text, a
choice, a switch, a value with a parser of its own), ``int_option`` or ``float_option`` (a number: its bounds
produce its parser). From the fields come the command-line flags (``add_option_flags``: help, parser, choices,
default), the options instance a command line gave (``options_from_args``), and the check of a value however it
was built (a ``ConfigError`` naming the flag). Used by ``arc-eval``'s registry (``arc_eval.registry``) and by
``arc-ref``'s front ends. Pure: no I/O.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Callable, Iterable, Mapping, NoReturn, Sequence

import attrs
from attrs import frozen

from arc_ref.errors import ConfigError

OPTION_KEY = "arc_ref.option"
# An integer as a command line writes it: ASCII digits, an optional leading '-' (no '+', '_', spaces, other digits).
_INTEGER = re.compile(r"-?[0-9]+", re.ASCII)
# A number likewise: ASCII digits, one optional '.', an optional exponent (no 'inf', 'nan', '_', spaces).
_NUMBER = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?", re.ASCII)
_SHOWN_CHARS = 40  # a refused value is echoed up to this many characters
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


@frozen
class OptionInfo:
    """What an option says about itself beyond its type and default (``option``, ``int_option``, ``float_option``)."""

    help: str
    flag: str | None = None  # the command-line flag (default: --the-field-name)
    aliases: tuple[str, ...] = ()  # other spellings of the flag (serve-scripted's --served-model-name, vLLM's)
    parse: Callable[[str], Any] | None = None  # a parser of its own (a URL); a number's comes from its bounds
    number: type | None = None  # int or float: a number, parsed and checked by its bounds
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None  # every number has one (``int_option``, ``float_option``)
    nargs: str | None = None
    metavar: str | None = None
    recorded: bool = True  # False: a connection setting, never in a record (an API key, a timeout)
    store_true: bool = False
    append: bool = False  # the flag may be repeated, each value appended (a tuple); no value twice

    def parser(self) -> Callable[[str], Any] | None:
        """The argparse ``type`` of the flag: a number's from its bounds, else the option's own parser (None: text)."""
        if self.number is int:
            assert self.minimum is not None and self.maximum is not None
            return integer_parser(int(self.minimum), int(self.maximum))
        if self.number is float:
            assert self.maximum is not None
            return number_parser(self.maximum, minimum=self.minimum, exclusive_minimum=self.exclusive_minimum)
        return self.parse

    def bounds_text(self) -> str:
        """The bounds in words, for the help: ``1 to 4096``, ``above 0, at most 86400``."""
        if self.number is None or self.maximum is None:
            return ""
        if self.exclusive_minimum is not None:
            return f"above {self.exclusive_minimum:g}, at most {self.maximum:g}"
        return f"{_shown_bound(self.minimum)} to {_shown_bound(self.maximum)}"


def _shown_bound(value: float | None) -> str:
    if value is None:
        return "any"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _echo(text: str) -> str:
    """A refused argument as a message shows it: quoted, at most ``_SHOWN_CHARS`` characters."""
    return repr(text) if len(text) <= _SHOWN_CHARS else repr(text[:_SHOWN_CHARS]) + f"... ({len(text)} characters)"


def strict_integer(text: str, minimum: int, maximum: int) -> int:
    """``text`` as an integer from ``minimum`` to ``maximum``, written with ASCII digits and an optional leading
    '-' only (``１``, ``1_0``, `` 1 `` and ``+1`` are refused, as are more digits than the bound has); else a
    ValueError saying what was expected."""
    expected = f"expected an integer from {minimum} to {maximum}"
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"{expected} (ASCII digits only), got {_echo(text)}")
    digits = text.lstrip("-").lstrip("0") or "0"
    if len(digits) > len(str(max(abs(minimum), abs(maximum)))):
        raise ValueError(f"{expected}, got {_echo(text)}")
    value = int(text)
    if not minimum <= value <= maximum:
        raise ValueError(f"{expected}, got {_echo(text)}")
    return value


def strict_number(text: str, maximum: float, *, minimum: float | None = None,
                  exclusive_minimum: float | None = None) -> float:
    """``text`` as a finite number within its bounds, written with ASCII digits, one optional '.' and an optional
    exponent (``inf``, ``nan``, ``1_0``, full-width digits and spaces are refused); else a ValueError."""
    low = (f"above {exclusive_minimum:g}, " if exclusive_minimum is not None
           else f"from {minimum:g} " if minimum is not None else "")
    up_to = "to" if minimum is not None and exclusive_minimum is None else "at most"
    expected = f"expected a number {low}{up_to} {maximum:g}"
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"{expected} (ASCII digits, '.', an exponent), got {_echo(text)}")
    value = float(text)
    in_bounds = ((minimum is None or value >= minimum) and (exclusive_minimum is None or value > exclusive_minimum)
                 and value <= maximum)
    if not in_bounds:
        raise ValueError(f"{expected}, got {_echo(text)}")
    return value


def integer_parser(minimum: int, maximum: int) -> Callable[[str], int]:
    """The argparse ``type`` of an integer from ``minimum`` to ``maximum`` (``strict_integer``)."""

    def parse(text: str) -> int:
        try:
            return strict_integer(text, minimum, maximum)
        except ValueError as refused:
            raise argparse.ArgumentTypeError(str(refused)) from None

    return parse


def number_parser(maximum: float, *, minimum: float | None = None,
                  exclusive_minimum: float | None = None) -> Callable[[str], float]:
    """The argparse ``type`` of a finite number within its bounds (``strict_number``)."""

    def parse(text: str) -> float:
        try:
            return strict_number(text, maximum, minimum=minimum, exclusive_minimum=exclusive_minimum)
        except ValueError as refused:
            raise argparse.ArgumentTypeError(str(refused)) from None

    return parse


def option(
    default: Any,
    *,
    help: str,
    flag: str | None = None,
    parse: Callable[[str], Any] | None = None,
    choices: Sequence[Any] | None = None,
    nargs: str | None = None,
    metavar: str | None = None,
    recorded: bool = True,
    converter: Callable[[Any], Any] | None = None,
    store_true: bool = False,
    append: bool = False,
    aliases: Sequence[str] = (),
) -> Any:
    """A field of an options class that is not a number: text, a choice, a switch (``store_true``), or a value with
    a parser of its own (``parse``)."""
    info = OptionInfo(help=help, flag=flag, parse=parse, choices=tuple(choices) if choices is not None else None,
                      nargs=nargs, metavar=metavar, recorded=recorded, store_true=store_true, append=append,
                      aliases=tuple(aliases))
    return _field(default, info, converter)


def int_option(
    default: Any,
    *,
    help: str,
    minimum: int,
    maximum: int,
    flag: str | None = None,
    nargs: str | None = None,
    metavar: str | None = None,
    recorded: bool = True,
    converter: Callable[[Any], Any] | None = None,
) -> Any:
    """An integer field (or, with ``nargs``, a tuple of them, no value twice): its bounds, both stated, make its
    parser (``strict_integer``) and its check."""
    info = OptionInfo(help=help, flag=flag, number=int, minimum=minimum, maximum=maximum, nargs=nargs,
                      metavar=metavar, recorded=recorded)
    return _field(default, info, converter)


def float_option(
    default: Any,
    *,
    help: str,
    maximum: float,
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
    flag: str | None = None,
    metavar: str | None = None,
    recorded: bool = True,
) -> Any:
    """A number field: its bounds (a maximum, and a minimum or an exclusive minimum) make its parser
    (``strict_number``) and its check."""
    if (minimum is None) == (exclusive_minimum is None):
        raise TypeError("float_option takes one of minimum and exclusive_minimum")
    info = OptionInfo(help=help, flag=flag, number=float, minimum=minimum, exclusive_minimum=exclusive_minimum,
                      maximum=maximum, metavar=metavar, recorded=recorded)
    return _field(default, info, None)


def _field(default: Any, info: OptionInfo, converter: Callable[[Any], Any] | None) -> Any:
    return attrs.field(default=default, validator=_check_option, converter=converter, metadata={OPTION_KEY: info})


def option_flag(attribute: attrs.Attribute[Any]) -> str:
    info = option_info(attribute)
    return info.flag or "--" + attribute.name.replace("_", "-")


def option_info(attribute: attrs.Attribute[Any]) -> OptionInfo:
    info = attribute.metadata.get(OPTION_KEY)
    if not isinstance(info, OptionInfo):
        raise TypeError(f"field {attribute.name} is not made with arc_ref.options.option")
    return info


def _shown_value(value: Any) -> str:
    """A value for a message: an integer past 64 bits by its number of digits (repr fails past 4,300)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    return repr(value)


def _bounded(info: OptionInfo, flag: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int if info.number is int else (int, float)):
        raise ConfigError(f"{flag} must be {'an integer' if info.number is int else 'a number'}, "
                          f"got {_shown_value(value)}")
    if value != value or value in (float("inf"), float("-inf")):
        raise ConfigError(f"{flag} must be a finite number, got {value!r}")
    if info.minimum is not None and not value >= info.minimum:
        raise ConfigError(f"{flag} must be at least {_shown_bound(info.minimum)}, got {_shown_value(value)}")
    if info.exclusive_minimum is not None and not value > info.exclusive_minimum:
        raise ConfigError(f"{flag} must be above {info.exclusive_minimum:g}, got {_shown_value(value)}")
    if info.maximum is not None and not value <= info.maximum:
        raise ConfigError(f"{flag} must be at most {_shown_bound(info.maximum)}, got {_shown_value(value)}")


def _check_option(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """The bounds and choices an option declares, checked on every construction (a ConfigError naming its flag)."""
    info = option_info(attribute)
    flag = option_flag(attribute)
    if value is None:
        return
    is_list = info.nargs is not None or info.append  # a list of values the command line gives one by one
    items = value if is_list and isinstance(value, tuple) else (value,)
    for item in items:
        if info.choices is not None and item not in info.choices:
            raise ConfigError(f"{flag} must be one of {', '.join(map(str, info.choices))}, got {item!r}")
    repeated = sorted({item for item in items if items.count(item) > 1}, key=str)
    if repeated:
        raise ConfigError(f"{flag} lists {', '.join(map(str, repeated))} more than once; give each once")
    if info.number is None:
        return
    for item in items:
        _bounded(info, flag, item)


def option_fields(options_class: type) -> tuple[attrs.Attribute[Any], ...]:
    """The fields of a class made with ``option`` (a spec may hold other fields too)."""
    return tuple(attribute for attribute in attrs.fields(options_class) if OPTION_KEY in attribute.metadata)


def option_names(options_class: type) -> tuple[str, ...]:
    return tuple(attribute.name for attribute in option_fields(options_class))


# -- flags ------------------------------------------------------------------------------------------


def option_dest(owner: str, name: str) -> str:
    """argparse's destination of an option: owner-qualified, so two components never share one."""
    return f"{owner}:{name}"


def add_option_flags(group: argparse._ArgumentGroup | argparse.ArgumentParser, owner: str,
                     options_class: type) -> None:
    """The command-line flags of ``options_class`` (help, parser, choices, default, bounds from the fields); the
    program's parser refuses a flag given twice (``once_each``) but the ``append`` ones.

    A flag not given leaves no value (``argparse.SUPPRESS``): ``given_options`` tells what the user set, and
    ``options_from_args`` takes the field's default for the rest."""
    for attribute in option_fields(options_class):
        info = option_info(attribute)
        default = attribute.default
        shown = " ".join(map(str, default)) if isinstance(default, tuple) else default
        said = [f"default: {shown}"] if default not in (None, ()) and not info.store_true else []
        said += [info.bounds_text()] if info.bounds_text() else []
        said += ["repeat it for more; no value twice"] if info.append else []
        text = f"{info.help} ({'; '.join(said)})" if said else info.help
        kwargs: dict[str, Any] = {"dest": option_dest(owner, attribute.name), "default": argparse.SUPPRESS,
                                  "help": text}
        flags = (option_flag(attribute), *info.aliases)
        if info.store_true:
            group.add_argument(*flags, action="store_true", **kwargs)
            continue
        parser = info.parser()
        if parser is not None:
            kwargs["type"] = parser
        if info.choices is not None:
            kwargs["choices"] = info.choices
        if info.nargs is not None:
            kwargs["nargs"] = info.nargs
        if info.metavar is not None or info.choices is None:  # the field's name, not the owner-qualified dest
            kwargs["metavar"] = info.metavar or attribute.name.upper()
        if info.append:
            kwargs["action"] = "append"
        group.add_argument(*flags, **kwargs)


def given_options(owner: str, args: argparse.Namespace) -> list[str]:
    """The flags of ``owner``'s options the command line gave."""
    prefix = option_dest(owner, "")
    return [name[len(prefix):] for name in vars(args) if name.startswith(prefix)]


def options_from_args(owner: str, options_class: type, args: argparse.Namespace) -> Any:
    """The options instance the command line gave (defaults for flags not given); a ConfigError if out of bounds."""
    values: dict[str, Any] = {}
    given = vars(args)
    for attribute in option_fields(options_class):
        dest = option_dest(owner, attribute.name)
        if dest in given:
            value = given[dest]
            values[attribute.name] = tuple(value) if isinstance(value, list) else value
    return options_class(**values)


def with_overrides(options: Any, overrides: Mapping[str, Any]) -> Any:
    """``options`` with the overrides that name its fields (checked like any construction)."""
    mine = {name: (tuple(value) if isinstance(value, list) else value)
            for name, value in overrides.items() if name in option_names(type(options))}
    return attrs.evolve(options, **mine) if mine else options


# -- a flag given once, an argument that is text, one line per refusal ------------------------------


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on standard error (``PROG: message (see PROG --help)``), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


_GIVEN = "_arc_flags_given"  # the namespace's record of the flags given so far


def _given_once(action: argparse.Action, namespace: argparse.Namespace) -> None:
    given: set[str] | None = getattr(namespace, _GIVEN, None)
    if given is None:
        given = set()
        setattr(namespace, _GIVEN, given)
    if action.dest in given:
        raise argparse.ArgumentError(action, "given more than once; give it once")
    given.add(action.dest)


def once_each(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` (and its subcommands' parsers) refusing any flag given twice, but the ``append`` ones (repeatable
    by design: ``--set``, ``--base-url``): each stored value's action becomes its once-only form. Returns it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                once_each(sub)
        elif type(action) in _ONCE_FORMS and action.option_strings:
            action.__class__ = _ONCE_FORMS[type(action)]
    return parser


class _OnceStore(argparse._StoreAction):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        _given_once(self, namespace)
        super().__call__(parser, namespace, values, option_string)


class _OnceConst(argparse._StoreConstAction):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        _given_once(self, namespace)
        super().__call__(parser, namespace, values, option_string)


_ONCE_FORMS: dict[type, type] = {
    argparse._StoreAction: _OnceStore,
    argparse._StoreTrueAction: _OnceConst,
    argparse._StoreFalseAction: _OnceConst,
    argparse._StoreConstAction: _OnceConst,
}


def unique_settings(pairs: Iterable[tuple[str, Any]], flag: str = "--set") -> dict[str, Any]:
    """``KEY=VALUE`` settings as a mapping; a key set twice is a ValueError (never a silent last value)."""
    settings: dict[str, Any] = {}
    for key, value in pairs:
        if key in settings:
            raise ValueError(f"{flag} {key} given more than once; give it once")
        settings[key] = value
    return settings


def undecodable_argument(argv: Sequence[str]) -> str | None:
    """Why a command line cannot be read as text (an argument that is not valid UTF-8, which Python hands over with
    lone surrogates), naming the argument and its bytes; None when every argument is text."""
    for position, argument in enumerate(argv, 1):
        if _LONE_SURROGATE.search(argument) is None:
            continue
        raw = argument.encode("utf-8", "surrogateescape" if _escaped_bytes_only(argument) else "surrogatepass")
        shown = repr(raw[:_SHOWN_CHARS]) + ("..." if len(raw) > _SHOWN_CHARS else "")
        before = argv[position - 2] if position > 1 else ""
        after = f" (after {before[:_SHOWN_CHARS]})" if before and _LONE_SURROGATE.search(before) is None else ""
        return f"argument {position}{after} is not valid UTF-8 text: {shown}; give every argument as UTF-8 text"
    return None


def _escaped_bytes_only(text: str) -> bool:
    """True when every lone surrogate of ``text`` is one Python made of an undecodable byte (U+DC80..U+DCFF)."""
    return all("\udc80" <= char <= "\udcff" for char in _LONE_SURROGATE.findall(text))
