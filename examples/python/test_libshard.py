"""Tests of the Python binding (the package examples/python/libshard/), against real
MariaDB servers started with tests/servers.sh and stopped at the end.

    make && LIBSHARD_LIB=build/libshard.so.0 python3 examples/python/test_libshard.py [-v]
    (make check: sh examples/python/check.sh installs libshard and this
    package into temporary directories and runs these tests against them)

Each class starts its own servers (one pair; two pairs for the move and
failover; two more for the topology, where the map lacks the second until
pair_add) under a fresh random LIBSHARD_PASSWORD and stops them in
tearDownClass; a guard process stops them too if this process dies.
NoServerTests also check the binding against include/libshard.h: every
function bound and called here, the structs' layouts, the codes. The
application's work runs as the map's account (`shard`, rows only); schema
apply, moves and failover as the operators' `shardadmin`, as servers.sh
makes them.

Standard library only. Needs what `make check` needs (mariadbd and
mariadb-install-db); the package is the libshard found on sys.path (this
directory's first), the shared library found as its docstring says.
$LIBSHARD_SOURCE_TREE names the source tree (tests/servers.sh,
include/libshard.h) when this file runs from a copy elsewhere.
"""

import atexit
import builtins
import ctypes
import dataclasses
import faulthandler
import gc
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("LIBSHARD_SOURCE_TREE") or \
    os.path.normpath(os.path.join(HERE, os.pardir, os.pardir))
SERVERS = os.path.join(ROOT, "tests", "servers.sh")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # nor from the subprocesses

import libshard as ls  # noqa: E402
import libshard.errors  # noqa: E402,F401
import libshard._lib  # noqa: E402,F401
import libshard.context  # noqa: E402,F401
import libshard.fleet  # noqa: E402,F401
import libshard.map  # noqa: E402,F401

# The directory that holds the package (to import it in a subprocess).
PACKAGE_PARENT = os.path.dirname(os.path.dirname(ls.__file__))

# ---------------------------------------------------------------- servers

_running = {}  # base dir -> its guard; servers still to stop, whatever happens

# A guard process per set of servers: it waits for EOF on its stdin, which
# comes when this process closes the pipe or dies in any way (even a crash in
# C code, where atexit never runs), then stops the servers if they are still
# there. Its own session keeps a terminal's ^C from killing it first.
GUARD = r"""
import os, shutil, subprocess, sys
servers, base = sys.argv[1:3]
sys.stdin.read()
sdir = os.path.join(base, "srv")
if os.path.exists(sdir):
    subprocess.run([servers, "stop", sdir], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL)
if not os.path.exists(sdir):
    shutil.rmtree(base, ignore_errors=True)
"""


def start_servers(npairs, shards=8, mod_shards=4):
    """Start npairs master-master pairs; returns (base dir, map path)."""
    base = tempfile.mkdtemp(prefix="libshard-py.")
    sdir = os.path.join(base, "srv")
    _running[base] = None
    proc = subprocess.run(
        [SERVERS, "start", sdir, str(npairs), "--shards", str(shards),
         "--mod-shards", str(mod_shards)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    if proc.returncode == 0:
        _running[base] = subprocess.Popen(
            [sys.executable, "-c", GUARD, SERVERS, base],
            stdin=subprocess.PIPE, start_new_session=True)
    else:
        stop_servers(base)
        raise RuntimeError(f"servers.sh start failed ({proc.returncode}):\n"
                           f"{proc.stderr}")
    return base, proc.stdout.strip().splitlines()[-1]


def stop_servers(base):
    """Stop the servers of base (servers.sh stops exactly its own pids)."""
    if base not in _running:
        return
    sdir = os.path.join(base, "srv")
    proc = subprocess.run([SERVERS, "stop", sdir], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        sys.stderr.write(f"servers.sh stop {sdir} failed:\n{proc.stderr}")
        return  # keep the files of servers that may still run (the guard retries)
    guard = _running.pop(base)
    shutil.rmtree(base, ignore_errors=True)
    if guard is not None:
        guard.stdin.close()
        guard.wait(timeout=60)


@atexit.register
def _stop_leftovers():  # an interrupted run (^C) still stops its servers
    for base in list(_running):
        stop_servers(base)


def read_header_version():
    with open(os.path.join(ROOT, "include", "libshard.h")) as f:
        return re.search(r'#define SHARD_VERSION_STRING "([^"]+)"',
                         f.read()).group(1)


def free_port():
    """A loopback port that nothing listens on (it was just released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Move option values the binding refuses itself, before any C call: the
# keyword arguments, the exception, a part of its message.
BAD_MOVE_OPTIONS = (
    ({"reverse_window_s": -1}, ls.Invalid, "reverse_window_s -1 out of range"),
    ({"reverse_window_s": 1 << 32}, ls.Invalid, "reverse_window_s"),
    ({"reverse_window_s": 1.5}, TypeError, "reverse_window_s must be an integer"),
    ({"reverse_window_s": "60"}, TypeError, "not str"),
    ({"reverse_window_s": None}, TypeError, "reverse_window_s"),
    ({"max_rows_per_second": -5}, ls.Invalid, "max_rows_per_second -5"),
    ({"max_rows_per_second": 1 << 64}, ls.Invalid, "max_rows_per_second"),
    ({"max_rows_per_second": True}, TypeError, "not bool"),
    ({"max_rows_per_second": 10.0}, TypeError, "max_rows_per_second"),
    ({"copy_threads": -1}, ls.Invalid, "copy_threads"),
    ({"max_load": 50}, TypeError, "max_load"),
    ({"max_load": ["Threads_running=5"]}, TypeError, "max_load"),
    ({"max_load": "Threads_running=5\0"}, ls.Invalid, "NUL"),
    ({"max_load": {"Threads running": 5}}, ls.Invalid, "'Threads running'"),
    ({"max_load": {"": 5}}, ls.Invalid, "max_load"),
    ({"max_load": {"Threads_running": -1}}, ls.Invalid,
     "max_load[Threads_running] -1"),
    ({"max_load": {"Threads_running": "5"}}, TypeError, "max_load"),
    ({"postpone_cutover_file": 7}, TypeError, "postpone_cutover_file"),
    ({"postpone_cutover_file": "/tmp/a\0b"}, ls.Invalid, "NUL"),
    ({"progress": "yes"}, TypeError, "progress must be callable"),
    ({"no_such_option": 1}, TypeError, "no_such_option"),
)


class Case(unittest.TestCase):

    def assertRaisesShard(self, cls, code, fn, *args, **kwargs):
        """fn raises cls, with that code and a non-empty message."""
        with self.assertRaises(cls) as cm:
            fn(*args, **kwargs)
        self.assertEqual(cm.exception.code, code)
        self.assertIsInstance(cm.exception, ls.ShardError)
        self.assertTrue(cm.exception.message)
        return cm.exception


class ServerCase(Case):
    """Servers for the whole class; stopped in tearDownClass even when the
    set-up fails half way."""

    NPAIRS = 1
    base = None
    ctx = None    # the application's account (the map's credentials)
    admin = None  # the operators' (schema apply, moves, failover)

    @classmethod
    def prepare_map(cls, doc):
        """Change the servers' map (a dict) before anything opens it."""

    @classmethod
    def setUpClass(cls):
        os.environ["LIBSHARD_PASSWORD"] = secrets.token_hex(16)
        try:
            cls.base, cls.server_map = start_servers(cls.NPAIRS)
            # The context reads a copy, so that tests may publish new versions.
            cls.map_path = os.path.join(cls.base, "map.json")
            with open(cls.server_map) as f:
                doc = json.load(f)
            cls.prepare_map(doc)
            with open(cls.map_path, "w") as f:
                json.dump(doc, f, indent=2)
            cls.log = []
            cls.ctx = ls.Context(cls.map_path, refresh_interval_ms=0,
                                 log_level=ls.LOG_INFO,
                                 log=lambda lvl, msg: cls.log.append((lvl, msg)))
            cls.admin = ls.Context(cls.map_path, refresh_interval_ms=0,
                                   user="shardadmin",
                                   password_env="LIBSHARD_PASSWORD")
            cls.progress = []
            cls.admin.schema_apply(
                progress=lambda *a: cls.progress.append(a))
        except BaseException:
            cls.tearDownClass()
            raise

    # ---- helpers: the map as the context has it, SQL as root

    def healthy_status(self):
        """fleet_status() once the standbys have applied what the masters
        have (a bounded wait: the set-up's databases replicate)."""
        for _ in range(100):
            st = self.admin.fleet_status()
            if st["healthy"]:
                break
            time.sleep(0.1)
        return st

    def pair_of(self, shard):
        self.ctx.reload()
        with self.ctx.map() as m:
            return m.pair_of(shard)

    def map_version(self):
        self.ctx.reload()
        with self.ctx.map() as m:
            return m.version

    def server_sql(self, pair, query, standby=False):
        """query as root on the pair's master (or standby) as the map has
        it now (test_failover swaps MySQL002's): its rows, no header."""
        self.ctx.reload()
        with self.ctx.map() as m:
            addr = m.pair_addrs(pair)[1 if standby else 0]
        port = addr.rsplit(":", 1)[1]
        sdir = os.path.join(self.base, "srv")
        with open(os.path.join(sdir, "servers")) as f:
            name = next(w[0] for w in map(str.split, f) if w[3] == port)
        p = subprocess.run([SERVERS, "sql", sdir, name, "-N"], input=query,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def db_exists(self, pair, shard):
        return self.server_sql(
            pair, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE "
            f"SCHEMA_NAME = 'db{shard:05d}'") != "0\n"

    def rows(self, pair, shard):
        return int(self.server_sql(pair,
                                   f"SELECT COUNT(*) FROM db{shard:05d}.pins"))

    @classmethod
    def tearDownClass(cls):
        try:
            for name in ("ctx", "admin"):
                if getattr(cls, name) is not None:
                    getattr(cls, name).close()
                    setattr(cls, name, None)
        finally:
            if cls.base:
                stop_servers(cls.base)
                cls.base = None


# ---------------------------------------------------------------- no server

class NoServerTests(Case):

    def test_version(self):
        self.assertEqual(ls.version(), read_header_version())
        self.assertEqual(ls.__version__, ls.version())
        major, minor, patch = map(int, ls.version().split("."))
        self.assertEqual(ls.version_num(), (major << 16) | (minor << 8) | patch)
        ls.global_init()

    def test_move_phases_match_the_library(self):
        for i, name in enumerate(ls.MOVE_PHASES):
            self.assertEqual(ls.phase_name(i), name)
        self.assertEqual(ls.phase_name(len(ls.MOVE_PHASES)), "unknown")

    def import_fails(self, env):
        """The ImportError text of `import libshard` (this module) under env."""
        code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
                "try:\n    import libshard\n"
                "except ImportError as e:\n    print(e); sys.exit(3)\n")
        p = subprocess.run(
            [sys.executable, "-c", code, PACKAGE_PARENT],
            env=dict(os.environ, **env), stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        return p.stdout

    def test_import_without_the_library(self):
        msg = self.import_fails({"LIBSHARD_LIB": "/nonexistent/libshard.so.0"})
        self.assertIn("LIBSHARD_LIB=/nonexistent/libshard.so.0", msg)
        env = {k: v for k, v in os.environ.items()
               if k not in ("LIBSHARD_LIB", "LD_LIBRARY_PATH")}
        probe = subprocess.run(
            [sys.executable, "-c", "import ctypes; ctypes.CDLL('libshard.so.0')"],
            env=env, capture_output=True, timeout=60)
        if probe.returncode == 0:
            self.skipTest("libshard.so.0 is installed system-wide")
        p = subprocess.run([sys.executable, "-c",
                            "import sys; sys.path.insert(0, sys.argv[1]); "
                            "import libshard", PACKAGE_PARENT],
                           env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        for hint in ("ImportError", "libshard.so.0", "make install",
                     "LD_LIBRARY_PATH", "LIBSHARD_LIB"):
            self.assertIn(hint, p.stderr)

    def test_import_refuses_another_version(self):
        cc = shutil.which(os.environ.get("CC", "cc"))
        if not cc:
            self.skipTest("no C compiler")
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "other.c")
            with open(src, "w") as f:
                f.write('const char *shard_version(void) { return "9.8.7"; }\n')
            lib = os.path.join(tmp, "libshard.so.0")
            subprocess.run([cc, "-shared", "-fPIC", "-o", lib, src], check=True)
            msg = self.import_fails({"LIBSHARD_LIB": lib})
        self.assertIn(f"binding is version {ls.__version__}", msg)
        self.assertIn("is version 9.8.7", msg)

    def test_ids(self):
        id = ls.make_id(3429, 1, 7)
        self.assertEqual(id, (3429 << 46) | (1 << 36) | 7)
        self.assertEqual((ls.id_shard(id), ls.id_type(id), ls.id_local(id)),
                         (3429, 1, 7))
        self.assertTrue(ls.id_valid(id))
        self.assertEqual(ls.parse_id(str(id)), id)
        self.assertEqual(ls.parse_id(str(id).encode()), id)
        top = ls.make_id(ls.MAX_SHARD, ls.MAX_TYPE, ls.MAX_LOCAL)
        self.assertEqual(top, (1 << 62) - 1)
        for bad in (0, 5, 1 << 62, 1 << 63, top + 1, -1, 1 << 64):
            self.assertFalse(ls.id_valid(bad), bad)

    def test_id_errors(self):
        for parts in ((65536, 1, 1), (0, 0, 1), (0, 1024, 1), (0, 1, 0),
                      (0, 1, 1 << 36), (-1, 1, 1), (0, 1, 1 << 64),
                      (1 << 32, 1, 1)):
            e = self.assertRaisesShard(ls.Invalid, -1, ls.make_id, *parts)
            self.assertIsInstance(e, ValueError)
            self.assertEqual(e.name, "SHARD_EINVAL")
        e = self.assertRaisesShard(ls.Invalid, -1, ls.make_id, 0, 0, 1)
        self.assertIn("type", e.message)
        for text in ("", "12a", " 1", "+1", "-1", "99999999999999999999999",
                     "5", "1\x002", str(1 << 62)):
            self.assertRaisesShard(ls.Invalid, -1, ls.parse_id, text)
        with self.assertRaises(TypeError):
            ls.make_id(1.0, 1, 1)
        with self.assertRaises(TypeError):
            ls.id_shard("1")

    def test_mod_shard(self):
        self.assertEqual(ls.mod_shard(b"1.2.3.4", 4096), 1537)
        self.assertEqual(ls.mod_shard("1.2.3.4", 4096), 1537)
        self.assertEqual(ls.mod_shard(bytearray(b"1.2.3.4"), 4096), 1537)
        # MD5 as a 128-bit big-endian integer, mod N; NUL bytes count.
        import hashlib
        for key in (b"", b"\0", b"a\0b", b"\xff\xfe\x80", bytes(range(256))):
            for n in (1, 7, 4096, 65536):
                want = int.from_bytes(hashlib.md5(key).digest(), "big") % n
                self.assertEqual(ls.mod_shard(key, n), want, (key, n))
        self.assertNotEqual(ls.mod_shard(b"a", 65536), ls.mod_shard(b"a\0", 65536))
        for n in (0, 65537):
            self.assertRaisesShard(ls.Invalid, -1, ls.mod_shard, b"k", n)
        with self.assertRaises(TypeError):
            ls.mod_shard(12, 16)

    def test_strerror_and_every_code(self):
        classes = {-1: ls.Invalid, -2: ls.NoMemory, -3: ls.MapError,
                   -4: ls.IOFailure, -5: ls.NotFound, -6: ls.Exists,
                   -7: ls.ConnectionError, -8: ls.ServerError,
                   -9: ls.TimeoutError, -10: ls.Moved, -11: ls.Conflict,
                   -12: ls.Busy, -13: ls.TooBig, -14: ls.NoShard,
                   -15: ls.VerifyFailed, -16: ls.PrivilegeError,
                   -17: ls.TLSError, -18: ls.Partial, -19: ls.InternalError}
        for code, cls in classes.items():
            self.assertEqual(cls.code, code)
            e = ls.errors.make_error(code, "detail")
            self.assertIs(type(e), cls)
            self.assertEqual((e.code, e.message, str(e)), (code, "detail", "detail"))
            self.assertNotEqual(ls.strerror(code), "unknown error code")
        self.assertEqual(ls.strerror(0), "success")
        self.assertEqual(ls.strerror(-5), "not found")
        self.assertEqual(ls.strerror(-20), "unknown error code")
        e = ls.errors.make_error(-20, "")  # a code appended later: the base class
        self.assertIs(type(e), ls.ShardError)
        self.assertEqual(e.code, -20)
        self.assertTrue(issubclass(ls.ConnectionError, builtins.ConnectionError))
        self.assertTrue(issubclass(ls.TimeoutError, builtins.TimeoutError))
        self.assertTrue(issubclass(ls.NotFound, LookupError))

    def test_map_parse_rejects(self):
        good = {"version": 3, "open_shards": 4, "database_format": "db%05d",
                "credentials": {"user": "u", "password_env": "LIBSHARD_PASSWORD"},
                "objects": {"pins": 1}, "mappings": {},
                "pairs": {"A": {"master": "127.0.0.1:1"},
                          "B": {"master": "127.0.0.1:2"}},
                "id_shards": [{"range": [0, 1], "pair": "A"},
                              {"range": [2, 3], "pair": "B"}]}
        m = ls.Map.parse(json.dumps(good))
        self.assertEqual((m.version, m.open_shards, m.mod_count), (3, 4, 0))
        self.assertEqual(m.pairs, ["A", "B"])
        self.assertEqual(m.pair_of(3), "B")
        self.assertEqual(m.pair_addrs("A"), ("127.0.0.1:1", None))
        m.close()
        m.close()  # idempotent
        self.assertTrue(m.closed)
        self.assertRaises(ls.Invalid, lambda: m.version)
        bad = dict(good, id_shards=[{"range": [0, 2], "pair": "A"},
                                    {"range": [2, 3], "pair": "B"}])
        e = self.assertRaisesShard(ls.MapError, -3, ls.Map.parse, bad)
        self.assertIn("id_shards", e.message)
        self.assertRaisesShard(ls.MapError, -3, ls.Map.parse, b"{")
        # The length is passed: text after a NUL byte is not cut off.
        self.assertRaisesShard(ls.MapError, -3, ls.Map.parse,
                               json.dumps(good).encode() + b"\0garbage")
        self.assertRaisesShard(ls.IOFailure, -4, ls.Map.load,
                               "/nonexistent/libshard/map.json")
        self.assertRaisesShard(ls.Invalid, -1, ls.Map.load, "a\0b")


    # The structs the binding shares with C, as ctypes lays them out, and
    # the C names they mirror (include/libshard.h).
    STRUCTS = (("Options", "shard_options"), ("Item", "shard_item"),
               ("CEdge", "shard_edge"), ("MoveOptions", "shard_move_options"),
               ("CMoveReport", "shard_move_report"),
               ("CFailoverReport", "shard_failover_report"),
               ("FailoverOptions", "shard_failover_options"),
               ("ImportOptions", "shard_import_options"),
               ("CImportReport", "shard_import_report"),
               ("CRebalanceMove", "shard_rebalance_move"),
               ("CRebalancePair", "shard_rebalance_pair"),
               ("RebalanceOptions", "shard_rebalance_options"))
    # (module, its name, the header's): every value the binding repeats.
    MACROS = tuple((ls._lib, n, "SHARD_" + n) for n in (
        "OPTIONS_VERSION", "MOVE_OPTIONS_VERSION", "MOVE_DRY_RUN",
        "MOVE_KEEP_SOURCE", "FAILOVER_FORCE", "DELETE_HARD", "IMPORT_DRY_RUN",
        "IMPORT_OPTIONS_VERSION", "REBALANCE_OPTIONS_VERSION",
        "FAILOVER_OPTIONS_VERSION", "MOVE_REPORT_VERSION",
        "FAILOVER_REPORT_VERSION", "IMPORT_REPORT_VERSION")) + tuple(
        (ls, n, "SHARD_" + n) for n in (
            "ANY", "SEQ_NOW", "SEQ_NONE", "LOG_ERROR", "LOG_WARN", "LOG_INFO",
            "LOG_DEBUG", "MAX_SHARD", "MAX_TYPE", "MAX_LOCAL",
            "MAX_MOD_SHARDS", "KEY_MAX", "REBALANCE_BY_BYTES",
            "REBALANCE_BY_WRITES"))

    def test_struct_layouts_match_the_header(self):
        """Every field of every shared struct at the offset and size that
        the C compiler gives it, the same sizeof, and the same versions and
        flags: a program compiled against include/libshard.h prints them
        (it does not compile when the binding names a field C lacks)."""
        cc = shutil.which(os.environ.get("CC", "cc"))
        if not cc:
            self.skipTest("no C compiler")
        want, lines = {}, ["#include <libshard.h>", "#include <stddef.h>",
                           "#include <stdio.h>", "int main(void)", "{"]
        for py, c in self.STRUCTS:
            cls = getattr(ls._lib, py)
            want[(c, "sizeof")] = (ctypes.sizeof(cls), ctypes.alignment(cls))
            lines.append(f'    printf("{c} sizeof %zu %zu\\n", sizeof({c}), '
                         f'_Alignof({c}));')
            for field, _type in cls._fields_:
                d = getattr(cls, field)
                want[(c, field)] = (d.offset, d.size)
                lines.append(f'    printf("{c} {field} %zu %zu\\n", '
                             f'offsetof({c}, {field}), '
                             f'sizeof((({c} *)0)->{field}));')
        for mod, py, c in self.MACROS:
            want[(c, "value")] = (getattr(mod, py), 0)
            lines.append(f'    printf("{c} value %lld 0\\n", (long long)({c}));')
        lines += ["    return 0;", "}"]
        with tempfile.TemporaryDirectory() as tmp:
            src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
            with open(src, "w") as f:
                f.write("\n".join(lines) + "\n")
            p = subprocess.run(
                [cc, "-std=c11", "-I", os.path.join(ROOT, "include"), "-o",
                 exe, src], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            out = subprocess.run([exe], capture_output=True, text=True,
                                 check=True, timeout=60).stdout
        have = {}
        for line in out.splitlines():
            c, field, a, b = line.split()
            have[(c, field)] = (int(a), int(b))
        # (C's, the binding's) for what differs: (offset, size), (sizeof,
        # alignment), or (value, 0)
        differ = {k: (have.get(k), v) for k, v in want.items()
                  if have.get(k) != v}
        self.assertEqual(differ, {})
        self.assertEqual(set(have), set(want))

    def test_move_options(self):
        """Version 2 with its fields, the strings kept alive by the struct;
        bad values refused before any C call (this needs no server)."""
        o, keep = ls.Context._move_options(
            reverse_window_s=600, max_rows_per_second=(1 << 64) - 1,
            max_load={"Threads_running": 50, "Threads_connected": 900},
            postpone_cutover_file=pathlib.Path("/nonexistent/postpone"))
        del keep
        gc.collect()
        self.assertEqual(o.version, 2)
        self.assertEqual((o.reverse_window_s, o.max_rows_per_second),
                         (600, (1 << 64) - 1))
        self.assertEqual(o.max_load,
                         b"Threads_running=50,Threads_connected=900")
        self.assertEqual(o.postpone_cutover_file, b"/nonexistent/postpone")
        o, _ = ls.Context._move_options()  # SHARD_MOVE_OPTIONS_INIT
        self.assertEqual(
            (o.flags, o.copy_threads, o.batch_rows, o.max_lag_ms,
             o.fence_timeout_s, o.cutover_attempts, o.catchup_timeout_s,
             o.reverse_window_s, o.max_rows_per_second, o.max_load,
             o.postpone_cutover_file),
            (0, 4, 2000, 500, 2, 20, 3600, 0, 0, None, None))
        o, _ = ls.Context._move_options(max_load=b"Threads_running=5")
        self.assertEqual(o.max_load, b"Threads_running=5")
        for bad, cls, text in BAD_MOVE_OPTIONS:
            with self.assertRaises(cls, msg=bad) as cm:
                ls.Context._move_options(**bad)
            self.assertIn(text, str(cm.exception), bad)

    def header(self):
        with open(os.path.join(ROOT, "include", "libshard.h")) as f:
            return f.read()

    def test_codes_match_the_header(self):
        """The classes are the code table: each SHARD_E* of the header has
        the class of its code and name, and nothing else is one."""
        codes = {int(v): n for n, v in re.findall(
            r"#define (SHARD_E[A-Z]+)\s+(-\d+)", self.header())}
        self.assertEqual(ls.CODES, codes)
        for code, name in codes.items():
            cls = ls.error_class(code)
            self.assertEqual((cls.code, cls.c_name), (code, name))
            self.assertEqual(ls.errors.make_error(code, "x").name, name)
            self.assertTrue(cls.__doc__.startswith(name), cls)
        self.assertIs(ls.error_class(-(len(codes) + 1)), ls.ShardError)

    def test_every_function_bound(self):
        """Every public function of the header has a prototype, and the
        package uses each one (lib.NAME, or "NAME" for a free function
        that a handle class names, in its sources)."""
        declared = set(re.findall(r"SHARD_EXPORT[^;(]*?\b(shard_\w+)\s*\(",
                                  self.header()))
        self.assertGreater(len(declared), 90)
        self.assertEqual(set(ls._lib.PROTOTYPES), declared)
        pkg = os.path.dirname(ls.__file__)
        source = ""
        for name in os.listdir(pkg):
            if name.endswith(".py"):
                with open(os.path.join(pkg, name)) as f:
                    source += f.read()
        uncalled = sorted(n for n in declared if not re.search(
            rf'lib\.{n}\b|"{n}"', source))
        self.assertEqual(uncalled, [])

    # Each public C function, and the binding's call that runs it (a
    # method, a property or a function, as this file calls it).
    # BINDINGS-BEGIN
    BINDINGS = {
        "shard_strerror": "ls.strerror(", "shard_errmsg": ".message",
        "shard_version": "ls.version(", "shard_version_num": "ls.version_num(",
        "shard_global_init": "global_init(",
        "shard_global_cleanup": "global_cleanup(",
        "shard_free": ".mapping_list(", "shard_id_make": "ls.make_id(",
        "shard_id_shard": "ls.id_shard(", "shard_id_type": "ls.id_type(",
        "shard_id_local": "ls.id_local(", "shard_id_valid": "ls.id_valid(",
        "shard_id_parse": "ls.parse_id(", "shard_mod": "ls.mod_shard(",
        "shard_map_parse": "ls.Map.parse(", "shard_map_load": "ls.Map.load(",
        "shard_map_free": "m.close(", "shard_map_version": "m.version",
        "shard_map_open_shards": ".open_shards", "shard_map_mod_count":
        ".mod_count", "shard_map_pair_count": "m.pairs",
        "shard_map_pair_name": "m.pairs", "shard_map_pair_of": ".pair_of(",
        "shard_map_mod_pair_of": ".mod_pair_of(",
        "shard_map_pair_addrs": ".pair_addrs(", "shard_map_type_of":
        ".type_of(", "shard_map_type_name": ".type_name(",
        "shard_map_database": ".database(", "shard_map_mod_database":
        ".mod_database(", "shard_map_to_json": ".to_json(",
        "shard_map_summary": ".summary(", "shard_store_open": "ls.Store(",
        "shard_store_free": "store.closed", "shard_store_load": "store.load(",
        "shard_store_load_version": "store.load_version(",
        "shard_store_publish": "store.publish(", "shard_ctx_open":
        "ls.Context(", "shard_ctx_free": "c.close(", "shard_ctx_reload":
        ".reload(", "shard_ctx_map": ".map(", "shard_ctx_stats": ".stats(",
        "shard_schema_apply": ".schema_apply(", "shard_schema_check":
        ".schema_check(", "shard_object_create": "c.create(",
        "shard_object_get": "c.get(", "shard_object_patch": "c.patch(",
        "shard_object_delete": "c.delete(", "shard_object_mget": "c.mget(",
        "shard_items_free": "c.mget(", "shard_object_create_json":
        "c.create_json(", "shard_object_get_json": "c.get_json(",
        "shard_object_update": "c.update(", "shard_mapping_add":
        "c.mapping_add(", "shard_mapping_remove": "c.mapping_remove(",
        "shard_mapping_list": "c.mapping_iter(", "shard_mapping_count":
        "c.mapping_count(", "shard_kv_put": "c.kv_put(", "shard_kv_put_new":
        "c.kv_put_new(", "shard_kv_get": "c.kv_get(", "shard_kv_delete":
        "c.kv_delete(", "shard_txn_begin": "c.transaction(",
        "shard_txn_object_create": "txn.create(", "shard_txn_object_get":
        "txn.get(", "shard_txn_object_put": "txn.put(",
        "shard_txn_mapping_add": "txn.mapping_add(", "shard_txn_commit":
        "txn.commit(", "shard_txn_rollback": "txn.rollback(",
        "shard_scatter_scan": "c.scatter_iter(", "shard_scatter_count":
        "c.scatter_count(", "shard_move": "a.move(", "shard_move_resume":
        "a.move_resume(", "shard_move_abort": "a.move_abort(",
        "shard_move_status": "a.move_status(", "shard_move_phase_name":
        "ls.phase_name(", "shard_move_revert": "a.move_revert(",
        "shard_move_finish": "a.move_finish(", "shard_pair_failover":
        ".failover(", "shard_pair_failover_opts": "failover(\"MySQL002\", wait_ms=",
        "shard_legacy_resolve": "c.legacy_resolve(",
        "shard_legacy_resolve_many": "c.legacy_resolve_many(",
        "shard_import_table": "c.import_table(", "shard_import_mapping":
        "c.import_mapping(", "shard_fleet_status": ".fleet_status(",
        "shard_pair_add": "a.pair_add(", "shard_pair_remove":
        "a.pair_remove(", "shard_shards_open": "a.shards_open(",
        "shard_rebalance_plan": "a.rebalance_plan(", "shard_rebalance_free":
        "plan0.moves", "shard_rebalance_moves": "plan.moves",
        "shard_rebalance_pairs": "plan.pairs", "shard_rebalance_spread":
        "plan.spread", "shard_rebalance_map_version": "plan.map_version",
        "shard_rebalance_run": "a.rebalance_run(",
    }
    # BINDINGS-END

    def test_every_function_tested(self):
        """Every public C function has its binding in BINDINGS, and this
        file calls that binding (outside the table)."""
        declared = set(re.findall(r"SHARD_EXPORT[^;(]*?\b(shard_\w+)\s*\(",
                                  self.header()))
        self.assertEqual(set(self.BINDINGS), declared)
        with open(os.path.abspath(__file__)) as f:
            me = f.read()
        me = re.sub(r"# BINDINGS-BEGIN.*# BINDINGS-END", "", me, flags=re.S)
        self.assertEqual(sorted(c for c, py in self.BINDINGS.items()
                                if py not in me), [])

    def test_docstrings_and_typing(self):
        """Every public callable has a docstring; the package is typed."""
        missing = []
        for name in ls.__all__:
            obj = getattr(ls, name)
            if isinstance(obj, type):
                if not obj.__doc__:
                    missing.append(name)
                for attr, value in vars(obj).items():
                    if attr.startswith("_") and (
                            attr != "__init__" or dataclasses.is_dataclass(obj)):
                        continue  # a dataclass's __init__ is its fields
                    fn = value.fget if isinstance(value, property) else value
                    if callable(fn) and not getattr(fn, "__doc__", None):
                        missing.append(f"{name}.{attr}")
            elif callable(obj) and not obj.__doc__:
                missing.append(name)
        for mixin in (ls.context.MoveMixin, ls.context.FleetMixin,
                      ls.context.LegacyMixin, ls.map.Handle):
            for attr, value in vars(mixin).items():
                fn = value.fget if isinstance(value, property) else value
                if not attr.startswith("_") and callable(fn) and not fn.__doc__:
                    missing.append(f"{mixin.__name__}.{attr}")
        self.assertEqual(missing, [])
        self.assertTrue(os.path.exists(os.path.join(
            os.path.dirname(ls.__file__), "py.typed")))
        self.assertEqual(ls.Context.get.__annotations__["id"], "int")

    def test_pydoc(self):
        p = subprocess.run([sys.executable, "-m", "pydoc", "libshard"],
                           cwd=PACKAGE_PARENT, env=dict(os.environ, PAGER="cat"),
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        for text in ("Missing keys", "libshard.context", "CODES"):
            self.assertIn(text, p.stdout)
        p = subprocess.run([sys.executable, "-m", "pydoc", "libshard.Context"],
                           cwd=PACKAGE_PARENT, env=dict(os.environ, PAGER="cat"),
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=60)
        for text in ("mapping_iter", "scatter_iter", "legacy_resolve",
                     "rebalance_plan", "fleet_status", "import_table"):
            self.assertIn(text, p.stdout)

    def test_global_init_and_cleanup(self):
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import libshard\n"
                "libshard.global_init(); libshard.global_cleanup(); print('ok')")
        p = subprocess.run([sys.executable, "-c", code, PACKAGE_PARENT],
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual((p.returncode, p.stdout), (0, "ok\n"), p.stderr)

    def test_rebalance_options(self):
        o, keep = ls.fleet._rebalance_options()  # SHARD_REBALANCE_OPTIONS_INIT
        self.assertEqual((o.version, o.by, o.threshold, o.max_moves, o.pairs,
                          o.drain, o.sample_ms), (2, 0, 0.10, 0, None, None,
                                                  5000))  # 2: versioned reports
        o, keep = ls.fleet._rebalance_options(
            by="writes", pairs=["A", "B"], drain="C", max_moves=3)
        self.assertEqual((o.by, o.pairs, o.drain, o.max_moves),
                         (1, b"A,B", b"C", 3))
        for bad, cls in (({"by": "size"}, ls.Invalid), ({"by": True}, ls.Invalid),
                         ({"threshold": 0}, ls.Invalid),
                         ({"threshold": "0.1"}, TypeError),
                         ({"max_moves": -1}, ls.Invalid),
                         ({"pairs": []}, ls.Invalid),
                         ({"drain": "A\0B"}, ls.Invalid),
                         ({"sample_ms": 1.5}, TypeError)):
            with self.assertRaises(cls, msg=bad):
                ls.fleet._rebalance_options(**bad)
            self.assertTrue(issubclass(cls, (ValueError, TypeError)))

    def test_unclosed_context_warns(self):
        # Servers are connected lazily: a map of unreachable ones opens.
        doc = {"version": 1, "open_shards": 1,
               "credentials": {"user": "u", "password_env": "LIBSHARD_PASSWORD"},
               "objects": {"pins": 1},
               "pairs": {"A": {"master": f"127.0.0.1:{free_port()}"}},
               "id_shards": [{"range": [0, 0], "pair": "A"}]}
        os.environ.setdefault("LIBSHARD_PASSWORD", "x")
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(doc, f)
            f.flush()
            c = ls.Context(f.name, refresh_interval_ms=10,
                           log=lambda *a: None)
            self.assertIn("Context", repr(c))
            with self.assertWarns(ResourceWarning):
                del c
                gc.collect()


# ---------------------------------------------------------------- one pair

class OnePairTests(ServerCase):

    def test_map(self):
        with ls.Map.load(self.server_map) as m:
            with open(self.server_map) as f:
                doc = json.load(f)
            self.assertEqual(m.version, 1)
            self.assertEqual(m.open_shards, 8)
            self.assertEqual(m.mod_count, 4)
            self.assertEqual(m.pairs, ["MySQL001"])
            for s in range(8):
                self.assertEqual(m.pair_of(s), "MySQL001")
            self.assertRaisesShard(ls.NoShard, -14, m.pair_of, 8)
            self.assertEqual(m.mod_pair_of(3), "MySQL001")
            self.assertRaises(ls.ShardError, m.mod_pair_of, 4)
            pair = doc["pairs"]["MySQL001"]
            self.assertEqual(m.pair_addrs("MySQL001"),
                             (pair["master"], pair["standby"]))
            self.assertRaisesShard(ls.NotFound, -5, m.pair_addrs, "MySQL999")
            self.assertEqual(m.type_of("pins"), 1)
            self.assertEqual(m.type_of(b"users"), 3)
            self.assertRaisesShard(ls.NotFound, -5, m.type_of, "nope")
            self.assertRaisesShard(ls.Invalid, -1, m.type_of, "pins\0x")
            self.assertEqual(m.type_name(2), "boards")
            self.assertRaises(ls.ShardError, m.type_name, 9)
            self.assertEqual(m.database(3), "db00003")
            self.assertEqual(m.database(65535), "db65535")
            self.assertRaisesShard(ls.Invalid, -1, m.database, 65536)
            self.assertEqual(m.mod_database(2), "modshard00002")
            self.assertRaisesShard(ls.NoShard, -14, m.mod_database, 4)
            text = m.to_json()
            self.assertEqual(json.loads(text)["pairs"], doc["pairs"])
            with ls.Map.parse(text) as again:
                self.assertEqual(again.to_json(), text)
            self.assertIn("map version 1", m.summary())
            self.assertIn("version 1", repr(m))

    def test_context_options(self):
        # Defaults (SHARD_OPTIONS_INIT) and a context manager.
        with ls.Context(self.map_path) as c:
            self.assertFalse(c.closed)
            self.assertEqual(c.map().open_shards, 8)
        self.assertTrue(c.closed)
        self.assertRaisesShard(ls.Invalid, -1, c.map)
        c.close()  # idempotent
        # The struct's fields land where C reads them: each is checked.
        for bad in ({"pool_size": 0}, {"retry_max": 0},
                    {"connect_timeout_ms": 0}, {"read_timeout_ms": 0},
                    {"write_timeout_ms": 0}):
            e = self.assertRaisesShard(ls.Invalid, -1, ls.Context,
                                       self.map_path, **bad)
            self.assertIn("shard_options", e.message)
        with self.assertRaises(TypeError):
            ls.Context(self.map_path, pool=3)
        self.assertRaisesShard(ls.Invalid, -1, ls.Context, self.map_path,
                               pool_size=-1)
        self.assertRaisesShard(ls.IOFailure, -4, ls.Context,
                               os.path.join(self.base, "absent.json"))

    def test_other_account(self):
        with ls.Context(self.map_path, user="shard",
                        password_env="LIBSHARD_PASSWORD",
                        refresh_interval_ms=0) as c:
            nobody = ls.make_id(0, 3, ls.MAX_LOCAL)  # no such user
            self.assertEqual(c.mapping_count("user_likes_pins", nobody), 0)
        with ls.Context(self.map_path, user="nobody",
                        password_env="LIBSHARD_PASSWORD", retry_max=1,
                        refresh_interval_ms=0) as c:
            e = self.assertRaisesShard(ls.PrivilegeError, -16, c.get,
                                       ls.make_id(0, 1, 1))
            self.assertIn("nobody", e.message)
            self.assertNotIn(os.environ["LIBSHARD_PASSWORD"], e.message)
        self.assertRaises(ls.ShardError, ls.Context, self.map_path,
                          user="shard", password_env="LIBSHARD_PY_UNSET_VAR")
        self.assertRaisesShard(ls.Invalid, -1, ls.Context, self.map_path,
                               user="")
        self.assertRaisesShard(ls.Invalid, -1, ls.Context, self.map_path,
                               user="a\0b")

    def test_connection_error(self):
        with open(self.map_path) as f:
            doc = json.load(f)
        doc["pairs"]["MySQL001"]["master"] = f"127.0.0.1:{free_port()}"
        path = os.path.join(self.base, "dead.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        with ls.Context(path, connect_timeout_ms=500, retry_budget_ms=100,
                        retry_max=1, refresh_interval_ms=0) as c:
            e = self.assertRaisesShard(ls.ConnectionError, -7, c.get,
                                       ls.make_id(0, 1, 1))
            self.assertIsInstance(e, builtins.ConnectionError)
            self.assertIn("MySQL001", e.message)
            # mget reports the element instead of raising, unless asked.
            out = c.mget([ls.make_id(0, 1, 1)])
            self.assertIsInstance(out[0], ls.ConnectionError)
            e = self.assertRaisesShard(ls.Partial, -18, c.mget,
                                       [ls.make_id(0, 1, 1)], raise_errors=True)
            self.assertIsInstance(e.errors[0], ls.ConnectionError)

    def test_store_publish_reload_and_log(self):
        store = ls.Store(self.map_path)
        with store, store.load() as m1:
            v = m1.version
            doc = json.loads(m1.to_json())
            doc["version"] = v + 1
            with ls.Map.parse(doc) as m2:
                # not newer than what it claims to replace
                self.assertRaisesShard(ls.Invalid, -1, store.publish, m2, v + 7)
                store.publish(m2, v)
            doc["version"] = v + 2
            with ls.Map.parse(doc) as m3:
                # the store moved on since version v
                self.assertRaisesShard(ls.Conflict, -11, store.publish, m3, v)
            with store.load() as m4:
                self.assertEqual(m4.version, v + 1)
            with store.load_version(v + 1) as m5:  # a file store: its current one
                self.assertEqual(m5.version, v + 1)
            self.assertRaisesShard(ls.NotFound, -5, store.load_version, v)
        self.assertTrue(store.closed)
        with self.ctx.map() as before:
            self.assertEqual(before.version, v)
        del self.log[:]
        self.ctx.reload()
        with self.ctx.map() as after:
            self.assertEqual(after.version, v + 1)
        self.assertIn((ls.LOG_INFO, f"shard map version {v + 1} replaces "
                       f"version {v}"), self.log)
        self.ctx.reload()  # same version: nothing to do

    def test_schema_apply(self):
        self.assertTrue(self.progress)
        what, done, total = self.progress[-1]
        self.assertIsInstance(what, str)
        self.assertEqual(done, total)
        self.admin.schema_apply()  # idempotent, no callback
        # Not the application's account: it may not create databases.
        self.assertRaisesShard(ls.PrivilegeError, -16, self.ctx.schema_apply)

        class Stop(Exception):
            pass

        def boom(*a):
            raise Stop()
        self.assertRaises(Stop, self.admin.schema_apply, progress=boom)

    def test_objects(self):
        c = self.ctx
        uid = c.create("users", {"name": "Ada", "city": "Zürich 🚀"})
        self.assertTrue(ls.id_valid(uid))
        self.assertEqual(ls.id_type(uid), 3)
        self.assertLess(ls.id_shard(uid), 8)
        self.assertEqual(json.loads(c.get(uid)),
                         {"name": "Ada", "city": "Zürich 🚀"})
        pid = c.create(1, '{"title": "x"}', shard=5)
        self.assertEqual((ls.id_shard(pid), ls.id_type(pid)), (5, 1))
        near = c.create("boards", b'{"n": 1}', near=pid)
        self.assertEqual(ls.id_shard(near), 5)
        # A JSON NUL escape survives; a raw NUL byte is not cut off but
        # refused, since the whole length is passed.
        nid = c.create("pins", '{"s": "a\\u0000b", "t": "\\u0000"}', shard=1)
        self.assertEqual(json.loads(c.get(nid)), {"s": "a\0b", "t": "\0"})
        self.assertRaisesShard(ls.Invalid, -1, c.create, "pins",
                               b'{"a": 1}\0{"b": 2}')
        self.assertRaisesShard(ls.Invalid, -1, c.create, "pins", b"[1, 2]")
        self.assertRaisesShard(ls.Invalid, -1, c.create, "pins", "{")
        self.assertRaisesShard(ls.Invalid, -1, c.create, 99, "{}")
        # An unknown type name is a bad argument: Invalid, a ValueError.
        e = self.assertRaisesShard(ls.Invalid, -1, c.create, "nope", "{}")
        self.assertIsInstance(e, ValueError)
        self.assertIn("'nope'", e.message)
        self.assertIn("pins", e.message)
        self.assertRaisesShard(ls.Invalid, -1, c.create, "pins", "{}",
                               shard=65536)
        self.assertRaisesShard(ls.NoShard, -14, c.create, "pins", "{}",
                               shard=100)
        self.assertRaisesShard(ls.Invalid, -1, c.create, "pins", "{}",
                               near=12345)
        # patch (RFC 7386)
        out = c.patch(uid, {"city": None, "age": 36})
        self.assertEqual(json.loads(out), {"name": "Ada", "age": 36})
        self.assertEqual(json.loads(c.get(uid)), json.loads(out))
        self.assertRaisesShard(ls.Invalid, -1, c.patch, uid, "[]")
        # missing, soft and hard delete
        missing = ls.make_id(ls.id_shard(uid), 3, ls.MAX_LOCAL)
        e = self.assertRaisesShard(ls.NotFound, -5, c.get, missing)
        self.assertIsInstance(e, LookupError)
        self.assertRaisesShard(ls.NotFound, -5, c.patch, missing, "{}")
        self.assertRaisesShard(ls.Invalid, -1, c.get, 5)
        c.delete(uid)
        self.assertRaisesShard(ls.NotFound, -5, c.get, uid)
        c.delete(pid, hard=True)
        self.assertRaisesShard(ls.NotFound, -5, c.get, pid)
        self.assertRaisesShard(ls.NotFound, -5, c.delete, pid, hard=True)
        with self.assertRaises(TypeError):
            c.create("pins", 42)

    def test_mget(self):
        c = self.ctx
        a = c.create("pins", {"n": "a"}, shard=0)
        b = c.create("pins", {"n": "b"}, shard=7)
        d = c.create("boards", {"n": "d"}, shard=3)
        gone = c.create("pins", {"n": "gone"}, shard=7)
        c.delete(gone)
        missing = ls.make_id(2, 1, ls.MAX_LOCAL)
        ids = [b, missing, a, d, a, gone, b]
        out = c.mget(ids)
        self.assertEqual([json.loads(x)["n"] if x else None for x in out],
                         ["b", None, "a", "d", "a", None, "b"])
        self.assertEqual(c.mget([]), [])
        self.assertEqual(c.mget(iter([a])), [c.get(a)])
        # An invalid ID fails alone; asked to, mget raises Partial.
        out = c.mget([a, 5, missing])
        self.assertEqual(out[0], c.get(a))
        self.assertIsInstance(out[1], ls.Invalid)
        self.assertEqual(out[1].code, -1)
        self.assertIsNone(out[2])
        e = self.assertRaisesShard(ls.Partial, -18, c.mget, [a, 5, missing],
                                   raise_errors=True)
        self.assertEqual(list(e.errors), [1])
        self.assertEqual(e.results[0], c.get(a))
        self.assertIsNone(e.results[2])
        self.assertRaisesShard(ls.Invalid, -1, c.mget, [a, -1])

    def test_mappings(self):
        c = self.ctx
        board = c.create("boards", {"name": "b"}, shard=2)
        pins = [c.create("pins", {"i": i}, shard=6) for i in range(3)]
        for i, p in enumerate(pins):
            c.mapping_add("board_has_pins", board, p, (i + 1) * 10)
        self.assertEqual(c.mapping_list("board_has_pins", board),
                         [(pins[2], 30), (pins[1], 20), (pins[0], 10)])
        self.assertEqual(c.mapping_list("board_has_pins", board, limit=2),
                         [ls.Edge(pins[2], 30), ls.Edge(pins[1], 20)])
        got = c.mapping_list("board_has_pins", board, before=30, limit=1)
        self.assertEqual((got[0].to, got[0].seq), (pins[1], 20))
        self.assertEqual(c.mapping_count("board_has_pins", board), 3)
        # the reverse mapping, on the shard of `to`
        self.assertEqual(c.mapping_list("pin_owned_by_board", pins[0]),
                         [(board, 10)])
        c.mapping_add("board_has_pins", board, pins[0], 40)  # re-sequence
        self.assertEqual(c.mapping_list("board_has_pins", board, limit=1),
                         [(pins[0], 40)])
        self.assertEqual(c.mapping_count("board_has_pins", board), 3)
        c.mapping_remove("board_has_pins", board, pins[0])
        self.assertEqual(c.mapping_count("board_has_pins", board), 2)
        self.assertEqual(c.mapping_list("pin_owned_by_board", pins[0]), [])
        self.assertRaisesShard(ls.NotFound, -5, c.mapping_remove,
                               "board_has_pins", board, pins[0])
        # SEQ_NOW: the current time in microseconds
        t0 = time.time()
        c.mapping_add("user_likes_pins", board, pins[1])
        seq = c.mapping_list("user_likes_pins", board)[0].seq
        self.assertLess(abs(seq / 1e6 - t0), 60)
        self.assertEqual(c.mapping_list("user_likes_pins", pins[2]), [])
        self.assertRaisesShard(ls.Invalid, -1, c.mapping_add, "nope", board,
                               pins[0])
        self.assertRaisesShard(ls.Invalid, -1, c.mapping_count,
                               "board_has_pins\0x", board)
        self.assertRaisesShard(ls.Invalid, -1, c.mapping_add, "board_has_pins",
                               board, pins[0], 1 << 63)

    def test_kv_hostile_bytes(self):
        c = self.ctx
        t = "users_by_email"
        keys = [b"", b"\0", b"a\0b", b"a", b"a\0", b"\xff\xfe\x80invalid utf-8",
                bytes(range(256)), b"k" * ls.KEY_MAX, "ünïcode".encode()]
        values = [bytes(range(256)) * 3, b"", b"\0" * 10, b"\xc3\x28",
                  b"x" * (1 << 20), b"'; DROP TABLE users_by_email; --",
                  b"\\", b"a\0", b"last"]
        for k, v in zip(keys, values):
            c.kv_put(t, k, v)
        for k, v in zip(keys, values):
            self.assertEqual(c.kv_get(t, k), v, k)
        self.assertEqual(c.kv_get(t, "ünïcode"), b"last")  # str as UTF-8
        c.kv_put(t, b"a\0", b"replaced")
        self.assertEqual(c.kv_get(t, b"a\0"), b"replaced")
        self.assertEqual(c.kv_get(t, b"a"), values[3])
        e = self.assertRaisesShard(ls.Exists, -6, c.kv_put_new, t, b"\0", b"v")
        self.assertIn(t, e.message)
        self.assertEqual(c.kv_get(t, b"\0"), values[1])
        c.kv_put_new(t, b"\0\0new", b"claimed")
        self.assertEqual(c.kv_get(t, b"\0\0new"), b"claimed")
        for k in keys:
            c.kv_delete(t, k)
            self.assertRaisesShard(ls.NotFound, -5, c.kv_get, t, k)
            self.assertRaisesShard(ls.NotFound, -5, c.kv_delete, t, k)
        # the other table is a different key space
        c.kv_put("users_by_name", b"n", b"1")
        self.assertRaisesShard(ls.NotFound, -5, c.kv_get, t, b"n")
        self.assertRaisesShard(ls.Invalid, -1, c.kv_put, t, b"k" * 1025, b"")
        self.assertRaisesShard(ls.Invalid, -1, c.kv_get, "nope", b"k")
        self.assertRaisesShard(ls.Invalid, -1, c.kv_get, t + "\0", b"k")
        with self.assertRaises(TypeError):
            c.kv_put(t, 1, b"v")

    def test_transaction_commit(self):
        c = self.ctx
        with c.transaction(4) as txn:
            self.assertTrue(txn.active)
            pin = txn.create("pins", {"title": "t"})
            board = txn.create(2, '{"name": "b"}')
            self.assertEqual(ls.id_shard(pin), 4)
            txn.mapping_add("board_has_pins", board, pin, 7)
            self.assertEqual(json.loads(txn.get(pin)), {"title": "t"})
            txn.put(pin, {"title": "u", "z": "\0"})
            # not visible outside before the commit
            self.assertRaises(ls.NotFound, c.get, pin)
        self.assertFalse(txn.active)
        self.assertEqual(json.loads(c.get(pin)), {"title": "u", "z": "\0"})
        self.assertEqual(c.mapping_list("board_has_pins", board), [(pin, 7)])
        self.assertRaisesShard(ls.Invalid, -1, txn.commit)
        txn.rollback()  # ended: nothing to do
        txn = c.transaction(4)  # without the with block
        explicit = txn.create("pins", {"e": 1})
        txn.commit()
        self.assertFalse(txn.active)
        self.assertEqual(c.get(explicit, decode=True), {"e": 1})

    def test_transaction_rollback(self):
        c = self.ctx

        class Oops(Exception):
            pass

        with self.assertRaises(Oops):
            with c.transaction(4) as txn:
                pin = txn.create("pins", {"title": "never"})
                raise Oops()
        self.assertFalse(txn.active)
        self.assertRaises(ls.NotFound, c.get, pin)
        # explicit rollback; errors inside a transaction
        txn = c.transaction(4)
        other = c.create("pins", {}, shard=5)
        self.assertRaisesShard(ls.Invalid, -1, txn.get, other)  # other shard
        self.assertRaisesShard(ls.Invalid, -1, txn.put, other, "{}")
        self.assertRaisesShard(ls.Invalid, -1, txn.create, "pins", "[]")
        txn.rollback()
        self.assertRaisesShard(ls.Invalid, -1, txn.create, "pins", "{}")
        self.assertRaisesShard(ls.NoShard, -14, c.transaction, 100)
        # closing a context rolls back what is still open on it
        with ls.Context(self.map_path, refresh_interval_ms=0) as c2:
            txn = c2.transaction(4)
            pin = txn.create("pins", {"title": "closed"})
        self.assertFalse(txn.active)
        self.assertRaises(ls.NotFound, c.get, pin)
        # an abandoned transaction is rolled back, with a ResourceWarning
        txn = c.transaction(4)
        pin = txn.create("pins", {"title": "abandoned"})
        with self.assertWarns(ResourceWarning):
            del txn
            gc.collect()
        self.assertRaises(ls.NotFound, c.get, pin)

    def test_scatter(self):
        c = self.ctx
        before = c.scatter_count("users")
        ids = [c.create("users", {"i": i}, shard=s)
               for i, s in enumerate((0, 3, 3, 7))]
        c.delete(ids[1])
        self.assertEqual(c.scatter_count(3), before + 3)
        seen = {}
        self.assertFalse(c.scatter_scan("users",
                                        lambda id, js: seen.update({id: js})))
        self.assertEqual(len(seen), before + 3)
        self.assertNotIn(ids[1], seen)
        self.assertEqual(json.loads(seen[ids[3]]), {"i": 3})
        got = []
        self.assertTrue(c.scatter_scan("users", lambda id, js: got.append(id)
                                       or len(got) == 2))
        self.assertEqual(len(got), 2)

        def boom(id, js):
            raise KeyError(id)
        self.assertRaises(KeyError, c.scatter_scan, "users", boom)
        self.assertRaisesShard(ls.Invalid, -1, c.scatter_count, 99)

    def test_threads_share_a_context(self):
        c, errors, ids = self.ctx, [], []

        def work(n):
            try:
                for i in range(10):
                    ids.append(c.create("pins", {"t": n, "i": i}))
                # each thread reads the detail of its own failure
                missing = ls.make_id(n, 1, ls.MAX_LOCAL - n)
                try:
                    c.get(missing)
                except ls.NotFound as e:
                    assert str(missing) in e.message, e.message
                else:
                    raise AssertionError("no NotFound")
            except BaseException as e:
                errors.append(e)
        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(c.mget(ids)), 80)
        self.assertNotIn(None, c.mget(ids))

    def test_stats(self):
        """Context.stats(): Prometheus text, exact under threads, served
        from an HTTP endpoint of the application's own."""
        import http.server
        import urllib.request
        sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')
        with ls.Context(self.map_path, refresh_interval_ms=0) as c:
            ids = [c.create("pins", {"s": i}, shard=i % 8) for i in range(8)]
            missing = ls.make_id(2, 1, ls.MAX_LOCAL)
            self.assertRaisesShard(ls.NotFound, -5, c.get, missing)
            errors = []

            def work(n):
                try:
                    for i in range(5):
                        c.get(ids[(n + i) % 8])
                except BaseException as e:
                    errors.append(e)
            threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])

            class Handler(http.server.BaseHTTPRequestHandler):
                def do_GET(self):
                    body = c.stats().encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

                def log_message(self, *args):
                    pass
            srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
            th = threading.Thread(target=srv.handle_request)
            th.start()
            url = "http://127.0.0.1:%d/metrics" % srv.server_address[1]
            with urllib.request.urlopen(url, timeout=30) as r:
                ctype = r.headers["Content-Type"]
                text = r.read().decode()
            th.join()
            srv.server_close()
        self.assertEqual(ctype, "text/plain; version=0.0.4")
        values, helps, types = {}, [], []
        for line in text.splitlines():
            if line.startswith("# HELP "):
                helps.append(line.split()[2])
            elif line.startswith("# TYPE "):
                types.append(line.split()[2])
            else:
                m = sample.match(line)
                self.assertTrue(m, line)
                values[m.group(1) + (m.group(2) or "")] = float(m.group(3))
        self.assertEqual(sorted(helps), sorted(set(helps)))
        self.assertEqual(helps, types)
        self.assertEqual(values['libshard_calls_total{op="object_create"}'], 8)
        self.assertEqual(values['libshard_calls_total{op="object_get"}'], 41)
        self.assertEqual(values['libshard_errors_total{op="object_get",'
                                'code="SHARD_ENOTFOUND"}'], 1)
        self.assertEqual(values['libshard_call_duration_seconds_count'
                                '{op="object_get"}'], 41)
        self.assertEqual(values['libshard_call_duration_seconds_bucket'
                                '{op="object_get",le="+Inf"}'], 41)
        self.assertEqual(values["libshard_map_reloads_total"], 1)
        pools = [k for k in values if k.startswith("libshard_pool_connections{")]
        self.assertEqual(len(pools), 2)  # the one master: idle and busy
        self.assertRaisesShard(ls.Invalid, -1, c.stats)  # closed

    def test_example(self):
        example = os.path.join(HERE, "example.py")
        admin = ["--apply-schema", "--user", "shardadmin",
                 "--password-env", "LIBSHARD_PASSWORD"]
        for i, extra in enumerate((admin, [])):
            p = subprocess.run([sys.executable, example, self.map_path] + extra,
                               stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertRegex(p.stdout, r"board \d+ has 1 pin\(s\):\n  pin \d+")
            self.assertIn("'name': 'Ada'", p.stdout)
            self.assertIn("(not found)", p.stdout)
            self.assertEqual("already taken" in p.stdout, i == 1)
        # The map from $LIBSHARD_MAP when no argument names one.
        p = subprocess.run([sys.executable, example],
                           env=dict(os.environ, LIBSHARD_MAP=self.map_path),
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"board \d+ has 1 pin\(s\):\n  pin \d+")
        p = subprocess.run([sys.executable, example, "/nonexistent.json"],
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("SHARD_EIO", p.stderr)
        env = {k: v for k, v in os.environ.items() if k != "LIBSHARD_MAP"}
        p = subprocess.run([sys.executable, example], env=env,
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("LIBSHARD_MAP", p.stderr)

    def test_decode_and_the_missing_key_rule(self):
        """decode=True gives dicts; a missing key is `default` when given
        and NotFound when not, for get, kv_get, Transaction.get and mget
        (whose default is None)."""
        c = self.ctx
        doc = {"name": "Ada", "n": [1, 2.5, None], "z": "\0"}
        a = c.create("users", doc, shard=1)
        missing = ls.make_id(1, 3, ls.MAX_LOCAL)
        self.assertEqual(c.get(a, decode=True), doc)
        self.assertEqual(json.loads(c.get(a)), doc)
        self.assertEqual(c.mget([a, missing], decode=True), [doc, None])
        self.assertEqual(c.mget([missing, a], default={}), [{}, c.get(a)])
        self.assertEqual(c.patch(a, {"n": None}, decode=True),
                         {"name": "Ada", "z": "\0"})
        self.assertIsNone(c.get(missing, default=None))
        self.assertEqual(c.get(missing, default="none"), "none")
        self.assertRaisesShard(ls.NotFound, -5, c.get, missing)
        self.assertRaisesShard(ls.Invalid, -1, c.get, 5, default=None)
        self.assertIsNone(c.kv_get("users_by_name", b"\0absent", default=None))
        self.assertRaisesShard(ls.NotFound, -5, c.kv_get, "users_by_name",
                               b"\0absent")
        with c.transaction(1) as txn:
            self.assertEqual(txn.get(a, decode=True), {"name": "Ada", "z": "\0"})
            self.assertEqual(txn.get(missing, default=0), 0)
            self.assertRaisesShard(ls.NotFound, -5, txn.get, missing)
        with ls.Context(self.map_path, refresh_interval_ms=0,
                        decode=True) as d:
            self.assertEqual(d.get(a), {"name": "Ada", "z": "\0"})
            self.assertIsInstance(d.get(a, decode=False), str)
            self.assertEqual(d.mget([a]), [{"name": "Ada", "z": "\0"}])
            with d.transaction(1) as txn:
                self.assertEqual(txn.get(a)["name"], "Ada")
            self.assertEqual(next(i for i in d.scatter_iter("users")
                                  if i[0] == a)[1]["name"], "Ada")

    def test_jansson_calls(self):
        """create_json, get_json and update: the C API's jansson
        conveniences, with dicts."""
        c = self.ctx
        a = c.create_json("pins", {"t": "x", "k": [1, {"d": None}]}, shard=2)
        self.assertEqual(ls.id_shard(a), 2)
        self.assertEqual(c.get_json(a), {"t": "x", "k": [1, {"d": None}]})
        self.assertEqual(c.get(a, decode=True), c.get_json(a))
        near = c.create_json("boards", {"n": "ü\0"}, near=a)
        self.assertEqual((ls.id_shard(near), c.get_json(near)), (2, {"n": "ü\0"}))
        missing = ls.make_id(2, 1, ls.MAX_LOCAL)
        self.assertIsNone(c.get_json(missing, default=None))
        self.assertRaisesShard(ls.NotFound, -5, c.get_json, missing)

        def bump(obj):
            obj["n"] = obj.get("n", 0) + 1
        for _ in range(3):
            out = c.update(a, bump)
        self.assertEqual(out["n"], 3)
        self.assertEqual(c.update(a, lambda obj: {"only": True}), {"only": True})
        self.assertEqual(c.get(a, decode=True), {"only": True})

        class Stop(Exception):
            pass

        def boom(obj):
            obj["never"] = 1
            raise Stop()
        self.assertRaises(Stop, c.update, a, boom)
        self.assertRaises(TypeError, c.update, a, lambda obj: [1])
        self.assertEqual(c.get(a, decode=True), {"only": True})
        self.assertRaisesShard(ls.NotFound, -5, c.update, missing, bump)
        self.assertRaises(TypeError, c.create_json, "pins", "{}")
        self.assertRaisesShard(ls.Invalid, -1, c.create_json, "nope", {})

    def test_mapping_iter(self):
        """Pages of any size give every row once, newest first, also where
        a page boundary falls among rows of one sequence."""
        c = self.ctx
        board = c.create("boards", {}, shard=3)
        pins = [ls.make_id(3, 1, i + 1) for i in range(40)]
        for i, p in enumerate(pins):  # sequences 0..7, five rows each
            c.mapping_add("user_likes_pins", board, p, i // 5)
        c.mapping_add("user_likes_pins", board, pins[0], ls.SEQ_NONE - 1)
        whole = c.mapping_list("user_likes_pins", board)
        self.assertEqual(len(whole), 40)
        for page in (1, 2, 3, 5, 7, 40, 100):
            self.assertEqual(list(c.mapping_iter("user_likes_pins", board,
                                                 page=page)), whole, page)
        self.assertEqual(list(c.mapping_iter("user_likes_pins", board,
                                             before=3, page=4)),
                         [e for e in whole if e.seq < 3])
        it = c.mapping_iter("user_likes_pins", board, page=2)
        self.assertEqual(next(it), whole[0])
        self.assertEqual(list(c.mapping_iter("user_likes_pins", pins[1])), [])
        self.assertRaises(ls.Invalid, c.mapping_iter, "user_likes_pins",
                          board, page=0)
        self.assertRaises(ls.Invalid, c.mapping_iter, "a\0b", board)
        self.assertRaisesShard(ls.Invalid, -1, list,
                               c.mapping_iter("nope", board))

    def test_scatter_iter(self):
        c = self.ctx
        ids = [c.create("users", {"it": i}, shard=s)
               for i, s in enumerate((0, 2, 4, 6, 6))]
        scanned = {}
        c.scatter_scan("users", lambda id, js: scanned.update({id: js}))
        got = dict(c.scatter_iter("users", buffer=2))
        self.assertEqual(got, scanned)
        for i, id in enumerate(ids):
            self.assertEqual(json.loads(got[id]), {"it": i})
        self.assertEqual(dict(c.scatter_iter(3, decode=True))[ids[2]],
                         {"it": 2})
        # Leaving early stops the scan and its thread.
        threads = threading.active_count()
        it = c.scatter_iter("users", buffer=1)
        first = next(it)
        self.assertIn(first[0], got)
        it.close()
        self.assertEqual(threading.active_count(), threads)
        for _ in c.scatter_iter("users"):
            break
        gc.collect()
        self.assertEqual(threading.active_count(), threads)
        # Closing the context stops a scan still open on it.
        c2 = ls.Context(self.map_path, refresh_interval_ms=0)
        it = c2.scatter_iter("users", buffer=1)
        next(it)
        c2.close()
        self.assertEqual(threading.active_count(), threads)
        self.assertRaises(StopIteration, next, it)
        self.assertRaisesShard(ls.Invalid, -1, c.scatter_iter, "nope")
        self.assertRaisesShard(ls.Invalid, -1, list, c.scatter_iter(99))
        self.assertRaises(ls.Invalid, c.scatter_iter, "users", buffer=0)

    def test_fleet_status_and_schema_check(self):
        st = self.healthy_status()
        self.assertTrue(st["healthy"], st["problems"])
        self.assertEqual(st["problems"], [])
        self.assertEqual([p["name"] for p in st["pairs"]], ["MySQL001"])
        servers = st["pairs"][0]["servers"]
        with self.ctx.map() as m:
            self.assertEqual([s["address"] for s in servers],
                             list(m.pair_addrs("MySQL001")))
        self.assertTrue(all(s["reachable"] for s in servers))
        self.admin.schema_check()
        with self.ctx.map() as m:
            self.admin.schema_check(m)
            doc = m.to_dict()
        doc["database_format"] = "nodb%05d"
        with ls.Map.parse(doc) as other:
            e = self.assertRaisesShard(ls.MapError, -3, self.admin.schema_check,
                                       other)
        self.assertIn("nodb0000", e.message)

    LEGACY_SQL = (
        "CREATE DATABASE legacy; USE legacy;"
        "CREATE TABLE boards (id INT PRIMARY KEY, name VARCHAR(50) NOT NULL);"
        "INSERT INTO boards SELECT seq, CONCAT('board ', seq) FROM seq_1_to_5;"
        "CREATE TABLE pins (id INT PRIMARY KEY, board_id INT, title TEXT);"
        "INSERT INTO pins SELECT seq, 1 + seq % 5, CONCAT('pin ', seq)"
        " FROM seq_1_to_20;"
        "CREATE TABLE board_pins (board_id INT NOT NULL, pin_id INT NOT NULL,"
        " PRIMARY KEY (board_id, pin_id));"
        "INSERT INTO board_pins SELECT 1 + seq % 5, seq FROM seq_1_to_20;")

    def test_import_and_legacy_resolve(self):
        """import_table (dry run, first pass, a clean pass, near a parent),
        import_mapping, legacy_resolve and legacy_resolve_many."""
        self.server_sql("MySQL001", self.LEGACY_SQL)
        with open(self.server_map) as f:
            doc = json.load(f)
        names = ("boards", "pins", "board_has_pins")
        doc["mod_shards"]["tables"] += [f"legacy_{n}" for n in names]
        doc["legacy"] = {n: {} for n in names}
        path = os.path.join(self.base, "import-map.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        with self.ctx.map() as m:
            port = m.pair_addrs("MySQL001")[0].rsplit(":", 1)[1]
        url = f"mysql://shardadmin@127.0.0.1:{port}/legacy"
        with ls.Context(path, refresh_interval_ms=0, user="shardadmin",
                        password_env="LIBSHARD_PASSWORD") as c:
            c.schema_apply()
            dry = c.import_table(url, "boards", "boards", dry_run=True)
            self.assertEqual((dry.rows_read, dry.created), (5, 5))
            self.assertEqual(c.legacy_resolve_many("boards", range(1, 6)),
                             [None] * 5)
            seen = []
            r = c.import_table(url, "boards", "boards",
                               progress=lambda *a: seen.append(a))
            self.assertIsInstance(r, ls.ImportReport)
            self.assertEqual((r.rows_read, r.created, r.unchanged), (5, 5, 0))
            self.assertFalse(r.clean)
            self.assertTrue(seen)
            self.assertIsInstance(seen[-1][0], str)
            r = c.import_table(url, "boards", "boards")
            self.assertEqual((r.created, r.changed, r.deleted, r.unchanged),
                             (0, 0, 0, 5))
            self.assertTrue(r.clean)
            r = c.import_table(url, "pins", "pins", near=("board_id", "boards"),
                               threads=2, batch_rows=7)
            self.assertEqual(r.created, 20)
            r = c.import_table(url, "pins", "pins", near="board_id:boards")
            self.assertEqual((r.created, r.unchanged), (0, 20))
            for bad, cls in (("board_id", ls.Invalid), (":boards", ls.Invalid),
                             (("board_id",), TypeError), (7, TypeError)):
                self.assertRaises(cls, c.import_table, url, "pins", "pins",
                                  near=bad)
            r = c.import_mapping(url, "board_pins", "board_has_pins",
                                 from_column="board_id", from_type="boards",
                                 to_column="pin_id", to_type="pins")
            self.assertEqual(r.created, 20)
            # legacy ids resolve; native IDs pass through
            b1 = c.legacy_resolve("boards", 1)
            self.assertEqual(c.get(b1, decode=True), {"id": 1, "name": "board 1"})
            self.assertEqual(c.legacy_resolve("boards", b1), b1)
            pins = c.legacy_resolve_many("pins", [5, 999, 10], default=0)
            self.assertEqual(pins[1], 0)
            for p in (pins[0], pins[2]):  # pins 5 and 10 are on board 1
                self.assertEqual(ls.id_shard(p), ls.id_shard(b1))
            self.assertEqual(pins[0], c.legacy_resolve("pins", 5))
            self.assertEqual(
                sorted(e.to for e in c.mapping_iter("board_has_pins", b1)),
                sorted(c.legacy_resolve_many("pins", [5, 10, 15, 20])))
            self.assertIsNone(c.legacy_resolve("boards", 99, default=None))
            e = self.assertRaisesShard(ls.NotFound, -5, c.legacy_resolve,
                                       "boards", 99)
            self.assertRaisesShard(ls.Invalid, -1, c.legacy_resolve, "nope", 1)
            self.assertEqual(c.legacy_resolve_many("boards", []), [])
            # refused before anything is read
            e = self.assertRaisesShard(
                ls.Invalid, -1, c.import_table,
                f"mysql://shardadmin:secret@127.0.0.1:{port}/legacy",
                "boards", "boards")
            self.assertIsInstance(e.report, ls.ImportReport)
            self.assertRaises(TypeError, c.import_table, url, "boards",
                              "boards", threads="4")
            self.assertRaises(TypeError, c.import_table, url, "boards",
                              "boards", progress=5)

    def test_move_errors_one_pair(self):
        c = self.admin
        self.assertEqual(c.move_status(), [])
        self.assertRaises(ls.ShardError, c.move, 0, 1, "MySQL999",
                          dry_run=True)
        self.assertRaises(ls.ShardError, c.move, 0, 1, "MySQL001",
                          dry_run=True)
        self.assertRaises(ls.ShardError, c.move_abort, 12345)
        self.assertRaisesShard(ls.Invalid, -1, c.move, 0, 1, "a\0b",
                               dry_run=True)


# ---------------------------------------------------------------- two pairs

class TwoPairTests(ServerCase):

    NPAIRS = 2

    def test_move(self):
        c, a = self.ctx, self.admin  # the application's, the operator's
        ids = [c.create("pins", {"i": i}, shard=i % 2) for i in range(20)]
        c.mapping_add("board_has_pins", ids[0], ids[1], 1)
        c.kv_put("users_by_email", b"\0k", b"\0v")
        with c.map() as m:
            self.assertEqual(m.pair_of(0), "MySQL001")
            self.assertEqual(m.pair_of(4), "MySQL002")
            version = m.version
        # The application's account may not move shards.
        self.assertRaisesShard(ls.PrivilegeError, -16, c.move, 0, 1,
                               "MySQL002")
        plan = a.move(0, 1, "MySQL002", dry_run=True)
        self.assertIsInstance(plan, str)
        self.assertTrue(plan.startswith("move ID shards 0-1 from MySQL001"),
                        plan)
        self.assertIn(" to MySQL002 ", plan.splitlines()[0])
        self.assertIn("table db00000.pins: 10 rows", plan)
        self.assertIn("table db00001.pins: 10 rows", plan)
        self.assertRegex(plan, r"total: \d+ tables, \d+ rows")
        # a dry run (and the refused move) changes nothing
        self.assertEqual(a.move_status(), [])
        c.reload()
        with c.map() as m:
            self.assertEqual((m.version, m.pair_of(0)), (version, "MySQL001"))
        # the move itself: progress, report, status
        phases = []
        rep = a.move(0, 1, "MySQL002", copy_threads=2,
                     progress=lambda ph, done, total: phases.append(ph))
        self.assertIsInstance(rep, ls.MoveReport)
        self.assertEqual((rep.source, rep.target, rep.first, rep.last),
                         ("MySQL001", "MySQL002", 0, 1))
        self.assertEqual((rep.phase, rep.phase_name), (7, "done"))
        self.assertEqual(rep.rows_copied, rep.rows_verified)
        self.assertGreaterEqual(rep.rows_copied, 21)
        self.assertEqual(rep.mismatches, 0)
        self.assertGreater(rep.map_version, version)
        # Done before the source's drop: move_resume() drops it.
        self.assertFalse(rep.source_dropped)
        self.assertTrue(self.db_exists("MySQL001", 0))
        st = [m for m in a.move_status() if m["id"] == rep.move_id]
        self.assertEqual((st[0]["phase"], st[0]["drop_pending"]),
                         ("dropping", "2 of 2 databases on MySQL001"))
        self.assertTrue(a.move_resume(rep.move_id).source_dropped)
        self.assertFalse(self.db_exists("MySQL001", 0))
        self.assertGreaterEqual(rep.fence_attempts, 1)
        self.assertGreater(rep.tables, 0)
        self.assertGreater(rep.bytes_copied, 0)
        self.assertGreaterEqual(rep.pause_ms, 0)
        self.assertIn("copying", phases)
        self.assertIn("done", phases)
        c.reload()
        with c.map() as m:
            self.assertEqual(m.pair_of(0), "MySQL002")
            self.assertEqual(m.version, rep.map_version)
        status = a.move_status()
        self.assertEqual(len(status), 1)
        self.assertEqual((status[0]["id"], status[0]["phase"]),
                         (rep.move_id, "done"))
        # the data followed the shards
        self.assertEqual([json.loads(x)["i"] for x in c.mget(ids)],
                         list(range(20)))
        self.assertEqual(c.mapping_list("board_has_pins", ids[0]),
                         [(ids[1], 1)])
        self.assertEqual(c.kv_get("users_by_email", b"\0k"), b"\0v")
        # nothing left to resume or abort
        self.assertRaises(ls.ShardError, a.move_resume)
        self.assertRaises(ls.ShardError, a.move_abort, rep.move_id)

    MOVER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import libshard
def log(level, msg):
    if "postponed" in msg:
        print("postponed", flush=True)
with libshard.Context(sys.argv[2], refresh_interval_ms=0, user="shardadmin",
                      password_env="LIBSHARD_PASSWORD", log=log) as a:
    a.move(4, 4, "MySQL001", postpone_cutover_file=sys.argv[3])
"""

    def killed_move(self):
        """A move of shard 4 to MySQL001 in a process killed (SIGKILL) while
        its cut-over waits: its journal entry."""
        flag = os.path.join(self.base, "hold the cut-over")
        open(flag, "w").close()
        p = subprocess.Popen([sys.executable, "-c", self.MOVER,
                              PACKAGE_PARENT, self.map_path, flag],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             text=True)
        try:
            self.assertEqual(p.stdout.readline(), "postponed\n")
        finally:
            p.kill()
            p.wait(timeout=60)
            p.stdout.close()
        os.remove(flag)
        unfinished = [m for m in self.admin.move_status()
                      if m["first"] == 4 and m["phase"] not in
                      ("done", "aborted", "reverted")]
        self.assertEqual(len(unfinished), 1, unfinished)
        return unfinished[0]

    def test_move_killed_then_aborted_or_resumed(self):
        """move_abort() of a killed move leaves the shard where it was;
        move_resume() of another completes it."""
        a = self.admin
        self.assertEqual(self.pair_of(4), "MySQL002")
        pin = self.ctx.create("pins", {"k": 4}, shard=4)
        m = self.killed_move()
        a.move_abort(m["id"])
        st = [x for x in a.move_status() if x["id"] == m["id"]]
        self.assertEqual(st[0]["phase"], "aborted")
        self.assertEqual(self.pair_of(4), "MySQL002")
        self.assertFalse(self.db_exists("MySQL001", 4))
        self.assertRaises(ls.ShardError, a.move_abort, m["id"])
        m = self.killed_move()
        rep = a.move_resume(m["id"])
        self.assertEqual((rep.move_id, rep.phase_name, rep.mismatches),
                         (m["id"], "done", 0))
        self.assertEqual(self.pair_of(4), "MySQL001")
        self.assertEqual(self.ctx.get(pin, decode=True), {"k": 4})
        self.assertTrue(a.move_resume(m["id"]).source_dropped)

    def test_move_option_errors_change_nothing(self):
        """A bad option value raises before anything happens: no journal
        entry, the same map, for move() and for revert and finish; a
        max_load the library refuses is Invalid before the move starts."""
        a = self.admin
        status, version = a.move_status(), self.map_version()
        # Shard 6 stays on MySQL002 in every other test.
        self.assertEqual(self.pair_of(6), "MySQL002")
        for kwargs, cls, text in BAD_MOVE_OPTIONS:
            for call in (lambda: a.move(6, 6, "MySQL001", **kwargs),
                         lambda: a.move(6, 6, "MySQL001", dry_run=True,
                                        **kwargs),
                         lambda: a.move_revert(**kwargs),
                         lambda: a.move_finish(**kwargs),
                         lambda: a.move_resume(**kwargs)):
                with self.assertRaises(cls, msg=kwargs) as cm:
                    call()
                self.assertIn(text, str(cm.exception), kwargs)
        # What only the library checks (shard_move(3), max_load).
        for load, text in (("Threads_running", 'max_load "Threads_running"'),
                           ({"Threads_running": 0}, "positive integer"),
                           (",".join(f"V{c}=1" for c in "abcdefghi"),
                            "at most 8")):
            for dry_run in (False, True):
                e = self.assertRaisesShard(ls.Invalid, -1, a.move, 6, 6,
                                           "MySQL001", dry_run=dry_run,
                                           max_load=load)
                self.assertIn(text, e.message)
        self.assertRaises(TypeError, a.move_revert, dry_run=True)
        self.assertRaises(TypeError, a.move_finish, 0, dry_run=False)
        # Nothing to revert or finish: NotFound, with the report.
        for fn in (a.move_revert, a.move_finish):
            e = self.assertRaisesShard(ls.NotFound, -5, fn, 987654321)
            self.assertIsInstance(e.report, ls.MoveReport)
        self.assertEqual(a.move_status(), status)
        self.assertEqual(self.pair_of(6), "MySQL002")
        self.assertEqual(self.map_version(), version)
        self.assertTrue(self.db_exists("MySQL002", 6))
        self.assertFalse(self.db_exists("MySQL001", 6))

    def test_move_throttled_and_postponed(self):
        """max_rows_per_second, max_load and postpone_cutover_file reach the
        library: the move waits for the file (its log line names it), then
        completes, its rows on the target, the source dropped."""
        c = self.ctx
        self.assertEqual(self.pair_of(2), "MySQL001")
        ids = [c.create("pins", {"t": i}, shard=2) for i in range(30)]
        flag = os.path.join(self.base, "postpone cut-over")
        open(flag, "w").close()
        lines, phases, calls = [], [], [0]

        def release():
            try:
                os.remove(flag)
            except FileNotFoundError:
                pass

        def log(level, msg):
            if "postponed" in msg:
                lines.append((level, msg))
                release()

        def progress(phase, done, total):
            phases.append(phase)
            calls[0] += 1
            if calls[0] > 1000:  # never wait for ever (the test fails below)
                release()

        with ls.Context(self.map_path, refresh_interval_ms=0,
                        user="shardadmin", password_env="LIBSHARD_PASSWORD",
                        log_level=ls.LOG_WARN, log=log) as a:
            rep = a.move(2, 2, "MySQL002", max_rows_per_second=50,
                         batch_rows=10,
                         max_load={"Threads_running": 100000},
                         postpone_cutover_file=pathlib.Path(flag),
                         progress=progress)
        self.assertEqual((rep.phase_name, rep.source, rep.target),
                         ("done", "MySQL001", "MySQL002"))
        self.assertEqual(len(lines), 1, lines)
        self.assertEqual(lines[0][0], ls.LOG_WARN)
        self.assertIn(f"postponed while {flag} exists", lines[0][1])
        self.assertFalse(os.path.exists(flag))
        self.assertIn("catchup", phases)
        self.assertGreaterEqual(rep.rows_copied, 30)
        self.assertEqual(rep.rows_verified, rep.rows_copied)
        self.assertEqual(rep.mismatches, 0)
        self.assertFalse(rep.source_dropped)
        self.assertTrue(rep.target_pair_healthy)
        self.assertTrue(self.admin.move_resume(rep.move_id).source_dropped)
        self.assertEqual(self.pair_of(2), "MySQL002")
        self.assertEqual(self.rows("MySQL002", 2), 30)
        self.assertFalse(self.db_exists("MySQL001", 2))
        self.assertEqual([json.loads(x)["t"] for x in c.mget(ids)],
                         list(range(30)))

    def test_move_reversible_then_revert_or_finish(self):
        """reverse_window_s leaves the move in phase "reversible", the
        source kept and following the target; move_revert() brings the
        shard back with what was written on the target; a second move
        with a window ends with move_finish(), the source dropped."""
        c, a = self.ctx, self.admin
        self.assertEqual(self.pair_of(3), "MySQL001")
        ids = [c.create("pins", {"r": i}, shard=3) for i in range(10)]
        rep = a.move(3, 3, "MySQL002", reverse_window_s=3600)
        self.assertEqual((rep.phase, rep.phase_name), (9, "reversible"))
        self.assertEqual(rep.mismatches, 0)
        self.assertFalse(rep.source_dropped)
        self.assertEqual(self.pair_of(3), "MySQL002")
        self.assertTrue(self.db_exists("MySQL001", 3))
        st = [m for m in a.move_status() if m["id"] == rep.move_id]
        self.assertEqual(len(st), 1)
        self.assertEqual((st[0]["phase"], st[0]["reverse_stream"],
                          st[0]["reverse_window_s"]),
                         ("reversible", "running", 3600))
        # A write on the target, which the revert must bring back.
        marker = c.create("pins", {"between": True}, shard=3)
        back = a.move_revert(rep.move_id)
        self.assertEqual((back.phase_name, back.source, back.target),
                         ("reverted", "MySQL002", "MySQL001"))
        self.assertEqual(back.move_id, rep.move_id)
        self.assertEqual(back.mismatches, 0)
        self.assertGreaterEqual(back.rows_verified, 11)
        self.assertEqual(self.pair_of(3), "MySQL001")
        self.assertEqual(json.loads(self.server_sql(
            "MySQL001", "SELECT data FROM db00003.pins WHERE local_id = "
            f"{ls.id_local(marker)}")), {"between": True})
        self.assertEqual(self.rows("MySQL001", 3), 11)
        self.assertEqual([json.loads(x) for x in c.mget(ids + [marker])],
                         [{"r": i} for i in range(10)] + [{"between": True}])
        self.assertRaisesShard(ls.NotFound, -5, a.move_revert, rep.move_id)
        # Forward again with a window, then end it at once.
        rep = a.move(3, 3, "MySQL002", reverse_window_s=3600)
        self.assertEqual(rep.phase_name, "reversible")
        self.assertTrue(self.db_exists("MySQL001", 3))
        phases = []
        done = a.move_finish(progress=lambda ph, d, t: phases.append(ph))
        self.assertEqual((done.phase_name, done.move_id), ("done", rep.move_id))
        self.assertTrue(done.source_dropped)
        self.assertIn("done", phases)
        self.assertFalse(self.db_exists("MySQL001", 3))
        self.assertEqual(self.pair_of(3), "MySQL002")
        self.assertEqual(self.rows("MySQL002", 3), 11)
        self.assertRaisesShard(ls.NotFound, -5, a.move_finish, rep.move_id)
        self.assertEqual(json.loads(c.get(marker)), {"between": True})

    def test_failover(self):
        c = self.ctx
        with c.map() as m:
            master, standby = m.pair_addrs("MySQL002")
            version = m.version
        pin = c.create("pins", {"before": True}, shard=5)
        self.assertRaisesShard(ls.Invalid, -1, c.failover, "MySQL999")
        # The application's account may not fence (READ_ONLY ADMIN).
        e = self.assertRaisesShard(ls.PrivilegeError, -16, c.failover,
                                   "MySQL002")
        self.assertEqual(e.report.pair, "MySQL002")
        self.assertRaisesShard(ls.Invalid, -1, c.failover, "MySQL002",
                               wait_ms=-1)
        rep = self.admin.failover("MySQL002", wait_ms=20000)
        self.assertIsInstance(rep, ls.FailoverReport)
        self.assertEqual((rep.pair, rep.old_master, rep.new_master),
                         ("MySQL002", master, standby))
        self.assertTrue(rep.old_master_fenced)
        self.assertGreaterEqual(rep.lag_transactions, 0)
        self.assertGreater(rep.map_version, version)
        self.assertGreater(rep.total_ms, 0)
        c.reload()
        with c.map() as m:
            self.assertEqual(m.pair_addrs("MySQL002"), (standby, master))
            self.assertEqual(m.version, rep.map_version)
        # the promoted standby had the data and takes writes
        self.assertEqual(json.loads(c.get(pin)), {"before": True})
        c.patch(pin, {"after": True})
        self.assertEqual(json.loads(c.get(pin)), {"before": True, "after": True})


# ---------------------------------------------------------------- topology

class FleetTests(ServerCase):
    """Two pairs started, the map rewritten so that MySQL001 serves every
    shard (ID shards 0-3 open) and MySQL002 is a spare that the map lacks:
    pair_add, shards_open (4-5) onto it, a rebalance plan that drains it
    run move by move, pair_remove."""

    NPAIRS = 2

    @classmethod
    def prepare_map(cls, doc):
        cls.spare = doc["pairs"].pop("MySQL002")
        doc["open_shards"] = 4
        doc["id_shards"] = [{"range": [0, 3], "pair": "MySQL001"}]
        count = doc["mod_shards"]["count"]
        doc["mod_shards"]["ranges"] = [{"range": [0, count - 1],
                                        "pair": "MySQL001"}]

    def test_pair_add_shards_open_rebalance_pair_remove(self):
        a, c = self.admin, self.ctx
        st = self.healthy_status()
        self.assertTrue(st["healthy"], st["problems"])
        self.assertEqual([p["name"] for p in st["pairs"]], ["MySQL001"])
        v0 = self.map_version()
        with a.rebalance_plan() as plan0:  # one pair: nothing to do
            self.assertEqual((len(plan0), plan0.moves), (0, []))
            self.assertEqual(plan0.map_version, v0)
            self.assertEqual([p.name for p in plan0.pairs], ["MySQL001"])
            v1 = a.pair_add("MySQL002", self.spare["master"],
                            self.spare["standby"])
            self.assertEqual(v1, v0 + 1)
            self.assertRaises(ls.ShardError, a.pair_add, "MySQL002",
                              self.spare["master"], self.spare["standby"])
            # the map moved on since the plan
            self.assertRaisesShard(ls.Conflict, -11, a.rebalance_run, plan0)
        self.assertIn("closed", repr(plan0))
        self.assertRaisesShard(ls.Invalid, -1, lambda: plan0.moves)
        with c.map() as m:
            c.reload()
        with c.map() as m:
            self.assertEqual(m.pair_addrs("MySQL002"),
                             (self.spare["master"], self.spare["standby"]))
        # open shards 4-5 on the new pair
        seen = []
        v2 = a.shards_open(6, "MySQL002", progress=lambda *x: seen.append(x))
        self.assertGreater(v2, v1)
        self.assertTrue(seen)
        self.assertEqual((self.pair_of(5), self.pair_of(3)),
                         ("MySQL002", "MySQL001"))
        a.reload()
        a.schema_check()
        self.assertRaises(ls.ShardError, a.shards_open, 4)  # not more
        ids = [c.create("pins", {"s": s}, shard=s) for s in (4, 5)]
        # drain it: every shard back to MySQL001
        with a.rebalance_plan(drain=["MySQL002"]) as plan:
            moves = plan.moves
            self.assertGreaterEqual(len(moves), 1)
            self.assertEqual(list(plan), moves)
            for mv in moves:
                self.assertIsInstance(mv, ls.RebalanceMove)
                self.assertEqual((mv.from_pair, mv.to_pair, mv.drain),
                                 ("MySQL002", "MySQL001", True))
            self.assertEqual(sorted(s for mv in moves
                                    for s in range(mv.first, mv.last + 1)),
                             [4, 5])
            pairs = {p.name: p for p in plan.pairs}
            self.assertTrue(pairs["MySQL002"].drained)
            self.assertEqual((pairs["MySQL002"].shards_before,
                              pairs["MySQL002"].shards_after), (2, 0))
            self.assertEqual(pairs["MySQL001"].shards_after, 6)
            before, after = plan.spread
            self.assertIsInstance(before, float)
            self.assertEqual(plan.map_version, self.map_version())
            steps = []
            done = a.rebalance_run(plan, step=lambda *x: steps.append(x),
                                   copy_threads=2)
        self.assertEqual(done, len(moves))
        self.assertEqual(len(steps), 2 * len(moves))
        move, index, count, rc, report = steps[0]
        self.assertEqual((move, index, count, rc, report),
                         (moves[0], 0, len(moves), 0, None))
        move, index, count, rc, report = steps[-1]
        self.assertEqual((index, rc, report.phase_name), (len(moves) - 1, 0,
                                                          "done"))
        self.assertEqual([self.pair_of(s) for s in range(6)],
                         ["MySQL001"] * 6)
        self.assertEqual([x["s"] for x in c.mget(ids, decode=True)], [4, 5])
        # it serves nothing now: remove it
        v3 = a.pair_remove("MySQL002")
        self.assertGreater(v3, v2)
        c.reload()
        with c.map() as m:
            self.assertEqual(m.pairs, ["MySQL001"])
        self.assertRaises(ls.ShardError, a.pair_remove, "MySQL002")
        self.assertRaises(ls.ShardError, a.pair_remove, "MySQL001")
        self.assertRaisesShard(ls.Invalid, -1, a.pair_add, "a\0b", "x", "y")
        a.reload()
        st = self.healthy_status()
        self.assertTrue(st["healthy"], st["problems"])

    def test_rebalance_step_stops_and_errors(self):
        """A step that returns True starts no move; a failing step's
        exception is re-raised by rebalance_run."""
        a = self.admin
        with a.rebalance_plan() as plan:
            self.assertEqual(a.rebalance_run(plan, step=lambda *x: True), 0)
            self.assertRaises(TypeError, a.rebalance_run, plan, step=3)
            self.assertRaises(TypeError, a.rebalance_run, plan, dry_run=True)
            self.assertRaises(ls.Invalid, a.rebalance_run, plan,
                              copy_threads=-1)


if __name__ == "__main__":
    faulthandler.enable()  # a crash in C prints where it happened
    # SIGTERM ends the run through atexit, which stops the servers.
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    unittest.main()
