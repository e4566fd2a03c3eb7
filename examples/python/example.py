"""libshard from Python in a page: a user, a board, a pin, their mappings.

Run it against any shard map whose objects include users, boards and pins
and whose mappings include board_has_pins and user_likes_pins (the map that
tests/servers.sh writes has them):

    make
    export LIBSHARD_PASSWORD=...          # the map's credentials.password_env
    python3 examples/python/example.py /path/to/map.json [--apply-schema]

--apply-schema creates the shard databases and tables first (idempotent;
`shardctl schema apply` does the same). libshard.py is found next to this
file; the shared library through $LIBSHARD_LIB, the build tree, or the
system's library path.
"""

import argparse
import json
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
import libshard  # noqa: E402  (next to this file)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("map", help="the shard map file")
    ap.add_argument("--apply-schema", action="store_true",
                    help="create the shard databases and tables first")
    args = ap.parse_args()

    try:
        with libshard.Context(args.map) as ctx:
            if args.apply_schema:
                ctx.schema_apply()

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

            edges = ctx.mapping_list("board_has_pins", board, limit=10)
            print(f"board {board} has {len(edges)} pin(s):")
            for edge in edges:
                print(f"  pin {edge.to} (sequence {edge.seq})")

            # One round trip per server, answers in the order asked;
            # None for an ID that does not exist.
            missing = libshard.make_id(libshard.id_shard(user), 1,
                                       libshard.MAX_LOCAL)
            for id, text in zip([user, board, pin, missing],
                                ctx.mget([user, board, pin, missing])):
                print(id, json.loads(text) if text is not None else "(not found)")
    except libshard.ShardError as e:
        print(f"example: {e} [{e.name}]", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
