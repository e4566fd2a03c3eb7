"""libshard from Python in a page: a user, a board, a pin, their mappings.

Run it against any shard map whose objects include users, boards and pins
and whose mappings include board_has_pins and user_likes_pins (the map that
tests/servers.sh writes has them):

    make install                          # the C library (PREFIX=... too)
    pip install --no-build-isolation examples/python    # this package
    export LIBSHARD_PASSWORD=...          # the map's credentials.password_env
    export LIBSHARD_MAP=/path/to/map.json # or name the map as the argument
    python3 examples/python/example.py [MAP] \
        [--apply-schema --user shardadmin --password-env LIBSHARD_PASSWORD]

--apply-schema creates the shard databases and tables first (idempotent;
`shardctl schema apply` does the same), as the operator's account that
--user and --password-env name: the map's credentials are the application's,
which reads and writes rows but may not create databases (tests/servers.sh
makes `shardadmin` for operators, with the application's password). The
rest runs as the application. The libshard package is the one next
to this file, else the installed one; it loads the C library as its
docstring says (LIBSHARD_LIB=build/libshard.so.0 uses a build tree's).
"""

import argparse
import os
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
import libshard  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("map", nargs="?", default=os.environ.get("LIBSHARD_MAP"),
                    help="the shard map file (default: $LIBSHARD_MAP)")
    ap.add_argument("--apply-schema", action="store_true",
                    help="create the shard databases and tables first")
    ap.add_argument("--user", help="the operator's account for --apply-schema "
                    "(default: the map's credentials)")
    ap.add_argument("--password-env", metavar="VAR",
                    help="the environment variable holding --user's password")
    args = ap.parse_args()
    if not args.map:
        ap.error("no shard map: name one, or set LIBSHARD_MAP")
    if (args.user is None) != (args.password_env is None):
        ap.error("--user and --password-env go together")

    try:
        if args.apply_schema:
            with libshard.Context(args.map, user=args.user,
                                  password_env=args.password_env) as admin:
                admin.schema_apply()
        with libshard.Context(args.map) as ctx:
            # A user on any open shard; the board on the same shard ("near"),
            # so that the user's data can be read together.
            user = ctx.create("users", {"name": "Ada", "email": "ada@example.com"})
            board = ctx.create("boards", {"title": "Engines", "owner": user},
                               near=user)
            # Claim the e-mail address: put_new fails if someone has it.
            try:
                ctx.kv_put_new("users_by_email", b"ada@example.com", str(user))
            except libshard.Exists:
                print("ada@example.com is already taken; carrying on")

            # A pin and its board_has_pins row in one transaction on the
            # board's shard (the reverse row pin_owned_by_board comes along).
            with ctx.transaction(libshard.id_shard(board)) as txn:
                pin = txn.create("pins", {"title": "Difference engine"})
                txn.mapping_add("board_has_pins", board, pin)
            ctx.mapping_add("user_likes_pins", user, pin)

            # The newest first, read a page at a time.
            edges = list(ctx.mapping_iter("board_has_pins", board, page=10))
            print(f"board {board} has {len(edges)} pin(s):")
            for edge in edges:
                print(f"  pin {edge.to} (sequence {edge.seq})")

            # One round trip per server, answers in the order asked, as
            # dicts (decode=True); the default (None) for an ID that does
            # not exist, as get(id, default=None) would give.
            missing = libshard.make_id(libshard.id_shard(user), 1,
                                       libshard.MAX_LOCAL)
            for id, obj in zip([user, board, pin, missing],
                               ctx.mget([user, board, pin, missing],
                                        decode=True)):
                print(id, obj if obj is not None else "(not found)")
    except libshard.ShardError as e:
        print(f"example: {e} [{e.name}]", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
