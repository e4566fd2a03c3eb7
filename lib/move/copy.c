/*
 * The snapshot copy (libshard-move(7), phase copying): every worker opens a
 * consistent snapshot of the source at one commit point and makes each
 * table on the target from the source's definition just before filling
 * it; rows are streamed in primary-key order and written as LOAD DATA
 * LOCAL INFILE (infile.c),
 * or, where the target refuses that, with array-bound prepared INSERTs
 * (bulk.c), or multi-row INSERTs below the target's packet limit. The way
 * is chosen once, before any row is copied.
 * Tables are handed out over the workers; the throttle (throttle.c) paces
 * them all.
 */
#include "move.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool numeric_text(const char *s, unsigned long len)
{
    if (len == 0)
        return false;
    for (unsigned long i = 0; i < len; i++)
        if (!strchr("0123456789.-+eE", s[i]))
            return false;
    return true;
}

/* One row's values: numbers as they are, everything else as hex. */
static int add_row(sqlbuf *q, MYSQL_ROW row, unsigned long *lens, MYSQL_FIELD *f, unsigned n)
{
    sql_add(q, "(");
    for (unsigned i = 0; i < n; i++) {
        if (i)
            sql_add(q, ",");
        if (!row[i])
            sql_add(q, "NULL");
        else if (IS_NUM(f[i].type) && f[i].type != MYSQL_TYPE_TIMESTAMP) {
            if (!numeric_text(row[i], lens[i]))
                return shard__fail(SHARD_ESERVER, "column %s: unexpected numeric text",
                                  f[i].name);
            sql_add(q, row[i]);
        } else {
            sql_hex(q, row[i], lens[i]);
        }
    }
    sql_add(q, ")");
    return 0;
}

static int insert_head(sqlbuf *q, const mtable *t, MYSQL_FIELD *f, unsigned n)
{
    sql_reset(q);
    sql_add(q, "INSERT INTO ");
    sql_table(q, t->db, t->name);
    sql_add(q, " (");
    for (unsigned i = 0; i < n; i++) {
        if (!move_name_ok(f[i].name))
            return shard__fail(SHARD_ESERVER, "%s.%s: unexpected column name", t->db, t->name);
        sql_addf(q, "%s`%s`", i ? "," : "", f[i].name);
    }
    sql_add(q, ") VALUES ");
    return 0;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* Send the batch of *rows rows, count them, and start the next batch. */
static int flush_batch(mv *m, const mtable *t, shard_conn *dst, sqlbuf *q, size_t head,
                       unsigned *rows, uint64_t *bytes)
{
    int rc = conn_query(dst, q);

    if (rc)
        return rc;
    move_copied(m, t, *rows, *bytes);
    q->len = head;
    *rows = 0;
    *bytes = 0;
    return 0;
}

/* The last resort (a server without array binding): multi-row INSERTs of
 * hex literals. */
static int insert_rows(mv *m, shard_conn *src, shard_conn *dst, const mtable *t,
                       MYSQL_RES *res)
{
    size_t limit = dst->max_packet / 2;
    MYSQL_FIELD *f = mysql_fetch_fields(res);
    unsigned n = mysql_num_fields(res), rows = 0;
    uint64_t batch = move_throttle_batch(m->th, m->o.batch_rows), bytes = 0;
    MYSQL_ROW row;
    size_t head;
    sqlbuf q;
    int rc;

    sql_init(&q);
    rc = insert_head(&q, t, f, n);
    head = q.len;
    while (rc == 0 && (rc = rows ? 0 : move_throttle_gate(m->th)) == 0 &&
           (row = mysql_fetch_row(res))) {
        unsigned long *lens = mysql_fetch_lengths(res);
        uint64_t len = 0;
        for (unsigned i = 0; i < n; i++)
            len += lens[i];
        /* Flush first when this row (hex doubles it) would not fit. */
        if (rows && q.len + 2 * len + 8 * n + 16 >= limit &&
            (rc = flush_batch(m, t, dst, &q, head, &rows, &bytes)))
            break;
        if (rows)
            sql_add(&q, ",");
        if ((rc = add_row(&q, row, lens, f, n)) || (rc = sql_check(&q)))
            break;
        rows++;
        bytes += len;
        if ((rows >= batch || q.len >= limit) &&
            (rc = flush_batch(m, t, dst, &q, head, &rows, &bytes)))
            break;
    }
    if (rc == 0 && mysql_errno(src->my))
        rc = shard__fail(SHARD_ECONNECT, "reading from the source: %s", mysql_error(src->my));
    if (rc == 0 && rows)
        rc = flush_batch(m, t, dst, &q, head, &rows, &bytes);
    sql_free(&q);
    return rc;
}

/* "1, 2": the positions of the leading primary-key columns ("1" if none). */
static int order_by_key(shard_conn *src, const mtable *t, char *out, size_t size)
{
    MYSQL_RES *res;
    MYSQL_FIELD *f;
    unsigned n, k = 0;
    size_t len = 0;
    int rc;

    if ((rc = move_runf(src, "SELECT * FROM `%s`.`%s` LIMIT 0", t->db, t->name)))
        return rc;
    if (!(res = mysql_store_result(src->my)))
        return shard__fail(SHARD_ESERVER, "%s", mysql_error(src->my));
    n = mysql_num_fields(res);
    f = mysql_fetch_fields(res);
    while (k < n && k < 16 && (f[k].flags & PRI_KEY_FLAG))
        k++;
    mysql_free_result(res);
    for (unsigned i = 1; i <= (k ? k : 1) && len < size; i++)
        len += (size_t)snprintf(out + len, size - len, "%s%u", i > 1 ? ", " : "", i);
    return 0;
}

static int copy_table(mv *m, shard_conn *src, shard_conn *dst, const mtable *t)
{
    char order[100];
    MYSQL_RES *res;
    MYSQL_FIELD *f;
    unsigned n;
    int rc;

    /* Ordered by the whole primary key, so that the server reads the
     * clustered index (a covering secondary index that starts with the same
     * column would give another order) and the target appends. */
    if ((rc = order_by_key(src, t, order, sizeof order)) ||
        (rc = move_runf(src, "SELECT * FROM `%s`.`%s` ORDER BY %s", t->db, t->name, order)))
        return rc;
    if (!(res = mysql_use_result(src->my)))
        return shard__fail(SHARD_ESERVER, "%s", mysql_error(src->my));
    n = mysql_num_fields(res);
    f = mysql_fetch_fields(res);
    for (unsigned i = 0; rc == 0 && i < n; i++)
        if (!move_name_ok(f[i].name))
            rc = shard__fail(SHARD_ESERVER, "unexpected column name");
    if (rc == 0)
        rc = m->feed == MOVE_FEED_INFILE ? move_infile_copy(m, m->th, src, dst, t, res)
             : m->feed == MOVE_FEED_BULK ? move_bulk_copy(m, m->th, src, dst, t, res)
                                         : insert_rows(m, src, dst, t, res);
    mysql_free_result(res); /* reads what is left: a failed copy may wait here */
    if (rc)
        move_throttle_fail(m->th);
    return rc ? shard__fail_prefix(rc, "copying %s.%s: ", t->db, t->name) : 0;
}

static int count_table(shard_conn *src, mtable *t)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM `%s`.`%s`", t->db, t->name);
    return repl_value_u64(src, sql, &t->rows);
}

int move_count_rows(mv *m, shard_conn *src)
{
    m->total = 0;
    for (size_t i = 0; i < m->ntables; i++) {
        int rc = count_table(src, &m->tables[i]);
        if (rc)
            return rc;
        m->total += m->tables[i].rows;
    }
    return 0;
}

/* A snapshot on c, and where it is in the binary log ("FILE,POSITION"). */
static int snapshot_at(shard_conn *c, char **at)
{
    int rc;

    *at = NULL;
    if ((rc = move_runf(c, "SET SESSION net_write_timeout = 3600, time_zone = '+00:00'")) ||
        (rc = move_runf(c, "START TRANSACTION WITH CONSISTENT SNAPSHOT")))
        return rc;
    return repl_value(c, "SELECT GROUP_CONCAT(VARIABLE_VALUE ORDER BY VARIABLE_NAME"
                      " SEPARATOR ',') FROM information_schema.SESSION_STATUS WHERE"
                      " VARIABLE_NAME IN ('BINLOG_SNAPSHOT_FILE', 'BINLOG_SNAPSHOT_POSITION')",
                      at);
}

/* A snapshot on each of the n workers: 1 when all are at one position
 * (*at, worker 0's, caller frees) or when any position will do (locked),
 * 0 when they are not (each ended again). */
static int snapshots_open(mv *m, unsigned n, bool locked, char **at)
{
    char *other = NULL;
    bool same = true;
    int rc;

    free(*at);
    if ((rc = snapshot_at(move_wsrcs(m)[0], at)) == 0)
        rc = move_hook(m, "snapshot opened");
    for (unsigned i = 1; rc == 0 && i < n; i++) {
        if ((rc = snapshot_at(move_wsrcs(m)[i], &other)) == 0 && strcmp(other, *at) != 0)
            same = false;
        free(other);
        other = NULL;
    }
    if (rc == 0 && !same && !locked)
        for (unsigned i = 0; i < n; i++)
            move_runf(move_wsrcs(m)[i], "COMMIT");
    return rc ? rc : same || locked;
}

/*
 * Open n snapshots of one state of the moved tables, and learn a GTID
 * position of it. A consistent snapshot sees exactly the transactions
 * before its binary-log position: while the source is quiet, opening them
 * one after another gives one position. Otherwise (twice), they open while
 * the moved tables are locked against writes: other databases' commits
 * still move the position between them, but none of those events touches
 * a moved table, so worker 0's position is every snapshot's for the moved
 * rows. Not BACKUP STAGE BLOCK_COMMIT: it stops every commit on the
 * server, and held while another mover's SET GLOBAL gtid_slave_pos waits
 * for it, the snapshots' status read waits for that one: every writer of
 * the server stalled for the mover's read timeout.
 */
static int open_snapshots(mv *m, unsigned n)
{
    shard_conn *ctl = NULL;
    char *at = NULL, *pos;
    sqlbuf q;
    int rc = 0;

    for (int attempt = 0; attempt < 2 && rc == 0; attempt++)
        rc = snapshots_open(m, n, false, &at);
    if (rc == 0) {
        if ((rc = move_conn(m, &move_sp(m)->master, &ctl)) == 0 &&
            (rc = move_lock_tables(m, ctl)) == 0 && (rc = move_hook(m, "snapshots held")) == 0)
            rc = snapshots_open(m, n, true, &at);
        if (ctl)
            move_runf(ctl, "UNLOCK TABLES");
        move_close(&ctl); /* and its locks with it, had UNLOCK failed */
    }
    if (rc < 0)
        goto out;
    rc = 0;
    /* "FILE,POSITION", both server-made */
    if (!at || !(pos = strrchr(at, ',')) || !move_name_ok(pos + 1) || !pos[1] ||
        strpbrk(at, "'\\")) {
        rc = shard__fail(SHARD_ESERVER, "unexpected binlog snapshot %.200s", at ? at : "");
        goto out;
    }
    *pos++ = '\0';
    sql_init(&q);
    sql_add(&q, "SELECT BINLOG_GTID_POS('");
    sql_add(&q, at);
    sql_add(&q, "', ");
    sql_add(&q, pos);
    sql_add(&q, ")");
    if ((rc = sql_check(&q)) == 0) {
        free(m->snap);
        m->snap = NULL;
        rc = repl_value(move_wsrcs(m)[0], q.s, &m->snap);
    }
    sql_free(&q);
    if (rc == 0)
        rc = repl_gtid_check(m->snap);
out:
    free(at);
    return rc ? shard__fail_prefix(rc, "source snapshot: ") : 0;
}

/*
 * The rows to copy, for the progress: InnoDB's persistent statistics of
 * each table, an estimate (counting every table first would read the whole
 * range once more before the first row is copied, and information_schema.
 * TABLES opens every table: half a second for 1536 of them). move_copied
 * corrects the total as the copy passes a table's estimate and as tables
 * finish; it is the exact count once the copy is done. Without those
 * statistics (or the right to read them) a table's estimate is 0.
 */
static void estimate_rows(mv *m, shard_conn *c)
{
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    sqlbuf q;

    m->total = 0;
    for (size_t i = 0; i < m->ntables; i++)
        m->tables[i].rows = m->tables[i].copied = 0;
    sql_init(&q);
    sql_add(&q, "SELECT database_name, table_name, n_rows FROM mysql.innodb_table_stats"
                " WHERE database_name IN (");
    move_db_list(m, &q, true);
    sql_add(&q, ")");
    if (sql_check(&q) != 0 || conn_select(c, &q, &res) != 0) {
        ctx_log(m->ctx, SHARD_LOG_DEBUG, "move %llu: no row estimate: %s",
                (unsigned long long)m->id, shard_errmsg());
        sql_free(&q);
        return;
    }
    sql_free(&q);
    /* Tables are listed by database, in order: a cursor finds most at once. */
    for (size_t k = 0; (row = mysql_fetch_row(res));) {
        if (!row[0] || !row[1] || !row[2])
            continue;
        for (size_t n = 0; n < m->ntables; n++, k = (k + 1) % m->ntables) {
            mtable *t = &m->tables[k];
            if (strcmp(t->db, row[0]) == 0 && strcmp(t->name, row[1]) == 0) {
                t->rows = strtoull(row[2], NULL, 10);
                m->total += t->rows;
                break;
            }
        }
    }
    mysql_free_result(res);
}

int move_wtsb(mv *m, unsigned w, shard_conn **out)
{
    int rc = 0;

    if (!m->tsb[w] && (rc = move_conn(m, &move_dp(m)->standby, &m->tsb[w])) == 0 &&
        /* As the master's sessions (below): tables made in any order (a
         * child before its parent), defaults read and made in one zone. */
        (rc = move_runf(m->tsb[w], "SET SESSION sql_log_bin = 0, foreign_key_checks = 0, "
                                   "time_zone = '+00:00'")))
        move_close(&m->tsb[w]);
    *out = m->tsb[w];
    return rc ? shard__fail_prefix(rc, "target standby %s: ", move_dp(m)->standby.text) : 0;
}

void move_close_wtsb(mv *m)
{
    for (unsigned w = 0; w < MOVE_MAX_WORKERS; w++)
        move_close(&m->tsb[w]);
}

/* CREATE TABLE [IF NOT EXISTS] `db`.`name` and the rest of the source's text. */
static int create_text(sqlbuf *q, const mtable *tb, const char *rest, bool if_not)
{
    sql_reset(q);
    sql_addf(q, "CREATE TABLE %s`%s`.`%s` ", if_not ? "IF NOT EXISTS " : "", tb->db, tb->name);
    sql_add(q, rest); /* the server's own text */
    return sql_check(q);
}

/* Whether c's CREATE TABLE IF NOT EXISTS found the table there (note
 * 1050); unsure (its warnings unreadable) counts as yes. */
static bool had_table(shard_conn *c)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    bool yes = false;

    if (!mysql_warning_count(c->my))
        return false;
    if (mysql_query(c->my, "SHOW WARNINGS") || !(res = mysql_store_result(c->my)))
        return true;
    while ((row = mysql_fetch_row(res)))
        yes = yes || (row[1] && strcmp(row[1], "1050") == 0);
    mysql_free_result(res);
    return yes;
}

/* With the DDL direct (plan.c, move_create_target): the standby's table
 * first, unlogged and strict (a table left there fails the move), then the
 * master's, logged as IF NOT EXISTS, which the standby's link applies as
 * nothing; the master must not have had it (no note). */
static int create_direct(mv *m, unsigned w, shard_conn *dst, const mtable *tb, const char *rest)
{
    shard_conn *sb;
    bool had = false;
    sqlbuf q;
    int rc;

    sql_init(&q);
    if ((rc = move_wtsb(m, w, &sb)) == 0 && (rc = create_text(&q, tb, rest, false)) == 0 &&
        (rc = conn_query(sb, &q)))
        shard__fail_prefix(rc, "target standby %s: ", move_dp(m)->standby.text);
    if (rc == 0 && (rc = create_text(&q, tb, rest, true)) == 0 &&
        (rc = move_ddl_then(dst, q.s, had_table, &had)) == 0 && had)
        rc = shard__fail(SHARD_EEXISTS, "target %s already had %s.%s", move_dp(m)->name, tb->db,
                        tb->name);
    sql_free(&q);
    return rc;
}

/*
 * Table i's copy on the target: the source's own CREATE TABLE, read in
 * worker w's snapshot (the definition of the rows it copies), run on the
 * target in its database (the name qualified in the text saves a USE per
 * table). Made by the worker that fills it, just before: the DDL of one
 * worker overlaps the rows of the others, instead of a phase of its own
 * before the copy (1536 tables: 12.5 s of the move under load). A move
 * stopped meanwhile is in phase copying, whose resume drops the target's
 * copies (the journal says they are its own) and plans again.
 */
static int create_table(mv *m, size_t i, unsigned w)
{
    const mtable *tb = &m->tables[i];
    shard_conn *src = move_wsrcs(m)[w], *dst = move_wdsts(m)[w];
    double t0 = now_seconds();
    MYSQL_RES *res;
    MYSQL_ROW row;
    char head[100];
    int rc;

    if ((rc = move_runf(src, "SHOW CREATE TABLE `%s`.`%s`", tb->db, tb->name)))
        return rc;
    if (!(res = mysql_store_result(src->my)) || !(row = mysql_fetch_row(res)) || !row[1]) {
        if (res)
            mysql_free_result(res);
        return shard__fail(SHARD_ESERVER, "SHOW CREATE TABLE %s.%s gave nothing", tb->db,
                          tb->name);
    }
    snprintf(head, sizeof head, "CREATE TABLE `%s` ", tb->name);
    if (strncmp(row[1], head, strlen(head)) == 0 && m->ddl_direct) {
        rc = create_direct(m, w, dst, tb, row[1] + strlen(head));
    } else if (strncmp(row[1], head, strlen(head)) == 0) {
        sqlbuf q;
        sql_init(&q);
        if ((rc = create_text(&q, tb, row[1] + strlen(head), false)) == 0)
            rc = move_ddl(dst, q.s);
        sql_free(&q);
    } else if ((rc = move_runf(dst, "USE `%s`", tb->db)) == 0) {
        /* Text of another shape: the standby gets it through the link. */
        rc = move_ddl(dst, row[1]);
    }
    mysql_free_result(res);
    pthread_mutex_lock(&m->lock);
    m->create_s += now_seconds() - t0;
    pthread_mutex_unlock(&m->lock);
    return rc ? shard__fail_prefix(rc, "creating %s.%s on the target: ", tb->db, tb->name) : 0;
}

static int copy_fn(void *arg, size_t i, unsigned w)
{
    mv *m = arg;
    mtable *t = &m->tables[i];
    uint64_t done, total;
    int rc;

    /* Table 0 was made before the feed was chosen (its probe loads it). */
    if ((i > 0 && (rc = create_table(m, i, w))) ||
        (rc = copy_table(m, move_wsrcs(m)[w], move_wdsts(m)[w], t)))
        return rc;
    /* The table is done: its rows, not its estimate, count from now on. */
    pthread_mutex_lock(&m->lock);
    m->total -= max_u64(t->rows, t->copied) - t->copied;
    t->rows = t->copied;
    done = m->done;
    total = m->total;
    pthread_mutex_unlock(&m->lock);
    move_progress(m, SHARD_MOVE_COPYING, done, total);
    return 0;
}

/*
 * The cheapest way the target takes rows, decided once, before any row is
 * copied, so that no table is ever copied half one way: LOAD DATA LOCAL
 * INFILE (probed with an empty load), else array binding, else multi-row
 * INSERTs.
 */
static int choose_feed(mv *m)
{
    shard_conn *dst = move_wdsts(m)[0];
    int yes;

    m->feed = MOVE_FEED_INSERT;
    if (m->ntables == 0)
        return 0;
    yes = move_infile_probe(m, dst, &m->tables[0]);
    if (yes < 0)
        return shard__fail_prefix(yes, "trying LOAD DATA LOCAL INFILE on the target: ");
    if (yes) {
        m->feed = MOVE_FEED_INFILE;
        ctx_log(m->ctx, SHARD_LOG_INFO, "move %llu: copying with LOAD DATA LOCAL INFILE",
                (unsigned long long)m->id);
        return 0;
    }
    if (move_bulk_supported(dst))
        m->feed = MOVE_FEED_BULK;
    ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: the target master %s refuses LOAD DATA LOCAL "
            "INFILE (%s; is local_infile OFF?): copying with %s instead, which is slower",
            (unsigned long long)m->id, dst->srv->label, shard_errmsg(),
            m->feed == MOVE_FEED_BULK ? "array-bound prepared INSERTs" : "multi-row INSERTs");
    return 0;
}

int move_copy(mv *m)
{
    unsigned n = fanout_workers(m->ntables, move_threads(m));
    double t0 = now_seconds(), t1 = t0;
    move_throttle th;
    shard_errsave saved;
    int rc = 0;

    for (unsigned w = 0; rc == 0 && w < n; w++) {
        shard_conn *c;
        /* Tables are copied in any order: a child's rows may come before
         * its parent's (the source's rows were consistent at the snapshot). */
        if ((rc = move_wsrc(m, w, &c)) == 0 && (rc = move_wdst(m, w, &c)) == 0)
            rc = move_runf(c, "SET SESSION time_zone = '+00:00', foreign_key_checks = 0, "
                              "sql_notes = 1"); /* create_direct counts notes */
        /* The source's bytes as they are stored, never converted; its
         * SHOW CREATE TABLE in the zone the target runs it in (a TIMESTAMP
         * default is printed in the session's zone). */
        if (rc == 0)
            rc = move_runf(move_wsrcs(m)[w], "SET SESSION character_set_results = binary, "
                                             "time_zone = '+00:00'");
    }
    m->create_s = 0;
    if (rc == 0 && m->ntables)
        rc = create_table(m, 0, 0);
    if (rc == 0)
        rc = choose_feed(m);
    move_step(m, &t1, "connecting and choosing the feed");
    /* The throttle's first look at the source before the snapshot: a
     * paused copy holds no snapshot open yet. */
    if (rc == 0) {
        rc = move_throttle_start(m, &th);
        m->th = &th;
    }
    if (rc == 0 && (rc = move_throttle_wait(&th)) == 0)
        rc = open_snapshots(m, n);
    move_step(m, &t1, "opening the snapshots");
    if (rc == 0) {
        m->done = m->total = 0;
        m->r->rows_copied = m->r->bytes_copied = 0;
        estimate_rows(m, move_src(m));
    }
    move_step(m, &t1, "estimating the rows");
    if (rc == 0) {
        th.next = now_seconds(); /* the bucket starts with the first row */
        rc = fanout_run(m->ntables, n, copy_fn, m);
    }
    if (rc == 0)
        move_throttle_settle(&th);
    move_step(m, &t1, "copying the tables");
    ctx_log(m->ctx, SHARD_LOG_DEBUG, "move %llu: making the target's tables (%s), inside the "
            "copy, summed over its %u workers, in %.3f s", (unsigned long long)m->id,
            m->ddl_direct ? "on both halves" : "on the master, the standby through its link", n,
            m->create_s);
    if (rc == 0) { /* the exact total, now that it is known */
        m->total = m->done;
        move_progress(m, SHARD_MOVE_COPYING, m->done, m->total);
    }
    shard__error_save(&saved, rc);
    if (m->th)
        move_throttle_stop(m->th);
    m->th = NULL;
    for (unsigned w = 0; w < n; w++)
        if (move_wsrcs(m)[w])
            move_runf(move_wsrcs(m)[w], "COMMIT"); /* ends the snapshot; may fail on a dead source */
    shard__error_restore(&saved);
    move_close_workers(m);
    move_close_wtsb(m);
    m->r->copy_seconds = now_seconds() - t0;
    return rc;
}
