"""`merge_visible` against a model: the newest version visible at a sequence number, tombstones hidden.

Equal keys sit in several sources with their versions in any mix, and
tombstones and versions above the snapshot fall anywhere in a key's run.
"""

from __future__ import annotations

from itertools import chain, pairwise

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from minilsm.errors import ClosedError, StoreIOError
from minilsm.iterators import Entry, ScanHandle, merge, merge_visible, prefix_bounds
from minilsm.keys import KIND_DELETE, KIND_VALUE

_KEYS = st.sampled_from([b"", b"a", b"ab", b"b", b"ba", b"c", b"d", b"\xff"])


@st.composite
def stores(draw: st.DrawFn) -> tuple[list[list[Entry]], int]:
    """Sources (each a list of versions in internal order) and a snapshot sequence number."""
    writes = draw(st.lists(st.tuples(_KEYS, st.integers(0, 4).map(bool)), max_size=40))  # mostly values
    num_sources = draw(st.integers(1, 5))
    sources: list[list[Entry]] = [[] for _ in range(num_sources)]
    for seq, (key, is_value) in enumerate(writes, start=1):
        kind = KIND_VALUE if is_value else KIND_DELETE
        value = b"v%d" % seq if is_value else b""
        sources[draw(st.integers(0, num_sources - 1))].append((key, (seq << 8) | kind, value))
    for source in sources:
        source.sort(key=lambda e: (e[0], -e[1]))
    seq = draw(st.integers(0, len(writes) + 1))
    return sources, seq


def model(sources: list[list[Entry]], seq: int) -> list[tuple[bytes, bytes]]:
    limit = (seq << 8) | 0xFF
    newest: dict[bytes, Entry] = {}
    for key, trailer, value in chain.from_iterable(sources):
        if trailer <= limit and (key not in newest or trailer > newest[key][1]):
            newest[key] = (key, trailer, value)
    return sorted((k, e[2]) for k, e in newest.items() if e[1] & 0xFF == KIND_VALUE)


@settings(max_examples=400, deadline=None)
@given(stores(), st.booleans())
def test_merge_visible_matches_the_model(store: tuple[list[list[Entry]], int], reverse: bool) -> None:
    sources, seq = store
    feeds = [iter(s[::-1] if reverse else s) for s in sources]
    handle = ScanHandle(feeds)
    merged = merge_visible(feeds, seq, reverse, handle)
    got = []
    for pair in merged:
        assert handle.last == pair[0]  # where an iterator stepping the scan stands
        got.append(pair)
    expect = model(sources, seq)
    assert got == (expect[::-1] if reverse else expect)


def test_merge_visible_keeps_a_key_whole_across_sources() -> None:
    # b"k" has versions in two sources; the newest visible one is a tombstone at snapshot 4
    # and the value of sequence 3 at snapshot 3.
    a = [(b"j", 1 << 8 | 1, b"j1"), (b"k", 5 << 8 | 1, b"k5"), (b"k", 4 << 8 | 0, b""), (b"l", 6 << 8 | 1, b"l6")]
    b = [(b"k", 3 << 8 | 1, b"k3"), (b"k", 2 << 8 | 1, b"k2")]

    def run(seq: int, reverse: bool = False) -> list[tuple[bytes, bytes]]:
        return list(merge_visible([iter(a[::-1] if reverse else a), iter(b[::-1] if reverse else b)], seq, reverse))

    assert run(6) == [(b"j", b"j1"), (b"k", b"k5"), (b"l", b"l6")]
    assert run(6, reverse=True) == [(b"l", b"l6"), (b"k", b"k5"), (b"j", b"j1")]
    assert run(4) == [(b"j", b"j1")]
    assert run(3) == [(b"j", b"j1"), (b"k", b"k3")]
    assert run(0) == []


def test_merge_visible_takes_a_version_seen_in_two_sources_once() -> None:
    # An iterator can catch a flush between reading the frozen memtable and the version:
    # the same versions then come from both.
    flushed = [(b"a", 1 << 8 | 1, b"1"), (b"b", 2 << 8 | 1, b"2")]
    for reverse in (False, True):
        feeds = [iter(flushed[::-1] if reverse else flushed) for _ in range(2)]
        got = list(merge_visible(feeds, 9, reverse))
        assert got == ([(b"b", b"2"), (b"a", b"1")] if reverse else [(b"a", b"1"), (b"b", b"2")])


def test_merge_visible_turns_a_read_error_into_store_io_error() -> None:
    def failing() -> chain[Entry]:
        def boom() -> list[Entry]:
            raise OSError(5, "Input/output error")

        return chain([(b"a", 1 << 8 | 1, b"1")], chain.from_iterable(iter(boom, None)))

    merged = merge_visible([failing()], 9)
    with pytest.raises(StoreIOError, match="a scan failed reading a table"):
        list(merged)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("taken", [0, 1, 3, 5])  # before the first step, mid-scan, at the last key, after it
def test_a_cancelled_scan_raises_closed_error_at_its_next_step(reverse: bool, taken: int) -> None:
    """Whatever the scan holds (a key half-merged, the last key yielded), its next step after `cancel` raises
    ClosedError with the handle's message, and the sources are let go."""
    a = [(b"a", 2 << 8 | 1, b"a2"), (b"a", 1 << 8 | 1, b"a1"), (b"c", 3 << 8 | 1, b"c")]
    b = [(b"a", 4 << 8 | 1, b"a4"), (b"b", 5 << 8 | 1, b"b"), (b"d", 6 << 8 | 1, b"d"), (b"e", 7 << 8 | 1, b"e")]
    sources = [iter(a[::-1] if reverse else a), iter(b[::-1] if reverse else b)]
    handle = ScanHandle(sources)
    merged = merge_visible(sources, 9, reverse, handle)
    want = [(b"a", b"a4"), (b"b", b"b"), (b"c", b"c"), (b"d", b"d"), (b"e", b"e")]
    assert [next(merged) for _ in range(taken)] == (want[::-1] if reverse else want)[:taken]
    handle.cancel("the store is closed")
    assert sources == []
    with pytest.raises(ClosedError, match="the store is closed"):
        next(merged)


def test_merge_visible_refuses_a_handle_made_for_other_sources() -> None:
    with pytest.raises(ValueError, match="other sources"):
        next(merge_visible([iter([])], 9, handle=ScanHandle([])))


def test_prefix_bounds() -> None:
    assert prefix_bounds(b"ab") == (b"ab", b"ac")
    assert prefix_bounds(b"a\xff") == (b"a\xff", b"b")
    assert prefix_bounds(b"\xff\xff") == (b"\xff\xff", None)


@st.composite
def aged_sources(draw: st.DrawFn) -> list[list[Entry]]:
    """Sources newest first, obeying the rule compaction's inputs obey: for a user key, every version in a
    newer source has a larger sequence number than every version in an older one.  Many versions per key
    (snapshots), keys in one source only or in all of them, the empty key."""
    nsources = draw(st.integers(1, 4))
    sources: list[list[Entry]] = [[] for _ in range(nsources)]
    for key in sorted(draw(st.lists(st.binary(max_size=3), max_size=25, unique=True))):
        seqs = sorted(draw(st.lists(st.integers(0, 50), min_size=1, max_size=8, unique=True)), reverse=True)
        # Split the key's versions, newest first, into one contiguous slice per source (some empty).
        cuts = sorted(draw(st.lists(st.integers(0, len(seqs)), min_size=nsources - 1, max_size=nsources - 1)))
        for n, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, len(seqs)], strict=True)):
            for seq in seqs[lo:hi]:
                kind = draw(st.sampled_from([KIND_VALUE, KIND_DELETE]))
                sources[n].append((key, seq << 8 | kind, b"%d" % seq))
    return sources


@given(aged_sources())
def test_merge_yields_internal_order(sources: list[list[Entry]]) -> None:
    merged = list(merge([iter(s) for s in sources]))
    assert merged == sorted(chain.from_iterable(sources), key=lambda e: (e[0], -e[1]))
    assert all((a[0], -a[1]) < (b[0], -b[1]) for a, b in pairwise(merged))  # strictly increasing
