"""The exceptions: one class per SHARD_E* code of include/libshard.h.

This module is the one place the codes are written: each class carries
its code and its C name; the description (in its docstring, and in
strerror()) is the library's own shard_strerror(), and the table from code
to class is built from the classes (the tests compare them with the
header). A code appended to the
library after this binding was written raises the base class ShardError
with that .code.

Each class is also the matching built-in exception where there is one:
Invalid is a ValueError (every bad argument raises it, or TypeError for a
wrong type), NotFound a LookupError, NoMemory a MemoryError, IOFailure an
OSError, ConnectionError and TimeoutError the built-in ones.
"""

from __future__ import annotations

import builtins
from typing import Dict, List, Optional, Type

from ._lib import lib, to_int


def _strerror(code: int) -> str:
    return lib.shard_strerror(code).decode()  # type: ignore[no-any-return]


class ShardError(Exception):
    """A libshard call failed: .code (SHARD_E*, negative), .name
    ("SHARD_ENOTFOUND"), .message (shard_errmsg(): the detail, read right
    after the failing call on the same thread)."""

    code: Optional[int] = None
    c_name: Optional[str] = None

    @property
    def name(self) -> str:
        """The C name of the code, e.g. "SHARD_ENOTFOUND"."""
        cls = _BY_CODE.get(self.code) if self.code is not None else None
        return cls.c_name if cls is not None and cls.c_name else "SHARD_E?"

    @property
    def message(self) -> str:
        """The detail of the failure (which input, server, shard)."""
        return self.args[0] if self.args else ""

    def __str__(self) -> str:
        if self.message or self.code is None:
            return self.message
        return strerror(self.code)


class Invalid(ShardError, ValueError):
    """Also a ValueError: every bad argument raises it (a value of the
    wrong type raises TypeError)."""
    code, c_name = -1, "SHARD_EINVAL"


class NoMemory(ShardError, MemoryError):
    """Also a MemoryError."""
    code, c_name = -2, "SHARD_ENOMEM"


class MapError(ShardError):
    """The message names the entry that breaks a rule."""
    code, c_name = -3, "SHARD_EMAP"


class IOFailure(ShardError, OSError):
    """Also an OSError."""
    code, c_name = -4, "SHARD_EIO"


class NotFound(ShardError, LookupError):
    """Also a LookupError; lookups that are given a default return it
    instead (the rule is in libshard.context)."""
    code, c_name = -5, "SHARD_ENOTFOUND"


class Exists(ShardError):
    code, c_name = -6, "SHARD_EEXISTS"


class ConnectionError(ShardError, builtins.ConnectionError):
    """Also the built-in ConnectionError."""
    code, c_name = -7, "SHARD_ECONNECT"


class ServerError(ShardError):
    code, c_name = -8, "SHARD_ESERVER"


class TimeoutError(ShardError, builtins.TimeoutError):
    """Also the built-in TimeoutError."""
    code, c_name = -9, "SHARD_ETIMEOUT"


class Moved(ShardError):
    code, c_name = -10, "SHARD_EMOVED"


class Conflict(ShardError):
    code, c_name = -11, "SHARD_ECONFLICT"


class Busy(ShardError):
    code, c_name = -12, "SHARD_EBUSY"


class TooBig(ShardError):
    code, c_name = -13, "SHARD_ETOOBIG"


class NoShard(ShardError):
    code, c_name = -14, "SHARD_ENOSHARD"


class VerifyFailed(ShardError):
    code, c_name = -15, "SHARD_EVERIFY"


class PrivilegeError(ShardError):
    code, c_name = -16, "SHARD_EPRIV"


class TLSError(ShardError):
    code, c_name = -17, "SHARD_ETLS"


class Partial(ShardError):
    """From Context.mget(..., raise_errors=True): .results is the whole
    answer (the object, the default for not found, a ShardError for a
    failed element) and .errors maps each failed position to its
    ShardError; from move_status(), .results holds the lines."""
    code, c_name = -18, "SHARD_EPARTIAL"
    results: Optional[List[object]] = None
    errors: Optional[Dict[int, ShardError]] = None


class InternalError(ShardError):
    code, c_name = -19, "SHARD_EINTERNAL"


# code -> class, from the classes themselves (written once, above); each
# class's docstring begins with its C name and the library's own
# description (shard_strerror), read here rather than written again.
_BY_CODE: Dict[int, Type[ShardError]] = {
    cls.code: cls for cls in ShardError.__subclasses__()
    if cls.code is not None}

for _cls in _BY_CODE.values():
    _cls.__doc__ = (f"{_cls.c_name}: {_strerror(_cls.code)}."  # type: ignore
                    + (f"\n\n    {_cls.__doc__}" if _cls.__doc__ else ""))
del _cls

#: code -> C name, e.g. {-5: "SHARD_ENOTFOUND", ...}, from the classes.
CODES: Dict[int, str] = {code: cls.c_name or "" for code, cls in
                         sorted(_BY_CODE.items(), reverse=True)}


def strerror(code: int) -> str:
    """The library's static description of a SHARD_E* code (shard_strerror);
    "unknown error code" for a code it does not have."""
    return lib.shard_strerror(to_int(code, -(1 << 31), (1 << 31) - 1,
                                     "code")).decode()


def error_class(code: int) -> Type[ShardError]:
    """The exception class of a SHARD_E* code (ShardError for one this
    binding does not know)."""
    return _BY_CODE.get(code, ShardError)


def make_error(code: int, message: str) -> ShardError:
    """An exception for code with message (no C call)."""
    cls = _BY_CODE.get(code)
    if cls is None:  # a code appended after this binding was written
        err = ShardError(message)
        err.code = code
        return err
    return cls(message)


def last_error(code: int) -> ShardError:
    """The exception for a failed call, with this thread's detail."""
    detail = lib.shard_errmsg()
    message = detail.decode("utf-8", "replace") if detail else ""
    return make_error(code, message or strerror(code))


def check(rc: int) -> int:
    """rc when it is not an error; the matching exception otherwise."""
    if rc < 0:
        raise last_error(rc)
    return rc
