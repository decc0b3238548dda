"""`merge_visible` against a model: the newest version visible at a sequence number, tombstones hidden.

The sources are cut into chunks at random places, so runs of one key's versions
cross chunk boundaries, equal keys sit in several sources, and tombstones and
versions above the snapshot fall on the edges of the batches the merge takes.
"""

from __future__ import annotations

from itertools import chain, pairwise

import hypothesis.strategies as st
from hypothesis import given, settings

from minilsm.iterators import Entry, merge_visible, prefix_bounds
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


def chunked(draw: st.DrawFn, source: list[Entry], seq: int, reverse: bool) -> list[tuple[list[Entry], bool]]:
    """`source` cut into non-empty chunks in scan order; a chunk claims clean only when it is."""
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(source) - 1)), max_size=4))) if len(source) > 1 else []
    bounds = [0, *cuts, len(source)]
    chunks = [source[a:b] for a, b in pairwise(bounds) if a < b]
    limit = (seq << 8) | 0xFF
    out = []
    for chunk in chunks:
        clean = all(t <= limit and t & 0xFF == KIND_VALUE for _, t, _ in chunk)
        out.append((chunk, clean and draw(st.booleans())))
    return out[::-1] if reverse else out


@settings(max_examples=400, deadline=None)
@given(st.data(), stores(), st.booleans())
def test_merge_visible_matches_the_model(
    data: st.DataObject, store: tuple[list[list[Entry]], int], reverse: bool
) -> None:
    sources, seq = store
    feeds = [iter(chunked(data.draw, s, seq, reverse)) for s in sources]
    batches = list(merge_visible(feeds, seq, reverse))
    assert all(batches), "no empty batch is yielded"
    got = list(chain.from_iterable(reversed(b.items()) if reverse else b.items() for b in batches))
    expect = model(sources, seq)
    assert got == (expect[::-1] if reverse else expect)
    for batch in batches:
        assert list(batch) == sorted(batch), "each batch lists its keys ascending"


def test_merge_visible_keeps_a_key_whole_across_chunks_and_sources() -> None:
    # b"k" has versions in two sources, split over chunks; the newest visible one is a tombstone
    # at snapshot 4 and the value of sequence 2 at snapshot 3.
    a = [[(b"j", 1 << 8 | 1, b"j1"), (b"k", 5 << 8 | 1, b"k5")], [(b"k", 4 << 8 | 0, b"")], [(b"l", 6 << 8 | 1, b"l6")]]
    b = [[(b"k", 3 << 8 | 1, b"k3"), (b"k", 2 << 8 | 1, b"k2")]]

    def run(seq: int) -> list[tuple[bytes, bytes]]:
        feeds = [iter([(c, False) for c in a]), iter([(c, False) for c in b])]
        return [kv for batch in merge_visible(feeds, seq) for kv in batch.items()]

    assert run(6) == [(b"j", b"j1"), (b"k", b"k5"), (b"l", b"l6")]
    assert run(4) == [(b"j", b"j1")]
    assert run(3) == [(b"j", b"j1"), (b"k", b"k3")]
    assert run(0) == []


def test_prefix_bounds() -> None:
    assert prefix_bounds(b"ab") == (b"ab", b"ac")
    assert prefix_bounds(b"a\xff") == (b"a\xff", b"b")
    assert prefix_bounds(b"\xff\xff") == (b"\xff\xff", None)
