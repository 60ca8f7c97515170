"""The replay contract: one output line per input line, errors as lines, never a traceback."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from arc_ref.config import make_setup
from arc_ref.store import action_signature
from arc_ref.trace import config_from_line, encode, replay, replay_text

CONFIG = json.dumps({"op": "config", "preset": "minimal"})
OBSERVE = json.dumps({"op": "observe", "action": "cat a.txt", "observation": "alpha ü 😀 beta", "returncode": 0})

MALFORMED = [
    ("not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"op": "dance"}', '"op" must be one of'),
    ('{"op": "observe", "action": "ls"}', "missing key(s) observation"),
    ('{"op": "observe", "action": "ls", "observation": "x", "color": 1}', "unknown key(s) color"),
    ('{"op": "observe", "action": 3, "observation": "x"}', "'action' must be a string"),
    ('{"op": "observe", "action": "ls", "observation": "x", "returncode": "0"}', "'returncode' must be an integer"),
    ('{"op": "observe", "action": "ls", "observation": "x", "returncode": true}', "'returncode' must be an integer"),
    ('{"op": "observe", "action": "ls", "observation": "x", "returncode": 4294967296}', "32-bit"),
    ('{"op": "agent", "thought": "t"}', "missing key(s) action"),
    ('{"op": "compact", "reason": "later"}', "compact reason must be one of"),
    ('{"op": "config", "preset": "minimal"}', "must be the first line"),
    ('{"op": "view", "extra": 1}', "unknown key(s) extra"),
    ("", "not valid JSON"),
    ("[" * 100000, "JSON nested 100000 levels deep (at most 128)"),
    ('{"op": "view", "n": ' + "9" * 5000 + "}", "not valid JSON"),
    ('{"op": "observe", "action": "ls", "observation": "\\ud800"}', "not valid Unicode"),
    ('{"op": "agent", "thought": "\\udfff", "action": "ls"}', "not valid Unicode"),
]


@pytest.mark.parametrize(("line", "message"), MALFORMED)
def test_malformed_line_is_an_error_line_and_the_replay_goes_on(line: str, message: str) -> None:
    outputs = list(replay([CONFIG, OBSERVE, line, OBSERVE], verify=True))
    assert len(outputs) == 4
    assert outputs[2]["op"] == "error" and outputs[2]["line"] == 3
    assert message in outputs[2]["message"]
    # the state before the bad line is kept: the next observation is the second one
    assert outputs[3]["op"] == "observe" and outputs[3]["index"] == 2


@pytest.mark.parametrize(
    ("first", "message"),
    [
        ('{"op": "observe", "action": "ls", "observation": "x"}', "no valid config line"),
        ('{"op": "config"}', 'config needs "preset"'),
        ('{"op": "config", "preset": "huge"}', 'config needs "preset"'),
        ('{"op": "config", "preset": "minimal", "page_sise": 2}', "unknown config key(s) page_sise"),
        ('{"op": "config", "preset": "minimal", "page_size": "2"}', "must be an integer"),
        ('{"op": "config", "preset": "paper", "summary_budget": 50000}', "exceeds L"),
        ('{"op": "config", "preset": "minimal", "tokenizer": "gpt2"}', "unknown tokenizer"),
    ],
)
def test_bad_or_missing_config_errors_every_line(first: str, message: str) -> None:
    outputs = list(replay([first, OBSERVE, '{"op": "view"}'], verify=True))
    assert outputs[0]["op"] == "error" and message in outputs[0]["message"]
    assert all(output["op"] == "error" for output in outputs)
    assert "no valid config line" in outputs[1]["message"]


def test_outputs_of_every_op() -> None:
    trace = [
        CONFIG,
        OBSERVE,
        json.dumps({"op": "agent", "thought": "read again", "action": "_recall §01"}),
        json.dumps({"op": "agent", "thought": "look", "action": "ls"}),
        json.dumps({"op": "compact", "reason": "reactive"}),
        json.dumps({"op": "view"}),
    ]
    config, observed, recalled, normal, compacted, shown = replay(trace, verify=True)
    assert config["op"] == "config" and config["budget"] <= config["limit"]
    assert observed["id"].startswith("§") and observed["chunks"] >= 1
    assert recalled["command"] is True and "did you mean" in recalled["response"]
    assert normal == {"op": "agent", "command": False, "folded": 0}
    assert compacted["op"] == "compact" and compacted["reason"] == "reactive"
    assert shown["tokens"] <= shown["budget"] <= shown["limit"]
    assert sum(shown["components"].values()) == shown["tokens"]
    assert shown["text"].endswith("<|im_start|>assistant\n")


def test_recall_output_carries_chunk_fields() -> None:
    first = list(replay([CONFIG, OBSERVE], verify=True))[1]
    recall = json.dumps({"op": "agent", "thought": "", "action": f"_recall {first['id']}\n_recall-next {first['id']}"})
    output = list(replay([CONFIG, OBSERVE, recall], verify=True))[2]
    assert (output["id"], output["chunk"], output["chunks"]) == (first["id"], 1, first["chunks"])
    assert [r["chunk"] for r in output["recalls"]] == [1, 2]
    assert output["payload"] == output["recalls"][0]["payload"]
    assert "alpha ü 😀 beta".startswith(output["recalls"][0]["payload"] + output["recalls"][1]["payload"])


def test_replay_is_deterministic_and_canonical() -> None:
    trace = [CONFIG, OBSERVE, '{"op": "view"}']
    first = list(replay_text(trace, verify=True))
    assert first == list(replay_text(trace, verify=True))
    for line in first:
        assert line == json.dumps(json.loads(line), ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", *args], input=stdin, capture_output=True, text=True)


def test_cli_replays_a_file_and_stdin(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join([CONFIG, OBSERVE, "oops", '{"op": "view"}']) + "\n", encoding="utf-8")
    from_file = _cli("replay", str(trace))
    from_stdin = _cli("replay", "-", stdin=trace.read_text(encoding="utf-8"))
    assert from_file.returncode == 0 and from_stdin.returncode == 0
    assert from_file.stdout == from_stdin.stdout
    lines = from_file.stdout.splitlines()
    assert len(lines) == 4 and json.loads(lines[2])["op"] == "error"
    assert "Traceback" not in from_file.stderr


def test_cli_reports_unreadable_input_without_traceback(tmp_path: Path) -> None:
    missing = _cli("replay", str(tmp_path / "absent.jsonl"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(CONFIG.encode() + b"\r\n\xff\xfe\x00garbage\n" + OBSERVE.encode() + b"\n")
    bad = _cli("replay", str(binary))
    assert bad.returncode == 0 and "Traceback" not in bad.stderr
    outputs = [json.loads(line) for line in bad.stdout.splitlines()]
    assert [o["op"] for o in outputs] == ["config", "error", "observe"]
    assert "not UTF-8" in outputs[1]["message"]


def test_cli_budgets_prints_the_table_and_refuses_k_over_l() -> None:
    shown = _cli("budgets", "--preset", "paper")
    assert shown.returncode == 0 and "K = B+M+R+P+Q+eta" in shown.stdout
    assert json.loads(shown.stdout.splitlines()[-1])["fits"] is True
    refused = _cli("budgets", "--preset", "paper", "--set", "recall_budget=9000")
    assert refused.returncode == 2 and "exceeds L" in refused.stderr
    wrong = _cli("budgets", "--set", "nonsense")
    assert wrong.returncode == 2 and "KEY=VALUE" in wrong.stderr



def _awkward_trace(seed: int, events: int) -> list[str]:
    """A text-mode trace whose strings hold what JSON escapes (quotes, backslashes, controls, U+2028, non-BMP),
    with recalls of the ids stored, catalog commands, compactions and views."""
    rng = random.Random(seed)
    pieces = ('"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "\u2028", "é", "中", "😀", "<|im_end|>", "§", "word", " ")
    config = {"op": "config", "preset": "minimal", "tokenizer": "o200k_base", "chunk_tokens": 8,
              "capacity": 400}
    scheme = make_setup(config_from_line(config)[1]).ids
    ids: list[str] = []
    lines = [json.dumps(config)]
    for number in range(events):
        roll = rng.random()
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 120)))
        event: dict[str, object] = {"op": "view"}
        if number % 7 == 6:
            pass
        elif roll < 0.4 or not ids:
            action = f"cat {text[:12]}"
            event = {"op": "observe", "action": action, "observation": text, "returncode": rng.randint(-2, 2)}
            ids.append(scheme.make(len(ids) + 1, action_signature(action), text))
        elif roll < 0.8:
            words = [rng.choice(("_recall", "_recall-next", "_recall_meta")) + " " + rng.choice(ids)
                     for _ in range(rng.randint(1, 3))]
            event = {"op": "agent", "thought": text, "action": "\n".join(words)}
        elif roll < 0.9:
            event = {"op": "agent", "thought": text, "action": rng.choice(("catalog-first", "catalog-next", "ls"))}
        else:
            event = {"op": "compact", "reason": rng.choice(("forced", "reactive", "later"))}
        lines.append(json.dumps(event, ensure_ascii=rng.random() < 0.5))
    return lines


def test_written_lines_are_the_encoded_objects_with_recalls() -> None:
    """The lines `replay_text` writes directly are `encode` of `replay`'s objects: observe lines, agent lines with
    recalls (payloads full of escapes) and responses, compact lines, errors and views."""
    for seed in range(3):
        trace = _awkward_trace(seed, 300)
        objects = list(replay(trace))
        assert sum(1 for obj in objects if obj["op"] == "agent" and len(obj.get("recalls", ())) > 1) > 20
        assert sum(1 for obj in objects if obj["op"] == "error") > 5  # the compact reason "later"
        assert list(replay_text(trace)) == [encode(obj) for obj in objects]
