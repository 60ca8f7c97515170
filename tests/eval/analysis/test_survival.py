"""Compactions the needle survived, counted from call records."""

from __future__ import annotations

from dataclasses import dataclass

from arc_eval.analysis.survival import NEVER_READ, bucket_order, compactions_survived, survival_bucket


@dataclass
class Call:
    call_index: int
    action: str | None
    compactions: tuple[str, ...] = ()


META = {"needle_action": "cat secrets.txt"}


def test_counts_the_compactions_recorded_after_the_read() -> None:
    calls = [Call(3, "cat notes_02.txt", ("forced",)), Call(1, "cat notes_01.txt"),
             Call(2, "cat  secrets.txt", ("proactive",)),  # compacted before the read: not survived
             Call(4, None, ("reactive", "reactive")), Call(5, "submit NEEDLE=X", ("forced",))]
    assert compactions_survived(META, calls) == 4
    again = [*calls, Call(6, "cat secrets.txt", ("forced",))]  # a re-read: the first read counts
    assert compactions_survived(META, again) == 5


def test_no_count_without_a_read_or_without_a_needle() -> None:
    assert compactions_survived(META, [Call(1, "cat notes_01.txt", ("forced",))]) is None
    assert compactions_survived({}, [Call(1, "cat secrets.txt")]) is None
    assert compactions_survived(META, [Call(1, "cat secrets.txt")]) == 0


def test_buckets_are_ordered() -> None:
    labels = [survival_bucket(count) for count in (None, 12, 7, 0, 5, 1)]
    assert labels == [NEVER_READ, "10+", "6-9", "0", "5", "1"]
    assert sorted(labels, key=bucket_order) == ["0", "1", "5", "6-9", "10+", NEVER_READ]
