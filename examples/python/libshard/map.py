"""Shard maps and map stores (shard_map_parse(3), shard_store_open(3)).

A Map is an immutable snapshot; a Store is where the map lives. Both own
one C handle, released by close() (they are context managers) or by the
garbage collector.
"""

from __future__ import annotations

import ctypes
import warnings
import weakref
from ctypes import byref, c_char_p, c_uint, c_void_p
from typing import Any, List, Optional, Tuple

from ._lib import (DBNAME_SIZE, cstr, invalid, json_arg, lib, out_ptr,
                   out_str, take, text, u64, uint)
from .errors import check


def _release(free: str, ptr: int, leaked_name: Optional[str],
             keep: Any) -> None:
    if leaked_name:
        warnings.warn(f"unclosed libshard {leaked_name}", ResourceWarning,
                      source=None)
    getattr(lib, free)(ptr)


class Handle:
    """One C handle, released once: by close() or by the garbage collector."""

    _free = ""         # name of the C free function
    _warn = False      # ResourceWarning when the collector has to release it
    _ptr: Optional[int] = None

    def _own(self, ptr: int, *keep: Any) -> None:
        self._ptr = ptr
        self._finalizer = weakref.finalize(
            self, _release, self._free, ptr,
            type(self).__name__ if self._warn else None, keep)

    def _handle(self) -> int:
        if not self._ptr:
            raise invalid(f"{type(self).__name__} is closed")
        return self._ptr

    def close(self) -> None:
        """Release the C handle now (idempotent)."""
        if self._ptr:
            self._finalizer.detach()
            ptr, self._ptr = self._ptr, None
            getattr(lib, self._free)(ptr)

    @property
    def closed(self) -> bool:
        """True once close() has run."""
        return not self._ptr

    def __enter__(self) -> Any:
        self._handle()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Map(Handle):
    """An immutable shard map (one reference to a C shard_map).

    Lookups of names the map lacks (pair_addrs, type_of, type_name) raise
    NotFound; numbers out of range raise Invalid.
    """

    _free = "shard_map_free"

    def __init__(self, _ptr: int):
        """Own a shard_map pointer; use Map.parse, Map.load, Context.map()."""
        self._own(_ptr)

    @classmethod
    def parse(cls, text: Any) -> "Map":
        """Parse and validate JSON text (str, bytes or a dict); MapError
        naming the entry if it breaks a rule."""
        raw = json_arg(text, "map JSON")
        out = c_void_p()
        check(lib.shard_map_parse(byref(out), raw, len(raw)))
        return cls(out_ptr(out))

    @classmethod
    def load(cls, path: Any) -> "Map":
        """Read and parse a map file; IOFailure when it cannot be read."""
        out = c_void_p()
        check(lib.shard_map_load(byref(out), cstr(path, "path")))
        return cls(out_ptr(out))

    @property
    def version(self) -> int:
        """The map's version."""
        return lib.shard_map_version(self._handle())

    @property
    def open_shards(self) -> int:
        """New objects go only to shards [0, open_shards)."""
        return lib.shard_map_open_shards(self._handle())

    @property
    def mod_count(self) -> int:
        """The number of mod shards (0 without a mod_shards section)."""
        return lib.shard_map_mod_count(self._handle())

    @property
    def pairs(self) -> List[str]:
        """The pair names, in the map's order."""
        h = self._handle()
        return [lib.shard_map_pair_name(h, i).decode()
                for i in range(lib.shard_map_pair_count(h))]

    def pair_of(self, shard: int) -> str:
        """The pair serving ID shard `shard` (NoShard when none does)."""
        out = c_char_p()
        check(lib.shard_map_pair_of(self._handle(), uint(shard, "shard"),
                                    byref(out)))
        return out_str(out)

    def mod_pair_of(self, modshard: int) -> str:
        """The pair serving mod shard `modshard`."""
        out = c_char_p()
        check(lib.shard_map_mod_pair_of(self._handle(),
                                        uint(modshard, "mod shard"),
                                        byref(out)))
        return out_str(out)

    def pair_addrs(self, pair: Any) -> Tuple[str, Optional[str]]:
        """(master, standby) of a pair; standby is None when it has none.
        NotFound for a pair the map lacks."""
        master, standby = c_char_p(), c_char_p()
        check(lib.shard_map_pair_addrs(self._handle(), cstr(pair, "pair"),
                                       byref(master), byref(standby)))
        return (out_str(master),
                standby.value.decode() if standby.value is not None else None)

    def type_of(self, name: Any) -> int:
        """The type number of an object name ("pins" -> 1); NotFound for a
        name the map lacks."""
        out = c_uint()
        check(lib.shard_map_type_of(self._handle(), cstr(name, "type name"),
                                    byref(out)))
        return out.value

    def type_name(self, type: int) -> str:
        """The object name of a type number (2 -> "boards")."""
        out = c_char_p()
        check(lib.shard_map_type_name(self._handle(), uint(type, "type"),
                                      byref(out)))
        return out_str(out)

    def database(self, shard: int) -> str:
        """The database name of ID shard `shard` ("db00003")."""
        buf = ctypes.create_string_buffer(DBNAME_SIZE)
        check(lib.shard_map_database(self._handle(), uint(shard, "shard"),
                                     buf, len(buf)))
        return buf.value.decode()

    def mod_database(self, modshard: int) -> str:
        """The database name of mod shard `modshard` ("modshard00002")."""
        buf = ctypes.create_string_buffer(DBNAME_SIZE)
        check(lib.shard_map_mod_database(
            self._handle(), uint(modshard, "mod shard"), buf, len(buf)))
        return buf.value.decode()

    def to_json(self) -> str:
        """The map as canonical JSON text (str); parsing it gives an equal
        map."""
        out = c_void_p()
        check(lib.shard_map_to_json(self._handle(), byref(out)))
        return text(take(out.value))

    def to_dict(self) -> Any:
        """The map as a dict (to_json(), decoded)."""
        import json
        return json.loads(self.to_json())

    def summary(self) -> str:
        """A one-line human summary."""
        out = c_void_p()
        check(lib.shard_map_summary(self._handle(), byref(out)))
        return text(take(out.value))

    def __repr__(self) -> str:
        if self.closed:
            return "<libshard.Map (closed)>"
        return f"<libshard.Map version {self.version}>"


class Store(Handle):
    """Where a map lives: a file path (or "file:PATH"); shard_store_open(3)."""

    _free = "shard_store_free"

    def __init__(self, location: Any):
        """Open the store at `location`; nothing is read yet."""
        out = c_void_p()
        check(lib.shard_store_open(byref(out), cstr(location, "location")))
        self._own(out_ptr(out))

    def load(self) -> Map:
        """Read and validate the current map."""
        out = c_void_p()
        check(lib.shard_store_load(self._handle(), byref(out)))
        return Map(out_ptr(out))

    def load_version(self, version: int) -> Map:
        """Read published version `version` from the store's history
        (shard_store_load(3)): a MySQL or ZooKeeper store keeps every
        version, a file store only its current one; NotFound otherwise."""
        out = c_void_p()
        check(lib.shard_store_load_version(self._handle(), u64(version, "version"),
                                           byref(out)))
        return Map(out_ptr(out))

    def publish(self, map: Map, expected_version: int) -> None:
        """Publish map atomically if the store is at expected_version (0:
        empty) and map is newer; Conflict otherwise."""
        check(lib.shard_store_publish(self._handle(), map._handle(),
                                      u64(expected_version, "version")))
