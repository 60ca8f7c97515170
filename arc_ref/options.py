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
from typing import Any, Callable, Mapping, Sequence

import attrs
from attrs import frozen

from arc_ref.errors import ConfigError

OPTION_KEY = "arc_ref.option"


@frozen
class OptionInfo:
    """What an option says about itself beyond its type and default (``option``, ``int_option``, ``float_option``)."""

    help: str
    flag: str | None = None  # the command-line flag (default: --the-field-name)
    parse: Callable[[str], Any] | None = None  # a parser of its own (a URL); a number's comes from its bounds
    number: type | None = None  # int or float: a number, parsed and checked by its bounds
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    exclusive_minimum: float | None = None
    nargs: str | None = None
    metavar: str | None = None
    recorded: bool = True  # False: a connection setting, never in a record (an API key, a timeout)
    store_true: bool = False
    append: bool = False  # the flag may be repeated, each value appended (a tuple)

    def parser(self) -> Callable[[str], Any] | None:
        """The argparse ``type`` of the flag: a number's from its bounds, else the option's own parser (None: text)."""
        if self.number is int:
            return integer_parser(self.minimum)
        if self.number is float:
            return number_parser(self.minimum, self.exclusive_minimum)
        return self.parse


def integer_parser(minimum: float | None = None) -> Callable[[str], int]:
    """A parser of an integer at least ``minimum``; an ``ArgumentTypeError`` saying what it expected otherwise."""
    expected = ("a positive integer" if minimum == 1 else f"an integer >= {minimum:g}" if minimum is not None
                else "an integer")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


def number_parser(minimum: float | None = None, exclusive_minimum: float | None = None) -> Callable[[str], float]:
    """A parser of a finite number at least ``minimum`` (above ``exclusive_minimum``)."""
    expected = (f"a number > {exclusive_minimum:g}" if exclusive_minimum is not None
                else f"a number >= {minimum:g}" if minimum is not None else "a finite number")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        low_ok = (minimum is None or value >= minimum) and (exclusive_minimum is None or value > exclusive_minimum)
        if not (low_ok and (exclusive_minimum is None or value < float("inf"))):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

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
) -> Any:
    """A field of an options class that is not a number: text, a choice, a switch (``store_true``), or a value with
    a parser of its own (``parse``)."""
    info = OptionInfo(help=help, flag=flag, parse=parse, choices=tuple(choices) if choices is not None else None,
                      nargs=nargs, metavar=metavar, recorded=recorded, store_true=store_true, append=append)
    return _field(default, info, converter)


def int_option(
    default: Any,
    *,
    help: str,
    minimum: float | None = None,
    flag: str | None = None,
    nargs: str | None = None,
    metavar: str | None = None,
    recorded: bool = True,
    converter: Callable[[Any], Any] | None = None,
) -> Any:
    """An integer field (or, with ``nargs``, a tuple of them): its bounds make its parser and its check."""
    info = OptionInfo(help=help, flag=flag, number=int, minimum=minimum, nargs=nargs, metavar=metavar,
                      recorded=recorded)
    return _field(default, info, converter)


def float_option(
    default: Any,
    *,
    help: str,
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
    flag: str | None = None,
    metavar: str | None = None,
    recorded: bool = True,
) -> Any:
    """A number field: its bounds make its parser and its check (a finite number)."""
    info = OptionInfo(help=help, flag=flag, number=float, minimum=minimum, exclusive_minimum=exclusive_minimum,
                      metavar=metavar, recorded=recorded)
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


def _bounded(info: OptionInfo, flag: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{flag} must be a number, got {value!r}")
    if info.minimum is not None and not value >= info.minimum:
        raise ConfigError(f"{flag} must be at least {info.minimum:g}, got {value!r}")
    if info.exclusive_minimum is not None and not value > info.exclusive_minimum:
        raise ConfigError(f"{flag} must be above {info.exclusive_minimum:g}, got {value!r}")
    if value != value or value == float("inf"):
        raise ConfigError(f"{flag} must be a finite number, got {value!r}")


def _check_option(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """The bounds and choices an option declares, checked on every construction (a ConfigError naming its flag)."""
    info = option_info(attribute)
    flag = option_flag(attribute)
    if value is None:
        return
    if info.choices is not None and value not in info.choices:
        raise ConfigError(f"{flag} must be one of {', '.join(map(str, info.choices))}, got {value!r}")
    if info.minimum is None and info.exclusive_minimum is None:
        return
    for item in value if isinstance(value, tuple) else (value,):
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
    """The command-line flags of ``options_class`` (help, parser, choices, default from the fields).

    A flag not given leaves no value (``argparse.SUPPRESS``): ``given_options`` tells what the user set, and
    ``options_from_args`` takes the field's default for the rest."""
    for attribute in option_fields(options_class):
        info = option_info(attribute)
        default = attribute.default
        shown = " ".join(map(str, default)) if isinstance(default, tuple) else default
        text = f"{info.help} (default: {shown})" if default is not None and not info.store_true else info.help
        kwargs: dict[str, Any] = {"dest": option_dest(owner, attribute.name), "default": argparse.SUPPRESS,
                                  "help": text}
        if info.store_true:
            group.add_argument(option_flag(attribute), action="store_true", **kwargs)
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
        group.add_argument(option_flag(attribute), **kwargs)


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
