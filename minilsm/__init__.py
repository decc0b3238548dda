"""minilsm: a log-structured merge key-value store with Bloom filters you can measure."""

from minilsm.batch import WriteBatch
from minilsm.bloom import BloomFilter, expected_fpr, key_hash, optimal_params
from minilsm.check import CheckReport, check_store
from minilsm.db import (
    DB,
    DBIterator,
    PrefixedDB,
    PrefixedSnapshot,
    PrefixedWriteBatch,
    RawIterator,
    RecoveryReport,
    Snapshot,
)
from minilsm.destroy import destroy_store
from minilsm.errors import (
    ClosedError,
    CorruptionError,
    Error,
    ExistsError,
    IteratorInvalidError,
    LockError,
    NotFoundError,
    ReadOnlyError,
    StoreIOError,
)
from minilsm.options import Options
from minilsm.repair import RepairReport, repair_store

__all__ = [
    "DB",
    "BloomFilter",
    "CheckReport",
    "ClosedError",
    "CorruptionError",
    "DBIterator",
    "Error",
    "ExistsError",
    "IteratorInvalidError",
    "LockError",
    "NotFoundError",
    "Options",
    "PrefixedDB",
    "PrefixedSnapshot",
    "PrefixedWriteBatch",
    "RawIterator",
    "ReadOnlyError",
    "RecoveryReport",
    "RepairReport",
    "Snapshot",
    "StoreIOError",
    "WriteBatch",
    "check_store",
    "destroy_store",
    "expected_fpr",
    "key_hash",
    "optimal_params",
    "repair_store",
]
__version__ = "0.1.0"
