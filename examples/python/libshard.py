"""libshard for Python: a ctypes binding of libshard's plain-types C API.

Standard library only. Install it with
`pip install --no-build-isolation examples/python` (from libshard's source
tree, into a venv or for the user); it needs the C library installed too
(make install). The C library is loaded as $LIBSHARD_LIB if that is set
(a path, e.g. build/libshard.so.0 of a source tree), else as libshard.so.0
through the dynamic loader (LD_LIBRARY_PATH, the ldconfig cache, the
system's directories), else as ctypes.util.find_library("shard") finds it.
Its shard_version() must equal this module's __version__: the import fails
with what to do otherwise, as it does when no library is found.

    import libshard
    with libshard.Context("/etc/libshard/map.json") as ctx:
        uid = ctx.create("users", {"name": "ada"})
        print(ctx.get(uid))

Types
    IDs are Python ints (64-bit unsigned). JSON goes in as str, bytes or a
    dict/list (serialised with json.dumps) and comes out as str. Key-value
    keys and values go in as bytes (bytes-like, or str encoded as UTF-8) and
    come out as bytes: NUL bytes and invalid UTF-8 are kept as they are.
    Every string crosses the C boundary with an explicit length where the C
    API takes one; names that C takes NUL-terminated (tables, mappings,
    pairs, paths) are refused when they contain a NUL byte rather than
    silently cut short.

Errors
    Every SHARD_E* code raises a subclass of ShardError carrying .code (the
    negative C code), .name ("SHARD_ENOTFOUND") and .message (the detail
    from shard_errmsg(), read right after the failing call on the same
    thread). Invalid is also a ValueError, NotFound a LookupError,
    ConnectionError and TimeoutError are also the built-in ones.

Memory
    Everything the library allocates is released with the library's own
    free functions (shard_free, shard_items_free, shard_map_free,
    shard_store_free, shard_ctx_free), never by Python. Map, Store, Context
    and Transaction own one C handle each: close() releases it (they are
    context managers); the garbage collector releases what was not closed,
    with a ResourceWarning for an unclosed Context or Transaction.

Threads
    A Context may be shared by any number of Python threads: libshard is
    thread-safe, ctypes releases the GIL during every C call so calls run in
    parallel, and the error detail is thread-local in C and read by the
    thread that failed. A Map and a Store are immutable and may be shared.
    A Transaction must be used by one thread at a time (it may be handed
    over). Close a Context only once no other thread uses it and its
    transactions have ended (close() rolls back those still open).
    Callbacks (log, progress, scan) may run on the library's own threads;
    they must not call into libshard (that would overwrite the calling
    thread's error detail) and should return quickly. An exception raised
    in a progress or scan callback is re-raised by the call that ran it; one
    raised in the log callback is reported through sys.unraisablehook.
"""

import builtins
import ctypes
import ctypes.util
import json as _json
import operator
import os
import threading
import warnings
import weakref
from collections import namedtuple
from collections.abc import Mapping
from ctypes import (POINTER, CFUNCTYPE, Structure, byref, c_char, c_char_p,
                    c_double, c_int, c_int64, c_size_t, c_uint, c_uint32,
                    c_uint64, c_void_p)
from dataclasses import dataclass

__all__ = [
    "ShardError", "Invalid", "NoMemory", "MapError", "IOFailure", "NotFound",
    "Exists", "ConnectionError", "ServerError", "TimeoutError", "Moved",
    "Conflict", "Busy", "TooBig", "NoShard", "VerifyFailed", "PrivilegeError",
    "TLSError", "Partial", "InternalError",
    "version", "version_num", "strerror", "global_init",
    "make_id", "id_shard", "id_type", "id_local", "id_valid", "parse_id",
    "mod_shard", "Map", "Store", "Context", "Transaction", "Edge", "MoveReport",
    "FailoverReport", "ANY", "SEQ_NOW", "SEQ_NONE", "LOG_ERROR", "LOG_WARN", "LOG_INFO",
    "LOG_DEBUG", "MAX_SHARD", "MAX_TYPE", "MAX_LOCAL", "MAX_MOD_SHARDS",
    "KEY_MAX", "MOVE_PHASES",
]

# The version of the C library this binding is written for: its
# SHARD_VERSION_STRING (include/libshard.h), and the package's version.
__version__ = "0.1.0"

# --------------------------------------------------------------------------
# Constants (values from include/libshard.h)
# --------------------------------------------------------------------------

MAX_SHARD = 65535
MAX_TYPE = 1023
MAX_LOCAL = (1 << 36) - 1
MAX_MOD_SHARDS = 65536
KEY_MAX = 1024
ANY = 0xFFFFFFFF            # SHARD_ANY: any open shard
SEQ_NOW = -(1 << 63)        # SHARD_SEQ_NOW: the current time in microseconds
SEQ_NONE = (1 << 63) - 1    # SHARD_SEQ_NONE: no cursor
LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG = 0, 1, 2, 3
_DELETE_HARD = 1
_MOVE_DRY_RUN = 1
_MOVE_KEEP_SOURCE = 2
_FAILOVER_FORCE = 1
_OPTIONS_VERSION = 2
_MOVE_OPTIONS_VERSION = 2
_DBNAME_SIZE = 65           # a database name is at most 64 bytes (man page)
MOVE_PHASES = ("planned", "copying", "catchup", "fenced", "flipped",
               "verifying", "cleaning", "done", "aborted", "reversible",
               "reverting", "reverted")

_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1

# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


class ShardError(Exception):
    """A libshard call failed: .code (SHARD_E*, negative), .name, .message."""

    code = None

    @property
    def name(self):
        return _CODE_NAMES.get(self.code, "SHARD_E?")

    @property
    def message(self):
        return self.args[0] if self.args else ""

    def __str__(self):
        if self.message or self.code is None:
            return self.message
        return strerror(self.code)


class Invalid(ShardError, ValueError):
    code = -1


class NoMemory(ShardError, MemoryError):
    code = -2


class MapError(ShardError):
    code = -3


class IOFailure(ShardError, OSError):
    code = -4


class NotFound(ShardError, LookupError):
    code = -5


class Exists(ShardError):
    code = -6


class ConnectionError(ShardError, builtins.ConnectionError):
    code = -7


class ServerError(ShardError):
    code = -8


class TimeoutError(ShardError, builtins.TimeoutError):
    code = -9


class Moved(ShardError):
    code = -10


class Conflict(ShardError):
    code = -11


class Busy(ShardError):
    code = -12


class TooBig(ShardError):
    code = -13


class NoShard(ShardError):
    code = -14


class VerifyFailed(ShardError):
    code = -15


class PrivilegeError(ShardError):
    code = -16


class TLSError(ShardError):
    code = -17


class Partial(ShardError):
    """Some elements of a multi-element call failed.

    From Context.mget(..., raise_errors=True): .results is the whole answer
    (str, None for not found, a ShardError for a failed element) and
    .errors maps each failed position to its ShardError.
    """
    code = -18
    results = None
    errors = None


class InternalError(ShardError):
    code = -19


_ERRORS = {cls.code: cls for cls in (
    Invalid, NoMemory, MapError, IOFailure, NotFound, Exists, ConnectionError,
    ServerError, TimeoutError, Moved, Conflict, Busy, TooBig, NoShard,
    VerifyFailed, PrivilegeError, TLSError, Partial, InternalError)}
_CODE_NAMES = {-1: "SHARD_EINVAL", -2: "SHARD_ENOMEM", -3: "SHARD_EMAP",
               -4: "SHARD_EIO", -5: "SHARD_ENOTFOUND", -6: "SHARD_EEXISTS",
               -7: "SHARD_ECONNECT", -8: "SHARD_ESERVER", -9: "SHARD_ETIMEOUT",
               -10: "SHARD_EMOVED", -11: "SHARD_ECONFLICT", -12: "SHARD_EBUSY",
               -13: "SHARD_ETOOBIG", -14: "SHARD_ENOSHARD", -15: "SHARD_EVERIFY",
               -16: "SHARD_EPRIV", -17: "SHARD_ETLS", -18: "SHARD_EPARTIAL",
               -19: "SHARD_EINTERNAL"}


def _make_error(code, message):
    cls = _ERRORS.get(code)
    if cls is None:  # a code appended after this binding was written
        err = ShardError(message)
        err.code = code
        return err
    return cls(message)


def _error(code):
    """The exception for a failed call, with this thread's detail."""
    detail = _lib.shard_errmsg()
    message = detail.decode("utf-8", "replace") if detail else ""
    return _make_error(code, message or strerror(code))


def _check(rc):
    if rc < 0:
        raise _error(rc)
    return rc


# --------------------------------------------------------------------------
# The library and its prototypes
# --------------------------------------------------------------------------

_SONAME = "libshard.so.0"


def _load():
    """The C library, as the module docstring says; ImportError otherwise."""
    env = os.environ.get("LIBSHARD_LIB")
    if env:
        try:
            return ctypes.CDLL(env)
        except OSError as e:
            raise ImportError(f"libshard: cannot load LIBSHARD_LIB={env}: {e}"
                              ) from None
    try:
        return ctypes.CDLL(_SONAME)
    except OSError as e:
        why = str(e)
    found = ctypes.util.find_library("shard")  # slower: runs ldconfig, cc
    if found and found != _SONAME:
        try:
            return ctypes.CDLL(found)
        except OSError:
            pass
    raise ImportError(
        f"libshard: the C library {_SONAME} is not installed where the "
        f"dynamic loader looks ({why}). Install it (make "
        f"install, then ldconfig as root), or add the directory that holds "
        f"it to LD_LIBRARY_PATH (e.g. $HOME/.local/lib after make install "
        f"PREFIX=$HOME/.local), or set LIBSHARD_LIB to its path (in a "
        f"source tree after make: build/{_SONAME}).")


def _check_version(lib):
    lib.shard_version.restype = c_char_p
    lib.shard_version.argtypes = []
    found = lib.shard_version().decode()
    if found != __version__:
        raise ImportError(
            f"libshard: this Python binding is version {__version__}, but "
            f"the C library it loaded ({lib._name}) is version {found}. "
            f"Install the binding from libshard {found}'s source tree "
            f"(pip install examples/python), or load libshard "
            f"{__version__} (LIBSHARD_LIB or LD_LIBRARY_PATH).")
    return lib


_lib = _check_version(_load())

_LOG_FN = CFUNCTYPE(None, c_int, c_char_p, c_void_p)
_PROGRESS_FN = CFUNCTYPE(None, c_char_p, c_uint64, c_uint64, c_void_p)
_SCAN_FN = CFUNCTYPE(c_int, c_uint64, c_void_p, c_size_t, c_void_p)
_MOVE_PROGRESS_FN = CFUNCTYPE(None, c_int, c_uint64, c_uint64, c_void_p)


class _Options(Structure):
    _fields_ = [("version", c_uint), ("connect_timeout_ms", c_uint),
                ("read_timeout_ms", c_uint), ("write_timeout_ms", c_uint),
                ("pool_size", c_uint), ("retry_budget_ms", c_uint),
                ("retry_max", c_uint), ("refresh_interval_ms", c_uint),
                ("log_level", c_int), ("log", _LOG_FN),
                ("log_payload", c_void_p), ("user", c_char_p),
                ("password_env", c_char_p)]


class _Item(Structure):
    _fields_ = [("status", c_int), ("data", c_void_p), ("len", c_size_t)]


class _Edge(Structure):
    _fields_ = [("to", c_uint64), ("seq", c_int64)]


class _MoveOptions(Structure):
    _fields_ = [("version", c_uint), ("flags", c_int),
                ("copy_threads", c_uint), ("batch_rows", c_uint),
                ("max_lag_ms", c_uint), ("fence_timeout_s", c_uint),
                ("cutover_attempts", c_uint), ("catchup_timeout_s", c_uint),
                ("progress", _MOVE_PROGRESS_FN), ("payload", c_void_p),
                # version 2
                ("reverse_window_s", c_uint), ("max_rows_per_second", c_uint64),
                ("max_load", c_char_p), ("postpone_cutover_file", c_char_p)]


class _MoveReport(Structure):
    _fields_ = [("move_id", c_uint64), ("source", c_char * 65),
                ("target", c_char * 65), ("first", c_uint), ("last", c_uint),
                ("phase", c_int), ("tables", c_uint64),
                ("rows_copied", c_uint64), ("bytes_copied", c_uint64),
                ("copy_seconds", c_double), ("catchup_seconds", c_double),
                ("cutover_seconds", c_double), ("verify_seconds", c_double),
                ("pause_ms", c_double), ("fence_attempts", c_uint),
                ("rows_verified", c_uint64), ("mismatches", c_uint64),
                ("map_version", c_uint64), ("source_dropped", c_int),
                ("target_pair_healthy", c_int)]


class _FailoverReport(Structure):
    _fields_ = [("pair", c_char * 65), ("old_master", c_char * 300),
                ("new_master", c_char * 300), ("old_master_fenced", c_int),
                ("lag_transactions", c_int64), ("lag_seconds", c_double),
                ("wait_ms", c_double), ("total_ms", c_double),
                ("map_version", c_uint64)]


_P = c_void_p            # opaque handles: shard_map *, shard_ctx *, ...
_PP = POINTER(c_void_p)  # T **out, and char **out (read with string_at)
_PROTOTYPES = {
    "shard_strerror": (c_char_p, [c_int]),
    "shard_errmsg": (c_char_p, []),
    "shard_version": (c_char_p, []),
    "shard_version_num": (c_uint, []),
    "shard_global_init": (c_int, []),
    "shard_free": (None, [c_void_p]),
    "shard_id_make": (c_int, [c_uint, c_uint, c_uint64, POINTER(c_uint64)]),
    "shard_id_shard": (c_uint, [c_uint64]),
    "shard_id_type": (c_uint, [c_uint64]),
    "shard_id_local": (c_uint64, [c_uint64]),
    "shard_id_valid": (c_int, [c_uint64]),
    "shard_id_parse": (c_int, [c_char_p, POINTER(c_uint64)]),
    "shard_mod": (c_int, [c_char_p, c_size_t, c_uint32, POINTER(c_uint32)]),
    "shard_map_parse": (c_int, [_PP, c_char_p, c_size_t]),
    "shard_map_load": (c_int, [_PP, c_char_p]),
    "shard_map_free": (None, [_P]),
    "shard_map_version": (c_uint64, [_P]),
    "shard_map_open_shards": (c_uint, [_P]),
    "shard_map_mod_count": (c_uint32, [_P]),
    "shard_map_pair_count": (c_size_t, [_P]),
    "shard_map_pair_name": (c_char_p, [_P, c_size_t]),
    "shard_map_pair_of": (c_int, [_P, c_uint, POINTER(c_char_p)]),
    "shard_map_mod_pair_of": (c_int, [_P, c_uint32, POINTER(c_char_p)]),
    "shard_map_pair_addrs": (c_int, [_P, c_char_p, POINTER(c_char_p),
                                     POINTER(c_char_p)]),
    "shard_map_type_of": (c_int, [_P, c_char_p, POINTER(c_uint)]),
    "shard_map_type_name": (c_int, [_P, c_uint, POINTER(c_char_p)]),
    "shard_map_database": (c_int, [_P, c_uint, c_char_p, c_size_t]),
    "shard_map_mod_database": (c_int, [_P, c_uint32, c_char_p, c_size_t]),
    "shard_map_to_json": (c_int, [_P, _PP]),
    "shard_map_summary": (c_int, [_P, _PP]),
    "shard_store_open": (c_int, [_PP, c_char_p]),
    "shard_store_free": (None, [_P]),
    "shard_store_load": (c_int, [_P, _PP]),
    "shard_store_publish": (c_int, [_P, _P, c_uint64]),
    "shard_ctx_open": (c_int, [_PP, c_char_p, POINTER(_Options)]),
    "shard_ctx_free": (None, [_P]),
    "shard_ctx_reload": (c_int, [_P]),
    "shard_ctx_map": (c_int, [_P, _PP]),
    "shard_ctx_stats": (c_int, [_P, _PP]),
    "shard_schema_apply": (c_int, [_P, _PROGRESS_FN, c_void_p]),
    "shard_object_create": (c_int, [_P, c_uint, c_uint, c_char_p, c_size_t,
                                    POINTER(c_uint64)]),
    "shard_object_get": (c_int, [_P, c_uint64, _PP, POINTER(c_size_t)]),
    "shard_object_patch": (c_int, [_P, c_uint64, c_char_p, c_size_t, _PP,
                                   POINTER(c_size_t)]),
    "shard_object_delete": (c_int, [_P, c_uint64, c_int]),
    "shard_object_mget": (c_int, [_P, POINTER(c_uint64), c_size_t,
                                  POINTER(POINTER(_Item))]),
    "shard_items_free": (None, [POINTER(_Item), c_size_t]),
    "shard_mapping_add": (c_int, [_P, c_char_p, c_uint64, c_uint64, c_int64]),
    "shard_mapping_remove": (c_int, [_P, c_char_p, c_uint64, c_uint64]),
    "shard_mapping_list": (c_int, [_P, c_char_p, c_uint64, c_int64, c_size_t,
                                   POINTER(POINTER(_Edge)), POINTER(c_size_t)]),
    "shard_mapping_count": (c_int, [_P, c_char_p, c_uint64, POINTER(c_uint64)]),
    "shard_kv_put": (c_int, [_P, c_char_p, c_char_p, c_size_t, c_char_p,
                             c_size_t]),
    "shard_kv_put_new": (c_int, [_P, c_char_p, c_char_p, c_size_t, c_char_p,
                                 c_size_t]),
    "shard_kv_get": (c_int, [_P, c_char_p, c_char_p, c_size_t, _PP,
                             POINTER(c_size_t)]),
    "shard_kv_delete": (c_int, [_P, c_char_p, c_char_p, c_size_t]),
    "shard_txn_begin": (c_int, [_P, c_uint, _PP]),
    "shard_txn_object_create": (c_int, [_P, c_uint, c_char_p, c_size_t,
                                        POINTER(c_uint64)]),
    "shard_txn_object_get": (c_int, [_P, c_uint64, _PP, POINTER(c_size_t)]),
    "shard_txn_object_put": (c_int, [_P, c_uint64, c_char_p, c_size_t]),
    "shard_txn_mapping_add": (c_int, [_P, c_char_p, c_uint64, c_uint64,
                                      c_int64]),
    "shard_txn_commit": (c_int, [_P]),
    "shard_txn_rollback": (None, [_P]),
    "shard_scatter_scan": (c_int, [_P, c_uint, _SCAN_FN, c_void_p]),
    "shard_scatter_count": (c_int, [_P, c_uint, POINTER(c_uint64)]),
    "shard_move": (c_int, [_P, c_uint, c_uint, c_char_p,
                           POINTER(_MoveOptions), POINTER(_MoveReport), _PP]),
    "shard_move_resume": (c_int, [_P, c_uint64, POINTER(_MoveOptions),
                                  POINTER(_MoveReport)]),
    "shard_move_abort": (c_int, [_P, c_uint64]),
    "shard_move_status": (c_int, [_P, _PP]),
    "shard_move_phase_name": (c_char_p, [c_int]),
    "shard_move_revert": (c_int, [_P, c_uint64, POINTER(_MoveOptions),
                                  POINTER(_MoveReport)]),
    "shard_move_finish": (c_int, [_P, c_uint64, POINTER(_MoveOptions),
                                  POINTER(_MoveReport)]),
    "shard_pair_failover": (c_int, [_P, c_char_p, c_int,
                                    POINTER(_FailoverReport)]),
}
for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    _fn = getattr(_lib, _name)
    _fn.restype = _restype
    _fn.argtypes = _argtypes
del _name, _restype, _argtypes, _fn

# --------------------------------------------------------------------------
# Conversions
# --------------------------------------------------------------------------


def _int(value, lo, hi, what):
    try:
        value = operator.index(value)  # TypeError for floats, str, None
    except TypeError:
        raise TypeError(f"{what} must be an integer, not "
                        f"{type(value).__name__}") from None
    if not lo <= value <= hi:
        raise Invalid(f"{what} {value} out of range ({lo}..{hi})")
    return value


def _u64(value, what="ID"):
    return _int(value, 0, _U64, what)


def _uint(value, what):
    return _int(value, 0, _U32, what)


def _i64(value, what):
    return _int(value, -(1 << 63), (1 << 63) - 1, what)


def _data(value, what):
    """Bytes for a length-carrying argument: bytes-like, or str as UTF-8."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes or str, not {type(value).__name__}")


def _json_arg(value, what="JSON"):
    if isinstance(value, (dict, list)):
        return _json.dumps(value, ensure_ascii=False).encode("utf-8")
    return _data(value, what)


def _cstr(value, what):
    """Bytes for a NUL-terminated argument; refuses embedded NUL bytes."""
    if isinstance(value, os.PathLike):
        value = os.fsencode(value)
    raw = _data(value, what)
    if b"\0" in raw:
        raise Invalid(f"{what} contains a NUL byte")
    return raw


def _move_uint(value, what, hi=_U32):
    """A move option's number: an int 0..hi (a bool is refused: it is
    always a mistake there)."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, not bool")
    return _int(value, 0, hi, what)


def _max_load(value):
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
                raise Invalid(f"max_load: {name!r} is not a status variable "
                              "name (letters and _)")
            parts.append(f"{name}={_move_uint(limit, f'max_load[{name}]', _U64)}")
        value = ",".join(parts)
    elif not isinstance(value, (str, bytes, bytearray, memoryview)):
        raise TypeError("max_load must be str, bytes or a dict {VAR: N}, not "
                        f"{type(value).__name__}")
    return _cstr(value, "max_load")


class _Keep:
    """What a C call's options point to, alive until the call has returned;
    reraise() re-raises what the callback raised, if anything."""

    def __init__(self, cb, objects):
        self.cb = cb
        self.objects = objects

    def reraise(self):
        if self.cb is not None:
            self.cb.reraise()


def _take(ptr, length=None):
    """Copy len bytes (or up to the NUL) out of library memory, then free it."""
    if not ptr:
        return b""
    try:
        if length is None:
            return ctypes.string_at(ptr)
        return ctypes.string_at(ptr, length)
    finally:
        _lib.shard_free(ptr)


def _text(raw):
    return raw.decode("utf-8")


# --------------------------------------------------------------------------
# Module functions: version, IDs, mod shard
# --------------------------------------------------------------------------

def version():
    """The library's version string, e.g. "0.1.0"."""
    return _lib.shard_version().decode()


def version_num():
    """The library's SHARD_VERSION_NUM (0xMMmmpp)."""
    return _lib.shard_version_num()


def strerror(code):
    """The static description of a SHARD_E* code."""
    return _lib.shard_strerror(_int(code, -(1 << 31), (1 << 31) - 1,
                                    "code")).decode()


def global_init():
    """Initialise the client library (optional: opening a Context does it)."""
    _check(_lib.shard_global_init())


def make_id(shard, type, local):
    """Compose an ID; Invalid when a part is out of range."""
    out = c_uint64()
    _check(_lib.shard_id_make(_uint(shard, "shard"), _uint(type, "type"),
                              _u64(local, "local id"), byref(out)))
    return out.value


def id_shard(id):
    return _lib.shard_id_shard(_u64(id))


def id_type(id):
    return _lib.shard_id_type(_u64(id))


def id_local(id):
    return _lib.shard_id_local(_u64(id))


def id_valid(id):
    """True when id is a valid ID (any int, even out of 64 bits, is asked)."""
    id = operator.index(id)
    return 0 <= id <= _U64 and bool(_lib.shard_id_valid(id))


def parse_id(text):
    """Parse a decimal ID (str or bytes) and check it; Invalid otherwise."""
    out = c_uint64()
    _check(_lib.shard_id_parse(_cstr(text, "ID text"), byref(out)))
    return out.value


def mod_shard(key, nshards):
    """The mod shard of key (bytes, or str as UTF-8) among nshards."""
    raw = _data(key, "key")
    out = c_uint32()
    _check(_lib.shard_mod(raw, len(raw), _uint(nshards, "nshards"), byref(out)))
    return out.value


# --------------------------------------------------------------------------
# Maps and stores
# --------------------------------------------------------------------------

class _Handle:
    """One C handle, released once: by close() or by the garbage collector."""

    _free = None       # name of the C free function
    _warn = False      # ResourceWarning when the collector has to release it

    def _own(self, ptr, *keep):
        self._ptr = ptr
        self._finalizer = weakref.finalize(
            self, _release, self._free, ptr,
            type(self).__name__ if self._warn else None, keep)

    def _handle(self):
        if not getattr(self, "_ptr", None):
            raise Invalid(f"{type(self).__name__} is closed")
        return self._ptr

    def close(self):
        """Release the C handle now (idempotent)."""
        if getattr(self, "_ptr", None):
            self._finalizer.detach()
            ptr, self._ptr = self._ptr, None
            getattr(_lib, self._free)(ptr)

    @property
    def closed(self):
        return not getattr(self, "_ptr", None)

    def __enter__(self):
        self._handle()
        return self

    def __exit__(self, *exc):
        self.close()


def _release(free, ptr, leaked_name, keep):
    if leaked_name:
        warnings.warn(f"unclosed libshard {leaked_name}", ResourceWarning,
                      source=None)
    getattr(_lib, free)(ptr)


class Map(_Handle):
    """An immutable shard map (one reference to a C shard_map)."""

    _free = "shard_map_free"

    def __init__(self, _ptr):
        self._own(_ptr)

    @classmethod
    def parse(cls, text):
        """Parse and validate JSON text (str or bytes); MapError if broken."""
        raw = _json_arg(text, "map JSON")
        out = c_void_p()
        _check(_lib.shard_map_parse(byref(out), raw, len(raw)))
        return cls(out.value)

    @classmethod
    def load(cls, path):
        """Read and parse a map file; IOFailure when it cannot be read."""
        out = c_void_p()
        _check(_lib.shard_map_load(byref(out), _cstr(path, "path")))
        return cls(out.value)

    @property
    def version(self):
        return _lib.shard_map_version(self._handle())

    @property
    def open_shards(self):
        return _lib.shard_map_open_shards(self._handle())

    @property
    def mod_count(self):
        return _lib.shard_map_mod_count(self._handle())

    @property
    def pairs(self):
        """The pair names, in the map's order."""
        h = self._handle()
        return [_lib.shard_map_pair_name(h, i).decode()
                for i in range(_lib.shard_map_pair_count(h))]

    def pair_of(self, shard):
        """The pair serving ID shard `shard` (NoShard when none does)."""
        out = c_char_p()
        _check(_lib.shard_map_pair_of(self._handle(), _uint(shard, "shard"),
                                      byref(out)))
        return out.value.decode()

    def mod_pair_of(self, modshard):
        out = c_char_p()
        _check(_lib.shard_map_mod_pair_of(self._handle(),
                                          _uint(modshard, "mod shard"),
                                          byref(out)))
        return out.value.decode()

    def pair_addrs(self, pair):
        """(master, standby) of a pair; standby is None when it has none."""
        master, standby = c_char_p(), c_char_p()
        _check(_lib.shard_map_pair_addrs(self._handle(), _cstr(pair, "pair"),
                                         byref(master), byref(standby)))
        return (master.value.decode(),
                standby.value.decode() if standby.value is not None else None)

    def type_of(self, name):
        """The type number of an object name ("pins" -> 1)."""
        out = c_uint()
        _check(_lib.shard_map_type_of(self._handle(), _cstr(name, "type name"),
                                      byref(out)))
        return out.value

    def type_name(self, type):
        out = c_char_p()
        _check(_lib.shard_map_type_name(self._handle(), _uint(type, "type"),
                                        byref(out)))
        return out.value.decode()

    def database(self, shard):
        """The database name of ID shard `shard` ("db00003")."""
        buf = ctypes.create_string_buffer(_DBNAME_SIZE)
        _check(_lib.shard_map_database(self._handle(), _uint(shard, "shard"),
                                       buf, len(buf)))
        return buf.value.decode()

    def mod_database(self, modshard):
        buf = ctypes.create_string_buffer(_DBNAME_SIZE)
        _check(_lib.shard_map_mod_database(
            self._handle(), _uint(modshard, "mod shard"), buf, len(buf)))
        return buf.value.decode()

    def to_json(self):
        """The map as canonical JSON text (str)."""
        out = c_void_p()
        _check(_lib.shard_map_to_json(self._handle(), byref(out)))
        return _text(_take(out.value))

    def summary(self):
        """A one-line human summary."""
        out = c_void_p()
        _check(_lib.shard_map_summary(self._handle(), byref(out)))
        return _text(_take(out.value))

    def __repr__(self):
        if self.closed:
            return "<libshard.Map (closed)>"
        return f"<libshard.Map version {self.version}>"


class Store(_Handle):
    """Where a map lives: a file path (or "file:PATH")."""

    _free = "shard_store_free"

    def __init__(self, location):
        out = c_void_p()
        _check(_lib.shard_store_open(byref(out), _cstr(location, "location")))
        self._own(out.value)

    def load(self):
        """Read and validate the current map."""
        out = c_void_p()
        _check(_lib.shard_store_load(self._handle(), byref(out)))
        return Map(out.value)

    def publish(self, map, expected_version):
        """Publish map atomically if the store is at expected_version (0:
        empty); Conflict otherwise."""
        _check(_lib.shard_store_publish(self._handle(), map._handle(),
                                        _u64(expected_version, "version")))


# --------------------------------------------------------------------------
# Contexts
# --------------------------------------------------------------------------

Edge = namedtuple("Edge", "to seq")


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
    def _from(cls, r):
        return cls(r.move_id, r.source.decode(), r.target.decode(), r.first,
                   r.last, r.phase, _phase_name(r.phase), r.tables,
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
    def _from(cls, r):
        return cls(r.pair.decode(), r.old_master.decode(),
                   r.new_master.decode(), bool(r.old_master_fenced),
                   r.lag_transactions, r.lag_seconds, r.wait_ms, r.total_ms,
                   r.map_version)


def _phase_name(phase):
    return _lib.shard_move_phase_name(phase).decode()


class _Callback:
    """A Python callable run from C: the first exception is kept to re-raise."""

    def __init__(self, fn):
        self.fn = fn
        self.error = None
        self.lock = threading.Lock()

    def call(self, *args):
        if self.error is not None:
            return 1
        try:
            return self.fn(*args)
        except BaseException as e:  # noqa: B902 (re-raised by reraise())
            with self.lock:
                if self.error is None:
                    self.error = e
            return 1

    def call_void(self, *args):  # for callbacks that return void
        self.call(*args)

    def reraise(self):
        if self.error is not None:
            err, self.error = self.error, None
            raise err


class Context(_Handle):
    """A libshard context: the map, the connection pools, the refresh thread.

    Context(location, **options) opens the map store at `location` (a map
    file path) with shard_options built like SHARD_OPTIONS_INIT: keyword
    arguments override its defaults (connect_timeout_ms=3000,
    read_timeout_ms=10000, write_timeout_ms=10000, pool_size=16,
    retry_budget_ms=5000, retry_max=20, refresh_interval_ms=30000,
    log_level=LOG_WARN, log=None, user=None, password_env=None). log is a
    callable(level, message: str); user and password_env name another
    account than the map's (the password is read from that variable).
    Object types may be given as numbers or as names from the map.
    """

    _free = "shard_ctx_free"
    _warn = True
    DEFAULTS = dict(connect_timeout_ms=3000, read_timeout_ms=10000,
                    write_timeout_ms=10000, pool_size=16, retry_budget_ms=5000,
                    retry_max=20, refresh_interval_ms=30000, log_level=LOG_WARN)

    def __init__(self, location, *, log=None, user=None, password_env=None,
                 **options):
        unknown = set(options) - set(self.DEFAULTS)
        if unknown:
            raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
        opts = _Options(version=_OPTIONS_VERSION)
        for name, default in self.DEFAULTS.items():
            value = options.get(name, default)
            if name == "log_level":
                value = _int(value, -(1 << 31), (1 << 31) - 1, name)
            else:
                value = _uint(value, name)
            setattr(opts, name, value)
        self._log = None
        if log is not None:
            if not callable(log):
                raise TypeError("log must be callable")
            # Kept alive as long as the C context (the finalizer holds it).
            self._log = _LOG_FN(
                lambda level, msg, _p: log(level, msg.decode("utf-8", "replace")))
            opts.log = self._log
        # Copied by shard_ctx_open: they need to live only during the call.
        if user is not None:
            opts.user = _cstr(user, "user")
        if password_env is not None:
            opts.password_env = _cstr(password_env, "password_env")
        out = c_void_p()
        _check(_lib.shard_ctx_open(byref(out), _cstr(location, "location"),
                                   byref(opts)))
        self._txns = weakref.WeakSet()
        self._own(out.value, self._log)

    def close(self):
        """Roll back open transactions, close every connection, free."""
        for txn in list(getattr(self, "_txns", ())):
            txn.rollback()
        super().close()

    # ---- map ---------------------------------------------------------
    def reload(self):
        """Read the map store now; switch to its map if its version is newer."""
        _check(_lib.shard_ctx_reload(self._handle()))

    def map(self):
        """The current map snapshot (a Map of its own)."""
        out = c_void_p()
        _check(_lib.shard_ctx_map(self._handle(), byref(out)))
        return Map(out.value)

    def stats(self):
        """The context's counters (calls, errors and durations per call,
        retries, fence waits, map reads, pool gauges) as Prometheus text,
        exposition format 0.0.4 (str): serve it as it is, with Content-Type
        "text/plain; version=0.0.4". See shard_ctx_stats(3)."""
        out = c_void_p()
        _check(_lib.shard_ctx_stats(self._handle(), byref(out)))
        return _text(_take(out.value))

    def _type(self, type):
        if isinstance(type, (str, bytes)):
            with self.map() as m:
                return m.type_of(type)
        return _uint(type, "type")

    def schema_apply(self, progress=None):
        """Create every shard database and table, idempotently.
        progress: callable(what: str, done: int, total: int) or None."""
        h = self._handle()
        if progress is None:
            _check(_lib.shard_schema_apply(h, _PROGRESS_FN(), None))
            return
        cb = _Callback(lambda what, done, total, _p:
                       progress(what.decode("utf-8", "replace"), done, total))
        rc = _lib.shard_schema_apply(h, _PROGRESS_FN(cb.call_void), None)
        cb.reraise()
        _check(rc)

    # ---- objects -----------------------------------------------------
    def create(self, type, json, shard=ANY, *, near=None):
        """Create an object (JSON object text or a dict); return its ID.
        shard: a shard number or ANY; near=ID: on the same shard as ID."""
        h = self._handle()
        type = self._type(type)
        if near is not None:
            if not id_valid(near):
                raise Invalid(f"invalid ID {near}")
            shard = id_shard(near)
        raw = _json_arg(json)
        out = c_uint64()
        _check(_lib.shard_object_create(h, type, _uint(shard, "shard"), raw,
                                        len(raw), byref(out)))
        return out.value

    def get(self, id):
        """The object's JSON text; NotFound if absent or soft-deleted."""
        out, n = c_void_p(), c_size_t()
        _check(_lib.shard_object_get(self._handle(), _u64(id), byref(out),
                                     byref(n)))
        return _text(_take(out.value, n.value))

    def patch(self, id, patch):
        """Apply an RFC 7386 merge patch in one transaction; the new JSON."""
        raw = _json_arg(patch, "patch")
        out, n = c_void_p(), c_size_t()
        _check(_lib.shard_object_patch(self._handle(), _u64(id), raw, len(raw),
                                       byref(out), byref(n)))
        return _text(_take(out.value, n.value))

    def delete(self, id, *, hard=False):
        """Soft-delete ("active": false) or, with hard=True, remove the row."""
        _check(_lib.shard_object_delete(self._handle(), _u64(id),
                                        _DELETE_HARD if hard else 0))

    def mget(self, ids, *, raise_errors=False):
        """Get many objects at once; a list in the order of ids.

        Each element is the JSON text, None when not found, or (an element
        that failed otherwise, e.g. an invalid ID or an unreachable server)
        a ShardError instance. With raise_errors=True such a failure raises
        Partial instead, carrying .results and .errors.
        """
        h = self._handle()
        ids = [_u64(i) for i in ids]
        arr = (c_uint64 * len(ids))(*ids)
        items = POINTER(_Item)()
        rc = _lib.shard_object_mget(h, arr, len(ids), byref(items))
        err = _error(rc) if rc < 0 else None
        if not items:
            raise err if err else InternalError("mget returned no items")
        try:
            results, errors = [], {}
            for i in range(len(ids)):
                it = items[i]
                if it.status == 0:
                    results.append(_text(ctypes.string_at(it.data, it.len)))
                elif it.status == NotFound.code:
                    results.append(None)
                else:
                    e = _make_error(it.status,
                                    f"ID {ids[i]}: {strerror(it.status)}")
                    errors[i] = e
                    results.append(e)
        finally:
            _lib.shard_items_free(items, len(ids))
        if err is not None and not isinstance(err, Partial):
            raise err
        if errors and raise_errors:
            if err is None:
                err = Partial("some elements failed")
            err.results, err.errors = results, errors
            raise err
        return results

    # ---- mappings ----------------------------------------------------
    def mapping_add(self, name, from_id, to_id, seq=SEQ_NOW):
        """Add (or re-sequence) a row, and its reverse if the map has one."""
        _check(_lib.shard_mapping_add(self._handle(), _cstr(name, "mapping"),
                                      _u64(from_id), _u64(to_id),
                                      _i64(seq, "sequence")))

    def mapping_remove(self, name, from_id, to_id):
        """Remove a row (and its reverse); NotFound when absent."""
        _check(_lib.shard_mapping_remove(self._handle(), _cstr(name, "mapping"),
                                         _u64(from_id), _u64(to_id)))

    def mapping_list(self, name, from_id, *, limit=0, before=SEQ_NONE):
        """Rows of from_id, newest first: a list of Edge(to, seq). limit 0:
        every row; before: only sequences strictly below it."""
        edges, n = POINTER(_Edge)(), c_size_t()
        _check(_lib.shard_mapping_list(
            self._handle(), _cstr(name, "mapping"), _u64(from_id),
            _i64(before, "before"), _int(limit, 0, (1 << 64) - 1, "limit"),
            byref(edges), byref(n)))
        try:
            return [Edge(edges[i].to, edges[i].seq) for i in range(n.value)]
        finally:
            _lib.shard_free(edges)

    def mapping_count(self, name, from_id):
        out = c_uint64()
        _check(_lib.shard_mapping_count(self._handle(), _cstr(name, "mapping"),
                                        _u64(from_id), byref(out)))
        return out.value

    # ---- key-value ---------------------------------------------------
    def _kv(self, fn, table, key, *rest):
        raw = _data(key, "key")
        return fn(self._handle(), _cstr(table, "table"), raw, len(raw), *rest)

    def kv_put(self, table, key, value):
        raw = _data(value, "value")
        _check(self._kv(_lib.shard_kv_put, table, key, raw, len(raw)))

    def kv_put_new(self, table, key, value):
        """Put only if the key is absent; Exists otherwise."""
        raw = _data(value, "value")
        _check(self._kv(_lib.shard_kv_put_new, table, key, raw, len(raw)))

    def kv_get(self, table, key):
        """The value (bytes); NotFound when absent."""
        out, n = c_void_p(), c_size_t()
        _check(self._kv(_lib.shard_kv_get, table, key, byref(out), byref(n)))
        return _take(out.value, n.value)

    def kv_delete(self, table, key):
        """NotFound when absent."""
        _check(self._kv(_lib.shard_kv_delete, table, key))

    # ---- transactions ------------------------------------------------
    def transaction(self, shard):
        """Begin a transaction bound to one shard (see Transaction)."""
        return Transaction(self, shard)

    # ---- scatter -----------------------------------------------------
    def scatter_count(self, type):
        """Live objects of `type` across every shard."""
        h = self._handle()
        out = c_uint64()
        _check(_lib.shard_scatter_count(h, self._type(type), byref(out)))
        return out.value

    def scatter_scan(self, type, fn):
        """Call fn(id, json) for every live object of `type`, shard by shard.
        A truthy return stops the scan. Returns True when it was stopped."""
        h = self._handle()
        t = self._type(type)
        cb = _Callback(lambda id, data, n, _p:
                       1 if fn(id, _text(ctypes.string_at(data, n))) else 0)
        rc = _lib.shard_scatter_scan(h, t, _SCAN_FN(cb.call), None)
        cb.reraise()
        return _check(rc) != 0

    # ---- moves -------------------------------------------------------
    @staticmethod
    def _move_options(*, dry_run=False, keep_source=False, copy_threads=4,
                      batch_rows=2000, max_lag_ms=500, fence_timeout_s=2,
                      cutover_attempts=20, catchup_timeout_s=3600,
                      reverse_window_s=0, max_rows_per_second=0,
                      max_load=None, postpone_cutover_file=None,
                      progress=None):
        """A shard_move_options (version 2) and what must stay alive with
        it for the call: the callback, the strings. Every value is checked
        here, before any C call: TypeError for a wrong type (a bool where a
        number goes too), Invalid for a number out of range or a NUL byte."""
        o = _MoveOptions(version=_MOVE_OPTIONS_VERSION)
        o.flags = ((_MOVE_DRY_RUN if dry_run else 0) |
                   (_MOVE_KEEP_SOURCE if keep_source else 0))
        o.copy_threads = _move_uint(copy_threads, "copy_threads")
        o.batch_rows = _move_uint(batch_rows, "batch_rows")
        o.max_lag_ms = _move_uint(max_lag_ms, "max_lag_ms")
        o.fence_timeout_s = _move_uint(fence_timeout_s, "fence_timeout_s")
        o.cutover_attempts = _move_uint(cutover_attempts, "cutover_attempts")
        o.catchup_timeout_s = _move_uint(catchup_timeout_s,
                                         "catchup_timeout_s")
        o.reverse_window_s = _move_uint(reverse_window_s, "reverse_window_s")
        o.max_rows_per_second = _move_uint(max_rows_per_second,
                                           "max_rows_per_second", _U64)
        load = _max_load(max_load)
        postpone = (None if postpone_cutover_file is None else
                    _cstr(postpone_cutover_file, "postpone_cutover_file"))
        # The struct points into these bytes objects (ctypes keeps them in
        # o._objects too); keep holds them, and the callback, explicitly.
        o.max_load = load
        o.postpone_cutover_file = postpone
        cb = None
        if progress is not None:
            if not callable(progress):
                raise TypeError("progress must be callable, not "
                                f"{type(progress).__name__}")
            cb = _Callback(lambda phase, done, total, _p:
                           progress(_phase_name(phase), done, total))
            o.progress = _MOVE_PROGRESS_FN(cb.call_void)
        return o, _Keep(cb, (load, postpone))

    def move(self, first, last, target, *, dry_run=False, **options):
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
        o, keep = self._move_options(dry_run=dry_run, **options)
        report = _MoveReport()
        plan = c_void_p()
        rc = _lib.shard_move(h, _uint(first, "first shard"),
                             _uint(last, "last shard"), _cstr(target, "pair"),
                             byref(o), byref(report),
                             byref(plan) if dry_run else None)
        text = _take(plan.value) if plan.value else None
        keep.reraise()
        self._move_check(rc, report)
        return _text(text) if dry_run else MoveReport._from(report)

    def _move_id_call(self, fn, move_id, options):
        """shard_move_resume, _revert or _finish: (ctx, id, opts, report)."""
        if "dry_run" in options:
            raise TypeError("dry_run is an option of move() only")
        h = self._handle()
        o, keep = self._move_options(**options)
        report = _MoveReport()
        rc = fn(h, _u64(move_id, "move id"), byref(o), byref(report))
        keep.reraise()
        self._move_check(rc, report)
        return MoveReport._from(report)

    def move_resume(self, move_id=0, **options):
        """Resume an unfinished move (0: the only one); a MoveReport.
        options as for move(). A reversible move's resume restarts its
        reverse stream and returns with it still "reversible" while its
        window lasts; after the window it finishes it (move_finish())."""
        return self._move_id_call(_lib.shard_move_resume, move_id, options)

    def move_revert(self, move_id=0, **options):
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
        return self._move_id_call(_lib.shard_move_revert, move_id, options)

    def move_finish(self, move_id=0, **options):
        """End the reverse window of a move in phase "reversible" now (0:
        the only one): stop its reverse stream and drop the source's copies
        (shard_move_revert(3)); a MoveReport, phase "done" on success.
        NotFound when no such move is reversible. options as for move()
        (progress is the one that counts). A failure raises with .report."""
        return self._move_id_call(_lib.shard_move_finish, move_id, options)

    @staticmethod
    def _move_check(rc, report):
        if rc < 0:
            err = _error(rc)
            err.report = MoveReport._from(report)
            raise err

    def move_abort(self, move_id=0):
        """Abort an unfinished move before its map flip (Busy after it)."""
        _check(_lib.shard_move_abort(self._handle(), _u64(move_id, "move id")))

    def move_status(self):
        """Every journaled move: a list of dicts (shard_move_status's lines)."""
        out = c_void_p()
        _check(_lib.shard_move_status(self._handle(), byref(out)))
        text = _text(_take(out.value))
        return [_json.loads(line) for line in text.splitlines() if line]

    # ---- failover --------------------------------------------------
    def failover(self, pair, *, force=False):
        """Promote the standby of `pair`; a FailoverReport. Without force an
        unreachable master is ConnectionError; with it, unsent writes are
        lost. A failed failover raises with .report."""
        r = _FailoverReport()
        rc = _lib.shard_pair_failover(self._handle(), _cstr(pair, "pair"),
                                      _FAILOVER_FORCE if force else 0,
                                      byref(r))
        if rc < 0:
            err = _error(rc)
            err.report = FailoverReport._from(r)
            raise err
        return FailoverReport._from(r)

    def __repr__(self):
        return "<libshard.Context (closed)>" if self.closed else \
            "<libshard.Context>"


class Transaction:
    """A transaction bound to one shard: Context.transaction(shard).

    As a context manager it commits when the block ends normally and rolls
    back when it raises. commit() and rollback() end it; so does a failed
    commit (the C library always frees the transaction then). One thread at
    a time.
    """

    def __init__(self, ctx, shard):
        out = c_void_p()
        _check(_lib.shard_txn_begin(ctx._handle(), _uint(shard, "shard"),
                                    byref(out)))
        self._ctx = ctx  # keeps the context alive as long as the transaction
        self.shard = shard
        self._ptr = out.value
        # The finalizer holds the context: an abandoned transaction is
        # rolled back before its context can be freed.
        self._finalizer = weakref.finalize(self, _release, "shard_txn_rollback",
                                           out.value, "Transaction", (ctx,))
        ctx._txns.add(self)  # ctx.close() rolls it back if still open

    def _handle(self):
        if not self._ptr:
            raise Invalid("the transaction has ended")
        return self._ptr

    def _end(self):
        ptr, self._ptr = self._handle(), None
        self._finalizer.detach()
        return ptr

    @property
    def active(self):
        return bool(self._ptr)

    def create(self, type, json):
        """Create an object on the transaction's shard; its ID."""
        h = self._handle()
        type = self._ctx._type(type)
        raw = _json_arg(json)
        out = c_uint64()
        _check(_lib.shard_txn_object_create(h, type, raw, len(raw), byref(out)))
        return out.value

    def get(self, id):
        """The object's JSON, locked until the transaction ends."""
        out, n = c_void_p(), c_size_t()
        _check(_lib.shard_txn_object_get(self._handle(), _u64(id), byref(out),
                                         byref(n)))
        return _text(_take(out.value, n.value))

    def put(self, id, json):
        """Replace the object's JSON."""
        raw = _json_arg(json)
        _check(_lib.shard_txn_object_put(self._handle(), _u64(id), raw,
                                         len(raw)))

    def mapping_add(self, name, from_id, to_id, seq=SEQ_NOW):
        _check(_lib.shard_txn_mapping_add(self._handle(), _cstr(name, "mapping"),
                                          _u64(from_id), _u64(to_id),
                                          _i64(seq, "sequence")))

    def commit(self):
        _check(_lib.shard_txn_commit(self._end()))

    def rollback(self):
        """Roll back (idempotent once the transaction has ended)."""
        if self._ptr:
            _lib.shard_txn_rollback(self._end())

    def __enter__(self):
        self._handle()
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self._ptr:
            return
        if exc_type is None:
            self.commit()
        else:
            self.rollback()
