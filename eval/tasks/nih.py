"""Needle-in-a-haystack (NIH) tasks, as the paper's "Benchmarks" section describes them.

A task plants one needle -- a 24-character token over a 30-character alphabet -- in
`secrets.txt`, inside a banner labelled ``THE NEEDLE FOR THIS TASK`` as ``NEEDLE=<value>``, with
`noise_lines_per_side` distractor lines above and below that are marked as noise (paper,
"Needle benchmark guardrail"). The goal then walks the agent through `distractor_files` files
(`notes_01.txt`, ...), one per step, which grows the context, before it submits
``NEEDLE=<value>``. Only that token is scored (`score_nih`). The goal's protocol ("Read every file in
this order before you submit") is the task's ``required_actions``: a submission before every file was
read is premature and counts as a failure (paper, "Evaluation metrics").

Layouts. ``paper`` is the paper's single structure: the needle is read at step 1, 16 distractor files
of 4,200 characters follow, the banner sits in the middle of `secrets.txt`, and the question comes at
step 18; every task has the same shape, so 1000 tasks behave as one. ``varied`` (the default) draws,
per seeded task, from its own generator (``("nih-layout", seed, index)``, so the layout of a task is
the same for every method):

* the number of distractor files, uniform in [D/2, 3D/2] around ``distractor_files`` = D (8..24);
* the step at which the needle is read: after ``before`` distractor files, ``before`` uniform in
  [0, files // 2] (the needle is introduced early, as in the paper's protocol);
* the delay before the question: the ``files - before`` distractor reads between the needle and the
  submission (at least half the files);
* each distractor file's size, uniform in [2,100, 6,300] characters (DISTRACTOR_CHARS / 2 .. 3/2);
* the banner's position in `secrets.txt`: ``noise_above`` uniform in [0, 2N] noise lines above it and
  ``2N - noise_above`` below, N = ``noise_lines_per_side`` (the file's size is unchanged).

Every task records its layout in ``meta`` (``needle_step``, ``delay_steps``, ``distractor_files``,
``distractor_chars``, ``noise_above``, ``noise_below``, ``needle_line``, ``needle_action``), so a report
can break accuracy down by it, and by the compactions the needle had to survive (from the records).

Pairing. The needle pool of a seed is drawn from ``random.Random(seed)`` alone, in task order, so
task `nih-s42-0007` has the same needle for every method, every `noise_lines_per_side` and every
`n_tasks` (a longer run extends the pool, it does not reshuffle it). The fixture text around the
needle is drawn from a second generator seeded by ``("nih-fixture", seed, index)``.

Fixture size (paper, Ablation, "Fixture size"). At the default of 25 noise lines per side
`secrets.txt` is about 4.5k characters: above the 500-character keep-verbatim threshold of the
lossy baselines and below the 8,000-character limit at which the presentation layer would elide
the needle. Each noise line is about 86 characters and the frame about 260, so the file is about
``172 * noise_lines_per_side + 260`` characters: 5 -> ~1.1k, 10 -> ~2.0k, 25 -> ~4.5k, 30 -> ~5.4k.

Overflow arithmetic (16k window, 4096 completion cap). The usable prompt budget is
L = L_ctx - G_max = 16384 - 4096 = 12288 tokens. Measured with `o200k_base` as a stand-in for
Qwen3's tokenizer (about 4 characters per token on this lowercase English-word text):
the goal costs ~260 tokens, `secrets.txt` ~1.1k tokens at 25 noise lines per side, each
distractor file (`DISTRACTOR_CHARS` = 4,200 characters) ~790 tokens, and an agent turn adds
~30 tokens of thought and action plus ~10 tokens of role markers. Before call k + 2 a transcript
that is never compacted holds the system prompt (S tokens), the goal, secrets.txt and k
distractor files: about S + 1.4k + 0.83k * k tokens. With S between 0.4k and 1.5k this passes
12,288 at k = 12 to 13, so a method that never compacts overflows at call 14 to 16 of the 18
calls the task needs (cat secrets.txt, 16 distractor reads, submit). The whole finished
transcript is ~15-16k tokens: it fits a 32k window, where the task does not overflow unless the
model writes long replies. `tests/eval/tasks/test_nih.py` re-measures this.
"""

from __future__ import annotations

import functools
import random
import re
from typing import Sequence

from attrs import frozen

from arc_ref.errors import ConfigError
from arc_eval.errors import InvalidInput
from arc_eval.registry import ComponentOptions, TaskEntry, int_option, option, register_task
from arc_eval.types import Task

NIH_KIND = "nih"  # the task's name: Task.kind, the records' task_kind, the command
NEEDLE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ234567"  # 30 symbols: A-Z without I and O, digits 2-7
NEEDLE_LENGTH = 24
NEEDLE_BANNER_LABEL = "THE NEEDLE FOR THIS TASK"
NEEDLE_FILE = "secrets.txt"
NEEDLE_KEY = "NEEDLE"

DEFAULT_NOISE_LINES_PER_SIDE = 25
DEFAULT_DISTRACTOR_FILES = 16
DISTRACTOR_CHARS = 4200
DISTRACTOR_LINE_CHARS = 76
NOISE_LINE_WORD_CHARS = 46
PHRASE_BANK_SIZE = 4096
NOISE_LINES_SWEEP = (5, 10, 25, 30)  # the paper's fixture-size ablation
NIH_LAYOUTS = ("varied", "paper")
DEFAULT_NIH_LAYOUT = "varied"
NEEDLE_ACTION = f"cat {NEEDLE_FILE}"
# The bounds of the task's sizes, and why (issue 31): the needle file holds ~172 * N + 260 characters, 17 MB at
# MAX_NOISE_LINES, more than any served window reads whole; a task has up to 3D/2 distractor files of up to
# 3/2 DISTRACTOR_CHARS each, 94 M characters at MAX_DISTRACTOR_FILES; and a seed's tasks are generated and held at
# once (about 1.1 bytes of memory per character, measured on 2,000 default tasks), so tasks x the largest task's
# characters (``largest_task_chars``) is at most MAX_SEED_CHARS (1 G characters, about 1.2 GB: 6,774 tasks of the
# default shape, seven times the paper's 1,000).
MAX_NOISE_LINES = 100_000
MAX_DISTRACTOR_FILES = 10_000
MAX_SEED_CHARS = 2**30

# A submitted `NEEDLE=<value>` token: the value is the longest run of letters and digits after it.
NEEDLE_TOKEN_RE = re.compile(r"NEEDLE=([A-Za-z0-9]+)")
# What a needle looks like anywhere in a fixture (used by the tests to prove noise never does).
NEEDLE_SHAPE_RE = re.compile(r"[A-HJ-NP-Z2-7]{24}")

assert len(NEEDLE_ALPHABET) == 30 and len(set(NEEDLE_ALPHABET)) == 30

# Lowercase filler vocabulary: it can never form a needle (needles are upper case).
_WORDS = (
    "river stone window garden paper ladder candle morning silver harbor forest meadow "
    "bridge lantern pocket marble orchard valley quiet shadow thunder velvet whisper yellow "
    "anchor basket cabin desert engine feather glacier hollow island jacket kettle lemon "
    "mirror needlework ocean pepper quilt ribbon saddle timber umbrella vessel wagon yarn "
    "account balance budget cargo delivery estimate freight invoice journal ledger margin "
    "notice order parcel quarter receipt schedule ticket update voucher warehouse archive "
    "copper dinner eagle fabric gravel hammer ivory jungle kitten lumber mellow nectar "
    "olive pebble quartz rocket sunset tunnel upland violet walnut zephyr alpine bamboo "
    "canyon dolphin ember falcon granite horizon indigo juniper kernel lagoon mosaic nutmeg "
    "oyster prairie quiver raven saffron tundra urchin vapor willow amber blossom clover "
    "drizzle ermine fjord grove heron inlet jasper kelp lichen maple nimbus osprey pine "
    "reed sorrel thistle tulip vale wren beacon cobble dune fern gully hearth isle knoll "
    "loft moss nook orbit plume ridge spruce trail vista wharf attic bench chimney doorway "
    "easel fountain gable hedge kiosk lattice mantel niche porch railing shelf terrace "
    "meeting report review summary draft memo agenda minutes outline figure table chapter "
    "section appendix footnote margin index preface volume edition column paragraph"
).split()


def make_needle(rng: random.Random) -> str:
    """One needle: `NEEDLE_LENGTH` symbols drawn uniformly from `NEEDLE_ALPHABET`."""
    return "".join(rng.choice(NEEDLE_ALPHABET) for _ in range(NEEDLE_LENGTH))


def needle_pool(seed: int, n_tasks: int) -> list[str]:
    """The seed's needles in task order; a prefix of a longer pool for the same seed."""
    rng = random.Random(seed)
    return [make_needle(rng) for _ in range(n_tasks)]


def nih_task_id(seed: int, index: int) -> str:
    return f"nih-s{seed}-{index:04d}"


def _phrase(rng: random.Random, chars: int) -> str:
    """Lowercase words joined by spaces, at least `chars` characters long."""
    words: list[str] = []
    total = -1
    while total < chars:
        word = rng.choice(_WORDS)
        words.append(word)
        total += len(word) + 1
    return " ".join(words)


@functools.lru_cache(maxsize=None)
def _phrase_bank(chars: int) -> tuple[str, ...]:
    """`PHRASE_BANK_SIZE` fixed phrases of about `chars` characters (same in every process).

    Fixtures are assembled from whole phrases of this bank, so building 1000 tasks costs a few
    thousand `choices` calls instead of millions of word draws; with 4096 phrases a 50-line
    block has 4096**50 possible orderings, so no two tasks share a fixture in practice.
    """
    rng = random.Random(f"nih-phrase-bank:{chars}")
    return tuple(_phrase(rng, chars) for _ in range(PHRASE_BANK_SIZE))


@functools.lru_cache(maxsize=None)
def _mean_line_chars(chars: int) -> float:
    """Mean length of a bank phrase plus its newline."""
    bank = _phrase_bank(chars)
    return sum(map(len, bank)) / len(bank) + 1


def _secrets_file(rng: random.Random, task_id: str, needle: str, noise_above: int, noise_below: int) -> str:
    bank = _phrase_bank(NOISE_LINE_WORD_CHARS)

    def noise_block(side: str, count: int) -> list[str]:
        return [
            f"NOISE {side} {line:02d}/{count:02d} (not the needle): {phrase}"
            for line, phrase in enumerate(rng.choices(bank, k=count), start=1)
        ]

    rule = "=" * 16
    lines = [
        f"# {NEEDLE_FILE} for task {task_id}",
        "# Lines starting with NOISE are distractors and hold no needle.",
        *noise_block("above", noise_above),
        f"{rule} BEGIN {NEEDLE_BANNER_LABEL} {rule}",
        f"{NEEDLE_KEY}={needle}",
        f"{rule} END {NEEDLE_BANNER_LABEL} {rule}",
        *noise_block("below", noise_below),
    ]
    return "\n".join(lines) + "\n"


def _distractor_file(rng: random.Random, name: str, number: int, total: int, chars: int = DISTRACTOR_CHARS) -> str:
    header = f"# {name}: distractor file {number} of {total}; it holds no needle.\n"
    bank = _phrase_bank(DISTRACTOR_LINE_CHARS)
    count = max(1, round((chars - len(header)) / _mean_line_chars(DISTRACTOR_LINE_CHARS)))
    return header + "\n".join(rng.choices(bank, k=count)) + "\n"


def distractor_names(distractor_files: int) -> list[str]:
    return [f"notes_{number:02d}.txt" for number in range(1, distractor_files + 1)]


def _goal(before: Sequence[str], after: Sequence[str]) -> str:
    """The plan: the distractors ``before``, the needle file, the distractors ``after``, then the submission."""
    steps = [f"cat {name}" for name in before]
    steps.append(
        f"cat {NEEDLE_FILE}  -- it holds the needle inside the banner labelled {NEEDLE_BANNER_LABEL}; "
        "lines marked NOISE are distractors."
    )
    steps.extend(f"cat {name}" for name in after)
    reads = "\n".join(f"  {step}. {text}" for step, text in enumerate(steps, start=1))
    return (
        f"Your task has {len(steps) + 1} steps; do exactly one action per step, in order.\n"
        f"{reads}\n"
        f"  {len(steps) + 1}. submit {NEEDLE_KEY}=<value>  -- with the exact 24-character "
        f"value from the banner in {NEEDLE_FILE}.\n"
        "Read every file in this order before you submit. Only the submitted "
        f"{NEEDLE_KEY}=<value> token is scored."
    )


@frozen
class NihLayout:
    """The shape of one task: what the ``varied`` layout draws (see the module docstring)."""

    before: int  # distractor files read before the needle
    distractor_chars: tuple[int, ...]  # target size of each distractor file, in reading order
    noise_above: int
    noise_below: int

    @property
    def files(self) -> int:
        return len(self.distractor_chars)

    @property
    def after(self) -> int:
        """The delay before the question: distractor reads between the needle and the submission."""
        return self.files - self.before


def paper_layout(noise_lines_per_side: int, distractor_files: int) -> NihLayout:
    return NihLayout(0, (DISTRACTOR_CHARS,) * distractor_files, noise_lines_per_side, noise_lines_per_side)


def varied_layout(seed: int, index: int, noise_lines_per_side: int, distractor_files: int) -> NihLayout:
    rng = random.Random(f"nih-layout:{seed}:{index}")
    files = rng.randint(-(-distractor_files // 2), distractor_files + distractor_files // 2)
    before = rng.randint(0, files // 2)
    chars = tuple(rng.randint(DISTRACTOR_CHARS // 2, DISTRACTOR_CHARS * 3 // 2) for _ in range(files))
    above = rng.randint(0, 2 * noise_lines_per_side)
    return NihLayout(before, chars, above, 2 * noise_lines_per_side - above)


def largest_task_chars(noise_lines_per_side: int, distractor_files: int) -> int:
    """The most characters one task's files can hold (either layout; an upper estimate): 3D/2 distractor files of
    up to 3/2 DISTRACTOR_CHARS, and the needle file's 2N noise lines of at most 90 characters and its banner."""
    files = distractor_files + distractor_files // 2
    return files * (DISTRACTOR_CHARS * 3 // 2 + 100) + 2 * noise_lines_per_side * 90 + 400


def make_nih_tasks(
    seed: int,
    n_tasks: int,
    *,
    noise_lines_per_side: int = DEFAULT_NOISE_LINES_PER_SIDE,
    distractor_files: int = DEFAULT_DISTRACTOR_FILES,
    layout: str = DEFAULT_NIH_LAYOUT,
) -> list[Task]:
    """`n_tasks` NIH tasks of `seed`, ids `nih-s{seed}-{index:04d}`; paired across methods."""
    if n_tasks < 0:
        raise InvalidInput(f"n_tasks must be >= 0, got {n_tasks}")
    if noise_lines_per_side < 0:
        raise InvalidInput(f"noise_lines_per_side must be >= 0, got {noise_lines_per_side}")
    if distractor_files < 0:
        raise InvalidInput(f"distractor_files must be >= 0, got {distractor_files}")
    if layout not in NIH_LAYOUTS:
        raise InvalidInput(f"unknown NIH layout {layout!r}; use one of {', '.join(NIH_LAYOUTS)}")
    tasks: list[Task] = []
    for index, needle in enumerate(needle_pool(seed, n_tasks)):
        task_id = nih_task_id(seed, index)
        shape = (
            paper_layout(noise_lines_per_side, distractor_files)
            if layout == "paper"
            else varied_layout(seed, index, noise_lines_per_side, distractor_files)
        )
        names = distractor_names(shape.files)
        rng = random.Random(f"nih-fixture:{seed}:{index}")
        secrets = _secrets_file(rng, task_id, needle, shape.noise_above, shape.noise_below)
        files = {NEEDLE_FILE: secrets}
        for number, (name, chars) in enumerate(zip(names, shape.distractor_chars, strict=True), start=1):
            files[name] = _distractor_file(rng, name, number, shape.files, chars)
        reads = [f"cat {name}" for name in names]
        required = (*reads[: shape.before], NEEDLE_ACTION, *reads[shape.before :])
        needle_line = secrets.split("\n").index(f"{NEEDLE_KEY}={needle}") + 1
        tasks.append(
            Task(
                task_id=task_id,
                kind=NIH_KIND,
                goal=_goal(names[: shape.before], names[shape.before :]),
                files=files,
                answer=needle,
                meta={
                    "layout": layout,
                    "noise_lines_per_side": noise_lines_per_side,
                    "distractor_files": shape.files,
                    "seed": seed,
                    "index": index,
                    "needle_step": shape.before + 1,
                    "delay_steps": shape.after,
                    "distractor_chars": [len(files[name]) for name in names],
                    "noise_above": shape.noise_above,
                    "noise_below": shape.noise_below,
                    "needle_line": needle_line,
                    "needle_action": NEEDLE_ACTION,
                },
                required_actions=required,
            )
        )
    return tasks


def extract_needle(submission: str | None) -> str | None:
    """The value of the submitted `NEEDLE=<value>` token; None when absent or ambiguous.

    Surrounding prose is ignored. Two tokens with different values are ambiguous (a hedge) and
    count as no value; the same value repeated is fine.
    """
    if not submission:
        return None
    values: set[str] = set(NEEDLE_TOKEN_RE.findall(submission))
    if len(values) != 1:
        return None
    return values.pop()


def needle_token(submission: str | None) -> str | None:
    """`NEEDLE=<value>` as scored (the `submission` field of a task record), or None."""
    value = extract_needle(submission)
    return None if value is None else f"{NEEDLE_KEY}={value}"


def score_nih(task: Task, submission: str | None) -> bool:
    """True when the submitted `NEEDLE=<value>` token is exactly the task's needle."""
    return extract_needle(submission) == task.answer


@frozen
class NihOptions(ComponentOptions):
    """The needle-in-a-haystack task's knobs (paper, "Experimental Setup"; the noise sweep of "Ablation")."""

    noise_lines_per_side: int = int_option(DEFAULT_NOISE_LINES_PER_SIDE, flag="--noise-lines", minimum=0,
                                           maximum=MAX_NOISE_LINES, metavar="N",
                                           help="noise lines per side")
    distractor_files: int = int_option(DEFAULT_DISTRACTOR_FILES, minimum=0, maximum=MAX_DISTRACTOR_FILES,
                                       metavar="N", help="distractor files (varied layout: the centre of each task's "
                                                         "range D/2..3D/2)")
    nih_layout: str = option(DEFAULT_NIH_LAYOUT, choices=NIH_LAYOUTS,
                             help="varied: each task draws its own shape; paper: the paper's single structure")

    def check_count(self, count: int, flag: str) -> None:
        """A seed's tasks are held at once: ``count`` times the largest task's characters within MAX_SEED_CHARS."""
        largest = largest_task_chars(self.noise_lines_per_side, self.distractor_files)
        if count * largest > MAX_SEED_CHARS:
            raise ConfigError(
                f"{flag} {count} x up to {largest:,} characters of files per task (--distractor-files "
                f"{self.distractor_files}, --noise-lines {self.noise_lines_per_side}) = {count * largest:,} characters"
                f" per seed, all held in memory at once; at most {MAX_SEED_CHARS:,}: give at most "
                f"{flag} {MAX_SEED_CHARS // largest}, or fewer --distractor-files or --noise-lines")


@frozen
class NihSource:
    """Tasks drawn from each seed (nothing to read)."""

    options: NihOptions

    def tasks(self, seed: int, count: int | None) -> list[Task]:
        return make_nih_tasks(seed, count or 0, noise_lines_per_side=self.options.noise_lines_per_side,
                              distractor_files=self.options.distractor_files, layout=self.options.nih_layout)


def _score_needle(task: Task, submission: str, reply: str) -> tuple[bool, str | None]:
    """The ``NEEDLE=<value>`` token of the submission, scored."""
    return score_nih(task, submission), needle_token(submission)


register_task(TaskEntry(
    name=NIH_KIND,
    label="Needle-in-a-haystack",
    help="needle-in-a-haystack",
    options=NihOptions,
    source=NihSource,
    scorer=_score_needle,
    plan_steps=lambda task: len(task.files) + 1,  # one step per file, then submit
    count_flag="--tasks",
    count_default=1000,
    count_help="tasks per seed",
    report_table="arc_eval.analysis.report:survival_table",
    order=1,
))
