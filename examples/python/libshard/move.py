"""Online shard moves: move, resume, revert, finish, abort, status
(shard_move(3), shard_move_revert(3)); Context has these methods."""

from __future__ import annotations

import json as _json
from collections.abc import Mapping
from ctypes import byref, c_void_p
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from ._lib import (MOVE_DRY_RUN, MOVE_KEEP_SOURCE, MOVE_OPTIONS_VERSION,
                   MOVE_PROGRESS_FN, U64, Callback, CMoveReport, Keep,
                   MoveOptions, check_callable, cstr, invalid, lib,
                   option_uint, take, text, u64, uint)
from .errors import check, last_error
from .values import MoveReport, phase_name

MaxLoad = Union[None, str, bytes, Dict[str, int]]


def max_load_arg(value: Any) -> Optional[bytes]:
    """shard_move_options.max_load: None, "VAR=N[,VAR=N...]" (str or
    bytes; the library checks its syntax before the move starts), or a
    mapping {VAR: N} made into that text."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        parts = []
        for name, limit in value.items():
            if not (isinstance(name, str) and name and name.isascii() and
                    all(c.isalpha() or c == "_" for c in name)):
                raise invalid(f"max_load: {name!r} is not a status variable "
                              "name (letters and _)")
            parts.append(
                f"{name}={option_uint(limit, f'max_load[{name}]', U64)}")
        value = ",".join(parts)
    elif not isinstance(value, (str, bytes, bytearray, memoryview)):
        raise TypeError("max_load must be str, bytes or a dict {VAR: N}, not "
                        f"{type(value).__name__}")
    return cstr(value, "max_load")


def move_options(*, dry_run: bool = False, keep_source: bool = False,
                 copy_threads: int = 4, batch_rows: int = 2000,
                 max_lag_ms: int = 500, fence_timeout_s: int = 2,
                 cutover_attempts: int = 20, catchup_timeout_s: int = 3600,
                 reverse_window_s: int = 0, max_rows_per_second: int = 0,
                 max_load: MaxLoad = None,
                 postpone_cutover_file: Any = None,
                 progress: Optional[Callable[[str, int, int], Any]] = None
                 ) -> Tuple[MoveOptions, Keep]:
    """A shard_move_options (version 2) and what must stay alive with it
    for the call: the callback, the strings. Every value is checked here,
    before any C call: TypeError for a wrong type (a bool where a number
    goes too), Invalid for a number out of range or a NUL byte."""
    o = MoveOptions(version=MOVE_OPTIONS_VERSION)
    o.flags = ((MOVE_DRY_RUN if dry_run else 0) |
               (MOVE_KEEP_SOURCE if keep_source else 0))
    o.copy_threads = option_uint(copy_threads, "copy_threads")
    o.batch_rows = option_uint(batch_rows, "batch_rows")
    o.max_lag_ms = option_uint(max_lag_ms, "max_lag_ms")
    o.fence_timeout_s = option_uint(fence_timeout_s, "fence_timeout_s")
    o.cutover_attempts = option_uint(cutover_attempts, "cutover_attempts")
    o.catchup_timeout_s = option_uint(catchup_timeout_s, "catchup_timeout_s")
    o.reverse_window_s = option_uint(reverse_window_s, "reverse_window_s")
    o.max_rows_per_second = option_uint(max_rows_per_second,
                                        "max_rows_per_second", U64)
    load = max_load_arg(max_load)
    postpone = (None if postpone_cutover_file is None else
                cstr(postpone_cutover_file, "postpone_cutover_file"))
    # The struct points into these bytes objects (ctypes keeps them in
    # o._objects too); Keep holds them, and the callback, explicitly.
    o.max_load = load
    o.postpone_cutover_file = postpone
    cb = None
    check_callable(progress, "progress")
    if progress is not None:
        fn = progress
        cb = Callback(lambda phase, done, total, _p:
                      fn(phase_name(phase), done, total))
        o.progress = MOVE_PROGRESS_FN(cb.call_void)
    return o, Keep(cb, objects=(load, postpone))


def raise_with_report(rc: int, report: CMoveReport) -> None:
    """Raise the error of a failed move call with .report attached."""
    if rc < 0:
        err = last_error(rc)
        err.report = MoveReport._from(report)  # type: ignore[attr-defined]
        raise err


class MoveMixin:
    """The move calls of Context."""

    _handle: Callable[[], int]

    _move_options = staticmethod(move_options)

    def move(self, first: int, last: int, target: str, *,
             dry_run: bool = False, **options: Any) -> Any:
        """Move ID shards first..last to pair `target`, online.

        With dry_run=True nothing changes and the plan text is returned;
        otherwise a MoveReport. options (shard_move(3), with
        SHARD_MOVE_OPTIONS_INIT's defaults): keep_source, copy_threads,
        batch_rows, max_lag_ms, fence_timeout_s, cutover_attempts,
        catchup_timeout_s; reverse_window_s (seconds: keep the source in
        sync from the target after the flip, the move ending in phase
        "reversible" for move_revert() or move_finish(); 0: none);
        max_rows_per_second (copy throttle, 0: none); max_load
        ("VAR=N[,VAR=N...]" or a dict {"Threads_running": 50}: the copy
        pauses while a source status variable is above N; None: none);
        postpone_cutover_file (a path: once caught up, the move waits while
        it exists); progress=callable(phase_name, done, total). A bad value
        raises TypeError or Invalid before anything happens. A failed move
        raises with .report (how far it got).
        """
        h = self._handle()
        o, keep = move_options(dry_run=dry_run, **options)
        report = CMoveReport()
        plan = c_void_p()
        rc = lib.shard_move(h, uint(first, "first shard"),
                            uint(last, "last shard"), cstr(target, "pair"),
                            byref(o), byref(report),
                            byref(plan) if dry_run else None)
        plan_text = take(plan.value) if plan.value else None
        keep.reraise()
        raise_with_report(rc, report)
        if dry_run:
            return text(plan_text or b"")
        return MoveReport._from(report)

    def _move_id_call(self, fn: Any, move_id: int,
                      options: Dict[str, Any]) -> MoveReport:
        """shard_move_resume, _revert or _finish: (ctx, id, opts, report)."""
        if "dry_run" in options:
            raise TypeError("dry_run is an option of move() only")
        h = self._handle()
        o, keep = move_options(**options)
        report = CMoveReport()
        rc = fn(h, u64(move_id, "move id"), byref(o), byref(report))
        keep.reraise()
        raise_with_report(rc, report)
        return MoveReport._from(report)

    def move_resume(self, move_id: int = 0, **options: Any) -> MoveReport:
        """Resume an unfinished move (0: the only one); a MoveReport.
        options as for move(). A reversible move's resume restarts its
        reverse stream and returns with it still "reversible" while its
        window lasts; after the window it finishes it (move_finish())."""
        return self._move_id_call(lib.shard_move_resume, move_id, options)

    def move_revert(self, move_id: int = 0, **options: Any) -> MoveReport:
        """Revert a move in phase "reversible" (0: the only one): a cut-over
        back to its source, verification, the target's copies dropped
        (kept with keep_source=True); shard_move_revert(3). A MoveReport of
        the revert: its source and target are the revert's (the move's
        target and source), its phase "reverted" on success. Busy while the
        reverse stream is broken (nothing changes then); NotFound when no
        such move is reversible. options as for move(); the ones that count
        are max_lag_ms, fence_timeout_s, cutover_attempts, copy_threads
        (verification), keep_source and progress. A failed revert raises
        with .report; move_resume() completes an interrupted one."""
        return self._move_id_call(lib.shard_move_revert, move_id, options)

    def move_finish(self, move_id: int = 0, **options: Any) -> MoveReport:
        """End the reverse window of a move in phase "reversible" now (0:
        the only one): stop its reverse stream and drop the source's copies
        (shard_move_revert(3)); a MoveReport, phase "done" on success.
        NotFound when no such move is reversible. options as for move()
        (progress is the one that counts). A failure raises with .report."""
        return self._move_id_call(lib.shard_move_finish, move_id, options)

    def move_abort(self, move_id: int = 0) -> None:
        """Abort an unfinished move before its map flip (Busy after it)."""
        check(lib.shard_move_abort(self._handle(), u64(move_id, "move id")))

    def move_status(self, *, raise_errors: bool = True) -> List[Dict[str, Any]]:
        """Every journaled move: a list of dicts (shard_move_status's lines:
        id, phase, source, target, first, last, ...). A master that cannot
        be asked raises Partial with .results (the lines, that master's
        {"pair": ..., "error": ...} among them); with raise_errors=False
        those lines are returned instead."""
        out = c_void_p()
        rc = lib.shard_move_status(self._handle(), byref(out))
        err = last_error(rc) if rc < 0 else None
        lines = [_json.loads(line) for line in
                 text(take(out.value)).splitlines() if line]
        if err is not None:
            from .errors import Partial
            if not isinstance(err, Partial):
                raise err
            if raise_errors:
                err.results = list(lines)
                raise err
        return lines
