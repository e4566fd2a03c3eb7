"""Contexts and transactions: objects, mappings, key-value, scatter.

Missing keys, one rule for every lookup (get, mget, kv_get,
Transaction.get, legacy_resolve, legacy_resolve_many): what is absent is
the call's `default` when one is given, and NotFound (a LookupError)
when none is. The calls that answer many keys at once (mget,
legacy_resolve_many) have default=None, so one absent key never costs the
others' answers: an absent one is None in the list, as it always was for
mget.

JSON: objects go in as a dict (or list), str or bytes, and come out as
str, or as dicts with decode=True (per call, or for every call of a
context with Context(..., decode=True)).
"""

from __future__ import annotations

import ctypes
import json as _json
import queue
import threading
import weakref
from ctypes import POINTER, byref, c_size_t, c_uint64, c_void_p
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional,
                    Tuple, Union)

from ._lib import (DELETE_HARD, LOG_FN, OPTIONS_VERSION, SCAN_FN, UPDATE_FN,
                   Bytesish, out_ptr,
                   CEdge, Callback, Item, Options, check_callable, cstr, data,
                   i64, json_arg, lib, progress_callback, take, text, to_int,
                   u64, uint)
from .errors import (InternalError, Invalid, NotFound, Partial, ShardError,
                     check, last_error, make_error, strerror)
from .fleet import FleetMixin
from .legacy import LegacyMixin
from .map import Handle, Map, _release
from .move import MoveMixin
from .values import (ANY, LOG_WARN, RAISE, SEQ_NONE, SEQ_NOW, Edge, TypeArg,
                    id_shard, id_valid)

#: A JSON value as the calls accept it: a dict or list, or JSON text.
JSONArg = Union[Dict[str, Any], List[Any], str, bytes]
#: A JSON object as the calls return it: text, or a dict with decode=True.
JSONOut = Union[str, Any]


def _shard_arg(shard: int, near: Optional[int]) -> int:
    """create()'s shard: `shard`, or the shard of ID `near`."""
    if near is None:
        return uint(shard, "shard")
    if not id_valid(near):
        raise Invalid(f"invalid ID {near}")
    return id_shard(near)


def _decoded(raw: bytes, decode: bool) -> JSONOut:
    s = raw.decode("utf-8")
    return _json.loads(s) if decode else s


class Context(MoveMixin, FleetMixin, LegacyMixin, Handle):
    """A libshard context: the map, the connection pools, the refresh thread.

    Context(location, **options) opens the map store at `location` (a map
    file path) with shard_options built like SHARD_OPTIONS_INIT: keyword
    arguments override its defaults (connect_timeout_ms=3000,
    read_timeout_ms=10000, write_timeout_ms=10000, pool_size=16,
    retry_budget_ms=5000, retry_max=20, refresh_interval_ms=30000,
    log_level=LOG_WARN, log=None, user=None, password_env=None). log is a
    callable(level, message: str); user and password_env name another
    account than the map's (the password is read from that variable).
    decode=True makes get, mget, patch, scatter_iter and Transaction.get
    return dicts instead of JSON text (each call may still say decode=).

    Object types may be given as numbers or as names from the map; an
    unknown name raises Invalid (a ValueError), as does any bad argument.
    A missing object or key raises NotFound unless the call is given a
    default (the rule is in the libshard.context module's docstring).
    """

    _free = "shard_ctx_free"
    _warn = True
    DEFAULTS = dict(connect_timeout_ms=3000, read_timeout_ms=10000,
                    write_timeout_ms=10000, pool_size=16, retry_budget_ms=5000,
                    retry_max=20, refresh_interval_ms=30000, log_level=LOG_WARN)

    def __init__(self, location: Any, *,
                 log: Optional[Callable[[int, str], Any]] = None,
                 user: Optional[str] = None,
                 password_env: Optional[str] = None,
                 decode: bool = False, **options: int):
        """Open the context (shard_ctx_open(3)); see the class docstring."""
        unknown = set(options) - set(self.DEFAULTS)
        if unknown:
            raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
        opts = Options(version=OPTIONS_VERSION)
        for name, default in self.DEFAULTS.items():
            value = options.get(name, default)
            if name == "log_level":
                value = to_int(value, -(1 << 31), (1 << 31) - 1, name)
            else:
                value = uint(value, name)
            setattr(opts, name, value)
        self.decode = bool(decode)
        self._log = None
        if log is not None:
            if not callable(log):
                raise TypeError("log must be callable")
            # Kept alive as long as the C context (the finalizer holds it).
            fn = log
            self._log = LOG_FN(
                lambda level, msg, _p: fn(level, msg.decode("utf-8", "replace")))
            opts.log = self._log
        # Copied by shard_ctx_open: they need to live only during the call.
        if user is not None:
            opts.user = cstr(user, "user")
        if password_env is not None:
            opts.password_env = cstr(password_env, "password_env")
        out = c_void_p()
        check(lib.shard_ctx_open(byref(out), cstr(location, "location"),
                                 byref(opts)))
        self._txns: "weakref.WeakSet[Transaction]" = weakref.WeakSet()
        self._scans: "weakref.WeakSet[Iterator[Any]]" = weakref.WeakSet()
        self._own(out_ptr(out), self._log)

    def close(self) -> None:
        """Roll back open transactions, stop unfinished scatter_iter()
        scans, close every connection, free."""
        for txn in list(getattr(self, "_txns", ())):
            txn.rollback()
        for scan in list(getattr(self, "_scans", ())):
            try:
                scan.close()  # type: ignore[attr-defined]
            except ValueError:  # running in another thread: its business
                pass
        super().close()

    # ---- helpers -------------------------------------------------------
    def _decode(self, decode: Optional[bool]) -> bool:
        return self.decode if decode is None else bool(decode)

    def _type(self, type: TypeArg) -> int:
        """A type number from a number or a name of the map's objects;
        Invalid for a name the map lacks."""
        if isinstance(type, (str, bytes)):
            with self.map() as m:
                try:
                    return m.type_of(type)
                except NotFound:
                    names = ", ".join(sorted(m.to_dict().get("objects", {})))
                    raise Invalid(f"unknown object type {type!r}: the map's "
                                  f"objects are {names or 'none'}") from None
        if isinstance(type, bool):
            raise TypeError("type must be an int or a name, not bool")
        return uint(type, "type")

    # ---- map ---------------------------------------------------------
    def reload(self) -> None:
        """Read the map store now; switch to its map if its version is newer."""
        check(lib.shard_ctx_reload(self._handle()))

    def map(self) -> Map:
        """The current map snapshot (a Map of its own: close it)."""
        out = c_void_p()
        check(lib.shard_ctx_map(self._handle(), byref(out)))
        return Map(out_ptr(out))

    def stats(self) -> str:
        """The context's counters (calls, errors and durations per call,
        retries, fence waits, map reads, pool gauges) as Prometheus text,
        exposition format 0.0.4 (str): serve it as it is, with Content-Type
        "text/plain; version=0.0.4". See shard_ctx_stats(3)."""
        out = c_void_p()
        check(lib.shard_ctx_stats(self._handle(), byref(out)))
        return text(take(out.value))

    def schema_apply(self, progress: Optional[Callable[[str, int, int], Any]]
                     = None) -> None:
        """Create every shard database and table, idempotently.
        progress: callable(what: str, done: int, total: int) or None."""
        h = self._handle()
        fn, cb = progress_callback(progress)
        rc = lib.shard_schema_apply(h, fn, None)
        if cb is not None:
            cb.reraise()
        check(rc)

    # ---- objects -----------------------------------------------------
    def create(self, type: TypeArg, json: JSONArg, shard: int = ANY, *,
               near: Optional[int] = None) -> int:
        """Create an object (JSON object text or a dict); return its ID.
        shard: a shard number or ANY; near=ID: on the same shard as ID."""
        h = self._handle()
        t = self._type(type)
        s = _shard_arg(shard, near)
        raw = json_arg(json)
        out = c_uint64()
        check(lib.shard_object_create(h, t, s, raw, len(raw), byref(out)))
        return out.value

    def get(self, id: int, *, decode: Optional[bool] = None,
            default: Any = RAISE) -> Any:
        """The object's JSON text (a dict with decode=True). Absent or
        soft-deleted: `default` when given, else NotFound."""
        out, n = c_void_p(), c_size_t()
        rc = lib.shard_object_get(self._handle(), u64(id), byref(out),
                                  byref(n))
        if rc == NotFound.code and default is not RAISE:
            return default
        check(rc)
        return _decoded(take(out.value, n.value), self._decode(decode))

    def patch(self, id: int, patch: JSONArg, *,
              decode: Optional[bool] = None) -> Any:
        """Apply an RFC 7386 merge patch in one transaction; the new JSON
        (a dict with decode=True). NotFound when the object is absent."""
        raw = json_arg(patch, "patch")
        out, n = c_void_p(), c_size_t()
        check(lib.shard_object_patch(self._handle(), u64(id), raw, len(raw),
                                     byref(out), byref(n)))
        return _decoded(take(out.value, n.value), self._decode(decode))

    def delete(self, id: int, *, hard: bool = False) -> None:
        """Soft-delete ("active": false) or, with hard=True, remove the row.
        NotFound when there is nothing to delete."""
        check(lib.shard_object_delete(self._handle(), u64(id),
                                      DELETE_HARD if hard else 0))

    def mget(self, ids: Iterable[int], *, decode: Optional[bool] = None,
             default: Any = None, raise_errors: bool = False) -> List[Any]:
        """Get many objects at once (one statement per server); a list in
        the order of ids.

        Each element is the JSON text (a dict with decode=True), `default`
        (None unless given) when not found, or, for an element that failed
        otherwise (an invalid ID, an unreachable server), a ShardError
        instance. With raise_errors=True such a failure raises Partial
        instead, carrying .results and .errors.
        """
        h = self._handle()
        dec = self._decode(decode)
        idl = [u64(i) for i in ids]
        arr = (c_uint64 * len(idl))(*idl)
        items = POINTER(Item)()
        rc = lib.shard_object_mget(h, arr, len(idl), byref(items))
        err = last_error(rc) if rc < 0 else None
        if not items:
            raise err if err else InternalError("mget returned no items")
        results: List[Any] = []
        errors: Dict[int, ShardError] = {}
        try:
            for i in range(len(idl)):
                it = items[i]
                if it.status == 0:
                    results.append(_decoded(ctypes.string_at(it.data, it.len),
                                            dec))
                elif it.status == NotFound.code:
                    results.append(default)
                else:
                    e = make_error(it.status,
                                   f"ID {idl[i]}: {strerror(it.status)}")
                    errors[i] = e
                    results.append(e)
        finally:
            lib.shard_items_free(items, len(idl))
        if err is not None and not isinstance(err, Partial):
            raise err
        if errors and raise_errors:
            perr = err if isinstance(err, Partial) else \
                Partial("some elements failed")
            perr.results, perr.errors = results, errors
            raise perr
        return results

    # ---- the jansson conveniences ------------------------------------
    def create_json(self, type: TypeArg, obj: Dict[str, Any],
                    shard: int = ANY, *, near: Optional[int] = None) -> int:
        """create() through shard_object_create_json(3): obj (a dict) is
        handed to C as a jansson value. The same result as create()."""
        from . import _jansson
        h = self._handle()
        t = self._type(type)
        if not isinstance(obj, dict):
            raise TypeError(f"obj must be a dict, not {obj.__class__.__name__}")
        s = _shard_arg(shard, near)
        ptr = _jansson.load(json_arg(obj))
        out = c_uint64()
        try:
            rc = lib.shard_object_create_json(h, t, s, ptr, byref(out))
        finally:
            _jansson.decref(ptr)
        check(rc)
        return out.value

    def get_json(self, id: int, *, default: Any = RAISE) -> Any:
        """get(id, decode=True) through shard_object_get_json(3): the
        object as a dict. Absent: `default` when given, else NotFound."""
        from . import _jansson
        out = c_void_p()
        rc = lib.shard_object_get_json(self._handle(), u64(id), byref(out))
        if rc == NotFound.code and default is not RAISE:
            return default
        check(rc)
        ptr = out_ptr(out)
        try:
            return _jansson.dump(ptr)
        finally:
            _jansson.decref(ptr)

    def update(self, id: int,
               fn: Callable[[Dict[str, Any]], Optional[Dict[str, Any]]]
               ) -> Dict[str, Any]:
        """Read-modify-write in one transaction (SELECT ... FOR UPDATE;
        shard_object_update(3)): fn(obj) gets the object as a dict and
        changes it in place (returning None) or returns the new dict; the
        result is written and returned. An exception in fn aborts: nothing
        is written and it propagates. NotFound when the object is absent.
        fn runs while the row is locked: keep it short, and do not call
        libshard from it."""
        from . import _jansson
        check_callable(fn, "fn")
        result: List[Any] = []

        def call(ptr: int, _p: Any) -> int:
            obj = _jansson.dump(ptr)
            new = fn(obj)
            if new is None:
                new = obj
            elif not isinstance(new, dict):
                raise TypeError("update's fn must return None or a dict, not "
                                f"{new.__class__.__name__}")
            _jansson.replace(ptr, new)
            result.append(new)
            return 0

        cb = Callback(call)
        rc = lib.shard_object_update(self._handle(), u64(id),
                                     UPDATE_FN(cb.call), None)
        cb.reraise()
        check(rc)
        return result[-1]

    # ---- mappings ----------------------------------------------------
    def mapping_add(self, name: str, from_id: int, to_id: int,
                    seq: int = SEQ_NOW) -> None:
        """Add (or re-sequence) a row, and its reverse if the map has one.
        seq defaults to the current time in microseconds."""
        check(lib.shard_mapping_add(self._handle(), cstr(name, "mapping"),
                                    u64(from_id), u64(to_id),
                                    i64(seq, "sequence")))

    def mapping_remove(self, name: str, from_id: int, to_id: int) -> None:
        """Remove a row (and its reverse); NotFound when absent."""
        check(lib.shard_mapping_remove(self._handle(), cstr(name, "mapping"),
                                       u64(from_id), u64(to_id)))

    def mapping_list(self, name: str, from_id: int, *, limit: int = 0,
                     before: int = SEQ_NONE) -> List[Edge]:
        """Rows of from_id, newest first: a list of Edge(to, seq). limit 0:
        every row; before: only sequences strictly below it. For long
        lists, mapping_iter() pages through them."""
        edges, n = POINTER(CEdge)(), c_size_t()
        check(lib.shard_mapping_list(
            self._handle(), cstr(name, "mapping"), u64(from_id),
            i64(before, "before"), to_int(limit, 0, (1 << 64) - 1, "limit"),
            byref(edges), byref(n)))
        try:
            return [Edge(edges[i].to, edges[i].seq) for i in range(n.value)]
        finally:
            lib.shard_free(edges)

    def mapping_iter(self, name: str, from_id: int, *,
                     before: int = SEQ_NONE, page: int = 100
                     ) -> Iterator[Edge]:
        """Every row of from_id, newest first, as a generator of Edge that
        reads `page` rows per call with the sequence as cursor (each page
        one shard_mapping_list()). Rows that share a sequence are never
        skipped or repeated at a page boundary. Rows added or removed while
        it runs may or may not be seen."""
        cstr(name, "mapping")
        u64(from_id)
        i64(before, "before")
        page = to_int(page, 1, 1 << 20, "page")
        return self._mapping_pages(name, from_id, before, page)

    def _mapping_pages(self, name: str, from_id: int, cursor: int,
                       page: int) -> Iterator[Edge]:
        seen: Optional[Edge] = None  # the last row given (of its sequence)
        limit = page
        while True:
            edges = self.mapping_list(name, from_id, limit=limit,
                                      before=cursor)
            # Asked again from seen.seq inclusive: skip what was given
            # (ties come highest `to` first).
            fresh = [e for e in edges if seen is None or e.seq != seen.seq
                     or e.to < seen.to]
            yield from fresh
            if len(edges) < limit:
                return
            if not fresh:  # a full page of one sequence already given
                limit *= 2
                continue
            seen, limit = fresh[-1], page
            cursor = seen.seq + 1 if seen.seq < SEQ_NONE else SEQ_NONE

    def mapping_count(self, name: str, from_id: int) -> int:
        """The number of rows of from_id."""
        out = c_uint64()
        check(lib.shard_mapping_count(self._handle(), cstr(name, "mapping"),
                                      u64(from_id), byref(out)))
        return out.value

    # ---- key-value ---------------------------------------------------
    def _kv(self, fn: Any, table: str, key: Bytesish, *rest: Any) -> int:
        raw = data(key, "key")
        return fn(self._handle(), cstr(table, "table"), raw, len(raw), *rest)

    def kv_put(self, table: str, key: Bytesish, value: Bytesish) -> None:
        """Set key to value (bytes, or str as UTF-8)."""
        raw = data(value, "value")
        check(self._kv(lib.shard_kv_put, table, key, raw, len(raw)))

    def kv_put_new(self, table: str, key: Bytesish, value: Bytesish) -> None:
        """Put only if the key is absent; Exists otherwise."""
        raw = data(value, "value")
        check(self._kv(lib.shard_kv_put_new, table, key, raw, len(raw)))

    def kv_get(self, table: str, key: Bytesish, *,
               default: Any = RAISE) -> Any:
        """The value (bytes). Absent: `default` when given, else NotFound."""
        out, n = c_void_p(), c_size_t()
        rc = self._kv(lib.shard_kv_get, table, key, byref(out), byref(n))
        if rc == NotFound.code and default is not RAISE:
            return default
        check(rc)
        return take(out.value, n.value)

    def kv_delete(self, table: str, key: Bytesish) -> None:
        """Delete key; NotFound when absent."""
        check(self._kv(lib.shard_kv_delete, table, key))

    # ---- transactions ------------------------------------------------
    def transaction(self, shard: int) -> "Transaction":
        """Begin a transaction bound to one shard (see Transaction)."""
        return Transaction(self, shard)

    # ---- scatter -----------------------------------------------------
    def scatter_count(self, type: TypeArg) -> int:
        """Live objects of `type` across every shard."""
        h = self._handle()
        out = c_uint64()
        check(lib.shard_scatter_count(h, self._type(type), byref(out)))
        return out.value

    def scatter_scan(self, type: TypeArg,
                     fn: Callable[[int, str], Any]) -> bool:
        """Call fn(id, json_text) for every live object of `type`, shard by
        shard. A truthy return stops the scan. Returns True when it was
        stopped. scatter_iter() is the same as an iterator."""
        h = self._handle()
        t = self._type(type)
        check_callable(fn, "fn")
        cb = Callback(lambda id, raw, n, _p:
                      1 if fn(id, text(ctypes.string_at(raw, n))) else 0)
        rc = lib.shard_scatter_scan(h, t, SCAN_FN(cb.call), None)
        cb.reraise()
        return check(rc) != 0

    def scatter_iter(self, type: TypeArg, *, decode: Optional[bool] = None,
                     buffer: int = 1000) -> Iterator[Tuple[int, Any]]:
        """Every live object of `type`, shard by shard in primary-key order,
        as a generator of (id, json) pairs (json a dict with decode=True).

        The scan runs in a thread of its own and waits while `buffer`
        objects are unread, so memory stays bounded; closing the generator
        (or leaving a for loop early and dropping it) stops the scan. A
        failed scan raises from the generator, after the objects it read.
        Unlike scatter_scan()'s callback, the loop's body runs on the
        caller's thread and may call libshard.
        """
        h = self._handle()
        t = self._type(type)
        dec = self._decode(decode)
        size = to_int(buffer, 1, 1 << 24, "buffer")
        gen = _scatter_gen(self, h, t, dec, size)
        self._scans.add(gen)  # close() stops it
        return gen

    def __repr__(self) -> str:
        return "<libshard.Context (closed)>" if self.closed else \
            "<libshard.Context>"


_END = object()


def _scatter_gen(ctx: Context, h: int, type: int, decode: bool,
                 size: int) -> Iterator[Tuple[int, Any]]:
    q: "queue.Queue[Any]" = queue.Queue(size)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def each(id: int, raw: int, n: int, _p: Any) -> int:
        return 0 if put((id, ctypes.string_at(raw, n))) else 1

    def scan() -> None:
        cb = Callback(each)
        rc = lib.shard_scatter_scan(h, type, SCAN_FN(cb.call), None)
        # The detail is the scanning thread's: read it here.
        err = cb.error or (last_error(rc) if rc < 0 else None)
        put((_END, err))

    th = threading.Thread(target=scan, name="libshard scatter_iter",
                          daemon=True)
    th.start()
    try:
        while True:
            id, raw = q.get()
            if id is _END:
                if raw is not None:
                    raise raw
                return
            yield id, _decoded(raw, decode)
    finally:
        stop.set()
        th.join()  # the generator holds ctx: it outlives the scan


class Transaction:
    """A transaction bound to one shard: Context.transaction(shard).

    As a context manager it commits when the block ends normally and rolls
    back when it raises. commit() and rollback() end it; so does a failed
    commit (the C library always frees the transaction then). One thread at
    a time.
    """

    def __init__(self, ctx: Context, shard: int):
        """Begin (shard_txn_begin(3)); Context.transaction() calls this."""
        out = c_void_p()
        check(lib.shard_txn_begin(ctx._handle(), uint(shard, "shard"),
                                  byref(out)))
        self._ctx = ctx  # keeps the context alive as long as the transaction
        self.shard = shard
        ptr = out_ptr(out)
        self._ptr: Optional[int] = ptr
        # The finalizer holds the context: an abandoned transaction is
        # rolled back before its context can be freed.
        self._finalizer = weakref.finalize(self, _release, "shard_txn_rollback",
                                           ptr, "Transaction", (ctx,))
        ctx._txns.add(self)  # ctx.close() rolls it back if still open

    def _handle(self) -> int:
        if not self._ptr:
            raise Invalid("the transaction has ended")
        return self._ptr

    def _end(self) -> int:
        ptr, self._ptr = self._handle(), None
        self._finalizer.detach()
        return ptr

    @property
    def active(self) -> bool:
        """True until commit() or rollback()."""
        return bool(self._ptr)

    def create(self, type: TypeArg, json: JSONArg) -> int:
        """Create an object on the transaction's shard; its ID."""
        h = self._handle()
        t = self._ctx._type(type)
        raw = json_arg(json)
        out = c_uint64()
        check(lib.shard_txn_object_create(h, t, raw, len(raw), byref(out)))
        return out.value

    def get(self, id: int, *, decode: Optional[bool] = None,
            default: Any = RAISE) -> Any:
        """The object's JSON (a dict with decode=True), locked until the
        transaction ends. Absent: `default` when given, else NotFound."""
        out, n = c_void_p(), c_size_t()
        rc = lib.shard_txn_object_get(self._handle(), u64(id), byref(out),
                                      byref(n))
        if rc == NotFound.code and default is not RAISE:
            return default
        check(rc)
        return _decoded(take(out.value, n.value), self._ctx._decode(decode))

    def put(self, id: int, json: JSONArg) -> None:
        """Replace the object's JSON."""
        raw = json_arg(json)
        check(lib.shard_txn_object_put(self._handle(), u64(id), raw,
                                       len(raw)))

    def mapping_add(self, name: str, from_id: int, to_id: int,
                    seq: int = SEQ_NOW) -> None:
        """Add a mapping row; from_id (and, with a reverse, to_id) on the
        transaction's shard."""
        check(lib.shard_txn_mapping_add(self._handle(), cstr(name, "mapping"),
                                        u64(from_id), u64(to_id),
                                        i64(seq, "sequence")))

    def commit(self) -> None:
        """Commit and end the transaction (ended even when it fails)."""
        check(lib.shard_txn_commit(self._end()))

    def rollback(self) -> None:
        """Roll back (idempotent once the transaction has ended)."""
        if self._ptr:
            lib.shard_txn_rollback(self._end())

    def __enter__(self) -> "Transaction":
        self._handle()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self._ptr:
            return
        if exc_type is None:
            self.commit()
        else:
            self.rollback()
