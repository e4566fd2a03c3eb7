"""The fleet: status, topology, failover and rebalancing
(shard_fleet_status(3), shard_pair_add(3), shard_shards_open(3),
shard_schema_check(3), shard_pair_failover(3), shard_pair_failover_opts(3),
shard_rebalance_plan(3));
Context has these methods."""

from __future__ import annotations

import json as _json
from ctypes import byref, c_double, c_size_t, c_uint64, c_void_p, pointer
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from ._lib import (FAILOVER_FORCE, FAILOVER_OPTIONS_VERSION, REBALANCE_FN,
                   REBALANCE_OPTIONS_VERSION, Callback, CFailoverReport,
                   FailoverOptions, RebalanceOptions,
                   check_callable, cstr, invalid, lib, names_list, opt_cstr,
                   out_ptr,
                   option_uint, progress_callback, take, text, uint)
from .errors import ShardError, check, last_error
from .map import Handle, Map
from .values import (REBALANCE_BY_BYTES, REBALANCE_BY_WRITES, FailoverReport,
                    MoveReport, RebalanceMove, RebalancePair)

_BY = {"bytes": REBALANCE_BY_BYTES, "writes": REBALANCE_BY_WRITES,
       REBALANCE_BY_BYTES: REBALANCE_BY_BYTES,
       REBALANCE_BY_WRITES: REBALANCE_BY_WRITES}


class RebalancePlan(Handle):
    """A rebalance plan (Context.rebalance_plan()): the moves, in the order
    they run, and every considered pair's load before and after. Iterating
    it gives the moves; len() is their number. Run it with
    Context.rebalance_run(plan); close() frees it (a context manager)."""

    _free = "shard_rebalance_free"

    def __init__(self, _ptr: int):
        """Own a shard_rebalance pointer (Context.rebalance_plan makes it)."""
        self._own(_ptr)

    @property
    def moves(self) -> List[RebalanceMove]:
        """The planned moves, in the order they run."""
        n = c_size_t()
        arr = lib.shard_rebalance_moves(self._handle(), byref(n))
        return [RebalanceMove._from(arr[i]) for i in range(n.value)]

    @property
    def pairs(self) -> List[RebalancePair]:
        """The pairs the plan considered, in map order."""
        n = c_size_t()
        arr = lib.shard_rebalance_pairs(self._handle(), byref(n))
        return [RebalancePair._from(arr[i]) for i in range(n.value)]

    @property
    def spread(self) -> Tuple[float, float]:
        """(before, after): (max - min) / mean of the loads of the pairs
        that keep shards; 0 when there is no load."""
        before, after = c_double(), c_double()
        lib.shard_rebalance_spread(self._handle(), byref(before),
                                   byref(after))
        return before.value, after.value

    @property
    def map_version(self) -> int:
        """The map version the plan was made on."""
        return lib.shard_rebalance_map_version(self._handle())

    def __iter__(self) -> Iterator[RebalanceMove]:
        return iter(self.moves)

    def __len__(self) -> int:
        n = c_size_t()
        lib.shard_rebalance_moves(self._handle(), byref(n))
        return n.value

    def __repr__(self) -> str:
        if self.closed:
            return "<libshard.RebalancePlan (closed)>"
        return (f"<libshard.RebalancePlan of {len(self)} move(s) on map "
                f"version {self.map_version}>")


def _rebalance_options(by: Any = "bytes", threshold: float = 0.10,
                       max_moves: int = 0, pairs: Any = None,
                       drain: Any = None, sample_ms: int = 5000
                       ) -> Tuple[RebalanceOptions, Tuple[Any, ...]]:
    o = RebalanceOptions(version=REBALANCE_OPTIONS_VERSION)
    if isinstance(by, bool) or by not in _BY:
        raise invalid(f"by {by!r}: \"bytes\" or \"writes\"")
    o.by = _BY[by]
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise TypeError("threshold must be a number, not "
                        f"{type(threshold).__name__}")
    if not 0 < threshold < 1e6:
        raise invalid(f"threshold {threshold} must be positive")
    o.threshold = float(threshold)
    o.max_moves = option_uint(max_moves, "max_moves")
    p, d = names_list(pairs, "pairs"), names_list(drain, "drain")
    o.pairs, o.drain = p, d
    o.sample_ms = option_uint(sample_ms, "sample_ms")
    return o, (p, d)


class FleetMixin:
    """The fleet calls of Context."""

    _handle: Callable[[], int]

    def fleet_status(self) -> Dict[str, Any]:
        """Ask every server of every pair at once and describe the fleet
        (shard_fleet_status(3) lists the fields): per server whether it
        answers, read_only, replication links and lag, shard databases and
        bytes; the map version, unfinished moves, "problems" (one line per
        thing wrong) and "healthy". A server that does not answer is
        reported, not raised. A dict."""
        out = c_void_p()
        check(lib.shard_fleet_status(self._handle(), byref(out)))
        return _json.loads(text(take(out.value)))

    def schema_check(self, map: Optional[Map] = None) -> None:
        """Check that every open ID shard and every mod shard of `map`
        (None: the context's) has its database and tables on its pair's
        master; MapError naming the first that lacks them."""
        check(lib.shard_schema_check(self._handle(),
                                     map._handle() if map is not None
                                     else None))

    def pair_add(self, name: str, master: str, standby: str) -> int:
        """Add pair `name` (master and standby addresses as in the map) to
        the stored map after checking both servers (shard_pair_add(3));
        the version published. It serves nothing until shards are opened
        or moved there. Exists when the map has the name already."""
        v = c_uint64()
        check(lib.shard_pair_add(self._handle(), cstr(name, "pair"),
                                 cstr(master, "master"),
                                 cstr(standby, "standby"), byref(v)))
        return v.value

    def pair_remove(self, name: str) -> int:
        """Remove a pair that serves nothing (no shard range, no unfinished
        move) from the stored map; the version published."""
        v = c_uint64()
        check(lib.shard_pair_remove(self._handle(), cstr(name, "pair"),
                                    byref(v)))
        return v.value

    def shards_open(self, n: int, pair: Optional[str] = None, *,
                    progress: Optional[Callable[[str, int, int], Any]] = None
                    ) -> int:
        """Open ID shards [open_shards, n): create their databases and
        tables, check them, then publish the map with open_shards = n
        (shard_shards_open(3)). Shards no range covers go to `pair` (a new
        range), or with None extend the last range. progress as for
        schema_apply(). The version published."""
        fn, cb = progress_callback(progress)
        v = c_uint64()
        rc = lib.shard_shards_open(self._handle(), uint(n, "n"),
                                   opt_cstr(pair, "pair"), fn, None, byref(v))
        if cb is not None:
            cb.reraise()
        check(rc)
        return v.value

    def failover(self, pair: str, *, force: bool = False,
                 wait_ms: Optional[int] = None) -> FailoverReport:
        """Promote the standby of `pair`; a FailoverReport. Without force an
        unreachable master is ConnectionError; with it, unsent writes are
        lost. wait_ms bounds the standby's wait to apply what it has
        (default 30000; shard_pair_failover_opts(3)): a standby that takes
        longer is Timeout, and the master stays in charge. A failed
        failover raises with .report."""
        r = CFailoverReport()
        flags = FAILOVER_FORCE if force else 0
        if wait_ms is None:
            rc = lib.shard_pair_failover(self._handle(), cstr(pair, "pair"),
                                         flags, byref(r))
        else:
            o = FailoverOptions(FAILOVER_OPTIONS_VERSION, flags,
                                uint(wait_ms, "wait_ms"))
            rc = lib.shard_pair_failover_opts(self._handle(), cstr(pair, "pair"),
                                              byref(o), byref(r))
        if rc < 0:
            err = last_error(rc)
            err.report = FailoverReport._from(r)  # type: ignore[attr-defined]
            raise err
        return FailoverReport._from(r)

    def rebalance_plan(self, *, by: Any = "bytes", threshold: float = 0.10,
                       max_moves: int = 0, pairs: Any = None,
                       drain: Any = None, sample_ms: int = 5000
                       ) -> RebalancePlan:
        """Measure the considered pairs and plan the moves that bring each
        within `threshold` of the mean load (shard_rebalance_plan(3));
        nothing changes. by: "bytes" (the databases' size) or "writes"
        (rows changed per second over sample_ms, needs userstat); pairs:
        the only pairs to move between (names, or "P1,P2"; None: all);
        drain: pairs to empty; max_moves: at most that many (0: no limit).
        A RebalancePlan (a balanced fleet gives one of 0 moves)."""
        o, keep = _rebalance_options(by, threshold, max_moves, pairs, drain,
                                     sample_ms)
        out = c_void_p()
        check(lib.shard_rebalance_plan(self._handle(), byref(o), byref(out)))
        del keep
        return RebalancePlan(out_ptr(out))

    def rebalance_run(self, plan: RebalancePlan, *,
                      step: Optional[Callable[..., Any]] = None,
                      **move_options: Any) -> int:
        """Run the plan's moves one after another, each a shard_move() with
        move_options (as for move(), but dry_run); the number of moves that
        completed. step(move, index, count, rc, report) is called before
        each move (rc 0, report None) and after it (its code and
        MoveReport); a truthy return starts no further move. Conflict when
        the map is no longer the plan's; the first failed move raises its
        error with .done (moves completed) and .report."""
        from .move import move_options as make_move_options
        if "dry_run" in move_options:
            raise TypeError("dry_run is an option of move() only")
        check_callable(step, "step")
        mo, mkeep = make_move_options(**move_options)
        o, _ = _rebalance_options()
        o.move = pointer(mo)
        last: List[Optional[MoveReport]] = [None]
        cb = None
        if step is not None:
            fn = step

            def call(move: Any, index: int, count: int, rc: int, rep: Any,
                     _p: Any) -> int:
                report = MoveReport._from(rep.contents) if rep else None
                if report is not None:
                    last[0] = report
                return 1 if fn(RebalanceMove._from(move.contents), index,
                               count, rc, report) else 0
            cb = Callback(call)
            o.step = REBALANCE_FN(cb.call)
        done = c_size_t()
        rc = lib.shard_rebalance_run(self._handle(), plan._handle(), byref(o),
                                     byref(done))
        err: Optional[ShardError] = last_error(rc) if rc < 0 else None
        mkeep.reraise()
        if cb is not None:
            cb.reraise()
        if err is not None:
            err.done = done.value  # type: ignore[attr-defined]
            err.report = last[0]  # type: ignore[attr-defined]
            raise err
        return done.value
