"""libshard for Python: a ctypes binding of libshard's C API.

Standard library only. Install it with
`pip install --no-build-isolation examples/python` (from libshard's source
tree, into a venv or for the user); it needs the C library installed too
(make install). The C library is loaded as $LIBSHARD_LIB if that is set
(a path, e.g. build/libshard.so.0 of a source tree), else as libshard.so.0
through the dynamic loader (LD_LIBRARY_PATH, the ldconfig cache, the
system's directories), else as ctypes.util.find_library("shard") finds it.
Its shard_version() must equal this package's __version__: the import fails
with what to do otherwise, as it does when no library is found.

    import libshard
    with libshard.Context("/etc/libshard/map.json", decode=True) as ctx:
        uid = ctx.create("users", {"name": "ada"})
        print(ctx.get(uid))                      # {'name': 'ada'}
        print(ctx.get(12345, default=None))      # None: no such object
        for edge in ctx.mapping_iter("user_likes_pins", uid):
            print(edge.to, edge.seq)

Modules
    libshard.context   Context and Transaction: objects, mappings,
                       key-value, scatter (and the missing-key rule)
    libshard.move      online shard moves (Context.move, move_revert, ...)
    libshard.fleet     fleet status, pairs and shards, failover, rebalance
    libshard.legacy    import passes and legacy ids
    libshard.map       Map and Store
    libshard.values    constants, IDs, mod shards, the report records
    libshard.errors    ShardError and one subclass per SHARD_E* code
    Everything public is importable from libshard itself.

Types
    IDs are Python ints (64-bit unsigned). JSON goes in as a dict/list
    (serialised with json.dumps), str or bytes and comes out as str, or as
    dicts with decode=True (per call, or Context(..., decode=True)).
    Key-value keys and values go in as bytes (bytes-like, or str encoded as
    UTF-8) and come out as bytes: NUL bytes and invalid UTF-8 are kept as
    they are. Every string crosses the C boundary with an explicit length
    where the C API takes one; names that C takes NUL-terminated (tables,
    mappings, pairs, paths) are refused when they contain a NUL byte rather
    than silently cut short. Object types are numbers or names of the map.

Missing keys
    One rule for get, mget, kv_get, Transaction.get and the legacy
    lookups: an absent key gives the call's `default` when one is given,
    and raises NotFound (a LookupError) when none is. mget and
    legacy_resolve_many answer many keys, so their default is None.

Errors
    Every SHARD_E* code raises a subclass of ShardError carrying .code (the
    negative C code), .name ("SHARD_ENOTFOUND") and .message (the detail
    from shard_errmsg(), read right after the failing call on the same
    thread). A bad argument raises Invalid, which is a ValueError (an
    unknown type name too), or TypeError for a value of the wrong type;
    NotFound is a LookupError, ConnectionError and TimeoutError are also
    the built-in ones.

Compatibility
    What worked with the one-module binding works the same, with two
    changes: an unknown object type name raises Invalid (a ValueError)
    where it raised NotFound, and the private names (_lib, _make_error,
    ...) moved into the modules. New calls: decode= and default= where
    objects and keys are read, the iterators, the jansson conveniences
    (create_json, get_json, update), fleet_status, schema_check,
    pair_add/pair_remove, shards_open, rebalance_plan/rebalance_run,
    import_table/import_mapping, legacy_resolve(_many) and
    global_cleanup.

Iterators
    Context.mapping_iter() pages through a mapping list with the sequence
    as cursor; Context.scatter_iter() yields every object of a type across
    the shards; a RebalancePlan iterates over its moves.

Memory
    Everything the library allocates is released with the library's own
    free functions (shard_free, shard_items_free, shard_map_free,
    shard_store_free, shard_rebalance_free, shard_ctx_free), never by
    Python. Map, Store, RebalancePlan, Context and Transaction own one C
    handle each: close() releases it (they are context managers); the
    garbage collector releases what was not closed, with a ResourceWarning
    for an unclosed Context or Transaction.

Threads
    A Context may be shared by any number of Python threads: libshard is
    thread-safe, ctypes releases the GIL during every C call so calls run in
    parallel, and the error detail is thread-local in C and read by the
    thread that failed. A Map and a Store are immutable and may be shared.
    A Transaction must be used by one thread at a time (it may be handed
    over). Close a Context only once no other thread uses it, its
    transactions have ended (close() rolls back those still open) and its
    scatter_iter() generators are closed.
    Callbacks (log, progress, scan, rebalance step) may run on the
    library's own threads; they must not call into libshard (that would
    overwrite the calling thread's error detail) and should return quickly.
    An exception raised in a progress, scan or step callback is re-raised
    by the call that ran it; one raised in the log callback is reported
    through sys.unraisablehook.
"""

from ._lib import VERSION
from .context import Context, Transaction
from .errors import (CODES, Busy, Conflict, ConnectionError, Exists,
                     InternalError, Invalid, IOFailure, MapError, Moved,
                     NoMemory, NoShard, NotFound, Partial, PrivilegeError,
                     ServerError, ShardError, TimeoutError, TLSError, TooBig,
                     VerifyFailed, error_class, strerror)
from .fleet import RebalancePlan
from .map import Map, Store
from .values import (ANY, KEY_MAX, LOG_DEBUG, LOG_ERROR, LOG_INFO, LOG_WARN,
                    MAX_LOCAL, MAX_MOD_SHARDS, MAX_SHARD, MAX_TYPE,
                    MOVE_PHASES, RAISE, REBALANCE_BY_BYTES,
                    REBALANCE_BY_WRITES, SEQ_NONE, SEQ_NOW, Edge,
                    FailoverReport, ImportReport, MoveReport, RebalanceMove,
                    RebalancePair, global_cleanup, global_init, id_local,
                    id_shard, id_type, id_valid, make_id, mod_shard,
                    parse_id, phase_name, version, version_num)

__version__ = VERSION

__all__ = [
    "ShardError", "Invalid", "NoMemory", "MapError", "IOFailure", "NotFound",
    "Exists", "ConnectionError", "ServerError", "TimeoutError", "Moved",
    "Conflict", "Busy", "TooBig", "NoShard", "VerifyFailed", "PrivilegeError",
    "TLSError", "Partial", "InternalError", "CODES", "error_class",
    "version", "version_num", "strerror", "global_init", "global_cleanup",
    "make_id", "id_shard", "id_type", "id_local", "id_valid", "parse_id",
    "mod_shard", "phase_name", "Map", "Store", "Context", "Transaction",
    "Edge", "MoveReport", "FailoverReport", "ImportReport", "RebalancePlan",
    "RebalanceMove", "RebalancePair", "ANY", "RAISE", "SEQ_NOW", "SEQ_NONE",
    "LOG_ERROR", "LOG_WARN", "LOG_INFO", "LOG_DEBUG", "MAX_SHARD", "MAX_TYPE",
    "MAX_LOCAL", "MAX_MOD_SHARDS", "KEY_MAX", "MOVE_PHASES",
    "REBALANCE_BY_BYTES", "REBALANCE_BY_WRITES",
]
