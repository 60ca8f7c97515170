"""Every id ARC shows the model as an example (its tools' descriptions, its instructions, its notes) has the shape
of an id ARC mints under the default scheme (the "paper" preset, which the proxy serves by default): a model that
copies an example's shape must send an id that parses (review h54 F7: the tools said ``§0001-3fa9c1e2``)."""

from __future__ import annotations

import re

import pytest

import arc_ref.tools
from arc_ref.config import preset
from arc_ref.ids import IdScheme
from arc_ref.render import ARC_INSTRUCTIONS
from arc_ref.session import TOOL_MODE_SYSTEM
from arc_ref.tools import ARC_TOOLS

_ID_LIKE = re.compile(r"§[0-9A-Za-z-]+")


def _texts() -> dict[str, str]:
    texts = {"arc_ref.tools docstring": arc_ref.tools.__doc__ or "", "ARC_INSTRUCTIONS": ARC_INSTRUCTIONS,
             "TOOL_MODE_SYSTEM": TOOL_MODE_SYSTEM}
    for tool in ARC_TOOLS:
        texts[f"tool {tool.name}"] = f"{tool.description or ''} {tool.parameters or ''}"
    try:
        from arc_ref.frontends.proxy import ARC_NOTE
    except ImportError:  # the proxy's extra is not installed
        pass
    else:
        texts["ARC_NOTE"] = ARC_NOTE
    return texts


def _parses(scheme: IdScheme, shown: str) -> bool:
    counter, fingerprint_digits = scheme.split(shown.removeprefix("§"))
    return (counter is not None and fingerprint_digits is not None
            and scheme.format(counter, int(fingerprint_digits)) == shown)


def test_the_default_scheme_parses_its_own_ids_and_refuses_the_old_example() -> None:
    config = preset("paper")
    scheme = IdScheme(config.capacity, config.fingerprint_bits)
    assert _parses(scheme, scheme.make(42, "ls", "a.txt"))
    assert _parses(scheme, scheme.widest())
    assert not _parses(scheme, "§0001-3fa9c1e2")


@pytest.mark.parametrize("where", sorted(_texts()))
def test_every_id_example_arc_shows_the_model_is_an_id_of_the_default_scheme(where: str) -> None:
    config = preset("paper")
    scheme = IdScheme(config.capacity, config.fingerprint_bits)
    text = _texts()[where]
    examples = [found.group() for found in _ID_LIKE.finditer(text) if found.group() != "§id"]
    assert all(_parses(scheme, example) for example in examples), (where, examples)


def test_the_tool_descriptions_show_an_example_id() -> None:
    """The check above is not vacuous: the recall tools' id parameter does show one."""
    recall = next(tool for tool in ARC_TOOLS if tool.name == "_recall")
    assert _ID_LIKE.search(recall.parameters or "") is not None
