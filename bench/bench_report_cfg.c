/* bench/bench_report_cfg.c: what a `bench serve` report shows and what
 * counts as a good request (bench_report_cfg, contracts in bench_stats.h):
 * the defaults and the parsers of vLLM's --percentile-metrics,
 * --metric-percentiles and --goodput values.
 *
 * The parsers are strict where vLLM's argparse is lenient: an unknown
 * metric name is an error (vLLM skips it silently), numbers are plain
 * decimals (no "inf", "nan", hex or signs, which strtod alone would take),
 * and a failed parse stores nothing, so a bad flag never leaves half a
 * configuration behind. Messages name the bad item; the option parser
 * (common/opt) prefixes the flag.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/util.h"
#include "bench/bench_stats.h"

/* Index order must match bench_metric. */
static const char *const k_metric_names[BENCH_METRIC_COUNT] = {"ttft", "tpot", "itl", "e2el"};

/* The largest SLO accepted, in ms (~11.6 days): beyond it a value can only
 * be a typo, and it keeps the comparison far from any overflow. */
#define GOODPUT_MAX_MS 1e9

const char *bench_metric_name(bench_metric m)
{
    return (unsigned)m < BENCH_METRIC_COUNT ? k_metric_names[m] : "?";
}

void bench_report_cfg_default(bench_report_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->metrics = (1u << BENCH_METRIC_COUNT) - 1;
    c->n_pcts = 3;
    c->pcts[0] = 90;
    c->pcts[1] = 95;
    c->pcts[2] = 99;
    for (int m = 0; m < BENCH_METRIC_COUNT; m++)
        c->goodput_slo_ms[m] = -1;
}

bool bench_report_cfg_has_goodput(const bench_report_cfg *c)
{
    for (int m = 0; m < BENCH_METRIC_COUNT; m++)
        if (c->goodput_slo_ms[m] >= 0)
            return true;
    return false;
}

/* Metric named s[0..len), or -1. */
static int metric_of(const char *s, size_t len)
{
    for (int m = 0; m < BENCH_METRIC_COUNT; m++)
        if (strlen(k_metric_names[m]) == len && strncmp(s, k_metric_names[m], len) == 0)
            return m;
    return -1;
}

/* A plain decimal s[0..len) ("99", "99.9", ".5"): digits and at most one
 * '.', at least one digit. false for anything else. */
static bool plain_number(const char *s, size_t len, double *out)
{
    int digits = 0, dots = 0;
    char buf[32];
    if (len == 0 || len >= sizeof buf)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] >= '0' && s[i] <= '9')
            digits++;
        else if (s[i] == '.' && ++dots == 1)
            continue;
        else
            return false;
    }
    if (digits == 0)
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    *out = strtod(buf, NULL);
    return isfinite(*out);
}

bool bench_parse_percentile_metrics(const char *text, bench_report_cfg *c)
{
    unsigned mask = 0;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int m = metric_of(p, len);
        if (m < 0) {
            inferd_set_error(INFERD_ERR_INVALID_ARG, "'%.*s' is not a metric (a comma list of ttft, tpot, itl, e2el)",
                             (int)len, p);
            return false;
        }
        mask |= 1u << m;
        if (!comma)
            break;
        p = comma + 1;
    }
    c->metrics = mask;
    return true;
}

bool bench_parse_metric_percentiles(const char *text, bench_report_cfg *c)
{
    double v[BENCH_MAX_PCTS];
    int n = 0;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        double x = 0;
        if (!plain_number(p, len, &x) || x > 100) {
            inferd_set_error(INFERD_ERR_INVALID_ARG, "'%.*s' is not a percentile in [0, 100] (e.g. 50,90,99)",
                             (int)len, p);
            return false;
        }
        if (n == BENCH_MAX_PCTS) {
            inferd_set_error(INFERD_ERR_INVALID_ARG, "at most %d percentiles", BENCH_MAX_PCTS);
            return false;
        }
        for (int k = 0; k < n; k++)
            if (v[k] == x) {
                inferd_set_error(INFERD_ERR_INVALID_ARG, "percentile %g given twice", x);
                return false;
            }
        v[n++] = x;
        if (!comma)
            break;
        p = comma + 1;
    }
    memcpy(c->pcts, v, sizeof(double) * (size_t)n);
    c->n_pcts = n;
    return true;
}

/* One "KEY:VALUE" token s[0..len) into slo[]. */
static bool goodput_pair(const char *s, size_t len, double *slo)
{
    const char *colon = memchr(s, ':', len);
    if (!colon) {
        inferd_set_error(INFERD_ERR_INVALID_ARG, "'%.*s' is not KEY:VALUE (e.g. ttft:200 tpot:50, in ms)", (int)len,
                         s);
        return false;
    }
    int m = metric_of(s, (size_t)(colon - s));
    if (m < 0 || m == BENCH_METRIC_ITL) {
        inferd_set_error(INFERD_ERR_INVALID_ARG, "'%.*s': goodput metrics are ttft, tpot and e2el", (int)len, s);
        return false;
    }
    double v = 0;
    size_t vlen = len - (size_t)(colon + 1 - s);
    if (!plain_number(colon + 1, vlen, &v) || v > GOODPUT_MAX_MS) {
        inferd_set_error(INFERD_ERR_INVALID_ARG, "'%.*s': the SLO must be a number of ms in [0, %g]", (int)len, s,
                         GOODPUT_MAX_MS);
        return false;
    }
    slo[m] = v;
    return true;
}

/* Tokens are separated by spaces or tabs, so one argument may carry every
 * pair ("ttft:200 tpot:50", quoted) as well as one pair each (vLLM's
 * nargs="+" form, which bench_serve_parse feeds here token by token). */
bool bench_parse_goodput(const char *text, bench_report_cfg *c)
{
    double slo[BENCH_METRIC_COUNT];
    memcpy(slo, c->goodput_slo_ms, sizeof slo);
    int pairs = 0;
    for (const char *p = text; *p;) {
        if (*p == ' ' || *p == '\t') {
            p++;
            continue;
        }
        size_t len = strcspn(p, " \t");
        if (!goodput_pair(p, len, slo))
            return false;
        pairs++;
        p += len;
    }
    if (pairs == 0) {
        inferd_set_error(INFERD_ERR_INVALID_ARG, "expected KEY:VALUE pairs (e.g. ttft:200 tpot:50, in ms)");
        return false;
    }
    memcpy(c->goodput_slo_ms, slo, sizeof slo);
    return true;
}
