"""The values calls take and give: constants, IDs and mod shards, and the
records that calls return (a module named so that it cannot shadow the
standard library's types).

IDs are Python ints (64-bit unsigned): 2 reserved bits (zero), 16 bits
shard, 10 bits type, 36 bits local id (libshard(3)).
"""

from __future__ import annotations

import operator
from ctypes import byref, c_uint32, c_uint64
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional, Union

from ._lib import U64, Bytesish, cstr, data, lib, name_of, u64, uint
from .errors import check

MAX_SHARD = 65535
MAX_TYPE = 1023
MAX_LOCAL = (1 << 36) - 1
MAX_MOD_SHARDS = 65536
KEY_MAX = 1024
ANY = 0xFFFFFFFF            # SHARD_ANY: any open shard
SEQ_NOW = -(1 << 63)        # SHARD_SEQ_NOW: the current time in microseconds
SEQ_NONE = (1 << 63) - 1    # SHARD_SEQ_NONE: no cursor
LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG = 0, 1, 2, 3
REBALANCE_BY_BYTES, REBALANCE_BY_WRITES = 0, 1
MOVE_PHASES = ("planned", "copying", "catchup", "fenced", "flipped",
               "verifying", "cleaning", "done", "aborted", "reversible",
               "reverting", "reverted", "dropping")



class _Raise:
    """The default of `default` arguments: raise NotFound when absent."""

    def __repr__(self) -> str:
        return "libshard.RAISE"


#: The default of `default` arguments: absent raises NotFound.
RAISE: Any = _Raise()

#: An object type: its number, or its name in the map's "objects".
TypeArg = Union[int, str, bytes]


# ---- version and global state ---------------------------------------------

def version() -> str:
    """The C library's version string, e.g. "0.1.0" (shard_version)."""
    return lib.shard_version().decode()


def version_num() -> int:
    """The C library's SHARD_VERSION_NUM, 0xMMmmpp (shard_version_num)."""
    return lib.shard_version_num()


def global_init() -> None:
    """Initialise the client library (shard_global_init). Optional: opening
    a Context does it."""
    check(lib.shard_global_init())


def global_cleanup() -> None:
    """Release what global_init() set up (shard_global_cleanup). Call it
    last, once, when no Context is open any more; nothing may use the
    library afterwards."""
    lib.shard_global_cleanup()


# ---- IDs and mod shards -----------------------------------------------------

def make_id(shard: int, type: int, local: int) -> int:
    """Compose an ID; Invalid when a part is out of range."""
    out = c_uint64()
    check(lib.shard_id_make(uint(shard, "shard"), uint(type, "type"),
                            u64(local, "local id"), byref(out)))
    return out.value


def id_shard(id: int) -> int:
    """The shard part of an ID (meaningful for a valid ID)."""
    return lib.shard_id_shard(u64(id))


def id_type(id: int) -> int:
    """The type part of an ID (meaningful for a valid ID)."""
    return lib.shard_id_type(u64(id))


def id_local(id: int) -> int:
    """The local id part of an ID (meaningful for a valid ID)."""
    return lib.shard_id_local(u64(id))


def id_valid(id: int) -> bool:
    """True when id is a valid ID (any int, even out of 64 bits, is asked)."""
    id = operator.index(id)
    return 0 <= id <= U64 and bool(lib.shard_id_valid(id))


def parse_id(text: Bytesish) -> int:
    """Parse a decimal ID (str or bytes) and check it; Invalid otherwise."""
    out = c_uint64()
    check(lib.shard_id_parse(cstr(text, "ID text"), byref(out)))
    return out.value


def mod_shard(key: Bytesish, nshards: int) -> int:
    """The mod shard of key (bytes, or str as UTF-8) among nshards."""
    raw = data(key, "key")
    out = c_uint32()
    check(lib.shard_mod(raw, len(raw), uint(nshards, "nshards"), byref(out)))
    return out.value


def phase_name(phase: int) -> str:
    """The name of a move phase number ("copying"; "unknown" for others)."""
    return lib.shard_move_phase_name(phase).decode()


# ---- records ----------------------------------------------------------------

class Edge(NamedTuple):
    """One mapping row of a list: the `to` ID and its sequence."""
    to: int
    seq: int


@dataclass
class MoveReport:
    """What shard_move(), shard_move_resume(), shard_move_revert() or
    shard_move_finish() did (shard_move(3), shard_move_revert(3)).
    target_pair_healthy: both replication links of the target pair ran
    without error at the end."""
    move_id: int
    source: str
    target: str
    first: int
    last: int
    phase: int
    phase_name: str
    tables: int
    rows_copied: int
    bytes_copied: int
    copy_seconds: float
    catchup_seconds: float
    cutover_seconds: float
    verify_seconds: float
    pause_ms: float
    fence_attempts: int
    rows_verified: int
    mismatches: int
    map_version: int
    source_dropped: bool
    target_pair_healthy: bool

    @classmethod
    def _from(cls, r: Any) -> "MoveReport":
        return cls(r.move_id, name_of(r.source), name_of(r.target), r.first,
                   r.last, r.phase, phase_name(r.phase), r.tables,
                   r.rows_copied, r.bytes_copied, r.copy_seconds,
                   r.catchup_seconds, r.cutover_seconds, r.verify_seconds,
                   r.pause_ms, r.fence_attempts, r.rows_verified, r.mismatches,
                   r.map_version, bool(r.source_dropped),
                   bool(r.target_pair_healthy))


@dataclass
class FailoverReport:
    """What shard_pair_failover() did. The lags are -1 when unknown."""
    pair: str
    old_master: str
    new_master: str
    old_master_fenced: bool
    lag_transactions: int
    lag_seconds: float
    wait_ms: float
    total_ms: float
    map_version: int

    @classmethod
    def _from(cls, r: Any) -> "FailoverReport":
        return cls(name_of(r.pair), name_of(r.old_master),
                   name_of(r.new_master), bool(r.old_master_fenced),
                   r.lag_transactions, r.lag_seconds, r.wait_ms, r.total_ms,
                   r.map_version)


@dataclass
class ImportReport:
    """What one import pass did (with dry_run=True: would do);
    shard_import_table(3). adopted counts the created objects that an
    interrupted pass had made and this one kept."""
    rows_read: int
    created: int
    changed: int
    deleted: int
    unchanged: int
    adopted: int
    seconds: float

    @property
    def clean(self) -> bool:
        """True when the pass found nothing to do (no new, changed or
        deleted row): the import has caught up."""
        return not (self.created or self.changed or self.deleted)

    @classmethod
    def _from(cls, r: Any) -> "ImportReport":
        return cls(r.rows_read, r.created, r.changed, r.deleted, r.unchanged,
                   r.adopted, r.seconds)


@dataclass
class RebalanceMove:
    """One planned move: ID shards first..last, all on pair from_pair, to
    to_pair (shard_rebalance_plan(3)); drain: it empties a drained pair."""
    first: int
    last: int
    from_pair: str
    to_pair: str
    bytes: int
    writes: float
    drain: bool

    @classmethod
    def _from(cls, m: Any) -> "RebalanceMove":
        return cls(m.first, m.last, name_of(getattr(m, "from")),
                   name_of(m.to), m.bytes, m.writes, bool(m.drain))


@dataclass
class RebalancePair:
    """One pair a rebalance plan considered, before and after the plan."""
    name: str
    drained: bool
    shards_before: int
    shards_after: int
    bytes_before: int
    bytes_after: int
    writes_before: float
    writes_after: float
    load_before: float
    load_after: float

    @classmethod
    def _from(cls, p: Any) -> "RebalancePair":
        return cls(name_of(p.name), bool(p.drained), p.shards_before,
                   p.shards_after, p.bytes_before, p.bytes_after,
                   p.writes_before, p.writes_after, p.load_before,
                   p.load_after)


def optional_report(cls: Any, r: Optional[Any]) -> Optional[Any]:
    return None if r is None else cls._from(r)
