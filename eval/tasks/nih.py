"""Needle-in-a-haystack (NIH) tasks, as the paper's "Benchmarks" section describes them.

A task plants one needle -- a 24-character token over a 30-character alphabet -- in
`secrets.txt`, inside a banner labelled ``THE NEEDLE FOR THIS TASK`` as ``NEEDLE=<value>``, with
`noise_lines_per_side` distractor lines above and below that are marked as noise (paper,
"Needle benchmark guardrail"). The goal then walks the agent through `distractor_files` files
(`notes_01.txt`, ...), one per step, which grows the context, before it submits
``NEEDLE=<value>``. Only that token is scored (`score_nih`).

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

from arc_eval.types import Task

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
PAPER_SEEDS = (42, 82, 122)

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


def _secrets_file(rng: random.Random, task_id: str, needle: str, noise_lines_per_side: int) -> str:
    bank = _phrase_bank(NOISE_LINE_WORD_CHARS)

    def noise_block(side: str) -> list[str]:
        return [
            f"NOISE {side} {line:02d}/{noise_lines_per_side:02d} (not the needle): {phrase}"
            for line, phrase in enumerate(rng.choices(bank, k=noise_lines_per_side), start=1)
        ]

    rule = "=" * 16
    lines = [
        f"# {NEEDLE_FILE} for task {task_id}",
        "# Lines starting with NOISE are distractors and hold no needle.",
        *noise_block("above"),
        f"{rule} BEGIN {NEEDLE_BANNER_LABEL} {rule}",
        f"{NEEDLE_KEY}={needle}",
        f"{rule} END {NEEDLE_BANNER_LABEL} {rule}",
        *noise_block("below"),
    ]
    return "\n".join(lines) + "\n"


def _distractor_file(rng: random.Random, name: str, number: int, total: int) -> str:
    header = f"# {name}: distractor file {number} of {total}; it holds no needle.\n"
    bank = _phrase_bank(DISTRACTOR_LINE_CHARS)
    count = max(
        1, round((DISTRACTOR_CHARS - len(header)) / _mean_line_chars(DISTRACTOR_LINE_CHARS))
    )
    return header + "\n".join(rng.choices(bank, k=count)) + "\n"


def distractor_names(distractor_files: int) -> list[str]:
    return [f"notes_{number:02d}.txt" for number in range(1, distractor_files + 1)]


def _goal(distractors: Sequence[str]) -> str:
    reads = "\n".join(f"  {step}. cat {name}" for step, name in enumerate(distractors, start=2))
    return (
        f"Your task has {len(distractors) + 2} steps; do exactly one action per step, in order.\n"
        f"  1. cat {NEEDLE_FILE}  -- it holds the needle inside the banner labelled "
        f"{NEEDLE_BANNER_LABEL}; lines marked NOISE are distractors.\n"
        f"{reads}\n"
        f"  {len(distractors) + 2}. submit {NEEDLE_KEY}=<value>  -- with the exact 24-character "
        f"value from the banner in {NEEDLE_FILE}.\n"
        "Read every file in this order before you submit. Only the submitted "
        f"{NEEDLE_KEY}=<value> token is scored."
    )


def make_nih_tasks(
    seed: int,
    n_tasks: int,
    *,
    noise_lines_per_side: int = DEFAULT_NOISE_LINES_PER_SIDE,
    distractor_files: int = DEFAULT_DISTRACTOR_FILES,
) -> list[Task]:
    """`n_tasks` NIH tasks of `seed`, ids `nih-s{seed}-{index:04d}`; paired across methods."""
    if n_tasks < 0:
        raise ValueError(f"n_tasks must be >= 0, got {n_tasks}")
    if noise_lines_per_side < 0:
        raise ValueError(f"noise_lines_per_side must be >= 0, got {noise_lines_per_side}")
    if distractor_files < 0:
        raise ValueError(f"distractor_files must be >= 0, got {distractor_files}")
    names = distractor_names(distractor_files)
    goal = _goal(names)
    tasks: list[Task] = []
    for index, needle in enumerate(needle_pool(seed, n_tasks)):
        task_id = nih_task_id(seed, index)
        rng = random.Random(f"nih-fixture:{seed}:{index}")
        files = {NEEDLE_FILE: _secrets_file(rng, task_id, needle, noise_lines_per_side)}
        for number, name in enumerate(names, start=1):
            files[name] = _distractor_file(rng, name, number, distractor_files)
        tasks.append(
            Task(
                task_id=task_id,
                kind="nih",
                goal=goal,
                files=files,
                answer=needle,
                meta={
                    "noise_lines_per_side": noise_lines_per_side,
                    "distractor_files": distractor_files,
                    "seed": seed,
                    "index": index,
                },
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
