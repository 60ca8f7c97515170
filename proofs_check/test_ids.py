"""A1 and Lemma 1: injective fixed-width ids, with fingerprint collisions forced by a tiny d."""

from __future__ import annotations

import hashlib
import math

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from arc_ref.errors import CapacityExceeded, ConfigError
from arc_ref.ids import IdScheme, decode_counter, edit_distance, encode_counter, fingerprint, normalize_token
from arc_ref.machine import Observe, init, observe
from arc_ref.config import preset
from arc_ref.text import ID_PATTERN
from proofs_check.registry import proves
from proofs_check.strategies import configs, texts, unicode_texts

schemes = st.builds(IdScheme, capacity=st.integers(2, 5000), fingerprint_bits=st.integers(0, 6))
wide_schemes = st.builds(IdScheme, capacity=st.integers(2, 10**7), fingerprint_bits=st.integers(0, 64))


@given(schemes, st.lists(st.tuples(st.sampled_from(("ls", "cat a")), st.sampled_from(("", "x", "y"))), min_size=2))
@proves("L1", "A1")
def test_lemma1_ids_pairwise_distinct_despite_fingerprint_collisions(
    scheme: IdScheme, occurrences: list[tuple[str, str]]
) -> None:
    """Lemma 1: id_1..id_n are pairwise distinct even when fingerprints collide (d <= 6, repeated content)."""
    occurrences = occurrences[: scheme.capacity]
    ids = [scheme.make(j, signature, content) for j, (signature, content) in enumerate(occurrences, start=1)]
    prints = [fingerprint(signature, content, scheme.fingerprint_bits) for signature, content in occurrences]
    if len(set(prints)) < len(prints):
        event("fingerprint collision forced")
    assert len(set(ids)) == len(ids)


@given(schemes, st.data())
@proves("A1")
def test_a1_fixed_width_printed_form(scheme: IdScheme, data: st.DataObject) -> None:
    """A1: b = ceil(log2(N_max + 1)) bits; every printed id has the same width and the printed form."""
    assert scheme.bits == math.ceil(math.log2(scheme.capacity + 1))
    index = data.draw(st.integers(1, scheme.capacity))
    content = data.draw(texts(40))
    obs_id = scheme.make(index, "cat a", content)
    assert ID_PATTERN.fullmatch(obs_id)
    assert len(obs_id) == len(scheme.widest())
    counter_text = obs_id[1:].partition("-")[0]
    assert decode_counter(counter_text, scheme.bits) == index


@given(wide_schemes, st.sampled_from(("ls", "cat a", "grep -n x  y.py", "δ 🙂")), st.one_of(texts(60), unicode_texts(40)),
       st.data())
@proves("A1")
def test_a1_printed_id_is_counter_then_top_d_bits_of_sha1(
    scheme: IdScheme, action: str, content: str, data: st.DataObject
) -> None:
    """A1: id_j = enc_b(j) || fp_d(signature(A_j) || 0x1F || O_j), fp_d the top d bits of SHA1 over UTF-8 bytes
    (an oracle computed here with hashlib), printed zero-padded after "-"; an index outside 1..N_max has no id."""
    index = data.draw(st.integers(1, scheme.capacity))
    digest = hashlib.sha1(action.encode("utf-8") + b"\x1f" + content.encode("utf-8")).digest()
    expected = int.from_bytes(digest, "big") >> (160 - scheme.fingerprint_bits)
    assert fingerprint(action, content, scheme.fingerprint_bits) == expected < 2**max(1, scheme.fingerprint_bits)
    printed = "§" + str(index).zfill(scheme.counter_width)
    if scheme.fingerprint_bits:
        printed += "-" + str(expected).zfill(scheme.fingerprint_width)
    assert scheme.make(index, action, content) == printed
    for outside in (0, -index, scheme.capacity + 1):
        with pytest.raises(CapacityExceeded):
            scheme.format(outside, 0)
    assert IdScheme(scheme.capacity, 160).fingerprint_width == len(str(2**160 - 1))  # d may be all of SHA1
    for capacity, bits in ((1, scheme.fingerprint_bits), (0, 0), (scheme.capacity, 161), (scheme.capacity, -1)):
        with pytest.raises(ConfigError):  # N_max >= 2 and 0 <= d <= 160
            IdScheme(capacity, bits)


@given(st.integers(1, 64), st.data())
@proves("A1")
def test_a1_counter_encoding_round_trip(bits: int, data: st.DataObject) -> None:
    """enc_b is injective: decode(encode(j)) == j for every j < 2^b."""
    index = data.draw(st.integers(1, 2**bits - 1))
    assert decode_counter(encode_counter(index, bits), bits) == index


@given(configs("minimal"), st.lists(texts(30), min_size=1, max_size=6), st.data())
@proves("A1")
def test_a1_printed_id_parses_with_or_without_section_sign_and_punctuation(
    config: object, contents: list[str], data: st.DataObject
) -> None:
    """An id resolves with or without § and wrapped in punctuation; the record found is the right one."""
    state = init(config)  # type: ignore[arg-type]
    for content in contents[: state.config.capacity]:
        state, _ = observe(state, Observe("cat a", content, 0))
    record = data.draw(st.sampled_from(list(state.records)))
    body = record.obs_id[1:]
    wrapping = data.draw(st.sampled_from(("{}", "§{}", "(§{}).", "`§{}`", "[{}],", '"§{}"', "§{}:")))
    assert normalize_token(wrapping.format(body)) == body
    assert state.lookup(wrapping.format(body)) == record


@given(configs("minimal"), st.lists(texts(20), min_size=1, max_size=8), st.data())
@proves("A1")
def test_a1_mistyped_id_gets_a_nearest_suggestion(config: object, contents: list[str], data: st.DataObject) -> None:
    """A one-character typo never resolves silently to nothing: it gets a stored id at distance <= 1."""
    state = init(config)  # type: ignore[arg-type]
    for content in contents[: state.config.capacity]:
        state, _ = observe(state, Observe("cat a", content, 0))
    record = data.draw(st.sampled_from(list(state.records)))
    body = record.obs_id[1:]
    position = data.draw(st.integers(0, len(body) - 1))
    replacement = data.draw(st.sampled_from("0123456789").filter(lambda c: c != body[position]))
    typo = body[:position] + replacement + body[position + 1 :]
    found = state.lookup("§" + typo)
    if found is not None:  # the typo hit another stored id exactly
        assert found.obs_id == "§" + typo
        return
    suggestion = state.nearest("§" + typo)
    assert suggestion is not None
    assert suggestion in {r.obs_id for r in state.records}
    assert edit_distance(typo, suggestion[1:]) <= 1


@proves("A1")
def test_a1_exceeding_capacity_is_an_explicit_error() -> None:
    """Going past N_max raises CapacityExceeded and the state stays usable (unchanged)."""
    state = init(preset("minimal", capacity=2))
    for content in ("a", "b"):
        state, _ = observe(state, Observe("ls", content, 0))
    with pytest.raises(CapacityExceeded):
        observe(state, Observe("ls", "c", 0))
    assert [r.content for r in state.records] == ["a", "b"]


@given(wide_schemes, st.sampled_from(("bytes", "o200k_base", "cl100k_base")), st.data())
@proves("A1", "A3")
def test_a1_every_id_of_a_scheme_costs_the_same_tokens(scheme: IdScheme, tokenizer_name: str, data: st.DataObject) -> None:
    """Decimal ids: any id costs exactly what the widest one costs, alone and inside a stub line, so the
    budget floors computed with the widest id hold for every id (A3: stub cost <= c)."""
    from arc_ref.tokenizers import get_tokenizer

    tokenizer = get_tokenizer(tokenizer_name)
    index = data.draw(st.integers(1, scheme.capacity))
    value = data.draw(st.integers(0, 2**scheme.fingerprint_bits - 1))
    obs_id = scheme.format(index, value)
    widest = scheme.widest()
    assert len(obs_id) == len(widest)
    assert tokenizer.count(obs_id) == tokenizer.count(widest)
    assert tokenizer.count(f"\n{obs_id} rc=0 | _recall {obs_id}") == tokenizer.count(f"\n{widest} rc=0 | _recall {widest}")


@given(st.integers(1, 40), st.text(alphabet="0123456789-ab", max_size=16))
@proves("A1")
def test_a1_decode_counter_accepts_exactly_the_printed_counters(bits: int, text: str) -> None:
    """decode_counter is the exact inverse of encode_counter: a fixed-width run of decimal digits whose value
    lies in 1 .. 2^b - 1, and nothing else (a wrong width, a letter, zero or 2^b is refused)."""
    width = len(str(2**bits - 1))
    valid = len(text) == width and text.isdigit() and 1 <= int(text) < 2**bits
    decoded = decode_counter(text, bits)
    assert decoded == (int(text) if valid else None)
    if valid:
        assert encode_counter(int(text), bits) == text
    edge = encode_counter(2**bits - 1, bits)
    assert decode_counter(edge, bits) == 2**bits - 1
    if len(str(2**bits)) == width:
        assert decode_counter(str(2**bits).zfill(width), bits) is None


@given(schemes, st.data())
@proves("A1")
def test_a1_split_reads_counter_and_fingerprint_or_refuses(scheme: IdScheme, data: st.DataObject) -> None:
    """IdScheme.split: (counter, fingerprint digits) of a well-formed body; None for a malformed part."""
    index = data.draw(st.integers(1, scheme.capacity))
    value = data.draw(st.integers(0, max(0, 2**scheme.fingerprint_bits - 1)))
    body = scheme.format(index, value)[1:]
    counter, fingerprint_text = scheme.split(body)
    assert counter == index
    if scheme.fingerprint_bits:
        assert fingerprint_text == body.partition("-")[2] and len(fingerprint_text) == scheme.fingerprint_width
        for broken in (body + "1", body[:-1], body[:-1] + "x", body.replace("-", "-1-", 1)):
            assert scheme.split(broken)[1] is None
    else:
        assert fingerprint_text is None and "-" not in body
        assert scheme.split(body + "-1")[0] is None


def _reference_distance(left: str, right: str) -> int:
    """Levenshtein distance by plain recursion (the oracle for short strings)."""
    import functools

    @functools.lru_cache(maxsize=None)
    def distance(i: int, j: int) -> int:
        if i == 0 or j == 0:
            return i + j
        return min(distance(i - 1, j) + 1, distance(i, j - 1) + 1,
                   distance(i - 1, j - 1) + (left[i - 1] != right[j - 1]))

    return distance(len(left), len(right))


@given(st.text(alphabet="ab-0", max_size=8), st.text(alphabet="ab-0", max_size=8))
@proves("A1")
def test_a1_suggestion_distance_is_levenshtein(left: str, right: str) -> None:
    """The distance ranking suggestions is the Levenshtein distance (checked against a recursive oracle), also
    between a string and its own shifts, where one insertion and one deletion beat every substitution (two
    independent random strings rarely need an insertion: a wrong insertion cost went unseen)."""
    assert edit_distance(left, right) == _reference_distance(left, right) == edit_distance(right, left)
    for shifted in (left[1:] + right[:1], right[:1] + left[:-1], left[:3] + right[:1] + left[3:]):
        assert edit_distance(left, shifted) == _reference_distance(left, shifted) == edit_distance(shifted, left)
