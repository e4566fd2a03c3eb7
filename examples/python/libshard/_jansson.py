"""The few jansson calls that the C API's jansson conveniences need
(shard_object_create_json, shard_object_get_json, shard_object_update take
and give json_t pointers): libjansson.so.4, which libshard links, so it is
loaded already."""

from __future__ import annotations

import ctypes
import json as _json
from ctypes import Structure, c_char_p, c_int, c_size_t, c_void_p
from typing import Any, Optional

# jansson.h
JSON_ALLOW_NUL = 0x10
JSON_COMPACT = 0x20


class JsonT(Structure):
    """The head of a json_t: json_decref() is an inline function."""
    _fields_ = [("type", c_int), ("refcount", c_size_t)]


_jansson: Optional[ctypes.CDLL] = None
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [c_void_p]
_libc.free.restype = None


def jansson() -> ctypes.CDLL:
    global _jansson
    if _jansson is None:
        j = ctypes.CDLL("libjansson.so.4")
        j.json_loadb.restype = c_void_p
        j.json_loadb.argtypes = [c_char_p, c_size_t, c_size_t, c_void_p]
        j.json_dumps.restype = c_void_p
        j.json_dumps.argtypes = [c_void_p, c_size_t]
        j.json_delete.restype = None
        j.json_delete.argtypes = [c_void_p]
        j.json_object_clear.restype = c_int
        j.json_object_clear.argtypes = [c_void_p]
        j.json_object_update.restype = c_int
        j.json_object_update.argtypes = [c_void_p, c_void_p]
        _jansson = j
    return _jansson


def decref(ptr: Optional[int]) -> None:
    """json_decref(): the jansson.h inline, for a value only we hold."""
    if not ptr:
        return
    head = JsonT.from_address(ptr)
    if head.refcount == ctypes.c_size_t(-1).value:
        return
    head.refcount -= 1
    if head.refcount == 0:
        jansson().json_delete(ptr)


def load(raw: bytes) -> int:
    """A new json_t from JSON text (MemoryError/ValueError otherwise)."""
    ptr = jansson().json_loadb(raw, len(raw), JSON_ALLOW_NUL, None)
    if not ptr:
        raise ValueError("jansson could not parse the JSON")
    return ptr


def dump(ptr: int) -> Any:
    """The Python value of a json_t (its compact text, decoded)."""
    out = jansson().json_dumps(ptr, JSON_COMPACT)
    if not out:
        raise MemoryError("json_dumps failed")
    try:
        return _json.loads(ctypes.string_at(out).decode("utf-8"))
    finally:
        _libc.free(out)


def replace(ptr: int, value: Any) -> None:
    """Make the json_t object at ptr equal to the dict value, in place."""
    new = load(_json.dumps(value, ensure_ascii=False).encode("utf-8"))
    try:
        j = jansson()
        if j.json_object_clear(ptr) or j.json_object_update(ptr, new):
            raise ValueError("the object could not be replaced")
    finally:
        decref(new)
