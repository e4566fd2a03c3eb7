/*
 * The copy's throttle (libshard-move(7), shardctl(1) --max-rows-per-second
 * and --max-load): a token bucket that every copy worker draws its batches
 * from, and one thread that reads the source master's status variables
 * about every half second and holds the copy while one is above its limit.
 * The workers only ever look at a flag: no status query per row or batch.
 */
#include "move.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define CHECK_INTERVAL_MS 500

int move_load_parse(const char *spec, move_loadvar *out, unsigned *n)
{
    unsigned count = 0;
    const char *p = spec;

    if (n)
        *n = 0;
    if (!spec || !*spec)
        return 0;
    for (;;) {
        const char *name = p, *num;
        size_t len = 0;
        uint64_t v = 0;

        while ((p[len] >= 'A' && p[len] <= 'Z') || (p[len] >= 'a' && p[len] <= 'z') ||
               p[len] == '_')
            len++;
        if (len == 0 || len > MOVE_LOAD_NAME_MAX || p[len] != '=')
            return shard__fail(SHARD_EINVAL, "max_load \"%.100s\": expected VAR=N[,VAR=N...] "
                              "with VAR a status variable name (letters and _) and N a "
                              "positive integer", spec);
        num = p += len + 1;
        while (*p >= '0' && *p <= '9') {
            if (v > (UINT64_MAX - 9) / 10)
                return shard__fail(SHARD_EINVAL, "max_load \"%.100s\": %.*s is too large", spec,
                                  (int)len, name);
            v = v * 10 + (uint64_t)(*p++ - '0');
        }
        if (p == num || v == 0 || (*p && *p != ','))
            return shard__fail(SHARD_EINVAL, "max_load \"%.100s\": the limit of %.*s must be a "
                              "positive integer", spec, (int)len, name);
        if (count == MOVE_LOAD_MAX)
            return shard__fail(SHARD_EINVAL, "max_load \"%.100s\": at most %d variables", spec,
                              MOVE_LOAD_MAX);
        if (out) {
            memcpy(out[count].name, name, len);
            out[count].name[len] = '\0';
            out[count].limit = v;
        }
        count++;
        if (!*p)
            break;
        p++;
    }
    if (n)
        *n = count;
    return 0;
}

/* One look at the source: *over names the first variable above its limit
 * ("" when none is). */
static int load_check(move_throttle *th, char *over, size_t size)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    bool seen[MOVE_LOAD_MAX] = {false};
    sqlbuf q;
    int rc;

    over[0] = '\0';
    sql_init(&q);
    sql_add(&q, "SHOW GLOBAL STATUS WHERE Variable_name IN (");
    for (unsigned i = 0; i < th->nload; i++) /* names are letters and _ only */
        sql_addf(&q, "%s'%s'", i ? "," : "", th->load[i].name);
    sql_add(&q, ")");
    rc = conn_select(th->mon, &q, &res);
    sql_free(&q);
    if (rc)
        return rc;
    while ((row = mysql_fetch_row(res))) {
        for (unsigned i = 0; i < th->nload; i++) {
            char *end;
            unsigned long long v;
            if (!row[0] || strcasecmp(row[0], th->load[i].name) != 0)
                continue;
            seen[i] = true;
            errno = 0;
            v = row[1] ? strtoull(row[1], &end, 10) : 0;
            if (!row[1] || end == row[1] || *end || errno) {
                mysql_free_result(res);
                return shard__fail(SHARD_EINVAL, "max_load: the source's status variable %s is "
                                  "not a number (%.40s)", th->load[i].name,
                                  row[1] ? row[1] : "NULL");
            }
            if (v > th->load[i].limit && !over[0])
                snprintf(over, size, "%s=%llu > %llu", th->load[i].name, v,
                         (unsigned long long)th->load[i].limit);
        }
    }
    mysql_free_result(res);
    for (unsigned i = 0; i < th->nload; i++)
        if (!seen[i])
            return shard__fail(SHARD_EINVAL, "max_load: the source master has no status "
                              "variable %s (SHOW GLOBAL STATUS)", th->load[i].name);
    return 0;
}

/* Set the flag from one look; tell the log when it changes. */
static void load_apply(mv *m, move_throttle *th, const char *over)
{
    bool pause = over[0] != '\0';

    pthread_mutex_lock(&th->lock);
    if (pause != th->paused) {
        th->paused = pause;
        th->pauses += pause;
        pthread_cond_broadcast(&th->cond);
        pthread_mutex_unlock(&th->lock);
        if (pause)
            ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: copy paused: source %s (max_load)",
                    (unsigned long long)m->id, over);
        else
            ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: copy resumed: the source is below "
                    "max_load again", (unsigned long long)m->id);
        return;
    }
    pthread_mutex_unlock(&th->lock);
}

static void *monitor_main(void *arg)
{
    move_throttle *th = arg;
    mv *m = th->m;
    bool failing = false;

    pthread_mutex_lock(&th->lock);
    while (!th->stop) {
        struct timespec ts;
        char over[200];
        int rc;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += CHECK_INTERVAL_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&th->cond, &th->lock, &ts);
        if (th->stop)
            break;
        pthread_mutex_unlock(&th->lock);
        if (!th->mon && move_conn(m, &move_sp(m)->master, &th->mon) != 0)
            th->mon = NULL;
        rc = th->mon ? load_check(th, over, sizeof over) : SHARD_ECONNECT;
        if (rc) {
            /* The copy's own connections find a source that is gone; a
             * throttle that cannot look does not hold the copy. */
            if (!failing)
                ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: max_load: cannot read the "
                        "source's status (%s); not pausing", (unsigned long long)m->id,
                        shard_errmsg());
            failing = true;
            move_close(&th->mon);
            over[0] = '\0';
        } else {
            failing = false;
        }
        load_apply(m, th, over);
        pthread_mutex_lock(&th->lock);
    }
    pthread_mutex_unlock(&th->lock);
    return NULL;
}

int move_throttle_start(mv *m, move_throttle *th)
{
    char over[200];
    int rc;

    memset(th, 0, sizeof *th);
    th->m = m;
    th->rate = (double)m->o.max_rows_per_second;
    pthread_mutex_init(&th->lock, NULL);
    pthread_cond_init(&th->cond, NULL);
    if ((rc = move_load_parse(m->o.max_load, th->load, &th->nload)) || th->nload == 0)
        return rc;
    /* The first look before any row is copied: a source already above its
     * limit copies nothing until it is below. */
    if ((rc = move_conn(m, &move_sp(m)->master, &th->mon)) ||
        (rc = load_check(th, over, sizeof over)))
        return shard__fail_prefix(rc, "max_load: ");
    load_apply(m, th, over);
    if (pthread_create(&th->monitor, NULL, monitor_main, th) != 0)
        return shard__fail(SHARD_ENOMEM, "max_load: cannot start the thread that watches "
                          "the source");
    th->running = true;
    return 0;
}

void move_throttle_stop(move_throttle *th)
{
    if (!th->m)
        return;
    pthread_mutex_lock(&th->lock);
    th->stop = true;
    pthread_cond_broadcast(&th->cond);
    pthread_mutex_unlock(&th->lock);
    if (th->running)
        pthread_join(th->monitor, NULL);
    th->running = false;
    move_close(&th->mon);
    pthread_cond_destroy(&th->cond);
    pthread_mutex_destroy(&th->lock);
    th->m = NULL;
}

void move_throttle_fail(move_throttle *th)
{
    pthread_mutex_lock(&th->lock);
    th->failed = true;
    pthread_cond_broadcast(&th->cond);
    pthread_mutex_unlock(&th->lock);
}

bool move_throttle_paused(move_throttle *th)
{
    bool p;
    if (th->nload == 0)
        return false;
    pthread_mutex_lock(&th->lock);
    p = th->paused;
    pthread_mutex_unlock(&th->lock);
    return p;
}

int move_throttle_wait(move_throttle *th)
{
    if (th->nload == 0)
        return 0;
    pthread_mutex_lock(&th->lock);
    while (th->paused && !th->failed && !th->stop)
        pthread_cond_wait(&th->cond, &th->lock);
    pthread_mutex_unlock(&th->lock);
    /* Another worker failed: the copy is over, this one stops too. */
    return th->failed ? shard__fail(SHARD_EINTERNAL, "another copy worker failed") : 0;
}

/*
 * The bucket is paid after the fact: a batch may start once the rows
 * before it are paid for, and costs the rows it really had (move_copied
 * charges them). A table's last, partial batch costs what it holds, an
 * empty table nothing.
 */
double move_throttle_due(move_throttle *th)
{
    double t = now_seconds(), at;

    if (th->rate <= 0)
        return t;
    pthread_mutex_lock(&th->lock);
    at = th->next > t ? th->next : t;
    pthread_mutex_unlock(&th->lock);
    return at;
}

void move_throttle_charge(move_throttle *th, uint64_t rows)
{
    double t, cost;

    if (!th || th->rate <= 0 || rows == 0)
        return;
    t = now_seconds();
    cost = (double)rows / th->rate;
    /* No credit for idle time beyond this batch's own: the time it took to
     * read and send is part of what it paid for. */
    pthread_mutex_lock(&th->lock);
    if (th->next < t - cost)
        th->next = t - cost;
    th->next += cost;
    pthread_mutex_unlock(&th->lock);
}

void move_throttle_settle(move_throttle *th)
{
    double wait;

    if (!th || th->rate <= 0)
        return;
    wait = move_throttle_due(th) - now_seconds();
    sleep_ms(wait > 0 ? wait * 1000 : 0);
}

uint64_t move_throttle_batch(move_throttle *th, uint64_t want)
{
    /* A low rate in small steps: a quarter of a second's rows each. */
    if (th->rate > 0 && th->rate / 4 < (double)want)
        want = th->rate >= 8 ? (uint64_t)(th->rate / 4) : 1;
    return want ? want : 1;
}

int move_throttle_gate(move_throttle *th)
{
    int rc = move_throttle_wait(th);
    double wait;

    if (rc)
        return rc;
    wait = move_throttle_due(th) - now_seconds();
    sleep_ms(wait > 0 ? wait * 1000 : 0);
    return 0;
}

/* ---- counting what was copied --------------------------------------------------------- */

static uint64_t larger(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/*
 * The total is the sum over the tables of their estimate, or of what was
 * copied once that is more, and of exactly what was copied once a table
 * is done (copy_fn): corrected as tables finish, never behind the rows
 * done.
 */
void move_copied(mv *m, const mtable *t, uint64_t rows, uint64_t bytes)
{
    mtable *mt = &m->tables[t - m->tables];
    uint64_t done, total;

    pthread_mutex_lock(&m->lock);
    m->total -= larger(mt->rows, mt->copied);
    mt->copied += rows;
    m->total += larger(mt->rows, mt->copied);
    m->done += rows;
    m->r->rows_copied += rows;
    m->r->bytes_copied += bytes;
    if (m->total < m->done) /* the estimate was low: never past the total */
        m->total = m->done;
    done = m->done;
    total = m->total;
    pthread_mutex_unlock(&m->lock);
    move_throttle_charge(m->th, rows);
    move_progress(m, SHARD_MOVE_COPYING, done, total);
}

/* A drop's rest: as long as it took, and at least MOVE_REST_MIN_MS, so a
 * burst of small drops never runs back to back. */
#define MOVE_REST_MIN_MS 50.0

int move_throttle_rest(move_throttle *th, double busy)
{
    double ms = busy * 1000.0;

    sleep_ms(ms > MOVE_REST_MIN_MS ? ms : MOVE_REST_MIN_MS);
    return move_throttle_wait(th);
}
