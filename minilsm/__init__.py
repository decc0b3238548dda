"""minilsm: a log-structured merge key-value store with Bloom filters you can measure."""

from minilsm.batch import WriteBatch
from minilsm.bloom import BloomFilter, expected_fpr, key_hash, optimal_params
from minilsm.db import DB, DBIterator, RecoveryReport, Snapshot
from minilsm.errors import (
    ClosedError,
    CorruptionError,
    Error,
    ExistsError,
    LockError,
    NotFoundError,
    ReadOnlyError,
    StoreIOError,
)
from minilsm.options import Options

__all__ = [
    "DB",
    "BloomFilter",
    "ClosedError",
    "CorruptionError",
    "DBIterator",
    "Error",
    "ExistsError",
    "LockError",
    "NotFoundError",
    "Options",
    "ReadOnlyError",
    "RecoveryReport",
    "Snapshot",
    "StoreIOError",
    "WriteBatch",
    "expected_fpr",
    "key_hash",
    "optimal_params",
]
__version__ = "0.1.0"
