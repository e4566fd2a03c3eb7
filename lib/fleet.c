/*
 * Asking the fleet's servers what they are: their variables, their
 * replication links, the shard databases they hold and the moves
 * journaled on them (shard_fleet_status(3), shard_pair_add(3),
 * shard_schema_check(3)).
 */
#include "control.h"
#include "fleet.h"
#include "repl.h"

#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fleet_connect(shard_ctx *ctx, const shard_endpoint *ep, shard_conn **out)
{
    shard_server *s = ctx_server_at(ctx, ep);

    *out = NULL;
    if (!s)
        return shard__fail(SHARD_ENOMEM, "out of memory");
    return conn_get(ctx, s, out);
}

static void copy_field(char *dst, size_t size, const char *v)
{
    snprintf(dst, size, "%s", v ? v : "");
}

static const char *col(MYSQL_ROW row, int i)
{
    return i >= 0 && row[i] ? row[i] : "";
}

static int read_links(shard_conn *c, fleet_server *s)
{
    repl_status st;
    int rc = repl_status_read(c, &st);

    if (rc)
        return rc;
    for (size_t i = 0; i < st.n && s->nlinks < FLEET_LINKS; i++) {
        const repl_link *r = &st.links[i];
        fleet_link *l = &s->links[s->nlinks++];
        copy_field(l->name, sizeof l->name, r->name);
        snprintf(l->source, sizeof l->source, "%s:%u", r->master_host, r->master_port);
        l->source_id = r->master_server_id;
        copy_field(l->io, sizeof l->io, r->io_running);
        copy_field(l->sql, sizeof l->sql, r->sql_running);
        l->lag = r->seconds_behind;
        copy_field(l->io_error, sizeof l->io_error, r->last_io_error);
        copy_field(l->sql_error, sizeof l->sql_error, r->last_sql_error);
    }
    repl_status_free(&st);
    return 0;
}

int fleet_probe(shard_conn *c, fleet_server *s)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    int rc;

    memset(s, 0, sizeof *s);
    if ((rc = conn_query_str(c, "SELECT @@version, @@read_only, @@server_id,"
                                " @@gtid_domain_id, @@gtid_binlog_pos, @@gtid_slave_pos,"
                                " @@log_bin, @@binlog_format = 'ROW',"
                                " @@gtid_ignore_duplicates, @@log_slave_updates")))
        return rc;
    if (!(res = mysql_store_result(c->my)) || !(row = mysql_fetch_row(res))) {
        if (res)
            mysql_free_result(res);
        return shard__fail(SHARD_ESERVER, "%s: no answer to a SELECT of its variables",
                          c->srv->label);
    }
    copy_field(s->version, sizeof s->version, row[0]);
    s->read_only = atoi(col(row, 1));
    s->server_id = strtoul(col(row, 2), NULL, 10);
    s->domain = strtoul(col(row, 3), NULL, 10);
    copy_field(s->binlog_pos, sizeof s->binlog_pos, row[4]);
    copy_field(s->slave_pos, sizeof s->slave_pos, row[5]);
    s->log_bin = atoi(col(row, 6));
    s->row_format = atoi(col(row, 7));
    s->ignore_dups = atoi(col(row, 8));
    s->log_slave_updates = atoi(col(row, 9));
    mysql_free_result(res);
    if ((s->links_rc = read_links(c, s))) {
        /* ER_SPECIFIC_ACCESS_DENIED_ERROR: no SLAVE MONITOR (nor SUPER). */
        s->links_denied = c->last_errno == 1227;
        snprintf(s->links_error, sizeof s->links_error, "%s", shard_errmsg());
    }
    return 0;
}

bool fleet_link_ok(const fleet_link *l)
{
    return strcmp(l->io, "Yes") == 0 && strcmp(l->sql, "Yes") == 0 && !l->io_error[0] &&
           !l->sql_error[0];
}

const fleet_link *fleet_link_from(const fleet_server *s, unsigned long id)
{
    for (size_t i = 0; i < s->nlinks; i++)
        if (id ? s->links[i].source_id == id : s->links[i].name[0] == '\0')
            return &s->links[i];
    return NULL;
}

/* ---- inventory ------------------------------------------------------------ */

/* Rows of a stored result, sorted for binary search. */
typedef struct rowset {
    MYSQL_RES *res;
    MYSQL_ROW *rows;
    size_t n;
} rowset;

static int cmp_schema(const void *a, const void *b)
{
    return strcmp((*(const MYSQL_ROW *)a)[0], (*(const MYSQL_ROW *)b)[0]);
}

/* By schema, then table. */
static int cmp_table(const void *a, const void *b)
{
    MYSQL_ROW x = *(const MYSQL_ROW *)a, y = *(const MYSQL_ROW *)b;
    int d = strcmp(x[0], y[0]);
    return d ? d : strcmp(x[1], y[1]);
}

static int rowset_load(shard_conn *c, const char *sql, int (*cmp)(const void *, const void *),
                       rowset *rs)
{
    MYSQL_ROW row;
    int rc;

    memset(rs, 0, sizeof *rs);
    if ((rc = conn_query_str(c, sql)))
        return rc;
    if (!(rs->res = mysql_store_result(c->my)))
        return shard__fail(SHARD_ESERVER, "%s: %s", c->srv->label, mysql_error(c->my));
    rs->rows = shard__calloc(mysql_num_rows(rs->res) + 1, sizeof *rs->rows);
    if (!rs->rows) {
        mysql_free_result(rs->res);
        rs->res = NULL;
        return shard__fail(SHARD_ENOMEM, "out of memory");
    }
    while ((row = mysql_fetch_row(rs->res)))
        if (row[0] && (mysql_num_fields(rs->res) < 2 || row[1]))
            rs->rows[rs->n++] = row;
    qsort(rs->rows, rs->n, sizeof *rs->rows, cmp);
    return 0;
}

static void rowset_free(rowset *rs)
{
    free(rs->rows);
    if (rs->res)
        mysql_free_result(rs->res);
}

/* The first row of rs (sorted by column 0) whose column 0 is `db`, or n. */
static size_t lower_bound(const rowset *rs, const char *db)
{
    size_t lo = 0, hi = rs->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(rs->rows[mid][0], db) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool has_schema(const rowset *rs, const char *db)
{
    size_t i = lower_bound(rs, db);
    return i < rs->n && strcmp(rs->rows[i][0], db) == 0;
}

/* Whether db has `table`, among the tables of db starting at row `first`. */
static bool has_table(const rowset *rs, size_t first, const char *db, const char *table)
{
    for (size_t i = first; i < rs->n && strcmp(rs->rows[i][0], db) == 0; i++)
        if (strcmp(rs->rows[i][1], table) == 0)
            return true;
    return false;
}

static void note(fleet_inventory *inv, bool mod, unsigned shard, const char *what)
{
    if (!inv->has_first) {
        inv->has_first = true;
        inv->first_mod = mod;
        inv->first_shard = shard;
        snprintf(inv->first_what, sizeof inv->first_what, "%s", what);
    }
    if (inv->nnamed < FLEET_NAMED)
        snprintf(inv->named[inv->nnamed++], sizeof inv->named[0], "%s", what);
}

/* One shard database: present, complete, and how large. */
static void take_db(fleet_inventory *inv, const rowset *schemata, const rowset *tables,
                    const char *db, const char *const *names, size_t nnames, bool mod,
                    unsigned shard)
{
    size_t first;
    bool complete = true;

    inv->databases++;
    if (!has_schema(schemata, db)) {
        inv->missing++;
        note(inv, mod, shard, db);
        return;
    }
    first = lower_bound(tables, db);
    for (size_t i = first; i < tables->n && strcmp(tables->rows[i][0], db) == 0; i++)
        inv->bytes += strtoull(tables->rows[i][2] ? tables->rows[i][2] : "0", NULL, 10);
    for (size_t t = 0; t < nnames; t++) {
        if (has_table(tables, first, db, names[t]))
            continue;
        if (complete) {
            char what[140];
            snprintf(what, sizeof what, "%s.%s", db, names[t]);
            inv->incomplete++;
            note(inv, mod, shard, what);
        }
        complete = false;
    }
}

/* The tables every ID shard database holds. */
static const char **id_tables(const shard_map *m, size_t *n)
{
    const char **t = shard__calloc(m->nobjects + 2 * m->nmappings + 1, sizeof *t);

    *n = 0;
    if (!t)
        return NULL;
    for (size_t i = 0; i < m->nobjects; i++)
        t[(*n)++] = m->objects[i].name;
    for (size_t i = 0; i < m->nmappings; i++) {
        t[(*n)++] = m->mappings[i].name;
        if (m->mappings[i].reverse)
            t[(*n)++] = m->mappings[i].reverse;
    }
    return t;
}

int fleet_inventory_get(shard_conn *c, const shard_map *map, size_t pair,
                        fleet_inventory *inv)
{
    rowset schemata, tables;
    const char **names;
    size_t nnames;
    char db[SHARD_DBNAME_MAX];
    int rc;

    memset(inv, 0, sizeof *inv);
    if ((rc = rowset_load(c, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA",
                          cmp_schema, &schemata)))
        return rc;
    rc = rowset_load(c, "SELECT TABLE_SCHEMA, TABLE_NAME,"
                        " IFNULL(DATA_LENGTH, 0) + IFNULL(INDEX_LENGTH, 0)"
                        " FROM information_schema.TABLES WHERE TABLE_SCHEMA NOT IN"
                        " ('mysql', 'information_schema', 'performance_schema', 'sys')",
                     cmp_table, &tables);
    if (rc) {
        rowset_free(&schemata);
        return rc;
    }
    if (!(names = id_tables(map, &nnames))) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t r = 0; r < map->nranges; r++) {
        const shard_rangedef *rg = &map->ranges[r];
        if (rg->pair != pair)
            continue;
        for (unsigned s = rg->lo; s <= rg->hi && s < map->open_shards; s++) {
            shard__dbfmt_name(&map->dbfmt, s, db);
            take_db(inv, &schemata, &tables, db, names, nnames, false, s);
            inv->id_shards++;
        }
    }
    for (size_t r = 0; r < map->nmod_ranges; r++) {
        const shard_rangedef *rg = &map->mod_ranges[r];
        if (rg->pair != pair)
            continue;
        for (unsigned s = rg->lo; s <= rg->hi; s++) {
            shard__dbfmt_name(&map->mod_dbfmt, s, db);
            take_db(inv, &schemata, &tables, db, map->mod_tables, map->nmod_tables, true, s);
            inv->mod_shards++;
        }
    }
out:
    free(names);
    rowset_free(&tables);
    rowset_free(&schemata);
    return rc;
}

/* ---- the move journal ----------------------------------------------------- */

int fleet_moves_get(shard_conn *c, const char *pair, fleet_move *out, size_t max, size_t *n,
                    size_t *total, bool all)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    sqlbuf q;
    int rc;

    *n = 0;
    if (total)
        *total = 0;
    /* A live mover holds its move's named lock on this server, on the
     * connection that writes the journal (libshard-move(7)). */
    sql_init(&q);
    sql_addf(&q, "SELECT id, source_pair, target_pair, first_shard, last_shard, phase,"
             " IS_USED_LOCK(CONCAT('libshard move ', id)) IS NOT NULL, updated_at, message"
             " FROM " MOVES_TABLE " WHERE %s",
             all ? "phase NOT IN " MOVE_OVER_SQL : "phase < " CONTROL_STR(SHARD_MOVE_DONE));
    if (pair) {
        /* Pair names are case-sensitive; the columns' collation is not. */
        sql_add(&q, " AND (BINARY source_pair = ");
        sql_str(&q, c->my, pair, strlen(pair));
        sql_add(&q, " OR BINARY target_pair = ");
        sql_str(&q, c->my, pair, strlen(pair));
        sql_add(&q, ")");
    }
    sql_add(&q, " ORDER BY phase = " CONTROL_STR(SHARD_MOVE_REVERSIBLE) ", id");
    rc = conn_query(c, &q);
    sql_free(&q);
    if (rc && (c->last_errno == ER_NO_SUCH_TABLE || c->last_errno == ER_BAD_DB_ERROR)) {
        shard__clear_error();
        return 0; /* no journal here: no move ever targeted this pair */
    }
    if (rc)
        return rc;
    if (!(res = mysql_store_result(c->my)))
        return shard__fail(SHARD_ESERVER, "%s: %s", c->srv->label, mysql_error(c->my));
    if (total)
        *total = (size_t)mysql_num_rows(res);
    while ((row = mysql_fetch_row(res)) && *n < max) {
        fleet_move *m = &out[(*n)++];
        m->id = strtoull(col(row, 0), NULL, 10);
        copy_field(m->source, sizeof m->source, row[1]);
        copy_field(m->target, sizeof m->target, row[2]);
        m->first = (unsigned)strtoul(col(row, 3), NULL, 10);
        m->last = (unsigned)strtoul(col(row, 4), NULL, 10);
        m->phase = atoi(col(row, 5));
        m->running = atoi(col(row, 6)) != 0;
        copy_field(m->updated_at, sizeof m->updated_at, row[7]);
        copy_field(m->message, sizeof m->message, row[8]);
    }
    mysql_free_result(res);
    return 0;
}
