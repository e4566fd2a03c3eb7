/*
 * shardctl: the one progress display of every long operation (the move's
 * copy and verification, schema apply, shards open, import, rebalance's
 * moves), on standard error.
 *
 * done/total in the operation's unit, the percentage, the rate since the
 * start and the time left at that rate. The total is the operation's
 * estimate as the library reports it (a move's plan, corrected as tables
 * finish; an import's row count); a total that the work has passed is
 * shown as it is, never as 100%: only progress_end() says that the
 * operation got to the end. On a terminal, a bar redrawn in place ten
 * times a second; otherwise a plain line every few seconds.
 */
#include "shardctl.h"

#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#define TTY_REDRAW_SECONDS 0.1
#define PLAIN_LINE_SECONDS 5.0
#define BAR_WIDTH 30

void progress_init(progress *p)
{
    memset(p, 0, sizeof *p);
    p->tty = isatty(STDERR_FILENO);
}

/* "12 s", "4 min 10 s", "2 h 5 min". */
static void eta_text(double s, char *buf, size_t size)
{
    if (s < 60)
        snprintf(buf, size, "%.0f s", s);
    else if (s < 3600)
        snprintf(buf, size, "%d min %d s", (int)(s / 60), (int)s % 60);
    else
        snprintf(buf, size, "%d h %d min", (int)(s / 3600), (int)s / 60 % 60);
}

/* The line for the current state; `final`: the operation ended. */
static void format(const progress *p, int final, char *line, size_t size)
{
    double el = ctl_now() - p->start;
    double rate = el > 0 ? (double)p->done / el : 0;
    uint64_t total = p->total;
    size_t len = 0;
    char eta[32];
    unsigned pct;

    if (final && total < p->done)
        total = p->done;
    if (final && !p->tty) {
        snprintf(line, size, "%s: done, %" PRIu64 " %s in %.1f s (%.0f %s/s)", p->label,
                 p->done, p->unit, el, rate, p->unit);
        return;
    }
    if (!total) { /* nothing to measure against (yet) */
        snprintf(line, size, "%s: %" PRIu64 " %s, %.0f %s/s", p->label, p->done, p->unit,
                 rate, p->unit);
        return;
    }
    pct = final ? 100 : (unsigned)(p->done >= total ? 99 : p->done * 100 / total);
    if (pct > 99 && !final)
        pct = 99;
    if (final || p->done >= total || rate <= 0)
        snprintf(eta, sizeof eta, final ? "0 s" : "?");
    else
        eta_text((double)(total - p->done) / rate, eta, sizeof eta);
    if (p->tty) {
        int fill = (int)(pct * BAR_WIDTH / 100);
        len = (size_t)snprintf(line, size, "%-10s [%.*s%*s] ", p->label, fill,
                               "##############################", BAR_WIDTH - fill, "");
    } else {
        len = (size_t)snprintf(line, size, "%s: ", p->label);
    }
    if (len < size)
        snprintf(line + len, size - len, "%3u%% %" PRIu64 "/%" PRIu64 " %s, %.0f %s/s, ETA %s",
                 pct, p->done, total, p->unit, rate, p->unit, eta);
}

static void draw(progress *p, int final)
{
    char line[256];

    format(p, final, line, sizeof line);
    if (p->tty) {
        /* Overwrite the previous line, padding out what it had beyond this one. */
        size_t len = strlen(line);
        fprintf(stderr, "\r%s%*s", line, p->line_len > len ? (int)(p->line_len - len) : 0,
                "");
        p->line_len = len;
        if (final)
            progress_break(p);
    } else {
        fprintf(stderr, "%s\n", line);
    }
    p->last = ctl_now();
}

void progress_begin(progress *p, const char *label, const char *unit)
{
    if (p->active)
        progress_end(p);
    snprintf(p->label, sizeof p->label, "%s", label);
    p->unit = unit;
    p->start = p->last = ctl_now();
    p->done = p->total = 0;
    p->active = 1;
}

void progress_update(progress *p, uint64_t done, uint64_t total)
{
    if (!p->active)
        return;
    p->done = done;
    p->total = total;
    if (ctl_now() - p->last >= (p->tty ? TTY_REDRAW_SECONDS : PLAIN_LINE_SECONDS))
        draw(p, 0);
}

/* The operation got to its end: its last state, complete. Nothing when
 * it never counted anything. */
void progress_end(progress *p)
{
    if (!p->active)
        return;
    p->active = 0;
    if (p->done || p->total)
        draw(p, 1);
    progress_break(p);
}

/* The operation stopped short (an error follows): no final line. */
void progress_stop(progress *p)
{
    p->active = 0;
    progress_break(p);
}

/* Ends an open terminal line, so that what follows (an error) starts clean. */
void progress_break(progress *p)
{
    if (p->line_len) {
        fputc('\n', stderr);
        p->line_len = 0;
    }
}
