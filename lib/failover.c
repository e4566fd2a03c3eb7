/*
 * Failover (DESIGN.md section 7): promote a pair's standby. Fence the old
 * master read-only if it answers, let the standby apply everything it can,
 * swap the roles in a new map version, and say how far behind it was.
 * Asynchronous replication's known risk stays: writes the master committed
 * but never sent are lost when it is dead (SHARD_FAILOVER_FORCE).
 */
#include "ctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAILOVER_WAIT_S 30
#define PUBLISH_TRIES 5

static bool gtid_ok(const char *s)
{
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || *s == '-' || *s == ','))
            return false;
    return true;
}

/* The sequence number of domain d in a GTID position, 0 when absent. */
static uint64_t seq_of(const char *pos, unsigned long d)
{
    for (const char *p = pos; *p;) {
        char *end;
        unsigned long dom = strtoul(p, &end, 10);
        const char *dash2 = end && *end == '-' ? strchr(end + 1, '-') : NULL;
        if (dash2 && dom == d)
            return strtoull(dash2 + 1, NULL, 10);
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
    }
    return 0;
}

/* Transactions in master_pos that the standby (at standby_pos) lacks. */
static int64_t behind(const char *master_pos, const char *standby_pos)
{
    int64_t n = 0;
    for (const char *p = master_pos; *p;) {
        unsigned long d = strtoul(p, NULL, 10);
        uint64_t m = seq_of(master_pos, d), s = seq_of(standby_pos, d);
        if (m > s)
            n += (int64_t)(m - s);
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
    }
    return n;
}

/* A column of SHOW SLAVE STATUS (the pair's unnamed connection). */
static int slave_field(shard_conn *c, const char *field, char *out, size_t size)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    MYSQL_FIELD *f;
    int rc = conn_query_str(c, "SHOW SLAVE STATUS");

    out[0] = '\0';
    if (rc)
        return rc;
    if (!(res = mysql_store_result(c->my)))
        return 0;
    f = mysql_fetch_fields(res);
    row = mysql_fetch_row(res);
    for (unsigned i = 0; row && i < mysql_num_fields(res); i++)
        if (strcmp(f[i].name, field) == 0)
            snprintf(out, size, "%s", row[i] ? row[i] : "");
    mysql_free_result(res);
    return 0;
}

static int wait_applied(shard_conn *sb, const char *pos, bool *reached)
{
    char sql[1200], out[16];
    int rc;

    if (!gtid_ok(pos))
        return shard_fail(SHARD_ESERVER, "unexpected GTID position \"%.100s\"", pos);
    snprintf(sql, sizeof sql, "SELECT MASTER_GTID_WAIT('%s', %d)", pos, FAILOVER_WAIT_S);
    if ((rc = conn_value(sb, sql, out, sizeof out)))
        return rc;
    *reached = strcmp(out, "0") == 0;
    return 0;
}

static int publish_swap(shard_ctx *ctx, const char *pair, const char *old_master,
                        uint64_t *version)
{
    int rc = 0;

    for (int attempt = 0; attempt < PUBLISH_TRIES; attempt++) {
        shard_map *cur = NULL, *next = NULL;
        long pi;

        if ((rc = shard_store_load(ctx->store, &cur)))
            return rc;
        pi = shard_map_find_pair(cur, pair);
        if (pi < 0 || !cur->pairs[pi].has_standby) {
            shard_map_free(cur);
            return shard_fail(SHARD_ECONFLICT, "the stored map changed pair %s meanwhile",
                              pair);
        }
        if (strcmp(cur->pairs[pi].master.text, old_master) != 0) {
            shard_map_free(cur);
            return shard_fail(SHARD_ECONFLICT, "pair %s's master changed meanwhile (now %s)",
                              pair, cur->pairs[pi].master.text);
        }
        rc = map_swap_roles(cur, pair, cur->version + 1, &next);
        if (rc == 0)
            rc = shard_store_publish(ctx->store, next, cur->version);
        if (rc == 0)
            *version = next->version;
        shard_map_free(next);
        shard_map_free(cur);
        if (rc != SHARD_ECONFLICT)
            break;
    }
    return rc;
}

static bool promoted_in_store(shard_ctx *ctx, const char *pair, const char *standby)
{
    shard_map *cur = NULL;
    bool yes = false;
    long pi;

    if (shard_store_load(ctx->store, &cur))
        return true; /* cannot tell: keep the old master fenced, the safe side */
    pi = shard_map_find_pair(cur, pair);
    yes = pi >= 0 && strcmp(cur->pairs[pi].master.text, standby) == 0;
    shard_map_free(cur);
    return yes;
}

int shard_pair_failover(shard_ctx *ctx, const char *pair, int flags,
                        shard_failover_report *report)
{
    shard_failover_report scratch;
    shard_failover_report *r = report ? report : &scratch;
    shard_map *map = NULL;
    shard_conn *sb = NULL, *ms = NULL;
    shard_server *s;
    const shard_pairdef *p;
    char pos[1024], sbpos[1024], sec[32];
    double t0 = now_seconds(), tw;
    bool reached = false;
    long pi;
    int rc;

    if (!ctx || !pair)
        return shard_fail(SHARD_EINVAL, "shard_pair_failover: NULL argument");
    if (flags & ~SHARD_FAILOVER_FORCE)
        return shard_fail(SHARD_EINVAL, "shard_pair_failover: unknown flags 0x%x", flags);
    memset(r, 0, sizeof *r);
    r->lag_transactions = -1;
    r->lag_seconds = -1;
    /* The store, not our snapshot: failover acts on the current truth. */
    if ((rc = shard_store_load(ctx->store, &map)))
        return rc;
    pi = shard_map_find_pair(map, pair);
    if (pi < 0) {
        rc = shard_fail(SHARD_EINVAL, "no pair named \"%.64s\" in the map", pair);
        goto out;
    }
    p = &map->pairs[pi];
    if (!p->has_standby) {
        rc = shard_fail(SHARD_EINVAL, "pair %s has no standby to promote", pair);
        goto out;
    }
    {
        uint64_t mid;
        if (!(flags & SHARD_FAILOVER_FORCE) && move_unfinished_on(ctx, map, pair, &mid)) {
            rc = shard_fail(SHARD_EBUSY, "move %llu involving %s is unfinished: resume or "
                            "abort it first (or --force, and check the move afterwards)",
                            (unsigned long long)mid, pair);
            goto out;
        }
    }
    snprintf(r->pair, sizeof r->pair, "%s", pair);
    snprintf(r->old_master, sizeof r->old_master, "%s", p->master.text);
    snprintf(r->new_master, sizeof r->new_master, "%s", p->standby.text);
    if (!(s = ctx_server_at(ctx, &p->standby)) || (rc = conn_get(ctx, s, &sb))) {
        rc = shard_fail_prefix(rc ? rc : SHARD_ENOMEM, "standby %s of %s cannot be promoted: ",
                               p->standby.text, pair);
        goto out;
    }
    if ((rc = slave_field(sb, "Seconds_Behind_Master", sec, sizeof sec)))
        goto out;
    if (sec[0])
        r->lag_seconds = strtod(sec, NULL);
    s = ctx_server_at(ctx, &p->master);
    rc = s ? conn_get(ctx, s, &ms) : SHARD_ENOMEM;
    if (rc == 0) {
        /* Fence: from now on the old master takes no more application writes
         * (for accounts without READ_ONLY ADMIN), so the standby can catch up
         * with everything there is. */
        if ((rc = conn_query_str(ms, "SET GLOBAL read_only = 1")))
            goto out;
        if ((rc = conn_value(ms, "SELECT @@gtid_binlog_pos", pos, sizeof pos)) ||
            (rc = conn_value(sb, "SELECT @@gtid_current_pos", sbpos, sizeof sbpos))) {
            conn_query_str(ms, "SET GLOBAL read_only = 0"); /* give the master back */
            goto out;
        }
        r->old_master_fenced = 1;
        r->lag_transactions = behind(pos, sbpos);
    } else if ((flags & SHARD_FAILOVER_FORCE) && (rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT)) {
        ctx_log(ctx, SHARD_LOG_WARN, "failover of %s: master %s does not answer (%s); "
                "promoting the standby: writes it never sent are lost", pair, p->master.text,
                shard_errmsg());
        /* Apply everything the standby received. */
        if ((rc = slave_field(sb, "Gtid_IO_Pos", pos, sizeof pos)))
            goto out;
    } else if (rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT) {
        rc = shard_fail_prefix(rc, "master %s of %s does not answer; promoting the standby "
                               "anyway (--force) loses the writes it never sent: ",
                               p->master.text, pair);
        goto out;
    } else { /* it answered, but refused us (privileges, TLS): it is not dead */
        rc = shard_fail_prefix(rc, "master %s of %s: ", p->master.text, pair);
        goto out;
    }
    tw = now_seconds();
    if (pos[0] && (rc = wait_applied(sb, pos, &reached))) {
        if (ms)
            conn_query_str(ms, "SET GLOBAL read_only = 0"); /* give the master back */
        goto out;
    }
    r->wait_ms = (now_seconds() - tw) * 1000.0;
    if (pos[0] && !reached) {
        if (ms)
            conn_query_str(ms, "SET GLOBAL read_only = 0"); /* give the master back */
        rc = shard_fail(SHARD_ETIMEOUT, "standby %s did not apply %s within %d s; the master "
                        "was left in charge", p->standby.text, pos, FAILOVER_WAIT_S);
        goto out;
    }
    /* A dead master may come back with transactions it never sent: the
     * promoted server must not take them (they would overwrite newer,
     * acknowledged writes). Its link from the old master stops here; the
     * pair is not redundant again until an operator rebuilds that server. */
    if (!ms && (rc = conn_query_str(sb, "STOP SLAVE")))
        goto out;
    if ((rc = conn_query_str(sb, "SET GLOBAL read_only = 0")) ||
        (rc = publish_swap(ctx, pair, p->master.text, &r->map_version))) {
        /* Not promoted after all? Only then does the old master take writes
         * again: a publish may have landed though its answer was lost. */
        if (ms && !promoted_in_store(ctx, pair, p->standby.text))
            conn_query_str(ms, "SET GLOBAL read_only = 0");
        goto out;
    }
    shard_ctx_reload(ctx);
    r->total_ms = (now_seconds() - t0) * 1000.0;
    ctx_log(ctx, SHARD_LOG_WARN, "failover of %s: %s promoted (map version %llu)", pair,
            p->standby.text, (unsigned long long)r->map_version);
out:
    conn_put(sb, false);
    conn_put(ms, false);
    shard_map_free(map);
    return rc;
}
