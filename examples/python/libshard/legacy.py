"""Coming from an unsharded database: legacy ids and import passes
(libshard-import(7), shard_legacy_resolve(3), shard_import_table(3));
Context has these methods."""

from __future__ import annotations

from ctypes import byref, c_uint64
from typing import Any, Callable, Iterable, List, Optional, Tuple, Union

from ._lib import (IMPORT_DRY_RUN, IMPORT_OPTIONS_VERSION, Callback,
                   CImportReport, ImportOptions, Keep, cstr, invalid, lib,
                   opt_cstr,
                   option_uint, progress_callback, u64)
from .errors import NotFound, check, last_error
from .values import RAISE, ImportReport, TypeArg

Progress = Optional[Callable[[str, int, int], Any]]


def _near_arg(near: Any) -> Tuple[Any, TypeArg]:
    """(column, type) from ("board_id", "boards") or "board_id:boards"."""
    if isinstance(near, str):
        column, sep, kind = near.partition(":")
        if not (sep and column and kind):
            raise invalid(f"near {near!r}: COLUMN:TYPE or (COLUMN, TYPE)")
        return column, kind
    if not (isinstance(near, tuple) and len(near) == 2):
        raise TypeError("near must be (COLUMN, TYPE) or \"COLUMN:TYPE\", not "
                        f"{type(near).__name__}")
    return near[0], near[1]


class LegacyMixin:
    """The legacy-id and import calls of Context."""

    _handle: Callable[[], int]
    _type: Callable[[TypeArg], int]

    def legacy_resolve(self, type: TypeArg, legacy_id: int, *,
                       default: Any = RAISE) -> Any:
        """The native ID of the object an import made of legacy row
        `legacy_id` of `type` (from the type's lookup table); a valid
        native ID of `type` comes back unchanged. Not imported: `default`
        when given, else NotFound (the missing-key rule of
        libshard.context). Answers are cached in the context."""
        t = self._type(type)
        out = c_uint64()
        rc = lib.shard_legacy_resolve(self._handle(), t,
                                      u64(legacy_id, "legacy id"), byref(out))
        if rc == NotFound.code and default is not RAISE:
            return default
        check(rc)
        return out.value

    def legacy_resolve_many(self, type: TypeArg, legacy_ids: Iterable[int],
                            *, default: Any = None) -> List[Any]:
        """legacy_resolve() for many ids at once (one statement per server,
        cached ids not asked): a list in the order of legacy_ids, `default`
        (None unless given) for a row not imported."""
        t = self._type(type)
        ids = [u64(i, "legacy id") for i in legacy_ids]
        arr = (c_uint64 * len(ids))(*ids)
        out = (c_uint64 * len(ids))()
        check(lib.shard_legacy_resolve_many(self._handle(), t, arr, len(ids),
                                            out))
        return [v if v else default for v in out]

    def _import(self, fn: Any, o: ImportOptions, keep: Keep) -> ImportReport:
        r = CImportReport()
        rc = fn(self._handle(), byref(o), byref(r))
        err = last_error(rc) if rc < 0 else None
        keep.reraise()
        if err is not None:
            err.report = ImportReport._from(r)  # type: ignore[attr-defined]
            raise err
        return ImportReport._from(r)

    @staticmethod
    def _import_options(source: Any, table: Any, password_env: Any,
                        threads: int, batch_rows: int, dry_run: bool,
                        progress: Progress
                        ) -> Tuple[ImportOptions, Optional[Callback],
                                   List[Optional[bytes]]]:
        """The fields both passes read (SHARD_IMPORT_OPTIONS_INIT's
        defaults otherwise), the progress callback, and the strings the
        struct points into (to keep alive for the call)."""
        o = ImportOptions(version=IMPORT_OPTIONS_VERSION)
        o.flags = IMPORT_DRY_RUN if dry_run else 0
        strings = [cstr(source, "source"),
                   opt_cstr(password_env, "password_env"),
                   cstr(table, "table")]
        o.source, o.password_env, o.table = strings
        o.threads = option_uint(threads, "threads")
        o.batch_rows = option_uint(batch_rows, "batch_rows")
        o.progress, cb = progress_callback(progress)
        return o, cb, strings

    def import_table(self, source: str, table: str, type: TypeArg, *,
                     id_column: Optional[str] = None,
                     json_column: Optional[str] = None,
                     near: Union[None, str, Tuple[str, TypeArg]] = None,
                     password_env: Optional[str] = None, threads: int = 4,
                     batch_rows: int = 0, dry_run: bool = False,
                     progress: Progress = None) -> ImportReport:
        """One import pass of legacy table `table` of `source`
        ("mysql://USER@HOST[:PORT]/DB", never a password: it comes from
        $password_env, by default the map's credentials.password_env) into
        objects of `type` (shard_import_table(3)). New rows become objects,
        changed rows are rewritten, objects of rows that are gone are
        soft-deleted; nothing is ever duplicated. id_column: the integer
        primary key (None: "id"); json_column: a column whose JSON object
        is the object (None: every column is a field); near=(COLUMN, TYPE)
        or "COLUMN:TYPE" (shardctl's --near): each object joins the shard
        of the parent of TYPE whose legacy id the column holds. Run passes until report.clean. An ImportReport;
        a failed pass raises with .report."""
        o, cb, strings = self._import_options(source, table, password_env,
                                              threads, batch_rows, dry_run,
                                              progress)
        o.type = self._type(type)
        strings += [opt_cstr(id_column, "id_column"),
                    opt_cstr(json_column, "json_column")]
        o.id_column, o.json_column = strings[-2:]
        if near is not None:
            column, near_type = _near_arg(near)
            strings.append(cstr(column, "near column"))
            o.near_column, o.near_type = strings[-1], self._type(near_type)
        return self._import(lib.shard_import_table, o,
                            Keep(cb, objects=strings))

    def import_mapping(self, source: str, table: str, mapping: str, *,
                       from_column: str, from_type: TypeArg, to_column: str,
                       to_type: TypeArg, seq_column: Optional[str] = None,
                       password_env: Optional[str] = None, threads: int = 4,
                       batch_rows: int = 0, dry_run: bool = False,
                       progress: Progress = None) -> ImportReport:
        """One import pass of legacy join table `table` into rows of
        `mapping` (and its reverse), both ends translated through their
        lookups (shard_import_mapping(3)): from_column holds legacy ids of
        from_type, to_column of to_type; seq_column (an integer or a date
        and time; None: the to side's legacy id) the sequence. source,
        password_env and the rest as for import_table(). An ImportReport."""
        o, cb, strings = self._import_options(source, table, password_env,
                                              threads, batch_rows, dry_run,
                                              progress)
        strings += [cstr(mapping, "mapping"), cstr(from_column, "from_column"),
                    cstr(to_column, "to_column"),
                    opt_cstr(seq_column, "seq_column")]
        o.mapping, o.from_column, o.to_column, o.seq_column = strings[-4:]
        o.from_type, o.to_type = self._type(from_type), self._type(to_type)
        return self._import(lib.shard_import_mapping, o,
                            Keep(cb, objects=strings))
