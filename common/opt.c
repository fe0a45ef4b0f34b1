/* common/opt.c: see opt.h.
 *
 * Every way a value comes in (a flag's text, a config key's JSON value, a
 * struct filled by code and validated at load) meets the same row and the
 * same range check, so the accept/reject of a value does not depend on where
 * it came from. JSON numbers are printed back to text and read by the flag
 * parser for the same reason (1.5 for an INT row is rejected like "--n 1.5").
 * Messages name the option the way the user wrote it: "--name" for text,
 * the key for JSON, the snake_case field for validation.
 */
#include "common/opt.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/alloc.h"
#include "common/status.h"
#include "common/util.h"

/* Largest magnitude an INT64 row may hold (below 2^63, exactly representable). */
#define OPT_INT64_LIMIT 9.2e18

/* Set the thread's error message (INVALID_ARG); always false. */
static bool opt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool opt_fail(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    inferd_set_error(INFERD_ERR_INVALID_ARG, "%s", msg);
    return false;
}

/* A number as a human writes it: "16", "0.9", "inf", "9.2e+18". */
static const char *fmt_num(double v, char *buf, size_t len)
{
    if (isinf(v))
        snprintf(buf, len, "%sinf", v < 0 ? "-" : "");
    else if (v == floor(v) && fabs(v) < 1e15)
        snprintf(buf, len, "%.0f", v);
    else
        snprintf(buf, len, "%g", v);
    return buf;
}

static bool is_numeric(opt_kind k)
{
    return k == OPT_INT || k == OPT_INT64 || k == OPT_DOUBLE || k == OPT_FLOAT;
}

const char *opt_range_str(const opt_row *r, char *buf, size_t len)
{
    char a[32], b[32];
    if (!is_numeric(r->kind))
        snprintf(buf, len, "%s", "");
    else
        snprintf(buf, len, "[%s, %s]", fmt_num(r->min, a, sizeof a), fmt_num(r->max, b, sizeof b));
    return buf;
}

/* Name of an ENUM value (first alias), or NULL. */
static const char *enum_name(const opt_row *r, int v)
{
    for (const opt_name *e = r->names; e && e->name; e++)
        if (e->value == v)
            return e->name;
    return NULL;
}

/* "a|b|c" of an ENUM row's names. */
static const char *enum_list(const opt_row *r, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = '\0';
    for (const opt_name *e = r->names; e && e->name && k + 1 < len; e++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", k ? "|" : "", e->name);
    return buf;
}

/* ---- defaults and freeing ---------------------------------------------------- */

void opt_defaults(const opt_row *t, size_t n, void *base)
{
    for (size_t i = 0; i < n; i++) {
        const opt_row *r = &t[i];
        void *p = (char *)base + r->off;
        switch (r->kind) {
        case OPT_STR:
            if (r->flags & OPT_F_BORROW)
                *(const char **)p = r->def_str;
            else
                *(char **)p = r->def_str ? inferd_strdup(r->def_str) : NULL;
            break;
        case OPT_INT: *(int *)p = (int)r->def; break;
        case OPT_INT64: *(int64_t *)p = (int64_t)r->def; break;
        case OPT_DOUBLE: *(double *)p = r->def; break;
        case OPT_FLOAT: *(float *)p = (float)r->def; break;
        case OPT_BOOL: *(bool *)p = r->def != 0; break;
        case OPT_ENUM: *(int *)p = (int)r->def; break;
        case OPT_CUSTOM:
            if (r->def_str && r->parse)
                r->parse(base, r, r->def_str);
            break;
        }
    }
}

void opt_free(const opt_row *t, size_t n, void *base)
{
    for (size_t i = 0; i < n; i++) {
        if (t[i].kind != OPT_STR || (t[i].flags & OPT_F_BORROW))
            continue;
        char **p = (char **)((char *)base + t[i].off);
        inferd_free(*p);
        *p = NULL;
    }
}

/* ---- reading one value --------------------------------------------------------- */

const opt_row *opt_find(const opt_row *t, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++) {
        const char *nm = t[i].name;
        if (strlen(nm) != len)
            continue;
        size_t k = 0;
        while (k < len && (nm[k] == name[k] || (nm[k] == '-' && name[k] == '_')))
            k++;
        if (k == len)
            return &t[i];
    }
    return NULL;
}

bool opt_parse_size(const char *s, int64_t *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0)
        return false;
    double mul = 1;
    if (*end) {
        switch (*end) {
        case 'k':
        case 'K': mul = 1024.0; break;
        case 'm':
        case 'M': mul = 1024.0 * 1024; break;
        case 'g':
        case 'G': mul = 1024.0 * 1024 * 1024; break;
        case 't':
        case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
        default: return false;
        }
        end++;
        if (*end == 'i')
            end++;
        if (*end == 'B' || *end == 'b')
            end++;
        if (*end)
            return false;
    }
    v *= mul;
    if (v > OPT_INT64_LIMIT || v != floor(v))
        return false;
    *out = (int64_t)v;
    return true;
}

/* A double from text; "inf" / "infinity" (any case) when the row allows it. */
static bool parse_real(const opt_row *r, const char *text, double *out)
{
    if (isinf(r->max) && (strcasecmp(text, "inf") == 0 || strcasecmp(text, "infinity") == 0)) {
        *out = INFINITY;
        return true;
    }
    return util_parse_double(text, out);
}

static bool set_number(const opt_row *r, void *p, const char *text)
{
    char range[80];
    opt_range_str(r, range, sizeof range);
    long long iv;
    int64_t sv;
    double dv;
    switch (r->kind) {
    case OPT_INT:
        if (!util_parse_int(text, (long long)ceil(r->min), (long long)floor(r->max), &iv))
            return opt_fail("--%s: expected an integer in %s, got '%s'", r->name, range, text);
        *(int *)p = (int)iv;
        return true;
    case OPT_INT64:
        if (!opt_parse_size(text, &sv) || (double)sv < r->min || (double)sv > r->max)
            return opt_fail("--%s: expected an integer in %s (K/M/G/T suffixes allowed), got '%s'", r->name,
                            range, text);
        *(int64_t *)p = sv;
        return true;
    default: /* DOUBLE, FLOAT */
        if (!parse_real(r, text, &dv) || !(dv >= r->min && dv <= r->max))
            return opt_fail("--%s: expected a number in %s, got '%s'", r->name, range, text);
        if (r->kind == OPT_FLOAT)
            *(float *)p = (float)dv;
        else
            *(double *)p = dv;
        return true;
    }
}

bool opt_set(const opt_row *r, void *base, const char *text)
{
    void *p = (char *)base + r->off;
    char names[256];
    switch (r->kind) {
    case OPT_STR:
        if (!*text)
            return opt_fail("--%s must not be empty", r->name);
        if (r->flags & OPT_F_BORROW) {
            *(const char **)p = text;
        } else {
            inferd_free(*(char **)p);
            *(char **)p = inferd_strdup(text);
        }
        return true;
    case OPT_BOOL:
        if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0)
            *(bool *)p = true;
        else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0)
            *(bool *)p = false;
        else
            return opt_fail("--%s: expected true or false, got '%s'", r->name, text);
        return true;
    case OPT_ENUM:
        for (const opt_name *e = r->names; e && e->name; e++) {
            if (strcmp(e->name, text) == 0) {
                *(int *)p = e->value;
                return true;
            }
        }
        return opt_fail("--%s: expected one of %s, got '%s'", r->name, enum_list(r, names, sizeof names), text);
    case OPT_CUSTOM:
        if (!r->parse || !r->parse(base, r, text)) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", r->parse ? inferd_last_error() : "no parser");
            return opt_fail("--%s: %s", r->name, msg);
        }
        return true;
    default: return set_number(r, p, text);
    }
}

/* Whether JSON value v has the type row r reads. */
static bool json_type_ok(const opt_row *r, const cJSON *v)
{
    switch (r->kind) {
    case OPT_STR:
    case OPT_ENUM:
    case OPT_CUSTOM: return cJSON_IsString(v);
    case OPT_BOOL: return cJSON_IsBool(v);
    case OPT_INT64: return cJSON_IsNumber(v) || cJSON_IsString(v);
    default: return cJSON_IsNumber(v);
    }
}

bool opt_set_json(const opt_row *r, void *base, const cJSON *v)
{
    const char *key = v->string ? v->string : r->name;
    if (!json_type_ok(r, v))
        return opt_fail("option '%s' has a value of the wrong type (expected %s)", key,
                        r->kind == OPT_BOOL                             ? "true or false"
                        : r->kind == OPT_INT64                          ? "a number or a size string"
                        : is_numeric(r->kind)                           ? "a number"
                                                                        : "a string");
    char buf[64];
    const char *text = buf;
    if (cJSON_IsString(v)) {
        text = v->valuestring;
    } else if (cJSON_IsBool(v)) {
        text = cJSON_IsTrue(v) ? "true" : "false";
    } else {
        double d = v->valuedouble;
        if (d == floor(d) && fabs(d) < 9e18)
            snprintf(buf, sizeof buf, "%lld", (long long)d);
        else
            snprintf(buf, sizeof buf, "%.17g", d);
    }
    if (r->flags & OPT_F_BORROW)
        return opt_fail("option '%s' cannot be set from JSON", key);
    return opt_set(r, base, text);
}

/* ---- argv and JSON objects ----------------------------------------------------- */

/* Row of any group named name[0..len), with its group; NULL when none. */
static const opt_row *group_find(const opt_group *g, size_t ng, const char *name, size_t len,
                                 const opt_group **in)
{
    for (size_t k = 0; k < ng; k++) {
        const opt_row *r = opt_find(g[k].rows, g[k].n, name, len);
        if (r) {
            *in = &g[k];
            return r;
        }
    }
    return NULL;
}

int opt_parse_arg(const opt_group *g, size_t ng, int argc, char **argv, int *i, const opt_row **matched)
{
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0)
        return 0;
    const char *name = a + 2;
    const char *eq = strchr(name, '=');
    size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
    const opt_group *in = NULL;
    const opt_row *r = group_find(g, ng, name, nlen, &in);
    bool negated = false;
    if (!r && nlen > 3 && strncmp(name, "no-", 3) == 0) {
        r = group_find(g, ng, name + 3, nlen - 3, &in);
        negated = r && r->kind == OPT_BOOL && !(r->flags & OPT_F_NO_NEGATE);
        if (!negated)
            r = NULL;
    }
    if (!r)
        return 0;
    if (matched)
        *matched = r;
    const char *val;
    if (r->kind == OPT_BOOL && (negated || (r->flags & OPT_F_NO_NEGATE)) && eq) {
        opt_fail("--%s%s takes no value", negated ? "no-" : "", r->name);
        return -1;
    }
    if (r->kind == OPT_BOOL && !eq) {
        val = negated ? "false" : "true";
    } else if (eq) {
        val = eq + 1;
    } else if (*i + 1 >= argc) {
        opt_fail("--%s needs a value", r->name);
        return -1;
    } else {
        val = argv[++*i];
    }
    return opt_set(r, in->base, val) ? 1 : -1;
}

bool opt_apply_json(const opt_group *g, size_t ng, const cJSON *obj, const char *src)
{
    if (!cJSON_IsObject(obj)) {
        inferd_set_error(INFERD_ERR_FORMAT, "%s: not a JSON object", src);
        return false;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, obj)
    {
        const opt_group *in = NULL;
        const opt_row *r = group_find(g, ng, it->string, strlen(it->string), &in);
        if (!r || (r->flags & OPT_F_NO_JSON))
            return opt_fail("%s: unknown option '%s'", src, it->string);
        if (!opt_set_json(r, in->base, it)) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", inferd_last_error());
            return opt_fail("%s: %s", src, msg);
        }
    }
    return true;
}

/* ---- validation ---------------------------------------------------------------- */

/* Field name of a row as code spells it: "block-size" -> "block_size". */
static const char *snake(const opt_row *r, char *buf, size_t len)
{
    size_t k = 0;
    for (; r->name[k] && k + 1 < len; k++)
        buf[k] = r->name[k] == '-' ? '_' : r->name[k];
    buf[k] = '\0';
    return buf;
}

bool opt_check_value(const opt_row *r, double v, const char *what)
{
    if (v >= r->min && v <= r->max)
        return true;
    char nm[64], range[80], num[32];
    return opt_fail("%s: %s %s out of range %s", what, snake(r, nm, sizeof nm), fmt_num(v, num, sizeof num),
                    opt_range_str(r, range, sizeof range));
}

bool opt_validate(const opt_row *t, size_t n, const void *base, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        const opt_row *r = &t[i];
        const void *p = (const char *)base + r->off;
        bool ok = true;
        switch (r->kind) {
        case OPT_INT: ok = opt_check_value(r, *(const int *)p, what); break;
        case OPT_INT64: ok = opt_check_value(r, (double)*(const int64_t *)p, what); break;
        case OPT_DOUBLE: ok = opt_check_value(r, *(const double *)p, what); break;
        case OPT_FLOAT: {
            /* a bound like 0.01 parses to a double the stored float rounds below */
            float v = *(const float *)p;
            ok = (v >= (float)r->min && v <= (float)r->max) || opt_check_value(r, v, what);
            break;
        }
        case OPT_ENUM:
            if (!enum_name(r, *(const int *)p)) {
                char nm[64], names[256];
                return opt_fail("%s: %s has no valid value (expected %s)", what, snake(r, nm, sizeof nm),
                                enum_list(r, names, sizeof names));
            }
            break;
        default: break;
        }
        if (!ok)
            return false;
    }
    return true;
}

/* ---- help ------------------------------------------------------------------------ */

/* The "(default X)" text of a row, or "" when it has none to show. */
static const char *default_str(const opt_row *r, char *buf, size_t len)
{
    char num[32];
    const char *d = NULL;
    if (r->flags & OPT_F_NO_DEFAULT)
        d = NULL;
    else if (r->kind == OPT_STR || r->kind == OPT_CUSTOM)
        d = r->def_str;
    else if (r->kind == OPT_BOOL)
        d = r->def != 0 ? "true" : "false";
    else if (r->kind == OPT_ENUM)
        d = enum_name(r, (int)r->def);
    else
        d = fmt_num(r->def, num, sizeof num);
    if (d)
        snprintf(buf, len, " (default %s)", d);
    else
        buf[0] = '\0';
    return buf;
}

void opt_usage(FILE *f, const opt_row *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const opt_row *r = &t[i];
        char left[160], names[256], range[80], def[160];
        const char *meta = r->meta;
        if (!meta) {
            switch (r->kind) {
            case OPT_BOOL: meta = ""; break;
            case OPT_ENUM: meta = enum_list(r, names, sizeof names); break;
            case OPT_INT:
            case OPT_INT64: meta = "N"; break;
            case OPT_DOUBLE:
            case OPT_FLOAT: meta = "X"; break;
            default: meta = "S"; break;
            }
        }
        bool neg = r->kind == OPT_BOOL && !(r->flags & OPT_F_NO_NEGATE);
        snprintf(left, sizeof left, "--%s%s%s%s", neg ? "[no-]" : "", r->name, *meta ? " " : "", meta);
        opt_range_str(r, range, sizeof range);
        fprintf(f, "  %-32s %s%s%s%s\n", left, r->help ? r->help : "", *range ? " " : "", range,
                default_str(r, def, sizeof def));
    }
}
