"""Trace vectors of rules a cold port could write another way while every earlier vector passed. Review h25 wrote each
trace against a mutated copy of review h23's port (made from spec/ alone); the reference's output pins the reading
of the text (its outputs equal the unmutated port's)."""

from __future__ import annotations

from proofs_check.vectors.dsl import VIEW, Feature, TraceVector, agent, compact, config, obs
from proofs_check.vectors.features import ops, response_has, view_has

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
    )
