/* common/opt.h: option tables, one generic parser for flags, config keys,
 * validation and --help.
 *
 * An options struct owns one table of opt_row rows, defined next to the
 * struct (model_opts in model/model_opts.c, engine_opts in
 * scheduler/engine_opts.c, srv_opts in server/srv_opts.c, bench_serve_opts in
 * bench/bench_serve.c, ...). A row says where a field lives (offset), how its
 * text is read (kind), which values are accepted ([min, max] for numbers, a
 * name list for enums) and its default and help. The same row then drives:
 *   - opt_defaults():     the struct's defaults;
 *   - opt_parse_argv():   "--name V", "--name=V", "--flag" / "--no-flag";
 *   - opt_apply_json():   a strict JSON object of {"name": value};
 *   - opt_validate():     the owning module's check at load/create, so what
 *                         the CLI accepts is exactly what load accepts;
 *   - opt_usage():        --help lines that print the accepted range and the
 *                         default, so the help cannot drift from the checks.
 * In names '_' matches '-' (flags and JSON keys alike).
 *
 * Several tables can fill several structs at once (serve: model + engine +
 * server): the functions take an array of opt_group {rows, n, base}.
 *
 * Errors: parse/set/validate functions return false (or -1) with
 * inferd_last_error() set to a message that names the option.
 */
#ifndef INFERD_COMMON_OPT_H
#define INFERD_COMMON_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

/* How a row's text is read and what C type the field has. */
typedef enum {
    OPT_STR,    /* char *: owned copy (inferd_strdup), not empty; OPT_F_BORROW: points at the text */
    OPT_INT,    /* int in [min, max] */
    OPT_INT64,  /* int64_t (or uint64_t) in [min, max]; K/M/G/T binary suffixes ("4K", "1.5G", "2MiB") */
    OPT_DOUBLE, /* double in [min, max]; "inf" allowed when max is INFINITY */
    OPT_FLOAT,  /* float in [min, max] (parsed as double, stored as float) */
    OPT_BOOL,   /* bool: "--name" / "--no-name"; text true|false|1|0; JSON true/false */
    OPT_ENUM,   /* int-sized enum: one of the row's names (opt_name list) */
    OPT_CUSTOM, /* read and stored by the row's parse callback (text form only) */
} opt_kind;

/* One accepted name of an OPT_ENUM row and the value it stores. A list ends
 * with {NULL, 0}. Several names may map to one value (aliases: the first
 * name of a value is the one --help shows as the default). */
typedef struct {
    const char *name;
    int value;
} opt_name;

/* Row flags. */
enum {
    OPT_F_BORROW = 1u << 0,    /* OPT_STR: store the text pointer itself (argv strings); never freed */
    OPT_F_NO_NEGATE = 1u << 1, /* OPT_BOOL: only "--name" (sets true); no "--no-name", no "=value" */
    OPT_F_NO_JSON = 1u << 2,   /* not accepted as a config-file key */
    OPT_F_NO_DEFAULT = 1u << 3 /* --help prints no "(default ...)" (the help text says it) */
};

typedef struct opt_row opt_row;

/* OPT_CUSTOM: read text into the struct at base (may set several fields).
 * false with inferd_last_error() set (the caller prefixes "--name: "). */
typedef bool (*opt_parse_fn)(void *base, const opt_row *row, const char *text);

struct opt_row {
    const char *name;       /* without the leading "--", words joined by '-' */
    opt_kind kind;
    size_t off;             /* offsetof(struct, field) */
    double min, max;        /* numeric kinds: accepted closed range */
    double def;             /* default of numeric, BOOL (0/1) and ENUM (value) rows */
    const char *def_str;    /* default of STR (NULL: none) and CUSTOM (text given to parse; NULL: none) rows */
    const char *help;       /* one line, no range or default (opt_usage adds them) */
    const char *meta;       /* value placeholder in --help ("N", "DIR"); NULL: from the kind */
    const opt_name *names;  /* OPT_ENUM: accepted names, {NULL, 0}-terminated */
    opt_parse_fn parse;     /* OPT_CUSTOM */
    unsigned flags;         /* OPT_F_* */
};

/* One table bound to the struct it fills. */
typedef struct {
    const opt_row *rows;
    size_t n;
    void *base;
} opt_group;

/* Store every row's default into base (STR defaults are copied unless
 * OPT_F_BORROW; CUSTOM rows with def_str go through their parse). Fields
 * that no row names are left as they are. */
void opt_defaults(const opt_row *t, size_t n, void *base);

/* Free the owned strings (OPT_STR rows without OPT_F_BORROW) of base and
 * set them to NULL. */
void opt_free(const opt_row *t, size_t n, void *base);

/* Row of t[0..n) named name[0..len) ('_' matches '-'), or NULL. */
const opt_row *opt_find(const opt_row *t, size_t n, const char *name, size_t len);

/* Read text as row r's value and store it at base + r->off, checking the
 * range / names. false with inferd_last_error() = "--name: ..." on a bad
 * value (nothing stored). */
bool opt_set(const opt_row *r, void *base, const char *text);

/* Set row r from one JSON value: STR/ENUM/CUSTOM take a string, INT/DOUBLE/
 * FLOAT a number, INT64 a number or a size string ("1G"), BOOL true/false.
 * Numbers go through the same text parser as flags, so the accept/reject of
 * a value is the same in both. false with inferd_last_error() set (naming
 * the key) on a wrong type or a bad value. */
bool opt_set_json(const opt_row *r, void *base, const cJSON *v);

/* Match argv[*i] against the groups: "--name V", "--name=V", and for BOOL
 * rows "--name" / "--no-name". Returns 1 when matched and stored (*i is
 * advanced past a separate value), 0 when argv[*i] is no row of any group
 * (nothing consumed), -1 on a missing or bad value (inferd_last_error()).
 * *matched (may be NULL) receives the row on 1 and -1. */
int opt_parse_arg(const opt_group *g, size_t ng, int argc, char **argv, int *i, const opt_row **matched);

/* Apply a JSON object strictly: every key must name a row (not
 * OPT_F_NO_JSON) of some group and have a value of the row's type. src names
 * the source in messages ("config.json: unknown option 'porrt'"). Stops at
 * the first error; false with inferd_last_error() set. */
bool opt_apply_json(const opt_group *g, size_t ng, const cJSON *obj, const char *src);

/* Check every numeric field of base against its row's [min, max] and every
 * ENUM field against its names (STR and CUSTOM rows are not checked). what
 * prefixes the message: "<what>: block_size 0 out of range [1, 1024]". */
bool opt_validate(const opt_row *t, size_t n, const void *base, const char *what);

/* Check one number against row r's range; false with the same message as
 * opt_validate. For modules that validate a field with another table's row
 * (engine_opts' max_num_seqs against model_opts' row). */
bool opt_check_value(const opt_row *r, double v, const char *what);

/* "123", "4K", "1.5G", "2MiB" (binary multiples, non-negative, integral
 * after scaling, < 9.2e18) -> bytes. */
bool opt_parse_size(const char *s, int64_t *out);

/* One help line per row:
 *   "  --block-size N              KV block size in tokens [1, 1024] (default 16)" */
void opt_usage(FILE *f, const opt_row *t, size_t n);

/* The range text of a numeric row, "[1, 1024]", into buf; "" for others. */
const char *opt_range_str(const opt_row *r, char *buf, size_t len);

#endif
