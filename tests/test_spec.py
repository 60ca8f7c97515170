"""Keep `spec/` and the reference core in agreement.

(a) every numbered statement of the appendix has a section in `spec/statements.md` whose "Implemented by"
    paths resolve and whose "Checked by" names are registered properties or CrossHair contracts, and every
    registered property is listed under every statement it proves;
(b) every trace vector's input and expected output lines validate against the two JSON Schemas;
(c) every trace vector replays to its expected output;
(d) the Wycheproof-style vector files have consistent headers and every case re-evaluates to its result;
(e) the parameter table lists every Config field with the presets' values, and the derived quantities;
plus: the templates quoted in `spec/rendering.md` are the code's, and its worked examples are real output.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import unittest
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import attrs
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test
from jsonschema import Draft202012Validator

import proofs_check
from arc_ref import render
from arc_ref.chat import CHAT_FORMATS
from arc_ref.config import OVERRIDE_KEYS, PRESETS, TEMPLATE_FORMAT, Config, Setup, make_setup
from arc_ref.text import ELLIPSIS
from arc_ref.trace import replay_text
from proofs_check import vectors
from proofs_check.broken_contracts import CONTRACT_STATEMENTS, CONTRACTED
from proofs_check.registry import PROPERTIES, STATEMENTS
from proofs_check.shared_data import SHARED_DATA_ENV, json_strings, replay_directory
from proofs_check.vectors.dsl import SECTION_REFERENCE

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "spec"
VECTOR_DIR = SPEC / "vectors"
STATEMENTS_FILE = SPEC / "statements.md"
IMPLEMENTED = "**Implemented by:**"
CHECKED = "**Checked by:**"
CROSSHAIR = "crosshair:"
_BACKTICKED = re.compile(r"`([^`]+)`")
_HEADING = re.compile(r"^## (?P<key>[A-Z][0-9]) — (?P<title>.+)$")


# --- (a) statements -------------------------------------------------------------------------------


@attrs.frozen
class Section:
    key: str
    title: str
    text: str
    implemented: tuple[str, ...]
    checked: tuple[str, ...]


def _paragraph_items(text: str, prefix: str) -> tuple[str, ...] | None:
    """Backticked items of the paragraph that starts with ``prefix`` (None when there is no such paragraph)."""
    lines = text.split("\n")
    for number, line in enumerate(lines):
        if line.startswith(prefix):
            paragraph = [line[len(prefix):]]
            for following in lines[number + 1:]:
                if not following.strip():
                    break
                paragraph.append(following)
            return tuple(_BACKTICKED.findall(" ".join(paragraph)))
    return None


@cache
def statement_sections() -> dict[str, Section]:
    text = STATEMENTS_FILE.read_text(encoding="utf-8")
    sections: dict[str, Section] = {}
    current: tuple[str, str] | None = None
    body: list[str] = []

    def close() -> None:
        if current is None:
            return
        key, title = current
        joined = "\n".join(body)
        assert key not in sections, f"spec/statements.md has two sections for {key}"
        sections[key] = Section(
            key, title, joined, _paragraph_items(joined, IMPLEMENTED) or (), _paragraph_items(joined, CHECKED) or ()
        )

    for line in text.split("\n"):
        match = _HEADING.match(line)
        if match:
            close()
            current, body = (match["key"], match["title"].strip()), []
        elif line.startswith("## "):
            close()
            current, body = None, []
        else:
            body.append(line)
    close()
    return sections


def _test_modules() -> list[ModuleType]:
    return [
        importlib.import_module(f"proofs_check.{info.name}")
        for info in pkgutil.iter_modules(proofs_check.__path__)
        if info.name.startswith("test_")
    ]


def _exposed_machines(module: ModuleType) -> Iterator[tuple[str, type[RuleBasedStateMachine]]]:
    """State machines a module exposes to pytest (``TestX = Machine.TestCase``), by registry name."""
    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, unittest.TestCase) and value.__qualname__.endswith(".TestCase"):
            machine_name = value.__qualname__[: -len(".TestCase")]
            machine = getattr(module, machine_name, None)
            if isinstance(machine, type) and issubclass(machine, RuleBasedStateMachine):
                yield f"{module.__name__}.{machine_name}", machine


@cache
def registered_properties() -> dict[str, tuple[str, ...]]:
    """Registry name -> statements, after importing every property module.

    Plain properties register at import (``@proves``); a state machine registers (``tally``) when a rule runs,
    so each exposed machine not yet registered is run for one short example first.
    """
    modules = _test_modules()
    quick = settings(max_examples=1, stateful_step_count=3, deadline=None, derandomize=True, database=None,
                     phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    for module in modules:
        for name, machine in _exposed_machines(module):
            if name not in PROPERTIES:
                run_state_machine_as_test(machine, settings=quick)
            assert name in PROPERTIES, f"state machine {name} ran but did not register itself (tally)"
    return {name: info.statements for name, info in PROPERTIES.items()}


def resolve_path(dotted: str) -> object:
    """Import the longest module prefix of ``dotted`` and getattr the rest; raise with a clear message."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            if not hasattr(target, attribute):
                raise LookupError(f"{'.'.join(parts[:split])} has no attribute path {'.'.join(parts[split:])!r}")
            target = getattr(target, attribute)
        return target
    raise LookupError(f"no importable module in {dotted!r}")


def test_every_statement_has_exactly_one_section_with_the_registry_title() -> None:
    sections = statement_sections()
    missing = [key for key in STATEMENTS if key not in sections]
    extra = [key for key in sections if key not in STATEMENTS]
    assert not missing, f"spec/statements.md has no section for {missing} (heading '## KEY — Title')"
    assert not extra, f"spec/statements.md has sections for unknown statements {extra}"
    assert list(sections) == list(STATEMENTS), "sections must follow the paper's numbering (registry order)"
    wrong = {key: (section.title, STATEMENTS[key]) for key, section in sections.items() if section.title != STATEMENTS[key]}
    assert not wrong, f"section titles differ from proofs_check.registry.STATEMENTS: {wrong}"


@pytest.mark.parametrize("key", list(STATEMENTS))
def test_statement_has_statement_behaviour_implementation_and_property(key: str) -> None:
    section = statement_sections().get(key)
    assert section is not None, f"no section for {key}"
    for part in ("**Statement.**", "**Reference behaviour.**"):
        assert part in section.text, f"{key}: the section has no {part} paragraph"
    assert section.implemented, f"{key}: no '{IMPLEMENTED}' paragraph with backticked paths"
    problems = []
    for path in section.implemented:
        if not path.startswith("arc_ref."):
            problems.append(f"{path}: implementation paths must name the core (arc_ref.*)")
            continue
        try:
            resolve_path(path)
        except (LookupError, ImportError) as failure:
            problems.append(f"{path}: {failure}")
    assert not problems, f"{key}: unresolvable 'Implemented by' paths:\n  " + "\n  ".join(problems)
    properties = [name for name in section.checked if not name.startswith(CROSSHAIR)]
    assert properties, f"{key}: '{CHECKED}' names no registered property"


@pytest.mark.parametrize("key", list(STATEMENTS))
def test_checked_by_names_exist_and_prove_the_statement(key: str) -> None:
    registry = registered_properties()
    section = statement_sections()[key]
    problems = []
    for name in section.checked:
        if name.startswith(CROSSHAIR):
            target = name[len(CROSSHAIR):]
            if target not in CONTRACTED:
                problems.append(f"{name}: not in proofs_check.broken_contracts.CONTRACTED")
            elif key not in CONTRACT_STATEMENTS.get(target, ()):
                problems.append(f"{name}: CONTRACT_STATEMENTS says it supports {CONTRACT_STATEMENTS.get(target)}, not {key}")
        elif name not in registry:
            problems.append(f"{name}: not a registered property (proofs_check.registry.PROPERTIES)")
        elif key not in registry[name]:
            problems.append(f"{name}: declares @proves{registry[name]}, not {key}")
    assert not problems, f"{key}: 'Checked by' disagrees with the registry:\n  " + "\n  ".join(problems)


def test_every_registered_property_and_contract_is_listed_under_each_statement_it_proves() -> None:
    sections = statement_sections()
    missing = [
        f"{name} (proves {key})"
        for name, keys in registered_properties().items()
        for key in keys
        if key in sections and name not in sections[key].checked
    ]
    missing += [
        f"{CROSSHAIR}{target} (supports {key})"
        for target in CONTRACTED
        for key in CONTRACT_STATEMENTS.get(target, ())
        if key in sections and f"{CROSSHAIR}{target}" not in sections[key].checked
    ]
    assert not missing, "spec/statements.md does not list these under 'Checked by':\n  " + "\n  ".join(missing)


def test_readme_indexes_every_statement_with_a_working_link() -> None:
    readme = (SPEC / "README.md").read_text(encoding="utf-8")
    statements = STATEMENTS_FILE.read_text(encoding="utf-8")
    for key, title in STATEMENTS.items():
        row = re.search(rf"^\| {key} \| (?P<title>[^|]+) \| \[[^\]]*\]\(statements\.md#{key}\) \|$", readme, re.MULTILINE)
        assert row, f"spec/README.md: no index row '| {key} | title | [..](statements.md#{key}) |'"
        assert row["title"].strip() == title, f"spec/README.md: title of {key} differs from the registry"
        assert f'<a id="{key}"></a>' in statements, f"spec/statements.md: no anchor <a id=\"{key}\"></a>"


# --- (b) and (c) trace vectors --------------------------------------------------------------------


def _schema(name: str) -> Draft202012Validator:
    schema = json.loads((SPEC / name).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@cache
def input_validator() -> Draft202012Validator:
    return _schema("trace-input.schema.json")


@cache
def output_validator() -> Draft202012Validator:
    return _schema("trace-output.schema.json")


TRACE_NAMES = sorted(path.name[: -len(".trace.jsonl")] for path in VECTOR_DIR.glob("*.trace.jsonl"))


def read_lines(path: Path) -> list[str]:
    """The lines of a vector file as `arc-ref replay` reads them: split at LF only (trace.md §1; a text-mode reader
    would also end a line at a CR, which `unicode_whitespace_is_text` holds inside a line), each with its LF."""
    return [line + "\n" for line in path.read_bytes().decode("utf-8").split("\n")[:-1]]


def test_vector_directory_matches_the_generator() -> None:
    generated = {vector.name for vector in vectors.trace_vectors()}
    assert TRACE_NAMES, f"no trace vectors in {VECTOR_DIR}; run python -m proofs_check.vectors --write"
    assert set(TRACE_NAMES) == generated, (
        f"spec/vectors disagrees with proofs_check/vectors/trace_cases.py: only on disk {sorted(set(TRACE_NAMES) - generated)},"
        f" only in the generator {sorted(generated - set(TRACE_NAMES))}; run python -m proofs_check.vectors --write"
    )
    for name in TRACE_NAMES:
        assert (VECTOR_DIR / f"{name}.expected.jsonl").exists(), f"{name}.expected.jsonl is missing"


def test_readme_lists_every_trace_vector_that_needs_the_qwen3_files() -> None:
    """Review h18 F1: the README said only the template_* vectors load more than tiktoken's encodings; 13 others did
    too. Its list is the vectors whose config names an hf-dir tokenizer, split by chat_format template."""
    needs: dict[str, set[str]] = {"tokenizer": set(), "template": set()}
    for name in TRACE_NAMES:
        text = (VECTOR_DIR / f"{name}.trace.jsonl").read_text(encoding="utf-8")
        if "hf-dir:" in text:
            needs["template" if '"template"' in text else "tokenizer"].add(name)
    readme = (SPEC / "README.md").read_text(encoding="utf-8")
    listed = {
        kind: set(re.findall(r"`(\w+)`", readme.split(f"- the {heading}:", 1)[1].split(";", 1)[0].split(".\n", 1)[0]))
        for kind, heading in (("tokenizer", "tokenizer only"), ("template", "tokenizer and its chat template"))
    }
    assert listed == needs
    assert f"the {len(needs['tokenizer']) + len(needs['template'])} trace vectors that name" in readme
    assert f"the {len(needs['template'])} that also set" in readme


def test_schemas_are_valid_and_name_every_config_field() -> None:
    input_schema: dict[str, Any] = json.loads((SPEC / "trace-input.schema.json").read_text(encoding="utf-8"))
    output_schema: dict[str, Any] = json.loads((SPEC / "trace-output.schema.json").read_text(encoding="utf-8"))
    for schema in (input_schema, output_schema):
        Draft202012Validator.check_schema(schema)
    fields = [field.name for field in attrs.fields(Config)]
    output_fields = output_schema["$defs"]["configFields"]["properties"]
    assert sorted(output_fields) == sorted(fields), "trace-output.schema.json configFields != Config fields"
    config_keys = input_schema["$defs"]["config"]["properties"]
    assert set(config_keys) - {"op", "preset"} == set(OVERRIDE_KEYS), (
        "trace-input.schema.json config keys != arc_ref.config.OVERRIDE_KEYS"
    )
    assert config_keys["preset"]["enum"] == sorted(PRESETS), "trace-input.schema.json preset enum != PRESETS"
    assert set(config_keys["chat_format"]["enum"]) == set(CHAT_FORMATS) | {TEMPLATE_FORMAT}, (
        "chat_format enum != CHAT_FORMATS and the template format"
    )


@pytest.mark.parametrize("name", TRACE_NAMES)
def test_trace_vector_lines_validate_against_the_schemas(name: str) -> None:
    inputs = read_lines(VECTOR_DIR / f"{name}.trace.jsonl")
    expected = read_lines(VECTOR_DIR / f"{name}.expected.jsonl")
    assert len(expected) == len(inputs), f"{name}: {len(expected)} expected lines for {len(inputs)} input lines"
    for number, (raw, out) in enumerate(zip(inputs, expected), start=1):
        output = json.loads(out)
        problems = [error.message for error in output_validator().iter_errors(output)]
        assert not problems, f"{name} expected line {number} violates trace-output.schema.json: {problems}"
        try:
            parsed: Any = json.loads(raw)
        except ValueError:  # not JSON, or an integer of more digits than Python converts
            parsed = None
        input_ok = parsed is not None and input_validator().is_valid(parsed)
        if not input_ok:
            assert output["op"] == "error", f"{name} line {number}: schema-invalid input must give an error line"
        if output["op"] != "error":
            assert input_ok, f"{name} line {number}: answered normally but violates trace-input.schema.json"
            assert output["op"] == parsed["op"], f"{name} line {number}: output op differs from input op"
        if output["op"] == "error":
            assert output["line"] == number, f"{name} line {number}: error line names line {output['line']}"
        if output["op"] == "view":
            assert output["tokens"] <= output["budget"] <= output["limit"], f"{name} line {number}: view over K or L"
            assert sum(output["components"].values()) == output["tokens"], f"{name} line {number}: components"


TRACE_VECTORS = {vector.name: vector for vector in vectors.trace_vectors()}


@pytest.mark.parametrize("name", TRACE_NAMES)
def test_trace_vector_replays_to_the_expected_output(name: str) -> None:
    inputs = read_lines(VECTOR_DIR / f"{name}.trace.jsonl")
    expected = [line.rstrip("\n") for line in read_lines(VECTOR_DIR / f"{name}.expected.jsonl")]
    needs = TRACE_VECTORS[name].needs if name in TRACE_VECTORS else ()
    with replay_directory(needs) as directory:
        if directory is None:
            pytest.skip(f"trace vector {name} needs {', '.join(needs)} beside the repository (or {SHARED_DATA_ENV})")
        actual = list(replay_text(inputs))
        assert list(replay_text(inputs, verify=True)) == actual, f"{name}: the replay with --verify prints other lines"
    assert len(actual) == len(inputs), f"{name}: replay wrote {len(actual)} lines for {len(inputs)}"
    for number, (got, want) in enumerate(zip(actual, expected), start=1):
        assert got == want, (
            f"{name} line {number}: the reference's output differs from spec/vectors/{name}.expected.jsonl"
            f" (regenerate with python -m proofs_check.vectors --write if the change is intended)\n"
            f"  got:  {got[:400]}\n  want: {want[:400]}"
        )


def test_trace_index_lists_every_trace_with_what_it_pins() -> None:
    index = json.loads((VECTOR_DIR / "traces.json").read_text(encoding="utf-8"))
    problems = [error.message for error in _schema("vectors/traces.schema.json").iter_errors(index)]
    assert not problems, f"traces.json violates traces.schema.json: {problems}"
    assert [trace["name"] for trace in index["traces"]] == [vector.name for vector in vectors.trace_vectors()]
    assert sorted(trace["name"] for trace in index["traces"]) == TRACE_NAMES, "traces.json != the trace files"
    assert index["numberOfTraces"] == len(index["traces"])
    for trace in index["traces"]:
        assert trace["lines"] == len(read_lines(VECTOR_DIR / f"{trace['name']}.trace.jsonl")), trace["name"]


def _numbered_sections(name: str) -> set[str]:
    """Numbers of the numbered headings of a spec file ("## 10. Agent turns" -> "10", "### 6.1 ..." -> "6.1")."""
    text = (SPEC / name).read_text(encoding="utf-8")
    return set(re.findall(r"^#{2,4} ([0-9]+(?:\.[0-9]+)*)\.? ", text, re.MULTILINE))


def test_every_statement_a_vector_pins_exists_in_the_spec() -> None:
    pinned = {f"trace vector {vector.name}": vector.statements for vector in vectors.trace_vectors()}
    pinned.update({f"vector file {item.name}.json": item.statements for item in vectors.vector_files()})
    sections = statement_sections()
    problems = []
    for owner, references in pinned.items():
        for reference in references:
            match = SECTION_REFERENCE.fullmatch(reference)
            if match is None and reference not in sections:
                problems.append(f"{owner}: {reference} has no section in spec/statements.md")
            elif match is not None and match["section"] not in _numbered_sections(f"{match['file']}.md"):
                problems.append(f"{owner}: spec/{match['file']}.md has no section {match['section']}")
    assert not problems, "vectors pin statements the spec does not have:\n  " + "\n  ".join(problems)
    on_disk = {name: json.loads((VECTOR_DIR / f"{name}.json").read_text(encoding="utf-8"))["statements"]
               for name in VECTOR_FILES}
    assert on_disk == {item.name: list(item.statements) for item in vectors.vector_files()}


# --- (d) Wycheproof-style vector files -------------------------------------------------------------

VECTOR_FILES = {vector_file.name: vector_file for vector_file in vectors.vector_files()}


@pytest.mark.parametrize("name", sorted(VECTOR_FILES))
def test_vector_file_header_counts_and_every_case_reevaluates(name: str) -> None:
    path = VECTOR_DIR / f"{name}.json"
    assert path.exists(), f"{path} is missing; run python -m proofs_check.vectors --write"
    document = json.loads(path.read_text(encoding="utf-8"))
    schema_errors = [error.message for error in _schema("vectors/vector-file.schema.json").iter_errors(document)]
    assert not schema_errors, f"{name}.json violates vector-file.schema.json: {schema_errors}"
    cases = document["cases"]
    assert document["numberOfTests"] == len(cases), f"{name}.json: numberOfTests {document['numberOfTests']} != {len(cases)}"
    assert [case["tcId"] for case in cases] == list(range(1, len(cases) + 1)), f"{name}.json: tcIds must be 1..n"
    used = {flag for case in cases for flag in case["flags"]}
    assert used <= set(document["notes"]), f"{name}.json: flags without a note: {sorted(used - set(document['notes']))}"
    assert set(document["notes"]) <= used, f"{name}.json: notes for unused flags: {sorted(set(document['notes']) - used)}"
    evaluate = VECTOR_FILES[name].evaluate
    for case in cases:
        assert evaluate(case["inputs"]) == case["result"], (
            f"{name}.json tcId {case['tcId']} ({case['comment']}): the reference now computes"
            f" {json.dumps(evaluate(case['inputs']), ensure_ascii=False)[:300]}"
        )


# --- (e) parameter table ---------------------------------------------------------------------------


def _table_under(text: str, heading: str) -> list[list[str]]:
    """Rows (cells stripped) of the first table after ``heading``."""
    start = text.find(heading)
    assert start >= 0, f"spec/parameters.md has no heading {heading!r}"
    rows: list[list[str]] = []
    for line in text[start:].split("\n")[1:]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(set(cell) <= set("-: ") for cell in cells):
                rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header row


def _cell_value(cell: str) -> object:
    """A table cell: an integer, a backticked JSON literal, or a backticked dotted name under arc_ref."""
    inner = cell.strip()
    if inner.startswith("`") and inner.endswith("`"):
        inner = inner[1:-1]
        if inner.startswith("arc_ref."):
            return resolve_path(inner)
    return json.loads(inner)


def _check_preset_table(heading: str, names: list[str], value_of: Callable[[str, str], object]) -> list[list[str]]:
    """The table under ``heading`` lists exactly ``names`` (column 1) with each preset's value (columns 2, 3)."""
    text = (SPEC / "parameters.md").read_text(encoding="utf-8")
    listed = {row[1].strip("`"): row for row in _table_under(text, heading)}
    assert sorted(listed) == sorted(names), (
        f"parameters.md {heading!r}: missing {sorted(set(names) - set(listed))},"
        f" unknown {sorted(set(listed) - set(names))}"
    )
    for name, row in listed.items():
        for column, preset_name in ((2, "minimal"), (3, "paper")):
            expected = value_of(preset_name, name)
            assert _cell_value(row[column]) == expected, (
                f"parameters.md {heading!r}: {name} under {preset_name} says {row[column]}, the code gives {expected!r}"
            )
    return list(listed.values())


def test_parameter_table_lists_every_config_field_with_both_presets() -> None:
    fields = [field.name for field in attrs.fields(Config)]
    rows = _check_preset_table("## Configuration fields", fields,
                               lambda preset_name, name: getattr(PRESETS[preset_name], name))
    for row in rows:
        assert len(row) == 5 and row[0] and row[4], f"parameters.md row for {row[1]} needs 5 non-empty cells"


def test_parameter_table_derived_quantities_match_make_setup() -> None:
    setups = {name: make_setup(config) for name, config in PRESETS.items()}
    integer_fields = [field.name for field in attrs.fields(Setup) if field.type in ("int", int)]
    _check_preset_table("## Derived quantities", integer_fields,
                        lambda preset_name, name: getattr(setups[preset_name], name))


# --- rendering.md: templates and worked examples -----------------------------------------------------


def test_rendering_quotes_the_fixed_strings_of_the_code() -> None:
    text = (SPEC / "rendering.md").read_text(encoding="utf-8")
    fixed = {
        "SUMMARY_HEADER": render.SUMMARY_HEADER,
        "RECALL_HEADER": render.RECALL_HEADER,
        "COMMAND_RESULT_HEADER": render.COMMAND_RESULT_HEADER,
        "ELLIPSIS": ELLIPSIS,
        "WIDEST_NUMBER": str(render.WIDEST_NUMBER),
        "WIDEST_RETURNCODE": str(render.WIDEST_RETURNCODE),
    }
    for chat in CHAT_FORMATS.values():
        fixed[f"{chat.name} generation prompt"] = json.dumps(chat.generation_prompt)
        fixed[f"{chat.name} message end"] = json.dumps(chat.message_end)
    missing = [name for name, value in fixed.items() if value not in text]
    assert not missing, f"spec/rendering.md does not quote these strings of arc_ref exactly: {missing}"
    block = re.search(r"```text default-system\n(?P<body>.*?)\n```", text, re.DOTALL)
    assert block and block["body"] == render.DEFAULT_SYSTEM, "rendering.md must quote DEFAULT_SYSTEM exactly"


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_rendering_quotes_the_pre_tokenizer_pattern_of_the_installed_tiktoken(
        encoding: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """rendering.md §2 quotes pat_str verbatim; the installed tiktoken's (its rank file is not fetched)."""
    openai_public = pytest.importorskip("tiktoken_ext.openai_public", reason="tiktoken is not installed")
    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda *args, **kwargs: {})
    pattern = getattr(openai_public, encoding)()["pat_str"]
    text = (SPEC / "rendering.md").read_text(encoding="utf-8")
    block = re.search(rf"```text pat_str={encoding}\n(?P<body>.*?)\n```", text, re.DOTALL)
    assert block is not None, f"rendering.md §2 must quote the pat_str of {encoding} in a 'text pat_str=' block"
    assert block["body"] == pattern, f"rendering.md §2 quotes another pat_str of {encoding} than tiktoken's"


def test_qwen3_split_regex_runs_on_the_same_unicode_tables_as_tiktoken() -> None:
    """rendering.md §2: Oniguruma (tokenizers' Split) has Unicode 16.0 letters and White_Space as \\s."""
    tokenizers = pytest.importorskip("tokenizers", reason="the Hugging Face tokenizers package is not installed")
    from proofs_check.shared_data import QWEN3_VECTOR_PATH

    path = ROOT / QWEN3_VECTOR_PATH / "tokenizer.json"
    if not path.is_file():
        pytest.skip(f"Qwen3's tokenizer.json is absent ({path})")
    split = tokenizers.Tokenizer.from_file(str(path)).pre_tokenizer

    def pieces(text: str) -> int:
        return len(split.pre_tokenize_str(text))

    assert pieces("a\u1c89b") == 1, "U+1C89 is a letter in Unicode 16.0"
    assert pieces("a\U0001e6c0b") == 2, "U+1E6C0 is a letter only since Unicode 17.0"
    assert pieces("\u0085 \u0085") == 1, "U+0085 is White_Space"
    for other in ("\ufeff", "\u180e", "\u001c"):
        assert pieces(f"{other} {other}") == 2, f"U+{ord(other):04X} is not White_Space"
    ignore_case = tokenizers.pre_tokenizers.Split(tokenizers.Regex("(?i:'s)"), "isolated")
    assert [piece for piece, _ in ignore_case.pre_tokenize_str("x'\u017fy")] == ["x", "'\u017f", "y"]


# --- rendering.md §2 run as written: token starts under NFC, byte-pair merging ------------------------

# Characters assigned by Unicode 9.0 (the tables of tokenizers' normalizer), so that Python's unicodedata (14.0)
# gives the same decompositions, classes and compositions: letters, composed letters, combining marks of several
# classes, U+0344 and U+0F73 (decompose to two marks), U+212B (a singleton), Hangul syllables and jamo, Tibetan.
_NFC_POOL = ("a", "e", "o", "d", "x", "q", "A", " ", "\u00e9", "\u00c5", "\u1e0b", "\u1ea1", "\u212b", "\u2126",
             "\u0301", "\u0307", "\u0308", "\u0323", "\u0327", "\u031b", "\u030a", "\u0340", "\u0341", "\u0343",
             "\u0344", "\u0345", "\u0313", "\u1f00", "\u1fbf", "\u05b8", "\u05c1", "\u0e48", "\u3099", "\u304b",
             "\u0958", "\u0b47", "\u0b3e", "\u0cc6", "\u0cd5", "\u0f71", "\u0f72", "\u0f73", "\u0f81", "\u1100",
             "\u1161", "\u11a8", "\uac00")


def spec_nfc_positions(text: str) -> tuple[str, list[int]]:
    """NFC(text) and each of its characters' position in ``text``: the four steps of rendering.md §2."""
    import unicodedata

    def composite(first: str, second: str) -> str | None:  # the primary composite of a starter and a character
        joined = unicodedata.normalize("NFC", first + second)
        return joined if len(joined) == 1 else None

    items = [[unicodedata.combining(part), part, 0 if number == 0 else 1]  # 1. decompose
             for char in text for number, part in enumerate(unicodedata.normalize("NFD", char))]
    start = 0
    while start < len(items):  # 2. reorder each run of non-starters by ccc, stably
        end = start
        while end < len(items) and items[end][0] != 0:
            end += 1
        items[start:end] = sorted(items[start:end], key=lambda item: item[0])
        start = end + 1
    kept: list[list[Any]] = []  # 3. compose: [char, change]
    starter: int | None = None
    last_class: int | None = None  # ccc of the last character kept after the starter
    for ccc, char, change in items:
        blocked = last_class is not None and (last_class == 0 or last_class >= ccc)
        found = composite(kept[starter][0], char) if starter is not None and not blocked else None
        if found is not None and starter is not None:
            kept[starter] = [found, kept[starter][1] + change - 1]
            continue
        kept.append([char, change])
        if ccc == 0:
            starter, last_class = len(kept) - 1, None
        else:
            last_class = ccc
    cursor, positions = 0, []  # 4. positions
    for _, change in kept:
        if change > 0:
            positions.append(max(cursor - 1, 0))
        else:
            positions.append(cursor)
            cursor += 1 - change
    return "".join(char for char, _ in kept), positions


def _qwen3_tokenizer() -> Any:
    from proofs_check.shared_data import QWEN3_VECTOR_PATH
    from arc_ref.tokenizers import get_tokenizer

    directory = ROOT / QWEN3_VECTOR_PATH
    if not (directory / "tokenizer.json").is_file():
        pytest.skip(f"Qwen3's tokenizer.json is absent ({directory})")
    return get_tokenizer(f"hf-dir:{directory}")


def test_token_starts_under_nfc_are_the_four_steps_of_rendering_md() -> None:
    """rendering.md §2's alignment rule, run as written, gives the reference's token starts (Qwen3, NFC) on 3,000
    random texts of composed letters, marks, Hangul and Tibetan, and on the spec's worked examples."""
    import random
    import unicodedata

    tokenizer = _qwen3_tokenizer()
    encoder = tokenizer._tokenizer
    byte_level = {**{chr(code): code for code in range(33, 127)}, **{chr(code): code for code in range(161, 173)},
                  **{chr(code): code for code in range(174, 256)}}
    extra = [code for code in range(256) if code not in byte_level.values()]
    byte_level.update({chr(256 + number): code for number, code in enumerate(extra)})

    def spec_starts(text: str) -> list[int]:
        normalized, positions = spec_nfc_positions(text)
        assert normalized == unicodedata.normalize("NFC", text)
        owner = [index for index, char in enumerate(normalized) for _ in char.encode("utf-8")]
        starts, offset, previous = [], 0, 0
        for token in encoder.encode(text, add_special_tokens=False).tokens:
            previous = max(previous, positions[owner[offset]])
            starts.append(previous)
            offset += len(token)  # a byte-level token: one character per byte
        return starts

    examples = {"x\u0323\u0307y": [0, 0, 2, 2, 3], "a\u0344b": [0, 1, 2]}
    for text, starts in examples.items():
        assert spec_starts(text) == starts == tokenizer.token_starts(text), text
    generator = random.Random(27)
    for _ in range(3000):
        text = "".join(generator.choice(_NFC_POOL) for _ in range(generator.randint(1, 9)))
        assert spec_starts(text) == tokenizer.token_starts(text), ascii(text)


def spec_merge(symbols: list[Any], rank: Callable[[Any, Any], int | None]) -> list[Any]:
    """Byte-pair merging as rendering.md §2 states it: the pair of lowest rank, the leftmost on ties."""
    while len(symbols) > 1:
        best: tuple[int, int] | None = None
        for index in range(len(symbols) - 1):
            found = rank(symbols[index], symbols[index + 1])
            if found is not None and (best is None or found < best[0]):
                best = (found, index)
        if best is None:
            break
        index = best[1]
        symbols[index:index + 2] = [symbols[index] + symbols[index + 1]]
    return symbols


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_byte_pair_merging_of_tiktoken_is_the_rule_of_rendering_md(encoding: str) -> None:
    """The spec's tie texts and sample texts, split by the encoding's pattern and each piece merged by the written
    rule, give tiktoken's ids."""
    regex = pytest.importorskip("regex", reason="the regex package (tiktoken's dependency) is not installed")
    from arc_ref.tokenizers import get_tokenizer

    tiktoken_encoding = get_tokenizer(encoding)._encoding
    ranks = tiktoken_encoding._mergeable_ranks
    for text in ("aaaaa", "eeeee", "ssssss", "!!!!!!!", "xxxxxxxxx", "Hello, wonderful world!", "Straße 1234567"):
        got: list[int] = []
        for piece in regex.findall(tiktoken_encoding._pat_str, text):
            symbols = spec_merge([bytes([byte]) for byte in piece.encode("utf-8")],
                                 lambda left, right: ranks.get(left + right))
            got.extend(ranks[symbol] for symbol in symbols)
        assert got == tiktoken_encoding.encode_ordinary(text), text


def test_byte_pair_merging_of_qwen3_is_the_rule_of_rendering_md() -> None:
    """Qwen3's BPE (merges' index as rank, leftmost on ties) by the written rule gives the reference's ids."""
    tokenizer = _qwen3_tokenizer()
    model = json.loads(tokenizer._tokenizer.to_str())["model"]
    merges = {tuple(pair if isinstance(pair, list) else pair.split(" ")): index
              for index, pair in reversed(list(enumerate(model["merges"])))}
    vocab = model["vocab"]
    for text in ("aaaaa", "eeeee", "ssssss", "!!!!!!!", "xxxxxxxxx", "Hello", "wonderful", "Straße"):
        symbols = spec_merge(list(tokenizer._tokenizer.pre_tokenizer.pre_tokenize_str(text)[0][0]),
                             lambda left, right: merges.get((left, right)))
        assert [vocab[symbol] for symbol in symbols] == tokenizer._tokenizer.encode(
            text, add_special_tokens=False).ids, text


def test_trace_md_lists_the_known_config_keys_in_the_order_of_the_message() -> None:
    """trace.md §6 gives the order of the known keys in the unknown-key message: OVERRIDE_KEYS' order."""
    text = (SPEC / "trace.md").read_text(encoding="utf-8")
    found = re.search(r"the known ones in this order, which is not the configuration table's: `(?P<keys>[a-z_, ]+)`",
                      text)
    assert found is not None, "trace.md §6 must list the known config keys of the unknown-key message"
    assert found["keys"].split(", ") == list(OVERRIDE_KEYS)


def test_rendering_gives_the_lossless_probe_exactly() -> None:
    """The Python block of rendering.md §2 computes LOSSLESS_PROBE, character for character."""
    from arc_ref.tokenizers import LOSSLESS_PROBE
    text = (SPEC / "rendering.md").read_text(encoding="utf-8")
    block = re.search(r"```python lossless-probe\n(?P<body>.*?)\n```", text, re.DOTALL)
    assert block is not None, "rendering.md §2 must give the probe in a 'python lossless-probe' block"
    namespace: dict[str, Any] = {}
    exec(block["body"], namespace)  # noqa: S102 - the spec's own text, run to compare with the code
    assert namespace["PROBE"] == LOSSLESS_PROBE
    assert f"{len(LOSSLESS_PROBE):,} characters" in text


def test_trace_md_examples_are_lines_of_the_vectors() -> None:
    text = (SPEC / "trace.md").read_text(encoding="utf-8")
    examples = re.findall(r"```jsonl vector=(?P<name>[a-z0-9_]+) (?P<kind>trace|expected)\n(?P<body>.*?)\n```", text, re.DOTALL)
    assert examples, "trace.md should show example lines taken from the vectors"
    for name, kind, body in examples:
        path = VECTOR_DIR / f"{name}.{kind}.jsonl"
        assert path.exists(), f"trace.md cites unknown vector file {path.name}"
        lines = [line.rstrip("\n") for line in read_lines(path)]
        for example in body.split("\n"):
            assert example in lines, f"trace.md example line is not a line of {path.name}: {example[:200]}"


def _anchors(markdown: str) -> set[str]:
    """Explicit <a id> anchors and GitHub heading slugs (lowercase, punctuation dropped, spaces to hyphens)."""
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', markdown))
    for heading in re.findall(r"^#{1,6} (.+)$", markdown, re.MULTILINE):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return anchors


def test_links_between_spec_files_resolve() -> None:
    broken = []
    for source in sorted(SPEC.rglob("*.md")):
        text = source.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path_text, _, anchor = target.partition("#")
            path = (source.parent / path_text).resolve() if path_text else source
            if not path.exists():
                broken.append(f"{source.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path.read_text(encoding="utf-8")):
                broken.append(f"{source.relative_to(ROOT)}: {target} (no such anchor)")
    assert not broken, "broken links in spec/:\n  " + "\n  ".join(broken)


def test_rendering_examples_are_real_replay_output() -> None:
    text = (SPEC / "rendering.md").read_text(encoding="utf-8")
    examples = re.findall(r"```text vector=(?P<name>[a-z0-9_]+)\n(?P<body>.*?)\n```", text, re.DOTALL)
    assert len(examples) >= 5, "rendering.md should carry worked examples taken from the vectors"
    for name, body in examples:
        path = VECTOR_DIR / f"{name}.expected.jsonl"
        assert path.exists(), f"rendering.md cites unknown vector {name}"
        outputs = [json.loads(line) for line in read_lines(path)]
        assert any(body in string for output in outputs for string in json_strings(output)), (
            f"rendering.md example from {name} is not in its expected output:\n{body[:300]}"
        )


# --- trace.md §6: every error message the code can raise is in the table ------------------------------

ERROR_CLASSES = {"TraceError", "ConfigError", "TemplateRefused", "InvalidEvent", "CapacityExceeded",
                 "BudgetViolation", "TemplateError", "SecurityError", "LineTooLong"}
NOT_REPLAY_MODULES = {"store_cli.py", "mcp_server.py", "budgets.py", "options.py"}  # their errors are not replay lines
PLACEHOLDER = re.compile(r"\{[a-z_][A-Za-z0-9_]*(?::[a-z]+)?\}")


def _message_texts(node: Any) -> list[str]:
    """The texts an error message expression can produce, each f-string field written {}."""
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return ["".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return [left + right for left in _message_texts(node.left) for right in _message_texts(node.right)]
    if isinstance(node, ast.IfExp):
        return _message_texts(node.body) + _message_texts(node.orelse)
    return ["{}"]


def _code_error_templates() -> list[tuple[str, str]]:
    """(where, template) of every message raised as an error (and every line of a refused configuration)."""
    import ast

    found = []
    for path in sorted((ROOT / "arc_ref").glob("*.py")) + sorted((ROOT / "arc_ref" / "frontends").glob("*.py")):
        if path.name in NOT_REPLAY_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            call = node.exc if isinstance(node, ast.Raise) else node
            if not isinstance(call, ast.Call) or not call.args:
                continue
            func = call.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            raised = isinstance(node, ast.Raise) and name in ERROR_CLASSES
            problem = (name == "append" and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                       and func.value.id == "problems")
            constructed = (name == "__init__" and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call)
                           and path.name == "cli.py")  # LineTooLong's own message
            if raised or problem or constructed:
                found += [(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}", text)
                          for text in _message_texts(call.args[0])]
    return found


def _table_templates() -> list[str]:
    text = (SPEC / "trace.md").read_text(encoding="utf-8")
    section = text[text.index("## 6. Error messages"):text.index("## 7. ")]
    spans = [span.replace("\\|", "|") for span in re.findall(r"`([^`]+)`", section)]
    return [PLACEHOLDER.sub("{}", span) for span in spans]


def test_every_error_message_of_the_code_is_in_the_table_of_trace_md() -> None:
    """trace.md §6 lists every error line's template: a message added to the code fails here until it is."""
    table = _table_templates()
    assert "internal budget violation: {}" in table and "{}: the replay stops here" not in table
    missing = []
    for where, template in _code_error_templates():
        lines = [line for line in template.split("\n")]
        pattern = [re.compile(".*".join(re.escape(piece) for piece in line.split("{}")), re.DOTALL) for line in lines]
        if where.startswith("arc_ref/frontends/cli.py"):  # the replay adds its stop to the line-too-long message
            pattern = [re.compile(pattern[0].pattern + re.escape(": the replay stops here"), re.DOTALL)]
        if not all(any(each.fullmatch(entry) for entry in table) for each in pattern):
            missing.append(f"{where}: {template!r}")
    assert not missing, (
        "these error messages of the code are not in the table of spec/trace.md §6; add each, in a code span, with"
        " its fields as placeholders ({name}, {name:json}, {name:py}, {name:list}, {name:pylist}, {name:count}):\n"
        + "\n".join(missing)
    )
