/*
 * Catch-up (libshard-move(7), phase catchup): a named replication
 * connection on the target master, from the source master, starting at
 * the snapshot's position and filtered to the moved databases.
 */
#include "move.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Start again what ran of a connection: both threads, or only the one. */
static int start_connection(shard_conn *t, const repl_link *l)
{
    bool io = strcmp(l->io_running, "No") != 0, sql = strcmp(l->sql_running, "No") != 0;
    const char *which = io && sql ? "" : io ? " IO_THREAD" : " SQL_THREAD";

    if (!io && !sql)
        return 0;
    if (!move_name_ok(l->name))
        return shard_fail(SHARD_ESERVER, "unexpected replication connection name");
    return move_runf(t, "START SLAVE '%s'%s", l->name, which);
}

/* Set the filter (it is not kept across restarts), then start. The filter
 * is checked before the connection runs: an unfiltered start would apply
 * the source's other databases. */
int move_repl_start(mv *m)
{
    char sql[160], *have = NULL;
    sqlbuf q, want;
    int rc;

    move_runf(m->t, "STOP SLAVE '%s'", m->name);
    sql_init(&q);
    sql_init(&want);
    sql_addf(&q, "SET GLOBAL %s.replicate_do_db = '", m->name);
    move_db_list(m, &q, false);
    sql_add(&q, "'");
    move_db_list(m, &want, false);
    if ((rc = sql_check(&q)) == 0 && (rc = sql_check(&want)) == 0)
        rc = conn_query(m->t, &q);
    snprintf(sql, sizeof sql, "SELECT @@%s.replicate_do_db", m->name);
    if (rc == 0)
        rc = repl_value(m->t, sql, &have);
    if (rc == 0 && strcmp(have, want.s) != 0)
        rc = shard_fail(SHARD_EINTERNAL, "replication filter is \"%.200s\", expected "
                        "\"%.200s\"", have, want.s);
    free(have);
    sql_free(&q);
    sql_free(&want);
    if (rc == 0)
        rc = move_runf(m->t, "START SLAVE '%s'", m->name);
    if (rc == 0)
        m->repl_checked = true;
    return rc;
}

/* MASTER_SSL options of CHANGE MASTER from the map's credentials.tls. */
static int add_tls(shard_conn *t, sqlbuf *q, const shard_tlsdef *tls)
{
    const char *names[] = {"master_ssl_ca", "master_ssl_cert", "master_ssl_key"};
    const char *vals[] = {tls->ca, tls->cert, tls->key};

    sql_add(q, ", master_ssl = 1");
    for (int i = 0; i < 3; i++) {
        char *esc;
        if (!vals[i])
            continue;
        esc = shard_malloc(strlen(vals[i]) * 2 + 1);
        if (!esc)
            return shard_fail(SHARD_ENOMEM, "out of memory");
        mysql_real_escape_string(t->my, esc, vals[i], (unsigned long)strlen(vals[i]));
        sql_addf(q, ", %s = '", names[i]);
        sql_add(q, esc);
        sql_add(q, "'");
        free(esc);
    }
    sql_addf(q, ", master_ssl_verify_server_cert = %d", tls->verify ? 1 : 0);
    return 0;
}

/* CHANGE MASTER for the move's connection; the statement holds the
 * password and is wiped after use. */
static int change_master(mv *m)
{
    const char *user = ctx_user(m->ctx, m->map);
    char *esc = NULL, *pesc = NULL, *pw = NULL;
    sqlbuf q;
    int rc;

    if ((rc = ctx_password_copy(m->ctx, &pw)))
        return rc;
    esc = shard_malloc(strlen(user) * 2 + 1);
    pesc = shard_malloc((pw ? strlen(pw) : 0) * 2 + 1);
    if (!esc || !pesc) {
        free(esc);
        free(pesc);
        shard_wipe_free(pw);
        return shard_fail(SHARD_ENOMEM, "out of memory");
    }
    mysql_real_escape_string(m->t->my, esc, user, (unsigned long)strlen(user));
    mysql_real_escape_string(m->t->my, pesc, pw ? pw : "", pw ? (unsigned long)strlen(pw) : 0);
    shard_wipe_free(pw);
    sql_init(&q);
    sql_addf(&q, "CHANGE MASTER '%s' TO master_host = '%s', master_port = %u,"
                 " master_user = '", m->name, move_sp(m)->master.host,
             move_sp(m)->master.port);
    sql_add(&q, esc);
    sql_add(&q, "', master_password = '");
    sql_add(&q, pesc);
    sql_add(&q, "', master_use_gtid = slave_pos, master_connect_retry = 1");
    shard_wipe_free(pesc);
    free(esc);
    /* The map's TLS settings apply to the moved rows' trip too (the paths
     * must be valid on the target server). */
    if (m->map->tls.enabled)
        rc = add_tls(m->t, &q, &m->map->tls);
    if (rc == 0 && (rc = sql_check(&q)) == 0)
        rc = conn_query(m->t, &q);
    if (q.s)
        memset(q.s, 0, q.len); /* it held the password */
    sql_free(&q);
    return rc;
}

int move_repl_setup(mv *m)
{
    unsigned long keep[2];
    size_t nkeep = 0;
    repl_status st;
    char *cur = NULL, *merged = NULL;
    uint64_t d = 0;
    bool ours;
    int rc;

    if ((rc = repl_status_read(m->t, &st)))
        goto out;
    ours = repl_status_find(&st, m->name) != NULL;
    if ((rc = repl_value_u64(m->t, "SELECT @@gtid_domain_id", &d)))
        goto out;
    keep[nkeep++] = (unsigned long)d;
    if (move_dp(m)->has_standby) {
        shard_conn *sb = NULL;
        if ((rc = move_conn(m, &move_dp(m)->standby, &sb)) == 0)
            rc = repl_value_u64(sb, "SELECT @@gtid_domain_id", &d);
        move_close(&sb);
        if (rc)
            goto out;
        keep[nkeep++] = (unsigned long)d;
    }
    /* gtid_slave_pos can only change with every connection stopped,
     * including the pair's own link: stopped for as short as possible. */
    if ((rc = move_runf(m->t, "STOP ALL SLAVES")) ||
        (rc = repl_value(m->t, "SELECT @@gtid_slave_pos", &cur)) ||
        (rc = repl_gtid_merge(cur, m->snap, keep, nkeep, &merged)))
        goto restart;
    {
        sqlbuf q;
        sql_init(&q);
        sql_add(&q, "SET GLOBAL gtid_slave_pos = '");
        sql_add(&q, merged); /* checked by the merge */
        sql_add(&q, "'");
        if ((rc = sql_check(&q)) == 0)
            rc = conn_query(m->t, &q);
        sql_free(&q);
        if (rc)
            goto restart;
    }
    if (ours)
        move_runf(m->t, "RESET SLAVE '%s' ALL", m->name);
    if ((rc = change_master(m)) == 0)
        rc = move_repl_start(m);
restart:
    /* Exactly the connections that ran before, however many. */
    for (size_t i = 0; i < st.n; i++) {
        int src;
        if (strcmp(st.links[i].name, m->name) == 0)
            continue;
        src = start_connection(m->t, &st.links[i]);
        if (!rc)
            rc = src;
    }
out:
    repl_status_free(&st);
    free(cur);
    free(merged);
    return rc ? shard_fail_prefix(rc, "replication to target %s: ", move_dp(m)->name) : 0;
}

int move_repl_remove(mv *m)
{
    repl_status st;
    int rc;

    if ((rc = repl_status_read(m->t, &st)))
        return rc;
    if (repl_status_find(&st, m->name) && (rc = move_runf(m->t, "STOP SLAVE '%s'", m->name)) == 0)
        rc = move_runf(m->t, "RESET SLAVE '%s' ALL", m->name);
    repl_status_free(&st);
    m->repl_checked = false;
    return rc;
}

void move_pair_link_start(mv *m)
{
    repl_status st;
    const repl_link *l;

    if (repl_status_read(m->t, &st))
        return;
    /* Killed between STOP ALL SLAVES and the restart, the pair's link stays
     * stopped: start it (a server without one is fine). */
    if ((l = repl_status_find(&st, "")) && !repl_link_running(l))
        move_runf(m->t, "START SLAVE");
    repl_status_free(&st);
}

/* Replication healthy? A stopped SQL thread with an error ends the move. */
static int repl_health(mv *m)
{
    repl_status st;
    const repl_link *l;
    int rc;

    if ((rc = repl_status_read(m->t, &st)))
        return rc;
    if (!(l = repl_status_find(&st, m->name)))
        rc = shard_fail(SHARD_EINTERNAL, "replication connection %s is gone from the target",
                        m->name);
    else if (!l->do_db[0])
        rc = shard_fail(SHARD_EINTERNAL, "replication connection %s runs without its "
                        "filter (was the target restarted without skip-slave-start?): "
                        "stop it and abort the move", m->name);
    else {
        /* Reconnecting is normal (a restarted source); refused credentials
         * are not, and would otherwise only show as a catch-up timeout. */
        const char *errs[] = {l->last_sql_error, l->last_io_error};
        for (int i = 0; i < 2 && rc == 0; i++)
            if (errs[i][0] &&
                ((!strstr(errs[i], "error reconnecting") && !strstr(errs[i], "error connecting")) ||
                 strstr(errs[i], "Access denied")))
                rc = shard_fail(SHARD_ESERVER, "replication connection %s: %s", m->name,
                                errs[i]);
    }
    repl_status_free(&st);
    return rc;
}

/* Until the target is within max_lag_ms of the source. */
int move_catch_up(mv *m)
{
    double t0 = now_seconds(), lag = m->o.max_lag_ms / 1000.0;
    int rc;

    for (;;) {
        char *pos = NULL;
        bool reached = false;
        if ((rc = repl_value(m->src, "SELECT @@gtid_binlog_pos", &pos)) == 0)
            rc = repl_wait_pos(m->t, pos, lag, &reached);
        free(pos);
        if (rc)
            return rc;
        if (reached)
            break;
        if ((rc = repl_health(m)))
            return rc;
        if (now_seconds() - t0 > m->o.catchup_timeout_s && (m->final = true))
            return shard_fail(SHARD_ETIMEOUT, "the target did not catch up within %u s",
                              m->o.catchup_timeout_s);
        move_progress(m, SHARD_MOVE_CATCHUP, 0, 0);
    }
    m->r->catchup_seconds += now_seconds() - t0;
    return 0;
}
