/* tests/common/test_opt.c: the generic option-table parser (common/opt):
 * every kind with good and bad values, size suffixes, the bool forms,
 * '_' for '-', JSON strictness, validation and the --help line format, all
 * against one test table on a test struct. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/opt.h"
#include "common/status.h"
#include "common/util.h"
#include "test_util.h"

typedef enum { COLOR_RED = 0, COLOR_GREEN = 5, COLOR_BLUE = 7 } color;

typedef struct {
    char *name;
    const char *borrowed;
    int n;
    int64_t bytes;
    double ratio;
    double rate;
    float f;
    bool on;
    bool flag;
    color c;
    int custom; /* set by parse_custom: text length */
} topts;

static const opt_name k_colors[] = {{"red", COLOR_RED}, {"green", COLOR_GREEN}, {"blue", COLOR_BLUE},
                                    {"azure", COLOR_BLUE}, {NULL, 0}};

static bool parse_custom(void *base, const opt_row *row, const char *text)
{
    (void)row;
    if (strcmp(text, "bad") == 0) {
        inferd_set_error(INFERD_ERR_INVALID_ARG, "custom says no");
        return false;
    }
    ((topts *)base)->custom = (int)strlen(text);
    return true;
}

#define OFF(f) offsetof(topts, f)
static const opt_row k_rows[] = {
    {.name = "name", .kind = OPT_STR, .off = OFF(name), .def_str = "dflt", .help = "a name"},
    {.name = "borrowed", .kind = OPT_STR, .off = OFF(borrowed), .flags = OPT_F_BORROW, .help = "borrowed"},
    {.name = "block-size", .kind = OPT_INT, .off = OFF(n), .min = 1, .max = 1024, .def = 16,
     .help = "KV block size in tokens"},
    {.name = "bytes", .kind = OPT_INT64, .off = OFF(bytes), .min = 0, .max = 1099511627776.0, .def = 0,
     .meta = "BYTES", .help = "size"},
    {.name = "ratio", .kind = OPT_DOUBLE, .off = OFF(ratio), .min = 0.01, .max = 1, .def = 0.9, .help = "ratio"},
    {.name = "rate", .kind = OPT_DOUBLE, .off = OFF(rate), .min = 1e-6, .max = INFINITY, .def = INFINITY,
     .help = "rate"},
    {.name = "f", .kind = OPT_FLOAT, .off = OFF(f), .min = -2, .max = 2, .def = 1, .help = "a float"},
    {.name = "on", .kind = OPT_BOOL, .off = OFF(on), .def = 1, .help = "negatable"},
    {.name = "flag", .kind = OPT_BOOL, .off = OFF(flag), .flags = OPT_F_NO_NEGATE | OPT_F_NO_JSON,
     .help = "store-true"},
    {.name = "color", .kind = OPT_ENUM, .off = OFF(c), .names = k_colors, .def = COLOR_GREEN, .help = "color"},
    {.name = "custom", .kind = OPT_CUSTOM, .parse = parse_custom, .def_str = "abc", .help = "custom"},
};
#undef OFF
#define NROWS INFERD_ARRAY_LEN(k_rows)

static void defaults(topts *o)
{
    memset(o, 0, sizeof *o);
    opt_defaults(k_rows, NROWS, o);
}

START_TEST(test_defaults)
{
    topts o;
    defaults(&o);
    ck_assert_str_eq(o.name, "dflt");
    ck_assert_ptr_null(o.borrowed);
    ck_assert_int_eq(o.n, 16);
    ck_assert(o.ratio == 0.9 && isinf(o.rate) && o.f == 1.0f && o.on && !o.flag);
    ck_assert_int_eq(o.c, COLOR_GREEN);
    ck_assert_int_eq(o.custom, 3);
    ck_assert(opt_validate(k_rows, NROWS, &o, "t"));
    opt_free(k_rows, NROWS, &o);
    ck_assert_ptr_null(o.name);
}
END_TEST

/* opt_set on every kind: text -> accepted?, and the stored value. */
START_TEST(test_set_table)
{
    static const struct {
        const char *row, *text;
        bool ok;
        double want; /* numeric / bool / enum value read back when ok */
    } cases[] = {
        {"block-size", "1", true, 1},          {"block-size", "1024", true, 1024},
        {"block-size", "0", false, 0},         {"block-size", "1025", false, 0},
        {"block-size", "-1", false, 0},        {"block-size", "1.5", false, 0},
        {"block-size", "12x", false, 0},       {"block-size", "", false, 0},
        {"bytes", "0", true, 0},               {"bytes", "4K", true, 4096},
        {"bytes", "4k", true, 4096},           {"bytes", "2MiB", true, 2097152},
        {"bytes", "1.5G", true, 1610612736.0}, {"bytes", "1T", true, 1099511627776.0},
        {"bytes", "1TB", true, 1099511627776.0}, {"bytes", "2T", false, 0},
        {"bytes", "1Q", false, 0},             {"bytes", "-1", false, 0},
        {"bytes", "0.5", false, 0},            {"bytes", "1KiBx", false, 0},
        {"ratio", "0.01", true, 0.01},         {"ratio", "1", true, 1},
        {"ratio", "0", false, 0},              {"ratio", "1.01", false, 0},
        {"ratio", "nan", false, 0},            {"ratio", "inf", false, 0},
        {"rate", "inf", true, INFINITY},       {"rate", "Infinity", true, INFINITY},
        {"rate", "2.5", true, 2.5},            {"rate", "0", false, 0},
        {"f", "-2", true, -2},                 {"f", "0.5", true, 0.5},
        {"f", "2.5", false, 0},                {"on", "true", true, 1},
        {"on", "0", true, 0},                  {"on", "false", true, 0},
        {"on", "1", true, 1},                  {"on", "yes", false, 0},
        {"color", "red", true, COLOR_RED},     {"color", "azure", true, COLOR_BLUE},
        {"color", "RED", false, 0},            {"color", "pink", false, 0},
        {"custom", "hello", true, 5},          {"custom", "bad", false, 0},
        {"name", "x", true, 0},                {"name", "", false, 0},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(cases); i++) {
        topts o;
        defaults(&o);
        const opt_row *r = opt_find(k_rows, NROWS, cases[i].row, strlen(cases[i].row));
        ck_assert_ptr_nonnull(r);
        bool ok = opt_set(r, &o, cases[i].text);
        ck_assert_msg(ok == cases[i].ok, "case %zu: %s '%s' -> %d", i, cases[i].row, cases[i].text, ok);
        if (!ok) {
            char want[64];
            snprintf(want, sizeof want, "--%s", cases[i].row);
            ck_assert_msg(strstr(inferd_last_error(), want), "case %zu: error '%s' does not name %s", i,
                          inferd_last_error(), want);
        } else {
            double got = 0;
            switch (r->kind) {
            case OPT_INT: got = o.n; break;
            case OPT_INT64: got = (double)o.bytes; break;
            case OPT_DOUBLE: got = strcmp(r->name, "rate") == 0 ? o.rate : o.ratio; break;
            case OPT_FLOAT: got = o.f; break;
            case OPT_BOOL: got = o.on; break;
            case OPT_ENUM: got = o.c; break;
            case OPT_CUSTOM: got = o.custom; break;
            default: got = 0; break;
            }
            if (r->kind == OPT_STR)
                ck_assert_str_eq(o.name, cases[i].text);
            else
                ck_assert_msg(got == cases[i].want || (isinf(got) && isinf(cases[i].want)),
                              "case %zu: stored %g want %g", i, got, cases[i].want);
        }
        opt_free(k_rows, NROWS, &o);
    }
}
END_TEST

/* Run opt_parse_arg over all of args; returns the last result (stops at != 1). */
static int parse_all(topts *o, int argc, char **argv, int *consumed)
{
    opt_group g = {k_rows, NROWS, o};
    int r = 1, i;
    for (i = 0; i < argc && r == 1; i++)
        r = opt_parse_arg(&g, 1, argc, argv, &i, NULL);
    *consumed = i;
    return r;
}

START_TEST(test_argv_forms)
{
    static const struct {
        const char *args[3];
        int rc;
    } cases[] = {
        {{"--block-size", "32"}, 1}, {{"--block-size=32"}, 1},  {{"--block_size=32"}, 1},
        {{"--block-size"}, -1},      {{"--block-size=0"}, -1},  {{"--on"}, 1},
        {{"--no-on"}, 1},            {{"--on=false"}, 1},       {{"--no-on=1"}, -1},
        {{"--flag"}, 1},             {{"--flag=1"}, -1},        {{"--no-flag"}, 0},
        {{"--no-block-size"}, 0},    {{"--bogus"}, 0},          {{"positional"}, 0},
        {{"--color", "blue"}, 1},    {{"--color=pink"}, -1},    {{"--name="}, -1},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(cases); i++) {
        topts o;
        defaults(&o);
        int argc = 0;
        while (argc < 3 && cases[i].args[argc])
            argc++;
        int used;
        int rc = parse_all(&o, argc, (char **)cases[i].args, &used);
        ck_assert_msg(rc == cases[i].rc, "case %zu (%s): rc %d", i, cases[i].args[0], rc);
        opt_free(k_rows, NROWS, &o);
    }
    /* values land in the struct; the separate value is consumed */
    topts o;
    defaults(&o);
    char *args[] = {"--block-size", "32", "--no-on", "--flag", "--bytes=1K", "--borrowed", "b", "--name", "n"};
    int used;
    ck_assert_int_eq(parse_all(&o, 9, args, &used), 1);
    ck_assert_int_eq(used, 9);
    ck_assert(o.n == 32 && !o.on && o.flag && o.bytes == 1024);
    ck_assert_ptr_eq(o.borrowed, args[6]);
    ck_assert_str_eq(o.name, "n");
    opt_free(k_rows, NROWS, &o);
}
END_TEST

START_TEST(test_json)
{
    static const struct {
        const char *json;
        bool ok;
        const char *in_err; /* the error names this */
    } cases[] = {
        {"{\"block-size\": 32, \"block_size\": 64}", true, NULL},
        {"{\"bytes\": \"1G\"}", true, NULL},
        {"{\"bytes\": 4096}", true, NULL},
        {"{\"ratio\": 0.5, \"f\": 1.5, \"on\": false, \"color\": \"blue\", \"name\": \"j\"}", true, NULL},
        {"{\"custom\": \"xy\"}", true, NULL},
        {"{\"block-sise\": 32}", false, "block-sise"},
        {"{\"block-size\": \"32\"}", false, "block-size"},
        {"{\"block-size\": 1.5}", false, "block-size"},
        {"{\"block-size\": 0}", false, "block-size"},
        {"{\"block-size\": 1025}", false, "block-size"},
        {"{\"on\": 1}", false, "on"},
        {"{\"on\": \"true\"}", false, "on"},
        {"{\"ratio\": \"0.5\"}", false, "ratio"},
        {"{\"name\": 3}", false, "name"},
        {"{\"color\": 5}", false, "color"},
        {"{\"flag\": true}", false, "flag"}, /* OPT_F_NO_JSON */
        {"{\"borrowed\": \"x\"}", false, "borrowed"},
        {"{\"bytes\": null}", false, "bytes"},
        {"[1]", false, "src"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(cases); i++) {
        topts o;
        defaults(&o);
        opt_group g = {k_rows, NROWS, &o};
        cJSON *j = cJSON_Parse(cases[i].json);
        ck_assert_ptr_nonnull(j);
        bool ok = opt_apply_json(&g, 1, j, "src");
        cJSON_Delete(j);
        ck_assert_msg(ok == cases[i].ok, "case %zu: %s -> %d", i, cases[i].json, ok);
        if (!ok)
            ck_assert_msg(strstr(inferd_last_error(), cases[i].in_err), "case %zu: '%s'", i, inferd_last_error());
        if (i == 0)
            ck_assert_int_eq(o.n, 64); /* '_' spelling, last wins */
        if (i == 1)
            ck_assert_int_eq(o.bytes, INT64_C(1) << 30);
        opt_free(k_rows, NROWS, &o);
    }
}
END_TEST

START_TEST(test_validate)
{
    topts o;
    defaults(&o);
    o.n = 0;
    ck_assert(!opt_validate(k_rows, NROWS, &o, "test options"));
    ck_assert_ptr_nonnull(strstr(inferd_last_error(), "test options: block_size 0 out of range [1, 1024]"));
    o.n = 1024;
    ck_assert(opt_validate(k_rows, NROWS, &o, "t"));
    o.c = (color)3; /* not a listed value */
    ck_assert(!opt_validate(k_rows, NROWS, &o, "t"));
    ck_assert_ptr_nonnull(strstr(inferd_last_error(), "color"));
    o.c = COLOR_RED;
    o.ratio = 1.5;
    ck_assert(!opt_validate(k_rows, NROWS, &o, "t"));
    ck_assert_ptr_nonnull(strstr(inferd_last_error(), "ratio"));
    const opt_row *r = opt_find(k_rows, NROWS, "block-size", 10);
    ck_assert(opt_check_value(r, 1, "t") && !opt_check_value(r, 1025, "t"));
    opt_free(k_rows, NROWS, &o);
}
END_TEST

START_TEST(test_usage)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    opt_usage(f, k_rows, NROWS);
    fclose(f);
    static const char *const want[] = {
        "--block-size N", "KV block size in tokens [1, 1024] (default 16)",
        "--bytes BYTES", "[0, 1099511627776] (default 0)",
        "ratio [0.01, 1] (default 0.9)", "rate [1e-06, inf] (default inf)",
        "--[no-]on", "negatable (default true)",
        "--flag ", "--color red|green|blue|azure", "(default green)",
        "--name S", "a name (default dflt)", "custom (default abc)",
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(want); i++)
        ck_assert_msg(strstr(buf, want[i]), "help lacks '%s':\n%s", want[i], buf);
    ck_assert_ptr_null(strstr(buf, "--[no-]flag"));
    free(buf);
    char range[64];
    ck_assert_str_eq(opt_range_str(&k_rows[2], range, sizeof range), "[1, 1024]");
    ck_assert_str_eq(opt_range_str(&k_rows[0], range, sizeof range), "");
}
END_TEST

START_TEST(test_size)
{
    static const struct {
        const char *s;
        bool ok;
        int64_t v;
    } cases[] = {{"123", true, 123},       {"4K", true, 4096},   {"2MiB", true, 2 << 20},
                 {"1.5G", true, 3 << 29}, {"1gb", true, 1 << 30}, {"", false, 0},
                 {"K", false, 0},         {"-4K", false, 0},    {"1.3", false, 0},
                 {"1e19", false, 0},      {"4KiBB", false, 0},  {"4X", false, 0}};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(cases); i++) {
        int64_t v = -1;
        bool ok = opt_parse_size(cases[i].s, &v);
        ck_assert_msg(ok == cases[i].ok, "case %zu '%s'", i, cases[i].s);
        if (ok)
            ck_assert_int_eq(v, cases[i].v);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("opt");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_set_table);
    tcase_add_test(tc, test_argv_forms);
    tcase_add_test(tc, test_json);
    tcase_add_test(tc, test_validate);
    tcase_add_test(tc, test_usage);
    tcase_add_test(tc, test_size);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
