"""Loading the C library, its structs and prototypes, and the conversions
every module shares (private: the public names are re-exported by the
package).

Every public function of include/libshard.h has its prototype in
_PROTOTYPES; the tests check that the set equals the header's and that
each struct below has the C compiler's layout.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import operator
import os
import threading
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p,
                    c_double, c_int, c_int64, c_size_t, c_uint, c_uint32,
                    c_uint64, c_void_p)
from typing import Any, Callable, Optional, Tuple, Union

# The version of the C library this binding is written for: its
# SHARD_VERSION_STRING, and the package's version (the build backend reads
# it from libshard/__init__.py, which repeats it as __version__).
VERSION = "0.1.0"

_SONAME = "libshard.so.0"

U32 = (1 << 32) - 1
U64 = (1 << 64) - 1


def _load() -> ctypes.CDLL:
    """The C library, as the package docstring says; ImportError otherwise."""
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


def _check_version(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.shard_version.restype = c_char_p
    lib.shard_version.argtypes = []
    found = lib.shard_version().decode()
    if found != VERSION:
        raise ImportError(
            f"libshard: this Python binding is version {VERSION}, but "
            f"the C library it loaded ({lib._name}) is version {found}. "
            f"Install the binding from libshard {found}'s source tree "
            f"(pip install examples/python), or load libshard "
            f"{VERSION} (LIBSHARD_LIB or LD_LIBRARY_PATH).")
    return lib


lib = _check_version(_load())

# ---- callbacks and structs (include/libshard.h) ---------------------------

LOG_FN = CFUNCTYPE(None, c_int, c_char_p, c_void_p)
PROGRESS_FN = CFUNCTYPE(None, c_char_p, c_uint64, c_uint64, c_void_p)
SCAN_FN = CFUNCTYPE(c_int, c_uint64, c_void_p, c_size_t, c_void_p)
MOVE_PROGRESS_FN = CFUNCTYPE(None, c_int, c_uint64, c_uint64, c_void_p)
UPDATE_FN = CFUNCTYPE(c_int, c_void_p, c_void_p)  # (json_t *, payload)

OPTIONS_VERSION = 2
MOVE_OPTIONS_VERSION = 2
IMPORT_OPTIONS_VERSION = 1
REBALANCE_OPTIONS_VERSION = 2
FAILOVER_OPTIONS_VERSION = 1
MOVE_REPORT_VERSION = 1
FAILOVER_REPORT_VERSION = 1
IMPORT_REPORT_VERSION = 1
DELETE_HARD = 1
MOVE_DRY_RUN = 1
MOVE_KEEP_SOURCE = 2
FAILOVER_FORCE = 1
IMPORT_DRY_RUN = 1
DBNAME_SIZE = 65  # a database name is at most 64 bytes (man page)


class Options(Structure):
    _fields_ = [("version", c_uint), ("connect_timeout_ms", c_uint),
                ("read_timeout_ms", c_uint), ("write_timeout_ms", c_uint),
                ("pool_size", c_uint), ("retry_budget_ms", c_uint),
                ("retry_max", c_uint), ("refresh_interval_ms", c_uint),
                ("log_level", c_int), ("log", LOG_FN),
                ("log_payload", c_void_p), ("user", c_char_p),
                ("password_env", c_char_p)]


class Item(Structure):
    _fields_ = [("status", c_int), ("data", c_void_p), ("len", c_size_t)]


class CEdge(Structure):
    _fields_ = [("to", c_uint64), ("seq", c_int64)]


class MoveOptions(Structure):
    _fields_ = [("version", c_uint), ("flags", c_int),
                ("copy_threads", c_uint), ("batch_rows", c_uint),
                ("max_lag_ms", c_uint), ("fence_timeout_s", c_uint),
                ("cutover_attempts", c_uint), ("catchup_timeout_s", c_uint),
                ("progress", MOVE_PROGRESS_FN), ("payload", c_void_p),
                # version 2
                ("reverse_window_s", c_uint), ("max_rows_per_second", c_uint64),
                ("max_load", c_char_p), ("postpone_cutover_file", c_char_p)]


class CMoveReport(Structure):
    """A report starts with its version, set here (SHARD_MOVE_REPORT_INIT)."""
    _fields_ = [("version", c_uint), ("move_id", c_uint64), ("source", c_char * 65),
                ("target", c_char * 65), ("first", c_uint), ("last", c_uint),
                ("phase", c_int), ("tables", c_uint64),
                ("rows_copied", c_uint64), ("bytes_copied", c_uint64),
                ("copy_seconds", c_double), ("catchup_seconds", c_double),
                ("cutover_seconds", c_double), ("verify_seconds", c_double),
                ("pause_ms", c_double), ("fence_attempts", c_uint),
                ("rows_verified", c_uint64), ("mismatches", c_uint64),
                ("map_version", c_uint64), ("source_dropped", c_int),
                ("target_pair_healthy", c_int)]

    def __init__(self) -> None:
        super().__init__(MOVE_REPORT_VERSION)


class CFailoverReport(Structure):
    """SHARD_FAILOVER_REPORT_INIT: the version set."""
    _fields_ = [("version", c_uint), ("pair", c_char * 65), ("old_master", c_char * 300),
                ("new_master", c_char * 300), ("old_master_fenced", c_int),
                ("lag_transactions", c_int64), ("lag_seconds", c_double),
                ("wait_ms", c_double), ("total_ms", c_double),
                ("map_version", c_uint64)]

    def __init__(self) -> None:
        super().__init__(FAILOVER_REPORT_VERSION)


class FailoverOptions(Structure):
    _fields_ = [("version", c_uint), ("flags", c_int), ("wait_ms", c_uint)]


class ImportOptions(Structure):
    _fields_ = [("version", c_uint), ("flags", c_int), ("source", c_char_p),
                ("password_env", c_char_p), ("table", c_char_p),
                ("type", c_uint), ("id_column", c_char_p),
                ("json_column", c_char_p), ("near_column", c_char_p),
                ("near_type", c_uint), ("mapping", c_char_p),
                ("from_column", c_char_p), ("from_type", c_uint),
                ("to_column", c_char_p), ("to_type", c_uint),
                ("seq_column", c_char_p), ("threads", c_uint),
                ("batch_rows", c_uint), ("progress", PROGRESS_FN),
                ("payload", c_void_p)]


class CImportReport(Structure):
    """SHARD_IMPORT_REPORT_INIT: the version set."""
    _fields_ = [("version", c_uint), ("rows_read", c_uint64), ("created", c_uint64),
                ("changed", c_uint64), ("deleted", c_uint64),
                ("unchanged", c_uint64), ("adopted", c_uint64),
                ("seconds", c_double)]

    def __init__(self) -> None:
        super().__init__(IMPORT_REPORT_VERSION)


class CRebalanceMove(Structure):
    _fields_ = [("first", c_uint), ("last", c_uint), ("from", c_char * 65),
                ("to", c_char * 65), ("bytes", c_uint64), ("writes", c_double),
                ("drain", c_int)]


class CRebalancePair(Structure):
    _fields_ = [("name", c_char * 65), ("drained", c_int),
                ("shards_before", c_uint), ("shards_after", c_uint),
                ("bytes_before", c_uint64), ("bytes_after", c_uint64),
                ("writes_before", c_double), ("writes_after", c_double),
                ("load_before", c_double), ("load_after", c_double)]


REBALANCE_FN = CFUNCTYPE(c_int, POINTER(CRebalanceMove), c_size_t, c_size_t,
                         c_int, POINTER(CMoveReport), c_void_p)


class RebalanceOptions(Structure):
    _fields_ = [("version", c_uint), ("by", c_int), ("threshold", c_double),
                ("max_moves", c_uint), ("pairs", c_char_p),
                ("drain", c_char_p), ("sample_ms", c_uint),
                ("move", POINTER(MoveOptions)), ("step", REBALANCE_FN),
                ("payload", c_void_p)]


_P = c_void_p            # opaque handles: shard_map *, shard_ctx *, ...
_PP = POINTER(c_void_p)  # T **out, and char **out (read with string_at)
_U64P = POINTER(c_uint64)
_SIZEP = POINTER(c_size_t)
_MOVE = [POINTER(MoveOptions), POINTER(CMoveReport)]
_IMPORT = [_P, POINTER(ImportOptions), POINTER(CImportReport)]
PROTOTYPES = {
    "shard_strerror": (c_char_p, [c_int]),
    "shard_errmsg": (c_char_p, []),
    "shard_version": (c_char_p, []),
    "shard_version_num": (c_uint, []),
    "shard_global_init": (c_int, []),
    "shard_global_cleanup": (None, []),
    "shard_free": (None, [c_void_p]),
    "shard_id_make": (c_int, [c_uint, c_uint, c_uint64, _U64P]),
    "shard_id_shard": (c_uint, [c_uint64]),
    "shard_id_type": (c_uint, [c_uint64]),
    "shard_id_local": (c_uint64, [c_uint64]),
    "shard_id_valid": (c_int, [c_uint64]),
    "shard_id_parse": (c_int, [c_char_p, _U64P]),
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
    "shard_store_load_version": (c_int, [_P, c_uint64, _PP]),
    "shard_store_publish": (c_int, [_P, _P, c_uint64]),
    "shard_ctx_open": (c_int, [_PP, c_char_p, POINTER(Options)]),
    "shard_ctx_free": (None, [_P]),
    "shard_ctx_reload": (c_int, [_P]),
    "shard_ctx_map": (c_int, [_P, _PP]),
    "shard_ctx_stats": (c_int, [_P, _PP]),
    "shard_schema_apply": (c_int, [_P, PROGRESS_FN, c_void_p]),
    "shard_schema_check": (c_int, [_P, _P]),
    "shard_object_create": (c_int, [_P, c_uint, c_uint, c_char_p, c_size_t,
                                    _U64P]),
    "shard_object_get": (c_int, [_P, c_uint64, _PP, _SIZEP]),
    "shard_object_patch": (c_int, [_P, c_uint64, c_char_p, c_size_t, _PP,
                                   _SIZEP]),
    "shard_object_delete": (c_int, [_P, c_uint64, c_int]),
    "shard_object_mget": (c_int, [_P, _U64P, c_size_t, POINTER(POINTER(Item))]),
    "shard_items_free": (None, [POINTER(Item), c_size_t]),
    # The jansson conveniences take json_t pointers (jansson.py).
    "shard_object_create_json": (c_int, [_P, c_uint, c_uint, c_void_p, _U64P]),
    "shard_object_get_json": (c_int, [_P, c_uint64, _PP]),
    "shard_object_update": (c_int, [_P, c_uint64, UPDATE_FN, c_void_p]),
    "shard_mapping_add": (c_int, [_P, c_char_p, c_uint64, c_uint64, c_int64]),
    "shard_mapping_remove": (c_int, [_P, c_char_p, c_uint64, c_uint64]),
    "shard_mapping_list": (c_int, [_P, c_char_p, c_uint64, c_int64, c_size_t,
                                   POINTER(POINTER(CEdge)), _SIZEP]),
    "shard_mapping_count": (c_int, [_P, c_char_p, c_uint64, _U64P]),
    "shard_kv_put": (c_int, [_P, c_char_p, c_char_p, c_size_t, c_char_p,
                             c_size_t]),
    "shard_kv_put_new": (c_int, [_P, c_char_p, c_char_p, c_size_t, c_char_p,
                                 c_size_t]),
    "shard_kv_get": (c_int, [_P, c_char_p, c_char_p, c_size_t, _PP, _SIZEP]),
    "shard_kv_delete": (c_int, [_P, c_char_p, c_char_p, c_size_t]),
    "shard_txn_begin": (c_int, [_P, c_uint, _PP]),
    "shard_txn_object_create": (c_int, [_P, c_uint, c_char_p, c_size_t,
                                        _U64P]),
    "shard_txn_object_get": (c_int, [_P, c_uint64, _PP, _SIZEP]),
    "shard_txn_object_put": (c_int, [_P, c_uint64, c_char_p, c_size_t]),
    "shard_txn_mapping_add": (c_int, [_P, c_char_p, c_uint64, c_uint64,
                                      c_int64]),
    "shard_txn_commit": (c_int, [_P]),
    "shard_txn_rollback": (None, [_P]),
    "shard_scatter_scan": (c_int, [_P, c_uint, SCAN_FN, c_void_p]),
    "shard_scatter_count": (c_int, [_P, c_uint, _U64P]),
    "shard_move": (c_int, [_P, c_uint, c_uint, c_char_p] + _MOVE + [_PP]),
    "shard_move_resume": (c_int, [_P, c_uint64] + _MOVE),
    "shard_move_abort": (c_int, [_P, c_uint64]),
    "shard_move_status": (c_int, [_P, _PP]),
    "shard_move_phase_name": (c_char_p, [c_int]),
    "shard_move_revert": (c_int, [_P, c_uint64] + _MOVE),
    "shard_move_finish": (c_int, [_P, c_uint64] + _MOVE),
    "shard_pair_failover": (c_int, [_P, c_char_p, c_int,
                                    POINTER(CFailoverReport)]),
    "shard_pair_failover_opts": (c_int, [_P, c_char_p, POINTER(FailoverOptions),
                                         POINTER(CFailoverReport)]),
    "shard_legacy_resolve": (c_int, [_P, c_uint, c_uint64, _U64P]),
    "shard_legacy_resolve_many": (c_int, [_P, c_uint, _U64P, c_size_t, _U64P]),
    "shard_import_table": (c_int, _IMPORT),
    "shard_import_mapping": (c_int, _IMPORT),
    "shard_fleet_status": (c_int, [_P, _PP]),
    "shard_pair_add": (c_int, [_P, c_char_p, c_char_p, c_char_p, _U64P]),
    "shard_pair_remove": (c_int, [_P, c_char_p, _U64P]),
    "shard_shards_open": (c_int, [_P, c_uint, c_char_p, PROGRESS_FN, c_void_p,
                                  _U64P]),
    "shard_rebalance_plan": (c_int, [_P, POINTER(RebalanceOptions), _PP]),
    "shard_rebalance_free": (None, [_P]),
    "shard_rebalance_moves": (POINTER(CRebalanceMove), [_P, _SIZEP]),
    "shard_rebalance_pairs": (POINTER(CRebalancePair), [_P, _SIZEP]),
    "shard_rebalance_spread": (None, [_P, POINTER(c_double),
                                      POINTER(c_double)]),
    "shard_rebalance_map_version": (c_uint64, [_P]),
    "shard_rebalance_run": (c_int, [_P, _P, POINTER(RebalanceOptions),
                                    _SIZEP]),
}
for _name, (_restype, _argtypes) in PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _restype
    _fn.argtypes = _argtypes
del _name, _restype, _argtypes, _fn

# ---- conversions ------------------------------------------------------------
# Bad arguments are refused here, before any C call: TypeError for a wrong
# type, errors.Invalid (a ValueError) for a bad value. errors imports this
# module, so the exception class is looked up when needed.


def invalid(message: str) -> Exception:
    from .errors import Invalid
    return Invalid(message)


def to_int(value: Any, lo: int, hi: int, what: str) -> int:
    try:
        value = operator.index(value)  # TypeError for floats, str, None
    except TypeError:
        raise TypeError(f"{what} must be an integer, not "
                        f"{type(value).__name__}") from None
    if not lo <= value <= hi:
        raise invalid(f"{what} {value} out of range ({lo}..{hi})")
    return value


def u64(value: Any, what: str = "ID") -> int:
    return to_int(value, 0, U64, what)


def uint(value: Any, what: str) -> int:
    return to_int(value, 0, U32, what)


def i64(value: Any, what: str) -> int:
    return to_int(value, -(1 << 63), (1 << 63) - 1, what)


def option_uint(value: Any, what: str, hi: int = U32) -> int:
    """An options struct's number: an int 0..hi (a bool is refused: it is
    always a mistake there)."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, not bool")
    return to_int(value, 0, hi, what)


Bytesish = Union[bytes, bytearray, memoryview, str]


def data(value: Any, what: str) -> bytes:
    """Bytes for a length-carrying argument: bytes-like, or str as UTF-8."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes or str, not {type(value).__name__}")


def json_arg(value: Any, what: str = "JSON") -> bytes:
    """JSON text for C: a dict or list is serialised, str/bytes passed."""
    if isinstance(value, (dict, list)):
        import json
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    return data(value, what)


def cstr(value: Any, what: str) -> bytes:
    """Bytes for a NUL-terminated argument; refuses embedded NUL bytes."""
    if isinstance(value, os.PathLike):
        value = os.fsencode(value)
    raw = data(value, what)
    if b"\0" in raw:
        raise invalid(f"{what} contains a NUL byte")
    return raw


def opt_cstr(value: Any, what: str) -> Optional[bytes]:
    return None if value is None else cstr(value, what)


def names_list(value: Any, what: str) -> Optional[bytes]:
    """"P1,P2" for C from None, a str, or an iterable of names."""
    if value is None:
        return None
    if not isinstance(value, (str, bytes)):
        value = ",".join(value)
    raw = cstr(value, what)
    if not raw:
        raise invalid(f"{what} is empty")
    return raw


def take(ptr: Optional[int], length: Optional[int] = None) -> bytes:
    """Copy len bytes (or up to the NUL) out of library memory, then free it."""
    if not ptr:
        return b""
    try:
        if length is None:
            return ctypes.string_at(ptr)
        return ctypes.string_at(ptr, length)
    finally:
        lib.shard_free(ptr)


def out_ptr(out: c_void_p) -> int:
    """The pointer a successful call put in out (never NULL then)."""
    if not out.value:
        from .errors import InternalError
        raise InternalError("libshard returned success and a NULL pointer")
    return out.value


def out_str(out: c_char_p) -> str:
    """The borrowed string a successful call put in out."""
    if out.value is None:
        from .errors import InternalError
        raise InternalError("libshard returned success and a NULL string")
    return out.value.decode()


def text(raw: bytes) -> str:
    return raw.decode("utf-8")


def name_of(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def check_callable(fn: Any, what: str) -> None:
    if fn is not None and not callable(fn):
        raise TypeError(f"{what} must be callable, not {type(fn).__name__}")


class Callback:
    """A Python callable run from C: the first exception is kept to re-raise."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self.error: Optional[BaseException] = None
        self.lock = threading.Lock()

    def call(self, *args: Any) -> Any:
        if self.error is not None:
            return 1
        try:
            return self.fn(*args)
        except BaseException as e:  # noqa: B902 (re-raised by reraise())
            with self.lock:
                if self.error is None:
                    self.error = e
            return 1

    def call_void(self, *args: Any) -> None:  # for callbacks that return void
        self.call(*args)

    def reraise(self) -> None:
        if self.error is not None:
            err, self.error = self.error, None
            raise err


def progress_callback(progress: Optional[Callable[[str, int, int], Any]]
                      ) -> Tuple[Any, Optional[Callback]]:
    """A shard_progress_fn for C (NULL for None) and its Callback."""
    check_callable(progress, "progress")
    if progress is None:
        return PROGRESS_FN(), None  # type: ignore[call-overload]  # NULL
    fn = progress
    cb = Callback(lambda what, done, total, _p:
                  fn(name_of(what), done, total))
    return PROGRESS_FN(cb.call_void), cb


class Keep:
    """What a C call's options point to, alive until the call has returned;
    reraise() re-raises what a callback raised, if anything."""

    def __init__(self, *callbacks: Optional[Callback], objects: Any = ()):
        self.callbacks = callbacks
        self.objects = objects

    def reraise(self) -> None:
        for cb in self.callbacks:
            if cb is not None:
                cb.reraise()
