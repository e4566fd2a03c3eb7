/*
 * Move status (libshard-move(7), "The journal"): every journaled move of
 * every pair's master, one JSON object per line, and the phases' names.
 */
#include "move.h"

#include <mysqld_error.h>
#include <stdlib.h>

static const char *const phase_names[] = {"planned", "copying", "catchup", "fenced",
                                          "flipped", "verifying", "cleaning", "done",
                                          "aborted"};

const char *shard_move_phase_name(int phase)
{
    if (phase < 0 || phase > SHARD_MOVE_ABORTED)
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

int shard_move_status(shard_ctx *ctx, char **text)
{
    shard_map *map;
    sqlbuf out;
    int rc = 0, qrc;
    bool partial = false;

    if (!ctx || !text)
        return shard_fail(SHARD_EINVAL, "shard_move_status: NULL argument");
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
                                " pause_ms, message, updated_at FROM " MOVE_CONTROL_DB ".moves"
                                " ORDER BY id");
        if (qrc && c->last_errno != ER_NO_SUCH_TABLE && c->last_errno != ER_BAD_DB_ERROR) {
            /* Not "no journal here": e.g. no right to read it. Say so. */
            add_json_line(&out, json_pack("{s:s,s:s}", "pair", map->pairs[p].name, "error",
                                          shard_errmsg()));
            partial = true;
        }
        if (qrc == 0 && (res = mysql_store_result(c->my))) {
            while ((row = mysql_fetch_row(res))) {
                add_json_line(&out, json_pack(
                    "{s:I,s:s,s:s,s:i,s:i,s:s,s:I,s:I,s:I,s:f,s:s,s:s}",
                    "id", (json_int_t)strtoll(row[0], NULL, 10), "source", row[1],
                    "target", row[2], "first", atoi(row[3]), "last", atoi(row[4]),
                    "phase", shard_move_phase_name(atoi(row[5])),
                    "rows_copied", (json_int_t)strtoll(row[6], NULL, 10),
                    "rows_verified", (json_int_t)strtoll(row[7], NULL, 10),
                    "mismatches", (json_int_t)strtoll(row[8], NULL, 10),
                    "pause_ms", strtod(row[9], NULL), "message", row[10],
                    "updated_at", row[11]));
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
        rc = shard_fail(SHARD_EPARTIAL, "some masters could not be asked: see their "
                        "\"error\" lines");
    return rc;
}
