/* tests/server/prom_check.c: see prom_check.h. Written for strictness over
 * generality: it accepts the subset of the text format a well-behaved
 * exporter writes (no whitespace inside label braces) and rejects anything
 * Prometheus itself would reject.
 */
#include "prom_check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FAM 256
#define MAX_SERIES 4096
#define MAX_HS 512

typedef struct {
    char name[128];
    char type[16];
    bool help, typed, has_samples, closed;
} fam;

typedef struct {
    char key[512]; /* family + labels without le */
    double les[64];
    double counts[64];
    int n;
    bool has_sum, has_count;
    double count;
} hseries;

typedef struct {
    fam fams[MAX_FAM];
    int n_fams;
    char *series[MAX_SERIES];
    int n_series;
    hseries hs[MAX_HS];
    int n_hs;
    int cur; /* family index of the last sample, -1 none */
    int line;
    char *err;
    size_t err_len;
} ctx;

static bool fail(ctx *c, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->err_len, "line %d: %s", c->line, msg);
    return false;
}

static bool name_start(char ch, bool colon)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || (colon && ch == ':');
}

static bool name_char(char ch, bool colon)
{
    return name_start(ch, colon) || (ch >= '0' && ch <= '9');
}

/* Metric (colon) or label name at *p; copies into out. */
static bool parse_name(const char **p, bool colon, char *out, size_t n)
{
    const char *s = *p;
    if (!name_start(*s, colon))
        return false;
    size_t k = 0;
    while (name_char(*s, colon)) {
        if (k + 1 >= n)
            return false;
        out[k++] = *s++;
    }
    out[k] = '\0';
    *p = s;
    return true;
}

static bool parse_float(const char *tok, double *v)
{
    if (!strcmp(tok, "NaN")) {
        *v = NAN;
        return true;
    }
    if (!strcmp(tok, "+Inf") || !strcmp(tok, "Inf")) {
        *v = INFINITY;
        return true;
    }
    if (!strcmp(tok, "-Inf")) {
        *v = -INFINITY;
        return true;
    }
    if (!*tok || strspn(tok, "0123456789+-.eE") != strlen(tok))
        return false;
    char *end;
    *v = strtod(tok, &end);
    return *end == '\0';
}

static fam *find_fam(ctx *c, const char *name)
{
    for (int i = 0; i < c->n_fams; i++)
        if (!strcmp(c->fams[i].name, name))
            return &c->fams[i];
    return NULL;
}

static fam *get_fam(ctx *c, const char *name)
{
    fam *f = find_fam(c, name);
    if (f || c->n_fams == MAX_FAM)
        return f;
    f = &c->fams[c->n_fams++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    snprintf(f->type, sizeof f->type, "untyped");
    return f;
}

static bool parse_comment(ctx *c, const char *l)
{
    bool help = !strncmp(l, "# HELP ", 7), type = !strncmp(l, "# TYPE ", 7);
    if (!help && !type)
        return true; /* plain comment */
    const char *p = l + 7;
    char name[128];
    if (!parse_name(&p, true, name, sizeof name))
        return fail(c, "bad metric name in %s", help ? "HELP" : "TYPE");
    if (*p != ' ' && !(help && *p == '\0'))
        return fail(c, "missing space after name");
    fam *f = get_fam(c, name);
    if (!f)
        return fail(c, "too many families");
    if (help) {
        if (f->help)
            return fail(c, "second HELP for %s", name);
        f->help = true;
        return true;
    }
    if (f->typed)
        return fail(c, "second TYPE for %s", name);
    if (f->has_samples)
        return fail(c, "TYPE for %s after its samples", name);
    p++;
    static const char *const k_types[] = {"counter", "gauge", "histogram", "summary", "untyped"};
    for (size_t i = 0; i < 5; i++) {
        if (!strcmp(p, k_types[i])) {
            f->typed = true;
            snprintf(f->type, sizeof f->type, "%s", p);
            return true;
        }
    }
    return fail(c, "unknown TYPE '%s'", p);
}

/* Family a sample name belongs to (histogram/summary suffixes). */
static fam *family_of(ctx *c, const char *name, const char **suffix)
{
    static const char *const k_suf[] = {"_bucket", "_sum", "_count"};
    *suffix = "";
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(name), s = strlen(k_suf[i]);
        if (n > s && !strcmp(name + n - s, k_suf[i])) {
            char base[128];
            snprintf(base, sizeof base, "%.*s", (int)(n - s), name);
            fam *f = find_fam(c, base);
            if (f && (!strcmp(f->type, "histogram") || (!strcmp(f->type, "summary") && i > 0))) {
                *suffix = k_suf[i];
                return f;
            }
        }
    }
    return get_fam(c, name);
}

typedef struct {
    char names[16][64];
    char values[16][128];
    int n;
} labels;

static bool parse_labels(ctx *c, const char **pp, labels *lb)
{
    const char *p = *pp;
    lb->n = 0;
    if (*p != '{')
        return true;
    p++;
    while (*p != '}') {
        if (lb->n == 16)
            return fail(c, "too many labels");
        char *ln = lb->names[lb->n], *lv = lb->values[lb->n];
        if (!parse_name(&p, false, ln, 64))
            return fail(c, "bad label name");
        if (!strncmp(ln, "__", 2))
            return fail(c, "reserved label name %s", ln);
        for (int i = 0; i < lb->n; i++)
            if (!strcmp(lb->names[i], ln))
                return fail(c, "duplicate label %s", ln);
        if (p[0] != '=' || p[1] != '"')
            return fail(c, "expected =\" after label %s", ln);
        p += 2;
        size_t k = 0;
        while (*p != '"') {
            if (!*p || k + 2 >= 128)
                return fail(c, "unterminated label value");
            if (*p == '\\') {
                if (p[1] != '\\' && p[1] != '"' && p[1] != 'n')
                    return fail(c, "bad escape in label value");
                lv[k++] = p[1] == 'n' ? '\n' : p[1];
                p += 2;
            } else {
                lv[k++] = *p++;
            }
        }
        lv[k] = '\0';
        p++;
        lb->n++;
        if (*p == ',')
            p++;
        else if (*p != '}')
            return fail(c, "expected , or } in labels");
    }
    *pp = p + 1;
    return true;
}

/* Series key: name plus labels sorted by name; `skip` drops one label. */
static void series_key(const char *name, const labels *lb, const char *skip, char *out, size_t n)
{
    int order[16];
    for (int i = 0; i < lb->n; i++)
        order[i] = i;
    for (int i = 1; i < lb->n; i++)
        for (int j = i; j > 0 && strcmp(lb->names[order[j - 1]], lb->names[order[j]]) > 0; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    size_t off = (size_t)snprintf(out, n, "%s{", name);
    for (int i = 0; i < lb->n && off < n; i++) {
        if (skip && !strcmp(lb->names[order[i]], skip))
            continue;
        off += (size_t)snprintf(out + off, n - off, "%s=\"%s\",", lb->names[order[i]], lb->values[order[i]]);
    }
    if (off < n)
        snprintf(out + off, n - off, "}");
}

static hseries *get_hs(ctx *c, const char *key)
{
    for (int i = 0; i < c->n_hs; i++)
        if (!strcmp(c->hs[i].key, key))
            return &c->hs[i];
    if (c->n_hs == MAX_HS)
        return NULL;
    hseries *h = &c->hs[c->n_hs++];
    memset(h, 0, sizeof *h);
    snprintf(h->key, sizeof h->key, "%s", key);
    return h;
}

static bool record_hist(ctx *c, fam *f, const char *suffix, const labels *lb, double v)
{
    char key[512];
    series_key(f->name, lb, "le", key, sizeof key);
    hseries *h = get_hs(c, key);
    if (!h)
        return fail(c, "too many histogram series");
    if (!strcmp(suffix, "_sum")) {
        h->has_sum = true;
        return true;
    }
    if (!strcmp(suffix, "_count")) {
        h->has_count = true;
        h->count = v;
        return true;
    }
    const char *le = NULL;
    for (int i = 0; i < lb->n; i++)
        if (!strcmp(lb->names[i], "le"))
            le = lb->values[i];
    double lev;
    if (!le || !parse_float(le, &lev))
        return fail(c, "bucket without a valid le label");
    if (h->n == 64)
        return fail(c, "too many buckets");
    if (h->n > 0 && !(lev > h->les[h->n - 1]))
        return fail(c, "le=%s not above the previous bucket", le);
    if (h->n > 0 && v < h->counts[h->n - 1])
        return fail(c, "bucket le=%s count %g below the previous bucket (not cumulative)", le, v);
    h->les[h->n] = lev;
    h->counts[h->n++] = v;
    return true;
}

static bool parse_sample(ctx *c, const char *l)
{
    const char *p = l;
    char name[128];
    if (!parse_name(&p, true, name, sizeof name))
        return fail(c, "bad metric name");
    labels lb;
    if (!parse_labels(c, &p, &lb))
        return false;
    if (*p != ' ')
        return fail(c, "expected a space before the value");
    while (*p == ' ')
        p++;
    char tok[64], ts[64];
    int n = sscanf(p, "%63s %63s", tok, ts);
    double v;
    if (n < 1 || !parse_float(tok, &v))
        return fail(c, "bad value '%s'", n >= 1 ? tok : "");
    if (n == 2 && strspn(ts, "-0123456789") != strlen(ts))
        return fail(c, "bad timestamp '%s'", ts);
    const char *suffix;
    fam *f = family_of(c, name, &suffix);
    if (!f)
        return fail(c, "too many families");
    int idx = (int)(f - c->fams);
    if (f->closed)
        return fail(c, "samples of %s are not contiguous", f->name);
    if (c->cur >= 0 && c->cur != idx)
        c->fams[c->cur].closed = true;
    c->cur = idx;
    f->has_samples = true;
    char key[512];
    series_key(name, &lb, NULL, key, sizeof key);
    for (int i = 0; i < c->n_series; i++)
        if (!strcmp(c->series[i], key))
            return fail(c, "duplicate series %s", key);
    if (c->n_series < MAX_SERIES)
        c->series[c->n_series++] = strdup(key);
    if (!strcmp(f->type, "counter") && !(v >= 0))
        return fail(c, "counter %s has value %g", name, v);
    if (!strcmp(f->type, "histogram")) {
        if (!*suffix)
            return fail(c, "histogram sample %s without _bucket/_sum/_count", name);
        return record_hist(c, f, suffix, &lb, v);
    }
    return true;
}

static bool check_hists(ctx *c)
{
    for (int i = 0; i < c->n_hs; i++) {
        hseries *h = &c->hs[i];
        if (h->n == 0 || !isinf(h->les[h->n - 1]))
            return fail(c, "histogram %s has no le=\"+Inf\" bucket", h->key);
        if (!h->has_sum || !h->has_count)
            return fail(c, "histogram %s lacks _sum or _count", h->key);
        if (h->count != h->counts[h->n - 1])
            return fail(c, "histogram %s: _count %g != +Inf bucket %g", h->key, h->count,
                        h->counts[h->n - 1]);
    }
    return true;
}

bool prom_validate(const char *text, char *err, size_t err_len)
{
    ctx *c = calloc(1, sizeof *c);
    c->cur = -1;
    c->err = err;
    c->err_len = err_len;
    bool ok = true;
    size_t len = strlen(text);
    if (len > 0 && text[len - 1] != '\n')
        ok = fail(c, "exposition does not end with a newline");
    const char *p = text;
    while (ok && *p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char *l = strndup(p, n);
        c->line++;
        if (strchr(l, '\r'))
            ok = fail(c, "carriage return in line");
        else if (l[0] == '#')
            ok = parse_comment(c, l);
        else if (l[0] != '\0')
            ok = parse_sample(c, l);
        free(l);
        p += n + (nl ? 1 : 0);
    }
    if (ok)
        ok = check_hists(c);
    for (int i = 0; i < c->n_series; i++)
        free(c->series[i]);
    free(c);
    return ok;
}

bool prom_value(const char *text, const char *series, double *out)
{
    size_t n = strlen(series);
    const char *p = text;
    while (p && *p) {
        if (!strncmp(p, series, n) && p[n] == ' ')
            return sscanf(p + n, " %lf", out) == 1;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return false;
}
