/*
 * Move status (libshard-move(7), "The journal"): every journaled move of
 * every pair's master, one JSON object per line, and the phases' names.
 */
#include "move.h"

#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const phase_names[] = {"planned", "copying", "catchup", "fenced",
                                          "flipped", "verifying", "cleaning", "done",
                                          "aborted", "reversible", "reverting",
                                          "reverted", "dropping"};

const char *shard_move_phase_name(int phase)
{
    if (phase < 0 || phase > SHARD_MOVE_DROPPING)
        return "unknown";
    return phase_names[phase];
}

/* One JSON object as a line of out; takes the reference (NULL: skipped). */
static void add_json_line(sqlbuf *out, json_t *o)
{
    char *line = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                       JSON_REAL_PRECISION(6))
                   : NULL;
    json_malloc_t jm;
    json_free_t jf;

    if (line) {
        sql_add(out, line);
        sql_add(out, "\n");
        json_get_alloc_funcs(&jm, &jf);
        jf(line);
    }
    json_decref(o);
}

/* The move of a journal row (source, target, first, last in columns 1-4),
 * enough to name its links and its source's databases: false when the map
 * lacks one of its pairs. */
static bool row_move(mv *m, shard_ctx *ctx, shard_map *map, MYSQL_ROW row)
{
    memset(m, 0, sizeof *m);
    m->ctx = ctx;
    m->map = map;
    m->first = (unsigned)strtoul(row[3], NULL, 10);
    m->last = (unsigned)strtoul(row[4], NULL, 10);
    m->sides[0].pi = shard__map_find_pair(map, row[1]);
    m->sides[1].pi = shard__map_find_pair(map, row[2]);
    return m->sides[0].pi >= 0 && m->sides[1].pi >= 0;
}

/* A reversible move's reverse stream, as its source master shows it:
 * "running", or what is wrong with it. One that runs while the journal
 * says it was not started (its mover stopped in between) is running: a
 * resume adopts it. */
static json_t *reverse_stream(shard_ctx *ctx, shard_map *map, MYSQL_ROW row)
{
    shard_server *s;
    shard_conn *c = NULL;
    shard_errsave saved;
    move_link l;
    char why[600];
    mv m;
    int bad;

    if (!row_move(&m, ctx, map, row))
        return json_string("unknown: the map lacks one of its pairs");
    move_link_names(&m);
    shard__error_save(&saved, 0);
    if (!(s = ctx_server_at(ctx, &move_sp(&m)->master)) || conn_get(ctx, s, &c)) {
        snprintf(why, sizeof why, "unknown: %s", shard_errmsg());
        shard__error_restore(&saved);
        return json_string(why);
    }
    move_link_reverse(&m, &l);
    l.c = c;
    bad = move_link_health(&m, &l, why, sizeof why);
    conn_put(c, bad >= 0);
    if (bad < 0) {
        char msg[600];
        snprintf(msg, sizeof msg, "unknown: %s", shard_errmsg());
        shard__error_restore(&saved);
        return json_string(msg);
    }
    shard__error_restore(&saved);
    if (strcmp(row[13], "1") != 0)
        return json_string(bad ? "not started (resume the move to start it)"
                               : "running (started by a run that stopped before it said so: "
                                 "a resume goes on with it)");
    if (!bad)
        return json_string("running");
    {
        char msg[700];
        snprintf(msg, sizeof msg, "broken: %s", why);
        return json_string(msg);
    }
}

/* A move left dropping, or a revert stopped in its drops (dir 1: of the
 * journal's target): how many of its databases its source master still
 * has ("37 of 256 databases on P001"), asked there (a kill between two
 * drops leaves no count behind to trust). */
static json_t *drop_pending(shard_ctx *ctx, shard_map *map, MYSQL_ROW row, int dir)
{
    shard_server *s;
    shard_conn *c = NULL;
    shard_errsave saved;
    uint64_t left = 0;
    char text[700];
    mv m;
    int rc;

    if (!row_move(&m, ctx, map, row))
        return json_string("unknown: the map lacks one of its pairs");
    m.dir = dir;
    shard__error_save(&saved, 0);
    if (!(s = ctx_server_at(ctx, &move_sp(&m)->master)) || conn_get(ctx, s, &c) ||
        (rc = move_source_left(&m, c, &left))) {
        snprintf(text, sizeof text, "unknown: %s", shard_errmsg());
        if (c)
            conn_put(c, false);
    } else {
        snprintf(text, sizeof text, "%llu of %u databases on %s", (unsigned long long)left,
                 m.last - m.first + 1, move_sp(&m)->name);
        conn_put(c, true);
    }
    shard__error_restore(&saved);
    return json_string(text);
}

int shard_move_status(shard_ctx *ctx, char **text)
{
    shard_map *map;
    sqlbuf out;
    int rc = 0, qrc;
    bool partial = false;

    if (!ctx || !text)
        return shard__fail(SHARD_EINVAL, "shard_move_status: NULL argument");
    map = ctx_map(ctx);
    sql_init(&out);
    for (size_t p = 0; p < map->npairs; p++) {
        shard_server *s = ctx_server(ctx, map, p);
        shard_conn *c = NULL;
        MYSQL_RES *res;
        MYSQL_ROW row;

        if (!s || conn_get(ctx, s, &c)) {
            /* Say which master could not be asked, rather than nothing. */
            add_json_line(&out, json_pack("{s:s,s:s}", "pair", map->pairs[p].name, "error",
                                          shard_errmsg()));
            partial = true;
            continue;
        }
        qrc = conn_query_str(c, "SELECT id, source_pair, target_pair, first_shard,"
                                " last_shard, phase, rows_copied, rows_verified, mismatches,"
                                " pause_ms, message, updated_at, reverse_until,"
                                " reverse_state, reverse_window_s, revert_step FROM "
                                MOVES_TABLE " ORDER BY id");
        if (qrc && c->last_errno == ER_BAD_FIELD_ERROR) /* from before revert steps */
            qrc = conn_query_str(c, "SELECT id, source_pair, target_pair, first_shard,"
                                    " last_shard, phase, rows_copied, rows_verified, mismatches,"
                                    " pause_ms, message, updated_at, reverse_until,"
                                    " reverse_state, reverse_window_s, 0 FROM " MOVES_TABLE
                                    " ORDER BY id");
        if (qrc && c->last_errno == ER_BAD_FIELD_ERROR) /* from before reverse windows */
            qrc = conn_query_str(c, "SELECT id, source_pair, target_pair, first_shard,"
                                    " last_shard, phase, rows_copied, rows_verified,"
                                    " mismatches, pause_ms, message, updated_at, 0, 0, 0, 0"
                                    " FROM " MOVES_TABLE " ORDER BY id");
        if (qrc && c->last_errno != ER_NO_SUCH_TABLE && c->last_errno != ER_BAD_DB_ERROR) {
            /* Not "no journal here": e.g. no right to read it. Say so. */
            add_json_line(&out, json_pack("{s:s,s:s}", "pair", map->pairs[p].name, "error",
                                          shard_errmsg()));
            partial = true;
        }
        if (qrc == 0 && (res = mysql_store_result(c->my))) {
            while ((row = mysql_fetch_row(res))) {
                int phase = atoi(row[5]);
                json_t *o = json_pack(
                    "{s:I,s:s,s:s,s:i,s:i,s:s,s:b,s:I,s:I,s:I,s:f,s:s,s:s}",
                    "id", (json_int_t)strtoll(row[0], NULL, 10), "source", row[1],
                    "target", row[2], "first", atoi(row[3]), "last", atoi(row[4]),
                    "phase", shard_move_phase_name(phase), "in_flight", !move_over(phase),
                    "rows_copied", (json_int_t)strtoll(row[6], NULL, 10),
                    "rows_verified", (json_int_t)strtoll(row[7], NULL, 10),
                    "mismatches", (json_int_t)strtoll(row[8], NULL, 10),
                    "pause_ms", strtod(row[9], NULL), "message", row[10],
                    "updated_at", row[11]);
                if (o && strtoul(row[14], NULL, 10))
                    json_object_set_new(o, "reverse_window_s",
                                        json_integer(strtoll(row[14], NULL, 10)));
                int step = atoi(row[15]);
                if (o && phase == MOVE_REVERTING && step)
                    /* The phase of the revert's run in the other direction. */
                    json_object_set_new(o, "revert_step",
                                        json_string(shard_move_phase_name(step)));
                if (o && (phase == MOVE_REVERSIBLE ||
                          (phase == MOVE_REVERTING && step < MOVE_FLIPPED))) {
                    json_object_set_new(o, "reverse_until",
                                        json_integer(strtoll(row[12], NULL, 10)));
                    json_object_set_new(o, "reverse_stream", reverse_stream(ctx, map, row));
                }
                if (o && (phase == MOVE_DROPPING ||
                          (phase == MOVE_REVERTING && step == MOVE_CLEANING)))
                    json_object_set_new(o, "drop_pending",
                                        drop_pending(ctx, map, row, phase == MOVE_REVERTING));
                add_json_line(&out, o);
            }
            mysql_free_result(res);
        }
        conn_put(c, true);
    }
    shard_map_free(map);
    if ((rc = sql_check(&out)) == 0)
        rc = copy_out(out.s ? out.s : "", out.len, text, NULL);
    sql_free(&out);
    if (rc == 0 && partial)
        rc = shard__fail(SHARD_EPARTIAL, "some masters could not be asked: see their "
                        "\"error\" lines");
    return rc;
}
