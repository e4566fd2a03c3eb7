/*
 * pinboard: a small pin board on libshard, written to be copied from.
 *
 *   pinboard [MAP]          MAP defaults to $LIBSHARD_MAP
 *
 * The map needs objects "users", "boards" and "pins", the mappings
 * "board_has_pins" (with a reverse) and "user_likes_pins", and the
 * key-value table "users_by_name" (tests/servers.sh writes such a map), and
 * its schema applied (shardctl schema apply). tests/demo.sh runs it all.
 *
 * How the data is laid out:
 *  - Every object is a JSON document named by a 64-bit ID that carries its
 *    shard, so finding an object never needs a lookup.
 *  - A user name is claimed with put-if-absent in users_by_name, a key-value
 *    table of the mod-shard space (a name is not an ID).
 *  - A board lives on its owner's shard, and its pins on the board's shard,
 *    so a pin and its board_has_pins row commit in one shard transaction.
 *  - Showing a board is a join done by the application: the board's newest
 *    pin IDs (one index range scan on one shard), then one multi-get.
 *
 * Copyright (c) 2026 the libshard authors. MIT licence, see COPYING.
 */
#include <libshard.h>

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE_SIZE 3

typedef struct app {
    shard_ctx *ctx;
    shard_map *map; /* a snapshot, for printing where things live */
    unsigned users, boards, pins; /* type numbers, from the map */
} app;

/* Report a failed libshard call on stderr; returns rc for chaining. */
static int fail(int rc, const char *what)
{
    fprintf(stderr, "pinboard: %s: %s (%s)\n", what, shard_strerror(rc), shard_errmsg());
    return rc;
}

/* Compact JSON text of v (free() it), or NULL; takes v's reference. */
static char *json_text(json_t *v)
{
    char *text = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    return text;
}

/* Print an object's physical home: everything follows from its ID. */
static int where(const app *a, const char *what, uint64_t id)
{
    const char *type = "?", *pair, *master, *standby;
    char db[65]; /* database names have at most 64 characters */
    unsigned shard = shard_id_shard(id);
    int rc;

    if ((rc = shard_map_type_name(a->map, shard_id_type(id), &type)) ||
        (rc = shard_map_database(a->map, shard, db, sizeof db)) ||
        (rc = shard_map_pair_of(a->map, shard, &pair)) ||
        (rc = shard_map_pair_addrs(a->map, pair, &master, &standby)))
        return fail(rc, "where");
    printf("  %-12s %-18" PRIu64 " %5u  %-6s %5" PRIu64 "  %-13s %s %s\n", what, id, shard,
           type, shard_id_local(id), db, pair, master);
    return 0;
}

/* The same for a key of a mod-shard key-value table. */
static int where_key(const app *a, const char *table, const char *key)
{
    const char *pair, *master, *standby;
    char db[65];
    uint32_t mod;
    int rc;

    if ((rc = shard_mod(key, strlen(key), shard_map_mod_count(a->map), &mod)) ||
        (rc = shard_map_mod_database(a->map, mod, db, sizeof db)) ||
        (rc = shard_map_mod_pair_of(a->map, mod, &pair)) ||
        (rc = shard_map_pair_addrs(a->map, pair, &master, &standby)))
        return fail(rc, "where_key");
    printf("  %-12s %-18s %5u  %-6s %5s  %-13s %s %s\n", key, table, mod, "(kv)", "-", db,
           pair, master);
    return 0;
}

/*
 * Sign up: create the user, then claim its name. SHARD_EEXISTS (not
 * reported) when the name is taken.
 */
static int user_signup(const app *a, const char *name, uint64_t *id)
{
    char *json = json_text(json_pack("{s:s}", "name", name));
    char idtext[24];
    int rc;

    if (!json)
        return fail(SHARD_ENOMEM, "user JSON");
    /* Users spread over every open shard: SHARD_ANY picks one at random. */
    rc = shard_object_create(a->ctx, a->users, SHARD_ANY, json, strlen(json), id);
    free(json);
    if (rc)
        return fail(rc, "create user");
    snprintf(idtext, sizeof idtext, "%" PRIu64, *id);
    rc = shard_kv_put_new(a->ctx, "users_by_name", name, strlen(name), idtext,
                          strlen(idtext));
    if (rc == SHARD_EEXISTS) {
        /* Someone else has the name: our user would be unreachable. */
        int drc = shard_object_delete(a->ctx, *id, SHARD_DELETE_HARD);
        if (drc)
            fail(drc, "drop the unclaimed user");
        return SHARD_EEXISTS;
    }
    /* On other errors the claim may still have been made: keep the user. */
    return rc ? fail(rc, "claim user name") : 0;
}

/* The user ID that claimed `name`. */
static int user_find(const app *a, const char *name, uint64_t *id)
{
    char *value = NULL;
    int rc = shard_kv_get(a->ctx, "users_by_name", name, strlen(name), &value, NULL);

    if (rc == 0)
        rc = shard_id_parse(value, id);
    shard_free(value);
    return rc ? fail(rc, "find user") : 0;
}

/* Sign up, or on a later run against the same servers, find the user. */
static int user_enter(const app *a, const char *name, uint64_t *id)
{
    const char *how = "signed up";
    int rc = user_signup(a, name, id);

    if (rc == SHARD_EEXISTS) {
        how = "already there (an earlier run)";
        rc = user_find(a, name, id);
    }
    if (rc == 0)
        printf("%-5s is user %" PRIu64 ", %s\n", name, *id, how);
    return rc;
}

/* A board lives next to its owner: same shard, so on the same servers. */
static int board_create(const app *a, uint64_t owner, const char *name, uint64_t *id)
{
    char *json = json_text(json_pack("{s:s, s:I}", "name", name, "owner", (json_int_t)owner));
    int rc;

    if (!json)
        return fail(SHARD_ENOMEM, "board JSON");
    rc = shard_object_create(a->ctx, a->boards, shard_id_shard(owner), json, strlen(json),
                             id);
    free(json);
    return rc ? fail(rc, "create board") : 0;
}

/* Failures after which the transaction was rolled back and may run again. */
static int txn_retryable(int rc)
{
    return rc == SHARD_EMOVED || rc == SHARD_EBUSY || rc == SHARD_ECONNECT;
}

/*
 * One attempt: the pin and its board_has_pins row (and the reverse row,
 * pin_owned_by_board, on the same shard), all or nothing. *again tells
 * whether running it again is safe.
 */
static int pin_txn(const app *a, uint64_t board, const char *json, uint64_t *id,
                   int *again)
{
    shard_txn *txn = NULL;
    int rc;

    if ((rc = shard_txn_begin(a->ctx, shard_id_shard(board), &txn)) == 0 &&
        ((rc = shard_txn_object_create(txn, a->pins, json, strlen(json), id)) ||
         (rc = shard_txn_mapping_add(txn, "board_has_pins", board, *id, SHARD_SEQ_NOW))))
        shard_txn_rollback(txn);
    if (rc) {
        *again = txn_retryable(rc);
        return rc;
    }
    rc = shard_txn_commit(txn); /* frees txn, committed or not */
    /* A connection lost during COMMIT leaves the outcome unknown: running
     * it again could pin twice, so only a sure rollback is retried. */
    *again = rc == SHARD_EMOVED || rc == SHARD_EBUSY;
    return rc;
}

static int pin_create(const app *a, uint64_t board, const char *title, const char *url,
                      uint64_t *id)
{
    char *json = json_text(json_pack("{s:s, s:s, s:I}", "title", title, "url", url,
                                     "board", (json_int_t)board));
    int rc, again = 0;

    if (!json)
        return fail(SHARD_ENOMEM, "pin JSON");
    /* After SHARD_EMOVED the context already has the map that says where
     * the shard went: the next attempt goes there. */
    for (int attempt = 1; attempt <= 3; attempt++)
        if ((rc = pin_txn(a, board, json, id, &again)) == 0 || !again)
            break;
    free(json);
    return rc ? fail(rc, "create pin") : 0;
}

/* Print one pin of a listing from its JSON text. */
static void pin_print(uint64_t id, int64_t seq, const char *json)
{
    json_t *pin = json_loads(json, 0, NULL);
    const char *title = "?";

    if (pin)
        json_unpack(pin, "{s:s}", "title", &title);
    printf("  %-18" PRIu64 " seq %" PRId64 "  %s\n", id, seq, title);
    json_decref(pin);
}

/* One page of a board: pin IDs from the mapping, then one multi-get. */
static int board_page(const app *a, uint64_t board, int64_t *before, size_t *n)
{
    shard_edge *edges = NULL;
    shard_item *items = NULL;
    uint64_t ids[PAGE_SIZE];
    int rc;

    rc = shard_mapping_list(a->ctx, "board_has_pins", board, *before, PAGE_SIZE, &edges, n);
    if (rc)
        return fail(rc, "list board");
    for (size_t i = 0; i < *n; i++)
        ids[i] = edges[i].to;
    /* Items come back in the order of ids, whatever servers they are on. */
    rc = *n ? shard_object_mget(a->ctx, ids, *n, &items) : 0;
    if (rc && rc != SHARD_EPARTIAL) {
        fail(rc, "get pins");
    } else {
        for (size_t i = 0; i < *n; i++) {
            if (items[i].status == 0)
                pin_print(ids[i], edges[i].seq, items[i].data);
            else if (items[i].status == SHARD_ENOTFOUND) /* deleted since pinned */
                printf("  %-18" PRIu64 " (deleted, skipped)\n", ids[i]);
            else /* with SHARD_EPARTIAL: the others are still answered */
                printf("  %-18" PRIu64 " (%s)\n", ids[i], shard_strerror(items[i].status));
        }
        if (rc)
            fail(rc, "get pins");
        else if (*n)
            *before = edges[*n - 1].seq; /* the cursor for the next page */
    }
    shard_items_free(items, *n);
    shard_free(edges);
    return rc;
}

/* Every pin of a board, newest first, PAGE_SIZE at a time. */
static int board_show(const app *a, uint64_t board)
{
    int64_t before = SHARD_SEQ_NONE;
    size_t n = PAGE_SIZE;
    uint64_t count;
    int rc;

    if ((rc = shard_mapping_count(a->ctx, "board_has_pins", board, &count)))
        return fail(rc, "count board");
    printf("board %" PRIu64 " has %" PRIu64 " pins; newest first, %d a page:\n", board,
           count, PAGE_SIZE);
    for (int page = 1; n == PAGE_SIZE; page++) {
        printf(" page %d\n", page);
        if ((rc = board_page(a, board, &before, &n)))
            return rc;
    }
    return 0;
}

static int run(app *a)
{
    static const char *const titles[][2] = {
        {"Sourdough starter", "https://example.com/starter"},
        {"No-knead bread", "https://example.com/no-knead"},
        {"Focaccia", "https://example.com/focaccia"},
        {"Rye crackers", "https://example.com/rye"},
    };
    static const char patch[] = "{\"title\":\"No-knead bread (easy)\",\"tags\":[\"easy\"]}";
    uint64_t ada, grace, other, board, pin[4], likes;
    char *json = NULL;
    int rc;

    puts("== users: each name claimed once in users_by_name (put-if-absent)");
    if ((rc = user_enter(a, "ada", &ada)) || (rc = user_enter(a, "grace", &grace)))
        return rc;
    rc = user_signup(a, "ada", &other);
    if (rc != SHARD_EEXISTS) {
        fprintf(stderr, "pinboard: a second \"ada\" got in (%s)\n", shard_strerror(rc));
        return rc ? rc : SHARD_EINTERNAL;
    }
    printf("ada   again: %s (SHARD_EEXISTS), as it should be\n", shard_strerror(rc));

    puts("\n== a board on its owner's shard; each pin + board_has_pins row in one transaction");
    if ((rc = board_create(a, ada, "Bread", &board)))
        return rc;
    printf("ada's board \"Bread\" is %" PRIu64 "\n", board);
    for (int i = 0; i < 4; i++) {
        if ((rc = pin_create(a, board, titles[i][0], titles[i][1], &pin[i])))
            return rc;
        printf("pinned %" PRIu64 " \"%s\"\n", pin[i], titles[i][0]);
    }

    puts("\n== likes: user_likes_pins rows live on the user's shard");
    for (int i = 1; i < 3; i++)
        if ((rc = shard_mapping_add(a->ctx, "user_likes_pins", grace, pin[i],
                                    SHARD_SEQ_NOW)))
            return fail(rc, "like");
    if ((rc = shard_mapping_count(a->ctx, "user_likes_pins", grace, &likes)))
        return fail(rc, "count likes");
    printf("grace likes %" PRIu64 " pins\n", likes);

    puts("\n== the board: mapping list + multi-get, paged with a sequence cursor");
    if ((rc = board_show(a, board)))
        return rc;

    puts("\n== patch a pin (RFC 7386 merge patch, one transaction)");
    rc = shard_object_patch(a->ctx, pin[1], patch, strlen(patch), &json, NULL);
    if (rc)
        return fail(rc, "patch pin");
    printf("%" PRIu64 " is now %s\n", pin[1], json);
    shard_free(json);

    puts("\n== soft delete a pin: \"active\": false, hidden from every read");
    if ((rc = shard_object_delete(a->ctx, pin[2], 0)))
        return fail(rc, "delete pin");
    rc = shard_object_get(a->ctx, pin[2], &json, NULL);
    if (rc != SHARD_ENOTFOUND) {
        if (rc == 0)
            shard_free(json);
        fprintf(stderr, "pinboard: a deleted pin was still found (%s)\n", shard_strerror(rc));
        return rc ? rc : SHARD_EINTERNAL;
    }
    printf("get %" PRIu64 ": %s\n", pin[2], shard_strerror(rc));
    if ((rc = board_show(a, board)))
        return rc;

    puts("\n== where everything lives");
    printf("  %-12s %-18s %5s  %-6s %5s  %-13s %s\n", "what", "ID or table", "shard", "type",
           "local", "database", "pair master");
    if ((rc = where(a, "user ada", ada)) || (rc = where(a, "user grace", grace)) ||
        (rc = where(a, "board Bread", board)) || (rc = where(a, "pin", pin[0])) ||
        (rc = where_key(a, "users_by_name", "ada")) ||
        (rc = where_key(a, "users_by_name", "grace")))
        return rc;
    return 0;
}

/* The type numbers the map gives to our object names. */
static int lookup_types(app *a)
{
    int rc;

    if ((rc = shard_map_type_of(a->map, "users", &a->users)) ||
        (rc = shard_map_type_of(a->map, "boards", &a->boards)) ||
        (rc = shard_map_type_of(a->map, "pins", &a->pins)))
        return fail(rc, "object types");
    return 0;
}

int main(int argc, char **argv)
{
    const char *location = argc > 1 ? argv[1] : getenv("LIBSHARD_MAP");
    app a = {0};
    char *summary = NULL;
    int rc;

    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        puts("usage: pinboard [MAP]   (default: $LIBSHARD_MAP)");
        return 0;
    }
    if (argc > 2 || !location || !*location || location[0] == '-') {
        fprintf(stderr, "usage: pinboard [MAP]   (default: $LIBSHARD_MAP)\n");
        return 2;
    }
    /* Servers are connected lazily: this only reads and checks the map. */
    if ((rc = shard_ctx_open(&a.ctx, location, NULL))) {
        fail(rc, location);
        goto out;
    }
    if ((rc = shard_ctx_map(a.ctx, &a.map)) || (rc = shard_map_summary(a.map, &summary))) {
        fail(rc, "map");
        goto out;
    }
    printf("pinboard on %s: %s\n\n", location, summary);
    if ((rc = lookup_types(&a)) == 0)
        rc = run(&a);
out:
    if (fflush(stdout) != 0 && rc == 0) {
        perror("pinboard: stdout");
        rc = SHARD_EIO;
    }
    shard_free(summary);
    shard_map_free(a.map);
    shard_ctx_free(a.ctx);
    shard_global_cleanup();
    return rc ? 1 : 0;
}
