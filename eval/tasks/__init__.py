"""Task generators and scorers: needle-in-a-haystack (`nih`) and LongBench-v2 (`longbench`)."""

from arc_eval.tasks.longbench import (
    LongBenchDataError,
    extract_longbench_answer,
    load_longbench,
    score_longbench,
)
from arc_eval.tasks.nih import make_needle, make_nih_tasks, needle_token, score_nih

__all__ = [
    "LongBenchDataError",
    "extract_longbench_answer",
    "load_longbench",
    "make_needle",
    "make_nih_tasks",
    "needle_token",
    "score_nih",
    "score_longbench",
]
