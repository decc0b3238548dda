"""WriteBatch behaviour and the batch payload encoding: round trips and damaged payloads."""

from __future__ import annotations

import copy
import pickle
import struct
import warnings
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minilsm.batch import BATCH_HEADER_SIZE, OP_HEADER_SIZE, WriteBatch, decode_batch, encode_batch
from minilsm.errors import ClosedError, CorruptionError
from minilsm.keys import KIND_DELETE, KIND_VALUE, MAX_KEY_SIZE, MAX_SEQUENCE, MAX_VALUE_SIZE

op = st.one_of(
    st.tuples(st.just(KIND_VALUE), st.binary(max_size=20), st.binary(max_size=40)),
    st.tuples(st.just(KIND_DELETE), st.binary(max_size=20), st.just(b"")),
)
ops_lists = st.lists(op, max_size=12)


@given(st.integers(0, MAX_SEQUENCE - 20), ops_lists)
def test_encode_decode_round_trip(seq: int, ops: list[tuple[int, bytes, bytes]]) -> None:
    payload = encode_batch(seq, ops)
    assert decode_batch(payload) == (seq, ops)
    assert len(payload) == BATCH_HEADER_SIZE + sum(OP_HEADER_SIZE + len(k) + len(v) for _, k, v in ops)


def test_single_op_layout_byte_by_byte() -> None:
    """Pins the documented layout (docs/FORMAT-wal.md): seq u64, count u32, kind u8, key_len u32, value_len u32."""
    payload = encode_batch(0x0102030405060708, [(KIND_VALUE, b"key", b"value")])
    assert payload == (
        bytes.fromhex("0807060504030201") + bytes.fromhex("01000000") + b"\x01" + bytes.fromhex("03000000")
        + bytes.fromhex("05000000") + b"key" + b"value"
    )  # fmt: skip
    assert encode_batch(9, [(KIND_DELETE, b"k", b"")]) == struct.pack("<QIBII", 9, 1, KIND_DELETE, 1, 0) + b"k"
    assert encode_batch(9, []) == struct.pack("<QI", 9, 0)


@given(st.integers(0, 1000), st.lists(op, min_size=1, max_size=4), st.data())
def test_every_truncation_and_flip_is_an_error_or_a_valid_batch(
    seq: int, ops: list[tuple[int, bytes, bytes]], data: st.DataObject
) -> None:
    payload = encode_batch(seq, ops)
    for cut in range(len(payload)):
        with pytest.raises(CorruptionError, match=r"a\.log"):
            decode_batch(payload[:cut], "a.log")
    with pytest.raises(CorruptionError):
        decode_batch(payload + b"\x00")
    mask = data.draw(st.integers(1, 255))
    for i in range(len(payload)):
        damaged = bytearray(payload)
        damaged[i] ^= mask
        try:
            got_seq, got_ops = decode_batch(bytes(damaged), "a.log")
        except CorruptionError as e:
            assert e.path == "a.log"
            continue
        # The log's checksum catches such damage; the decoder need only stay within the rules.
        assert all(kind in (KIND_VALUE, KIND_DELETE) for kind, _, _ in got_ops)
        assert all(value == b"" for kind, _, value in got_ops if kind == KIND_DELETE)
        assert encode_batch(got_seq, got_ops) == bytes(damaged)


@pytest.mark.parametrize(
    ("payload", "detail"),
    [
        (b"", "shorter than its 12-byte header"),
        (struct.pack("<QI", 1, 0xFFFFFFFF), "claims 4294967295 operations"),
        (struct.pack("<QIBII", 1, 1, KIND_VALUE, 0xFFFFFFFF, 0), "key length"),
        (struct.pack("<QIBII", 1, 1, KIND_VALUE, 0, 0xFFFFFFFF), "value length"),
        (struct.pack("<QIBII", 1, 1, KIND_VALUE, MAX_KEY_SIZE + 1, 0), "key length"),
        (struct.pack("<QIBII", 1, 1, KIND_VALUE, 0, MAX_VALUE_SIZE + 1), "value length"),
        (struct.pack("<QIBII", 1, 1, KIND_VALUE, 5, 5) + b"short", "runs past the end"),
        (struct.pack("<QIBII", 1, 1, 7, 0, 0), "unknown kind 7"),
        (struct.pack("<QIBII", 1, 1, KIND_DELETE, 1, 1) + b"kv", "a delete with a 1-byte value"),
        (struct.pack("<QIBII", MAX_SEQUENCE, 2, KIND_DELETE, 0, 0) * 2, "exceed the maximum"),
        (struct.pack("<QIBII", 1, 1, KIND_DELETE, 0, 0) + b"x", "1 bytes after its last op"),
    ],
)
def test_malformed_payloads(payload: bytes, detail: str) -> None:
    with pytest.raises(CorruptionError, match=detail) as info:
        decode_batch(payload, "000007.log")
    assert info.value.path == "000007.log"


def test_last_sequence_number_is_allowed() -> None:
    payload = encode_batch(MAX_SEQUENCE, [(KIND_DELETE, b"k", b"")])
    assert decode_batch(payload) == (MAX_SEQUENCE, [(KIND_DELETE, b"k", b"")])


# -- WriteBatch ---------------------------------------------------------------------


def test_batch_collects_ops_in_order_and_sizes_its_payload() -> None:
    b = WriteBatch()
    assert len(b) == 0 and b.approximate_size == BATCH_HEADER_SIZE and not b
    b.put(b"a", b"1")
    b.delete(b"b")
    b.put(bytearray(b"c"), memoryview(b"3"))
    expected = [(KIND_VALUE, b"a", b"1"), (KIND_DELETE, b"b", b""), (KIND_VALUE, b"c", b"3")]
    assert list(b) == expected and list(b.ops) == expected and len(b) == 3
    assert all(type(k) is bytes and type(v) is bytes for _, k, v in b)
    assert b.approximate_size == len(encode_batch(1, b.ops))
    b.clear()
    assert list(b) == [] and b.approximate_size == BATCH_HEADER_SIZE


def test_batch_validates_like_the_store() -> None:
    b = WriteBatch()
    with pytest.raises(TypeError, match="encode"):
        b.put("text", b"v")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        b.put(b"k", "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        b.delete(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="maximum"):
        b.put(bytes(MAX_KEY_SIZE + 1), b"")
    with pytest.raises(ValueError, match="maximum"):
        b.delete(bytes(MAX_KEY_SIZE + 1))
    assert len(b) == 0


def test_batch_refuses_to_outgrow_a_log_record() -> None:
    b = WriteBatch()
    big = bytes(MAX_VALUE_SIZE)
    b.put(b"a", big)
    with pytest.raises(ValueError, match="log record limit"):
        b.put(b"b", big)
    assert len(b) == 1


def test_append_adds_another_batchs_ops_after_its_own() -> None:
    """plyvel's WriteBatch.append: the source's ops, in order, after the batch's; the source unchanged."""
    a, b = WriteBatch(), WriteBatch()
    a.put(b"k", b"1")
    b.delete(b"k")
    b.put(b"j", b"2")
    a.append(b)
    assert list(a) == [(KIND_VALUE, b"k", b"1"), (KIND_DELETE, b"k", b""), (KIND_VALUE, b"j", b"2")]
    assert a.approximate_size == len(encode_batch(1, a.ops)) and len(b) == 2
    a.append(a)  # itself: its ops twice
    assert len(a) == 6 and a.approximate_size == len(encode_batch(1, a.ops))
    with pytest.raises(TypeError, match="WriteBatch"):
        a.append([(KIND_VALUE, b"x", b"y")])  # type: ignore[arg-type]
    big = WriteBatch()
    big.put(b"v", bytes(MAX_VALUE_SIZE))
    huge = WriteBatch()
    huge.append(big)
    with pytest.raises(ValueError, match="log record limit"):
        huge.append(big)  # all or none
    assert len(huge) == 1 and huge.approximate_size == big.approximate_size
    spent = WriteBatch(_writer=lambda batch: None)
    spent.put(b"s", b"3")
    spent.write()
    a.clear()
    a.append(spent)  # a written batch may still be read
    assert list(a) == [(KIND_VALUE, b"s", b"3")]
    with pytest.raises(ClosedError):
        spent.append(a)


def test_bound_batch_writes_once_on_clean_exit() -> None:
    written: list[list[tuple[int, bytes, bytes]]] = []
    with WriteBatch(_writer=lambda batch: written.append(list(batch))) as b:
        b.put(b"k", b"v")
        b.delete(b"gone")
        assert written == []
    assert written == [[(KIND_VALUE, b"k", b"v"), (KIND_DELETE, b"gone", b"")]]
    assert b.closed
    for use in (lambda: b.put(b"x", b"y"), lambda: b.delete(b"x"), b.clear, b.write, b.__enter__):
        with pytest.raises(ClosedError, match="already written"):
            use()
    assert len(written) == 1
    assert list(b) == written[0]  # still readable


def test_bound_batch_is_discarded_when_the_block_raises() -> None:
    """Its ClosedError says so.  Was: "write batch was already written", which told a program that caught the
    block's error and tried the batch again that its writes had landed, when nothing had."""
    written: list[WriteBatch] = []
    with pytest.raises(KeyError), WriteBatch(_writer=written.append) as b:
        b.put(b"k", b"v")
        raise KeyError("boom")
    assert written == [] and b.closed and len(b) == 0
    for use in (lambda: b.put(b"k", b"v"), b.write, b.__enter__):
        with pytest.raises(ClosedError, match="discarded") as raised:
            use()
        assert "already written" not in str(raised.value)


def test_a_write_inside_the_block_is_not_repeated_at_its_end() -> None:
    """Was: the block's end raised ClosedError (it tried to write the spent batch again).  The block's end
    now writes only a batch still open: one written inside the block, by its own `write` or by
    ``db.write`` (tests/test_db.py), is written exactly once and the block ends cleanly, the same rule for
    both; a change after that write still raises ClosedError, and an error in the block keeps the ops."""
    written: list[WriteBatch] = []
    with WriteBatch(_writer=written.append) as b:
        b.put(b"k", b"v")
        b.write()
    assert written == [b] and b.closed and list(b) == [(KIND_VALUE, b"k", b"v")]
    with pytest.raises(ClosedError), WriteBatch(_writer=written.append) as late:
        late.put(b"k", b"v")
        late.write()
        late.put(b"k2", b"v2")
    assert written == [b, late] and list(late) == [(KIND_VALUE, b"k", b"v")]


def test_failed_writer_closes_the_batch() -> None:
    def failing(batch: WriteBatch) -> None:
        raise OSError("disk full")

    b = WriteBatch(_writer=failing)
    b.put(b"k", b"v")
    with pytest.raises(OSError):
        b.write()
    assert b.closed
    with pytest.raises(ClosedError, match="spent by a write that raised"):  # not "already written": it raised
        b.write()


def test_standalone_batch_is_reusable_and_not_a_context_manager() -> None:
    b = WriteBatch()
    b.put(b"k", b"v")
    with pytest.raises(ValueError, match=r"db\.write"):
        b.write()
    with pytest.raises(ValueError, match="not bound"), b:
        pass
    assert not b.closed
    b.clear()
    b.put(b"k2", b"v2")
    assert list(b) == [(KIND_VALUE, b"k2", b"v2")]
    assert repr(b) == f"WriteBatch(ops=1, approximate_size={b.approximate_size})"


@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy])
def test_a_copy_is_a_batch_of_its_own(how: Callable[[WriteBatch], WriteBatch]) -> None:
    """Was: copy.copy shared the ops list, and a bound batch's count of writes: a put to the copy changed the
    original, and the copy of a bound batch said it was open but raised "already written" (an API audit)."""
    b = WriteBatch()
    b.put(b"k", b"v")
    twin = how(b)
    twin.put(b"k2", b"v2")
    assert list(b) == [(KIND_VALUE, b"k", b"v")] and len(twin) == 2
    assert twin.approximate_size == b.approximate_size + OP_HEADER_SIZE + 4
    written: list[list[tuple[int, bytes, bytes]]] = []
    bound = WriteBatch(_writer=lambda batch: written.append(list(batch)))
    bound.put(b"a", b"1")
    bound_twin = how(bound)
    bound_twin.delete(b"b")
    bound.write()
    assert bound.closed and not bound_twin.closed
    bound_twin.write()  # bound to the same store, and not spent by the other's write
    assert written == [[(KIND_VALUE, b"a", b"1")], [(KIND_VALUE, b"a", b"1"), (KIND_DELETE, b"b", b"")]]
    spent = how(bound)
    assert spent.closed
    with pytest.raises(ClosedError, match="already written"):
        spent.write()


def test_a_standalone_batch_pickles_as_its_ops_and_a_stores_does_not_pickle() -> None:
    b = WriteBatch()
    b.put(b"", b"v")
    b.delete(b"gone")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 3.12 and 3.13 deprecate pickling the itertools.count a batch holds
        back = pickle.loads(pickle.dumps(b))
    assert list(back) == list(b) and back.approximate_size == b.approximate_size and not back.closed
    bound = WriteBatch(_writer=lambda batch: None)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(bound)
