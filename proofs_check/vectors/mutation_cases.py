"""Trace vectors of rules a cold port could write another way while every earlier vector passed. Review h25 wrote each
trace against a mutated copy of review h23's port (made from spec/ alone); the reference's output pins the reading
of the text (its outputs equal the unmutated port's). Review h28 wrote the tool-mode ones (chat format template on
Qwen3's files) the same way, each against a one-line mutation of the reference itself."""

from __future__ import annotations

import json
from collections.abc import Callable

from proofs_check.shared_data import QWEN3_VECTOR_PATH
from proofs_check.vectors.dsl import (
    VIEW,
    Feature,
    Outputs,
    TraceVector,
    agent,
    call,
    compact,
    config,
    make_id,
    obs,
    tool_result,
    tool_turn,
)
from proofs_check.vectors.features import (
    errors_on, inline_in_summary, ops, response_has, summary_section, view_has,
)

RUNS = (  # outputs and turns of uneven sizes: a fold that shrinks G as well (review h25's search)
    obs("run 0", "o0 " * 20), obs("run 1", "o1 " * 6), agent("think 2 " * 6, "run 2"), obs("run 3", "o3 o"),
    agent("thin", "run 4"), obs("run 5", "o5 " * 20), agent("think 6 " * 3, "run 6"), agent("think 7 " * 7, "run 7"),
    agent("think", "run 8"), obs("run 9", "o9 "), agent("thin", "run 12"), VIEW,
)


def reads(count: int, thought_times: int, output_times: int = 1) -> list[str]:
    """``count`` turns: a thought of ``thought_times`` 'step N ' and `cat fN`, its output ``output_times`` 'fN '."""
    return [event for number in range(1, count + 1)
            for event in (agent(f"step {number} " * thought_times, f"cat f{number}"),
                          obs(f"cat f{number}", f"f{number} " * output_times))]


def folded_at(line_number: int, folded: int) -> Feature:
    """The feature: input line ``line_number`` (1-based) folds ``folded`` entries."""
    return (f"line {line_number} folds {folded}", lambda outputs: bool(outputs[line_number - 1]["folded"] == folded))


# Tool mode (rendering.md §13) on Qwen3's template and tokenizer; one environment tool, read_file.
READ_FILE = {"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                              "parameters": {"type": "object",
                                                             "properties": {"path": {"type": "string"}},
                                                             "required": ["path"]}}}
TOOLS = {"tokenizer": f"hf-dir:{QWEN3_VECTOR_PATH}", "chat_format": "template", "action_mode": "tools",
         "tools": [READ_FILE], "context_limit": 3000, "recent_budget": 420, "summary_budget": 300,
         "page_budget": 300, "recall_budget": 200, "chunk_tokens": 24, "prefill_cost": 1}
ADLAM = "\U0001e900"  # a letter of 4 tokens under Qwen3 (its 4 UTF-8 bytes, unmerged): a costly id to echo


def answer(call_id: str, predicate: Callable[[str], bool]) -> Callable[[Outputs], bool]:
    """ARC's answer to the call ``call_id`` (its ``content``, as H shows it) satisfies ``predicate``."""
    return lambda outputs: any(item["call_id"] == call_id and predicate(str(item["content"]))
                               for output in ops(outputs, "tool_turn") for item in output["answered"])


def clipped_answer(call_id: str) -> Callable[[Outputs], bool]:
    """ARC's answer to ``call_id`` is shown clipped: its ``content`` a proper prefix of ``response`` and an ellipsis."""

    def clipped(content: str, response: str) -> bool:
        return content.endswith("\u2026") and len(content) - 1 < len(response) and response.startswith(content[:-1])

    return lambda outputs: any(item["call_id"] == call_id and clipped(str(item["content"]), str(item["response"]))
                               for output in ops(outputs, "tool_turn") for item in output["answered"])


def tool_mode_mutation_vectors() -> tuple[TraceVector, ...]:
    """Review h28's traces of tool mode (4 to 6 lines), each red under the mutation its description names."""
    tool_mode = ("rendering.md §13",)
    listing = '{"path": "a.txt"}'
    alpha = make_id(1, f"read_file {listing}", "alpha beta")
    stub = f"_recall_meta: {alpha} rc=0"  # the answer of _recall_meta ID: ID's stub line
    rows = "".join(f"row {number}: {number * 7}\n" for number in range(25))
    return (
        TraceVector("tool_argument_by_parameter_key", tool_mode,
                    "An ARC tool reads its argument from its parameter's key (id; page), whatever the key's place in"
                    " the text, then from the other keys: _recall_meta {\"note\": \"see\", \"id\": ID} shows ID's"
                    " stub and catalog-page {\"n\": \"9\", \"page\": \"1\"} page 1 (read in the text's order they"
                    " would look up 'see' and page 9); _recall_meta {\"path\": ID}, without the key, still reads ID"
                    " (read by the key alone it would be missing its argument).",
                    (config("minimal", **TOOLS),
                     tool_turn("Read it.", call("call_1", "read_file", listing)),
                     tool_result("call_1", "alpha beta"),
                     tool_turn("Look again.", call("call_2", "_recall_meta", json.dumps({"note": "see", "id": alpha})),
                               call("call_3", "catalog-page", json.dumps({"n": "9", "page": "1"})),
                               call("call_4", "_recall_meta", json.dumps({"path": alpha})))),
                    (("id read by its key", answer("call_2", lambda text: text.startswith(stub))),
                     ("page read by its key", answer("call_3", lambda text: "catalog page 1/1 is shown" in text)),
                     ("another key when the parameter's is absent",
                      answer("call_4", lambda text: text.startswith(stub)))),
                    (QWEN3_VECTOR_PATH,)),
        TraceVector("tool_arguments_null", tool_mode,
                    "Arguments that are JSON null as a whole are no value (as empty arguments): _recall null is"
                    " missing its argument; null as a key's value is written as JSON, the word 'null':"
                    " _recall_meta {\"id\": null} looks up the id 'null' (review h28: the spec listed a bare null"
                    " among the values read as 'null').",
                    (config("minimal", **TOOLS),
                     tool_turn("Read it.", call("call_1", "read_file", listing)),
                     tool_result("call_1", "alpha beta"),
                     tool_turn("Look again.", call("call_2", "_recall", "null"),
                               call("call_3", "_recall_meta", json.dumps({"id": None})))),
                    (("a bare null is no argument", answer("call_2", lambda text: "missing argument" in text)),
                     ("a key's null is the word null",
                      answer("call_3", lambda text: text.startswith("_recall_meta null: no stored observation")))),
                    (QWEN3_VECTOR_PATH,)),
        TraceVector("tool_result_share_full_reserves", tool_mode,
                    "A result's share is R less its unit's messages so far less the full reserves (the stub message at"
                    " the widest, 155 tokens) of the calls still pending: the first of two results, 238 tokens"
                    " verbatim, exceeds its share (420 - 53 - 155 = 212) and is shown as its stub; with only the other"
                    " call's stub frame (51) subtracted it would fit (316) and be shown verbatim.",
                    (config("minimal", **TOOLS),
                     tool_turn("Read both.", call("call_1", "read_file", listing),
                               call("call_2", "read_file", '{"path": "b.txt"}')),
                     tool_result("call_1", rows), tool_result("call_2", "b"), VIEW),
                    (("the first result is its stub",
                      lambda outputs: [output["verbatim"] for output in ops(outputs, "tool_result")] == [False, True]),
                     ("H holds the turn, the stub and the second result",
                      lambda outputs: bool(ops(outputs, "view")[0]["components"]["recent"] == 153))),
                    (QWEN3_VECTOR_PATH,)),
        TraceVector("tool_answers_clipped_against_r", tool_mode,
                    "Each of ARC's answers is clipped against R alone (R = 190, the ids echoed made of a 4-token"
                    " letter): line 2's answer, 216 tokens, is longer than R and is cut to 91 (its content clipped,"
                    " its response whole), and the turn fits; line 3's answers, 24 and 183 tokens, and line 4's, 175"
                    " tokens, are each within R and stay whole, so they leave the assistant message too little (beside"
                    " line 4's read_file frame, 51) and both turns are refused. Never clipped, line 2 would be"
                    " refused; clipped against R less the answers before it, line 3 would be taken (183 cut to 83);"
                    " against R less the environment's reserves (111) or frames (51), line 4 (175 cut to 31 or 83).",
                    (config("minimal", **{**TOOLS, "recent_budget": 190, "stub_cap": 60}),
                     tool_turn("", call("call_1", "_recall", json.dumps({"id": ADLAM * 60}, ensure_ascii=False))),
                     tool_turn("", call("call_2", "_recall_meta", '{"id": "x"}'),
                               call("call_3", "_recall", json.dumps({"id": ADLAM * 40}, ensure_ascii=False))),
                     tool_turn("", call("call_4", "read_file", listing),
                               call("call_5", "_recall", json.dumps({"id": ADLAM * 38}, ensure_ascii=False))),
                     VIEW),
                    (("an answer longer than R is clipped", clipped_answer("call_1")),
                     ("answers within R are not clipped: lines 3 and 4 are refused", errors_on(3, 4))),
                    (QWEN3_VECTOR_PATH,)),
        TraceVector("tool_answers_in_call_position", tool_mode,
                    "Each of ARC's answers takes its call's place among the results (Qwen3's template pairs results"
                    " with calls by position and writes no id; review h30 F8): of read_file, catalog-first,"
                    " read_file, _recall_meta, the catalog's answer waits for the first result and _recall_meta's for"
                    " the second; of read_file, catalog-next, read_file with the results given last first, the answer"
                    " follows both. Appended with the turn (the order before), each view would show an answer where"
                    " the model reads a read_file output.",
                    (config("minimal", **{**TOOLS, "recent_budget": 900}),
                     tool_turn("Read both.", call("call_1", "read_file", '{"path": "a.txt"}'),
                               call("call_2", "catalog-first", "{}"), call("call_3", "read_file", '{"path": "b.txt"}'),
                               call("call_4", "_recall_meta", '{"id": "x"}')),
                     VIEW, tool_result("call_1", "alpha"), VIEW, tool_result("call_3", "beta"), VIEW,
                     tool_turn("Again.", call("call_5", "read_file", '{"path": "c.txt"}'),
                               call("call_6", "catalog-next", "{}"), call("call_7", "read_file", '{"path": "d.txt"}')),
                     tool_result("call_7", "gamma"), VIEW, tool_result("call_5", "delta"), VIEW),
                    (("no answer before the first result", responses_start(0)),
                     ("the catalog's answer right after the first result",
                      responses_start(1, "Observation (rc=0):\nalpha", "catalog-first:")),
                     ("each answer in its call's place", responses_start(
                         2, "Observation (rc=0):\nalpha", "catalog-first:", "Observation (rc=0):\nbeta", "_recall_meta")),
                     ("an answer waits for every earlier call's result",
                      lambda outputs: responses_start(3, "Observation (rc=0):\ngamma")(outputs) and responses_start(
                          4, "Observation (rc=0):\ngamma", "Observation (rc=0):\ndelta", "catalog-next:")(outputs))),
                    (QWEN3_VECTOR_PATH,)),
        TraceVector("tool_answer_waiting_shares_r", tool_mode,
                    "An answer that waits for an earlier call's result is part of that result's unit (review h36):"
                    " of read_file then _recall_meta at R = 300, the answer (24 tokens) waits for read_file's result,"
                    " and the result's share of R leaves room for it, so 220 words, which would be shown verbatim"
                    " were the waiting answer not counted, are shown as their stub; in a second turn alike (its"
                    " answer now 39 tokens: an id range to name), 190 words fit their share and are shown verbatim.",
                    (config("minimal", **{**TOOLS, "recent_budget": 300}),
                     tool_turn("Read it.", call("call_1", "read_file", '{"path": "a.txt"}'),
                               call("call_2", "_recall_meta", '{"id": "x"}')),
                     tool_result("call_1", "word " * 220), VIEW,
                     tool_turn("Read it.", call("call_3", "read_file", '{"path": "a.txt"}'),
                               call("call_4", "_recall_meta", '{"id": "x"}')),
                     tool_result("call_3", "word " * 190), VIEW),
                    (("the waiting answer counts in the result's share: line 3 is its stub",
                      lambda outputs: ops(outputs, "tool_result")[0]["verbatim"] is False),
                     ("a result within its share is verbatim: line 6",
                      lambda outputs: ops(outputs, "tool_result")[1]["verbatim"] is True)),
                    (QWEN3_VECTOR_PATH,)),
    ) + waiting_answer_vectors()


def waiting_answer_vectors() -> tuple[TraceVector, ...]:
    """Review h48's traces of ARC's answers that wait for earlier calls' results (rendering.md §13, 10a12b5), each
    red under the one-line mutation of the reference its description names."""
    tool_mode = ("rendering.md §13",)
    read = [call(f"call_{letter}", "read_file", json.dumps({"path": f"{letter}.txt"})) for letter in "abcd"]
    meta = call("call_m", "_recall_meta", '{"id": "x"}')
    return (
        TraceVector("tool_answer_waits_for_every_earlier_call", tool_mode,
                    "An answer waits until every environment call before its call has its result, not the nearest"
                    " one only: of read_file a, catalog-first, read_file b, _recall_meta with b's result first, no"
                    " answer follows b's result (_recall_meta's still waits for a's); a's result brings both"
                    " answers, in call order. Waiting for the nearest earlier call only, _recall_meta's answer would"
                    " follow b's result.",
                    (config("minimal", **{**TOOLS, "recent_budget": 900}),
                     tool_turn("Read both.", read[0], call("call_c", "catalog-first", "{}"), read[1], meta),
                     tool_result("call_b", "beta"), VIEW, tool_result("call_a", "alpha"), VIEW),
                    (("no answer after b's result", responses_start(0, "Observation (rc=0):\nbeta")),
                     ("both answers after a's result, in call order", responses_start(
                         1, "Observation (rc=0):\nbeta", "Observation (rc=0):\nalpha", "catalog-first:",
                         "_recall_meta"))),
                    (QWEN3_VECTOR_PATH,)),
        TraceVector("tool_answer_waiting_shares_r_out_of_order", tool_mode,
                    "A waiting answer counts in the share of R of every result that comes while it waits, also one"
                    " of a call after its own: of read_file a, _recall_meta, read_file b at R = 500 (each result"
                    " reserved its full stub) with b's result first, the answer waits for a's result, and b's 246"
                    " words are shown as their stub (verbatim were only the answers of later calls counted in share,"
                    " the answer's call coming before b's); in a second turn alike (the answer now names the id"
                    " range), 216 words fit and are shown verbatim.",
                    (config("minimal", **{**TOOLS, "recent_budget": 500}),
                     tool_turn("Read it.", read[0], meta, read[1]),
                     tool_result("call_b", "word " * 246), tool_result("call_a", "alpha"), VIEW,
                     tool_turn("Read it.", read[2], call("call_n", "_recall_meta", '{"id": "x"}'), read[3]),
                     tool_result("call_d", "word " * 216), tool_result("call_c", "gamma"), VIEW),
                    (("the waiting answer counts in b's share: line 3 is its stub",
                      lambda outputs: ops(outputs, "tool_result")[0]["verbatim"] is False),
                     ("a result within its share is verbatim: line 7",
                      lambda outputs: ops(outputs, "tool_result")[2]["verbatim"] is True)),
                    (QWEN3_VECTOR_PATH,)),
        TraceVector("tool_answer_waiting_in_least", tool_mode,
                    "A waiting answer counts in `least` too, the room of a result in a unit whose results were"
                    " reserved their stub frames only: of read_file a, _recall_meta, read_file b, read_file c at"
                    " R = 280, results c, b, a of 40 words each, b's does not fit its share and is shown as its stub"
                    " (verbatim were the waiting answer left out of least); c's and a's are verbatim.",
                    (config("minimal", **{**TOOLS, "recent_budget": 280}),
                     tool_turn("Read them.", read[0], meta, read[1], read[2]),
                     tool_result("call_c", "word " * 40), tool_result("call_b", "word " * 40),
                     tool_result("call_a", "word " * 40), VIEW),
                    (("b's result is its stub",
                      lambda outputs: [out["verbatim"] for out in ops(outputs, "tool_result")] == [True, False, True]),
                     ("the answer follows a's result", responses_start(
                         0, "Observation (rc=0):", "Observation", "Observation (rc=0):", "_recall_meta"))),
                    (QWEN3_VECTOR_PATH,)),
        TraceVector("tool_answer_waiting_not_in_trigger", tool_mode + ("rendering.md §11.1", "rendering.md §14"),
                    "A waiting answer is not in the trigger's sums: layout paper (h > R folds), R = 420, a first"
                    " unit with a result of 300 words, then read_file b, catalog-first: with the catalog's answer"
                    " waiting H stays within R and the tool turn folds nothing; b's result, with the answer now in"
                    " H, folds the first unit. Counting the waiting answer in h, the tool turn itself would fold.",
                    (config("minimal", **{**TOOLS, "recent_budget": 420, "layout": "paper"}),
                     tool_turn("Read it.", read[0]), tool_result("call_a", "word " * 300),
                     tool_turn("Again.", read[1], call("call_c", "catalog-first", "{}")), VIEW,
                     tool_result("call_b", "beta"), VIEW),
                    (folded_at(4, 0), folded_at(6, 2),
                     ("H within R before b's result", lambda outputs: bool(
                         ops(outputs, "view")[0]["components"]["recent"] <= 420))),
                    (QWEN3_VECTOR_PATH,)),
        TraceVector("tool_answer_released_before_trigger", tool_mode + ("rendering.md §11.1", "rendering.md §14"),
                    "The answers a result releases join H before the proactive trigger runs: layout paper (h > R"
                    " folds), R = 420, a first unit with a result of 264 words, then read_file b, catalog-first: b's"
                    " result with the catalog's answer after it takes h over R, and that line folds the first unit"
                    " (with the trigger run before the answer joins, h stays within R and nothing folds).",
                    (config("minimal", **{**TOOLS, "recent_budget": 420, "layout": "paper"}),
                     tool_turn("Read it.", read[0]), tool_result("call_a", "word " * 264),
                     tool_turn("Again.", read[1], call("call_c", "catalog-first", "{}")), VIEW,
                     tool_result("call_b", "beta"), VIEW),
                    (folded_at(4, 0), folded_at(6, 2)),
                    (QWEN3_VECTOR_PATH,)),
    )


def responses_start(number: int, *prefixes: str) -> Callable[[Outputs], bool]:
    """The ``<tool_response>`` blocks after the last assistant turn of view ``number`` (0-based) are as many as
    ``prefixes`` and start with them, in order (Qwen3's template writes a turn's results so, with no call id)."""
    def holds(outputs: Outputs) -> bool:
        text = str(ops(outputs, "view")[number]["text"])
        last_turn = text.rsplit("<|im_start|>assistant", 2)[-2]
        blocks = last_turn.split("<tool_response>\n")[1:]
        return len(blocks) == len(prefixes) and all(map(str.startswith, blocks, prefixes))
    return holds


def mutation_vectors() -> tuple[TraceVector, ...]:
    """Review h25's traces (2 to 18 lines), each with the values it pins."""
    cost = ("rendering.md §11.1",)
    return (
        TraceVector("cost_fold_appends_to_summary", cost + ("rendering.md §11.3",),
                    "The cost rule takes a fold whose S only grows (its items appended: s_kept = s, S's earlier text"
                    " stays cached): line 13 folds 1 entry; with s_kept = 0 the copy's Y is larger and it is declined.",
                    (config("minimal", prefill_cost=1), *reads(6, 4), VIEW), (folded_at(13, 1),)),
        TraceVector("cost_fold_summary_shrinks", cost + ("rendering.md §11.3",),
                    "Folds priced while S must shrink (s_kept = 0: S prefilled again whole): line 15 is declined (with"
                    " s_kept = s it would fold 3), lines 16 and 17 fold 4 and 1; E = max(1, a), the agent's own turns"
                    " (with E = h line 13 would fold).",
                    (config("minimal", prefill_cost=2), *reads(8, 4), VIEW),
                    (folded_at(13, 0), folded_at(15, 0), folded_at(16, 4), folded_at(17, 1))),
        TraceVector("cost_screen_counts_summary_shrink", cost,
                    "The screen on the state's counts adds S's shedding to X and Y when S may have to shrink"
                    " (s + n * c > M): line 13 folds 1; a screen without those terms declines it.",
                    (config("minimal", prefill_cost=5), *reads(6, 2, 6), VIEW), (folded_at(13, 1),)),
        TraceVector("cost_screen_uses_k", cost,
                    "The screen's X is h - k, k what a fold to the low-water mark would keep (whole units, the newest"
                    " always): line 16 keeps; with X = h - h_low the screen would take a fold.",
                    (config("minimal", prefill_cost=30), *reads(8, 2)[:-1], VIEW), (folded_at(16, 0),)),
        TraceVector("cost_screen_shrink_test_is_strict", cost,
                    "S may have to shrink only when s + n * c > M, strictly (summary_budget 309): at equality the"
                    " screen's terms stay out and line 12 keeps; read as >=, it folds.",
                    (config("minimal", prefill_cost=5, summary_budget=309), *RUNS), (folded_at(12, 0),)),
        TraceVector("cost_screen_declines_fold_copy_would_take", cost,
                    "A fold that also shrinks G: the screen (X 51, Y 333 on the state's counts) declines at line 12 a"
                    " fold the copy's own measure (X 108, Y 276) would take. The screen is part of the rule, not a"
                    " shortcut: a fold is taken only when both inequalities hold (review h25 F-A).",
                    (config("minimal", prefill_cost=5), *RUNS, compact("forced"), VIEW),
                    (folded_at(12, 0), folded_at(14, 1))),
        TraceVector("cost_expected_completion_per_turn", cost,
                    "With expected_completion set, E = expected_completion * max(1, t), t the agent turns in H: line"
                    " 13 folds 11; with E = expected_completion alone it keeps.",
                    (config("minimal", prefill_cost=2, expected_completion=8), *reads(6, 2), VIEW),
                    (folded_at(13, 11),)),
        TraceVector("paper_fold_keeps_last_page", ("rendering.md §8", "rendering.md §14"),
                    "Layout paper: G is re-rendered when an observation is stored, never by a fold: after line 6 folds"
                    " 3 the view still shows the last page of both observations (302 tokens); re-rendered as under"
                    " lean it would show 1 of 1.",
                    (config("minimal", layout="paper"),
                     *(event for number in (1, 2) for event in (
                         agent(f"step {number}", f"cat f{number}.txt"),
                         obs(f"cat f{number}.txt", f"line {number} of f{number}\n" * 5))),
                     agent("step 3", "cat f3.txt"), VIEW),
                    (folded_at(6, 3), ("G still lists both", view_has("observations 1-2 of 2;")),
                     ("its cost", lambda outputs: bool(ops(outputs, "view")[0]["components"]["catalog"] == 302)))),
        TraceVector("ignored_line_escape_after_clip", ("rendering.md §10",),
                    "An ignored line is echoed as escape_line(clipped(S(x), 48)): clipped first (44 characters,"
                    " nothing cut), then its TABs escaped; escaping first would cut it at 48.",
                    (config("minimal"), agent("list", "catalog-first\nnote" + "".join(f"\t{n}" for n in range(1, 17)))),
                    (("nothing cut", lambda outputs: str(outputs[1]["response"]).endswith(
                        "note" + "".join(f"\\t{n}" for n in range(1, 17)))),)),
        TraceVector("suggest_reads_first_ten_chars", ("rendering.md §6.2",),
                    "suggest reads only the first 2 * (counter_width + fingerprint_width + 2) characters of the token's"
                    " body: a long token gets no suggestion, the range is named instead (without the cut, §01-1 would"
                    " be suggested).",
                    (config("minimal"), obs("ls", "a.txt"), agent("read it", "_recall §88888888881")),
                    (("no suggestion", response_has("no stored observation has this id; ids run from")),)),
        TraceVector("summary_fit_counts_whole_message", ("rendering.md §11.3",),
                    "fit checks msg(S's message) <= M even when the sum of its lines fits (o200k_base, summary_budget"
                    " 160): S is 144 tokens; without the whole-message test it would keep a line that makes it 161.",
                    (config("minimal", tokenizer="o200k_base", summary_budget=160, thought_chars=200),
                     agent("look at the first file to find the setting that decides the output format of the tool",
                           "cat a.txt"),
                     agent("look at the second file, which holds the value of that setting for this run", "cat b.txt"),
                     agent("the value is read from the environment when the file does not set it", "env"),
                     agent("so print the environment and look for the name", "env | grep FMT"),
                     obs("cat b.txt", "b = 1\t\t"), agent("done", "echo ok"), compact("forced"), VIEW),
                    (("S is 144 tokens",
                      lambda outputs: bool(ops(outputs, "view")[0]["components"]["summary"] == 144)),)),
    ) + tool_mode_mutation_vectors() + spec_port_vectors()


def spec_port_vectors() -> tuple[TraceVector, ...]:
    """Review h68's readings of the text that no earlier vector decided (its cold JavaScript port passed every
    vector with either reading); review h69 wrote each trace against a one-line mutation of the reference that
    takes the other reading, red there and green on the reference."""
    tabs = "a\tb\tc\td\te\tf\tg\th"
    listing = "ls\t-la\t/tmp\t/var\t/usr\t/opt\t/srv\t/home\t/etc\t/x"
    bells = "\u0007" * 9
    return (
        TraceVector("command_action_entries_fold_one_at_a_time", ("rendering.md §10", "rendering.md §11.1",
                                                                  "rendering.md §11.2"),
                    "In text mode every entry of H is a unit of its own: a command action appends its agent entry"
                    " and its command-result entry together, but the routine folds them one at a time (low_water 50,"
                    " h_low 208): line 5 folds 2 (the observation and turn 1's agent entry) and turn 1's"
                    " command-result entry stays in H. Folded as one unit with its agent entry, it would fold 3.",
                    (config("minimal", low_water=50), obs("ls", "a.txt"),
                     agent("I will look at the listing again with a long thought " + "x" * 120, "catalog-first"),
                     obs("cat a.txt", "hello"), compact("forced"), VIEW),
                    (folded_at(5, 2), ("the agent entry is in S", view_has("\nturn 1: thought: I will look … |")),
                     ("the command result is still in H",
                      view_has("Result of your command:\ncatalog-first: catalog page 1/1 is shown")))),
        TraceVector("summary_items_escape_then_clip", ("rendering.md §11.2",),
                    "A summary item's thought, action and joined notes are escaped first, then clipped (thought_chars"
                    " 12, action_chars 40): the thought keeps 4 of its TABs (a\\tb\\tc\\td\\t…), the action 7,"
                    " and the note, whose \\x07 escapes escape_line doubles, 5 of its 9 BELs. Clipped first (as"
                    " section 10 echoes an ignored line), each would keep more.",
                    (config("minimal", action_chars=40), agent(tabs, listing), agent("", "_recall_meta " + bells),
                     obs("ls", "x"), compact("forced"), VIEW),
                    (folded_at(5, 3),
                     ("the thought and action items", view_has(
                         "turn 1: thought: a\\tb\\tc\\td\\t… | action: ls\\t-la\\t/tmp\\t/var\\t/usr\\t/opt"
                         "\\t/srv\\t/…\n")),
                     ("the result item", view_has("turn 2: result: _recall_meta " + "\\\\x07" * 5 + "\\\\…")))),
        TraceVector("fold_stops_at_the_target", ("rendering.md §11.2",),
                    "The routine folds while more than the target is left, strictly: low_water 25 makes h_low 104, and"
                    " the last two observations cost 104 together, so line 5 folds 1 and leaves H at 104 tokens."
                    " Folding while remaining >= target, it would fold 2.",
                    (config("minimal", low_water=25), obs("a", "x" * 10), obs("b", "y" * 3), obs("c", "z" * 5),
                     compact("forced"), VIEW),
                    (folded_at(5, 1), ("H keeps 104 tokens",
                                       lambda outputs: bool(ops(outputs, "view")[0]["components"]["recent"] == 104)))),
        TraceVector("ignored_line_echoed_stripped", ("rendering.md §10",),
                    "An ignored line is echoed as parsed, stripped of ASCII whitespace at both ends: the line"
                    " '   note one' + TAB + CR is echoed as 'note one' (unstripped, its spaces and its escaped TAB and"
                    " CR would be echoed too).",
                    (config("minimal"), agent("list", "catalog-first\n   note one\t\r\n")),
                    (("the echo", response_has("\nignored (not a command): note one")),
                     ("nothing after it", lambda outputs: str(outputs[1]["response"]).endswith(": note one")))),
        TraceVector("inline_test_counts_summary_frame", ("rendering.md §11.2",),
                    "An observation is summarized inline only when summary_frame + line(inline) <= M (the frame with"
                    " the widest omitted line, 175 tokens under minimal; keep_verbatim_chars 400): 150 characters"
                    " give an inline line of 177 tokens, 352 > M = 320, so the stub is used. Tested against"
                    " summary_base (100) instead, 277 <= 320, it would be inline.",
                    (config("minimal", keep_verbatim_chars=400), obs("cat f", "w" * 150), agent("t", "ls"),
                     compact("forced"), VIEW),
                    (folded_at(4, 1), ("the stub in S", lambda outputs: "\n§01-1 rc=0 150ch 150tok $ cat f | head:" in
                                        summary_section(str(ops(outputs, "view")[0]["text"]))),
                     ("no inline item in S", lambda outputs: not inline_in_summary(outputs)))),
        TraceVector("cost_agent_tokens_leave_out_command_results", ("rendering.md §11.1",),
                    "The cost rule's a (E = max(1, a) by default) is the tokens of the agent turns in H, the agent"
                    " entries only: line 7's command action appends an agent entry and a command-result entry, and"
                    " the state is kept (folded 0). With the command-result entry counted in a as well, E is larger"
                    " and line 7 folds 6.",
                    (config("minimal", prefill_cost=5, low_water=10), agent("think " * 6, "run 0"),
                     obs("cat f1", "o1 " * 9), agent("think ", "run 2"), obs("cat f3", "o3 "),
                     obs("cat f4", "o4 " * 6), agent("t " * 4, "catalog-first"), VIEW),
                    (folded_at(7, 0),)),
        TraceVector("cost_copy_test_holds_at_equality", ("rendering.md §11.1",),
                    "The cost rule's inequality is E * X^2 >= 2 * prefill_cost * Y * h, equality included: nine"
                    " normal turns (prefill_cost 10, low_water 50); at line 10 the copy measures X = 100 and Y = 500"
                    " with E = a = h = 600, and 600 * 100^2 = 2 * 10 * 500 * 600, so the fold is taken (6 entries)."
                    " Read as >, line 10 keeps.",
                    (config("minimal", prefill_cost=10, low_water=50),
                     *(agent("t " * times, f"run {number}") for number, times in enumerate((5, 7, 5, 7, 7, 3, 0, 6, 8)))),
                    (folded_at(10, 6),)),
    ) + screen_equality_vectors()


def screen_equality_vectors() -> tuple[TraceVector, ...]:
    """Review h69 left the screen's reading of the cost rule's inequality (>= or >) unpinned; review h74 found the
    trace by a search over small traces (a mutation of the reference strict in `trigger.decide` alone)."""
    return (
        TraceVector("cost_screen_holds_at_equality", ("rendering.md §11.1",),
                    "The cost rule's screen holds at equality too: after a forced compact S holds one stub (165"
                    " tokens); at line 6 (E = expected_completion * t = 10887, h = 191, k = 56) the screen sees"
                    " s + n * c = 165 + 2 * 104 > M = 320 and prices S shed to s_low = 160: X = 135 + 5 = 140,"
                    " Y = 183 + 56 + 160 = 399, and 10887 * 140^2 = 2 * 1400 * 399 * 191. The copy is made; its S"
                    " collapses its three stubs to ids and lands at 121, below s_low, so it measures X = 164 and"
                    " Y = 375 and the fold is taken (2 entries). With > in the screen alone, line 6 keeps.",
                    (config("minimal", low_water=25, keep_verbatim_chars=0, prefill_cost=1400,
                            expected_completion=10887),
                     obs("cat f0", ""), obs("cat f1", "o1 " * 8 + "o1"), compact("forced"), obs("cat f4", "o4 " * 4 + "o"),
                     agent("", "run 7"), VIEW),
                    (folded_at(6, 2),
                     ("S lands at 121 tokens, below s_low",
                      lambda outputs: bool(ops(outputs, "view")[0]["components"]["summary"] == 121)))),
    )
