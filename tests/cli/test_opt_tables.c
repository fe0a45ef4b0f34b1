/* tests/cli/test_opt_tables.c: every numeric row of every option table
 * (model, engine, server, bench) at min-1, min, max, max+1:
 *   - as a flag (serve: cli_serve_parse; generate: cli_parse_model_flag;
 *     bench: bench_serve_parse),
 *   - as a --config JSON key (serve),
 *   - and, for the model / engine / server tables, stored straight into the
 *     struct and checked by the owning module's validation (what model_load,
 *     engine_create and srv_run run),
 * must all accept min and max and reject min-1 and max+1; and each --help
 * prints the row's range. Most of it runs in-process; a few rows go through
 * the built binary ($INFERD_BIN) to prove the wiring.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_serve.h"
#include "cli/cli_common.h"
#include "cli/cli_serve.h"
#include "common/alloc.h"
#include "common/status.h"
#include "common/util.h"
#include "test_util.h"

typedef enum { T_MODEL, T_ENGINE, T_SERVER, T_BENCH } table_id;

static const opt_row *table_rows(table_id t, size_t *n)
{
    switch (t) {
    case T_MODEL: return model_opts_rows(n);
    case T_ENGINE: return engine_opts_rows(n);
    case T_SERVER: return srv_opts_rows(n);
    default: return bench_serve_rows(n);
    }
}

static bool numeric(const opt_row *r)
{
    return r->kind == OPT_INT || r->kind == OPT_INT64 || r->kind == OPT_DOUBLE || r->kind == OPT_FLOAT;
}

/* The four probes of a row and whether each must be accepted. Above a
 * bound too large to step by one in a double, the probe doubles it. */
static int probes(const opt_row *r, double v[4], bool ok[4])
{
    v[0] = r->min - 1, ok[0] = false;
    v[1] = r->min, ok[1] = true;
    v[2] = r->max, ok[2] = true;
    v[3] = fabs(r->max) >= 1e15 ? r->max * 2 : r->max + 1, ok[3] = false;
    return isinf(r->max) ? 2 : 4; /* no "max + 1" past infinity; max itself is "inf" */
}

static void num_text(double v, char *buf, size_t len)
{
    if (isinf(v))
        snprintf(buf, len, "inf");
    else if (v == floor(v) && fabs(v) < 1e18)
        snprintf(buf, len, "%.0f", v);
    else
        snprintf(buf, len, "%.17g", v);
}

/* serve: "--model m --name=V" through cli_serve_parse. */
static bool serve_flag(const opt_row *r, const char *text)
{
    char arg[128];
    snprintf(arg, sizeof arg, "--%s=%s", r->name, text);
    char *argv[] = {"serve", "--model", "m", arg, NULL};
    srv_opts o;
    srv_opts_default(&o);
    FILE *null = fopen("/dev/null", "w");
    int rc = cli_serve_parse(&o, NULL, 4, argv, null);
    fclose(null);
    srv_opts_free(&o);
    ck_assert_msg(rc == 0 || rc == 2, "%s: rc %d", arg, rc);
    return rc == 0;
}

/* serve: {"model": "m", "<name>": V} as a config file's object. */
static bool serve_json(const opt_row *r, const char *text, bool as_string)
{
    char json[256];
    snprintf(json, sizeof json, as_string ? "{\"model\": \"m\", \"%s\": \"%s\"}" : "{\"model\": \"m\", \"%s\": %s}",
             r->name, text);
    srv_opts o;
    srv_opts_default(&o);
    bool ok = cli_serve_apply_json(&o, NULL, json, "cfg") && srv_opts_validate(&o) == INFERD_OK;
    srv_opts_free(&o);
    return ok;
}

/* generate: the shared model/engine flag parser. */
static bool generate_flag(const opt_row *r, const char *text)
{
    char arg[128];
    snprintf(arg, sizeof arg, "--%s=%s", r->name, text);
    char *argv[] = {arg, NULL};
    cli_model_args a;
    cli_model_args_default(&a);
    int i = 0;
    int rc = cli_parse_model_flag(1, argv, &i, &a);
    cli_model_args_free(&a);
    ck_assert_msg(rc == 1 || rc == -1, "%s: rc %d", arg, rc);
    return rc == 1;
}

static bool bench_flag(const opt_row *r, const char *text)
{
    char arg[128];
    snprintf(arg, sizeof arg, "--%s=%s", r->name, text);
    char *argv[] = {"serve", arg, NULL};
    bench_serve_opts o;
    bench_serve_opts_default(&o);
    bool help;
    return bench_serve_parse(2, argv, &o, &help) == 0;
}

/* Store v in the row's field of a valid struct and run the owner's check. */
static bool owner_validate(table_id t, const opt_row *r, double v)
{
    srv_opts o;
    srv_opts_default(&o);
    o.model.model_dir = inferd_strdup("m");
    void *base = t == T_MODEL ? (void *)&o.model : t == T_ENGINE ? (void *)&o.engine : (void *)&o;
    char *p = (char *)base + r->off;
    switch (r->kind) {
    case OPT_INT: *(int *)p = (int)fmax(fmin(v, 2e9), -2e9); break;
    case OPT_INT64: *(int64_t *)p = v > 9.2e18 ? INT64_MAX : (int64_t)v; break;
    case OPT_FLOAT: *(float *)p = (float)v; break;
    default: *(double *)p = v; break;
    }
    bool ok;
    if (t == T_MODEL)
        ok = model_opts_validate(&o.model) == INFERD_OK;
    else if (t == T_ENGINE)
        ok = engine_opts_validate(&o.engine) == INFERD_OK;
    else
        ok = srv_opts_validate(&o) == INFERD_OK;
    srv_opts_free(&o);
    return ok;
}

START_TEST(test_bounds_everywhere)
{
    int checked = 0;
    for (int t = T_MODEL; t <= T_BENCH; t++) {
        size_t n;
        const opt_row *rows = table_rows((table_id)t, &n);
        for (size_t k = 0; k < n; k++) {
            const opt_row *r = &rows[k];
            if (!numeric(r))
                continue;
            double v[4];
            bool want[4];
            int np = probes(r, v, want);
            for (int p = 0; p < np; p++) {
                char text[64];
                num_text(v[p], text, sizeof text);
                const char *what = r->name;
                if (t == T_BENCH) {
                    ck_assert_msg(bench_flag(r, text) == want[p], "bench --%s=%s", what, text);
                    checked++;
                    continue;
                }
                ck_assert_msg(serve_flag(r, text) == want[p], "serve --%s=%s: %s", what, text, inferd_last_error());
                if (!isinf(v[p]))
                    ck_assert_msg(serve_json(r, text, false) == want[p], "config \"%s\": %s", what, text);
                if (r->kind == OPT_INT64)
                    ck_assert_msg(serve_json(r, text, true) == want[p], "config \"%s\": \"%s\"", what, text);
                if (t != T_SERVER)
                    ck_assert_msg(generate_flag(r, text) == want[p], "generate --%s=%s", what, text);
                if (!isinf(v[p]))
                    ck_assert_msg(owner_validate((table_id)t, r, v[p]) == want[p], "validate %s = %s: %s",
                                  what, text, inferd_last_error());
                checked++;
            }
        }
    }
    ck_assert_int_ge(checked, 4 * 20);
}
END_TEST

/* The help line of row name: from "--name " to the end of that line. */
static const char *help_line(const char *help, const char *name, char *line, size_t len)
{
    char key[96];
    snprintf(key, sizeof key, "--%s ", name);
    const char *p = strstr(help, key);
    if (!p) {
        snprintf(key, sizeof key, "--[no-]%s", name);
        p = strstr(help, key);
    }
    if (!p)
        return NULL;
    size_t n = strcspn(p, "\n");
    snprintf(line, len, "%.*s", (int)INFERD_MIN(n, len - 1), p);
    return line;
}

static char *capture(void (*fn)(FILE *))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fn(f);
    fclose(f);
    return buf;
}

/* Every row of the tables a help text covers appears with its range. */
static void check_help(const char *help, const table_id *ts, int nt, const char *cmd)
{
    for (int i = 0; i < nt; i++) {
        size_t n;
        const opt_row *rows = table_rows(ts[i], &n);
        for (size_t k = 0; k < n; k++) {
            char line[512], range[80];
            ck_assert_msg(help_line(help, rows[k].name, line, sizeof line), "%s --help lacks --%s", cmd,
                          rows[k].name);
            opt_range_str(&rows[k], range, sizeof range);
            ck_assert_msg(strstr(line, range), "%s --help: '%s' lacks %s", cmd, line, range);
        }
    }
}

START_TEST(test_help_ranges)
{
    char *h = capture(cli_serve_usage);
    static const table_id serve_t[] = {T_MODEL, T_ENGINE, T_SERVER};
    check_help(h, serve_t, 3, "serve");
    ck_assert_ptr_nonnull(strstr(h, "[1, 1024] (default 16)")); /* --block-size */
    free(h);
    h = capture(cli_model_usage);
    check_help(h, serve_t, 2, "generate");
    free(h);
    h = capture(bench_serve_usage);
    static const table_id bench_t[] = {T_BENCH};
    check_help(h, bench_t, 1, "bench serve");
    free(h);
}
END_TEST

/* ---- through the binary ------------------------------------------------------ */

static void run(char *const *argv, int *rc, char **out, char **err)
{
    ck_assert_msg(test_run_cmd(argv, out, err, rc), "cannot run %s", argv[0]);
}

START_TEST(test_binary_help)
{
    const char *bin = test_inferd_bin();
    if (!bin)
        test_skip("INFERD_BIN not set");
    static const struct {
        const char *args[4];
        const char *want;
    } cases[] = {
        {{"serve", "--help"}, "KV block size in tokens [1, 1024] (default 16)"},
        {{"serve", "--help"}, "--max-queued-requests N"},
        {{"serve", "--help"}, "[0, 65535] (default 8000)"},
        {{"generate", "--help"}, "KV block size in tokens [1, 1024] (default 16)"},
        {{"generate", "--help"}, "sequences per engine step [1, 65536] (default 64)"},
        {{"generate", "--help"}, "--kv-cache-dtype auto|fp8"},
        {{"serve", "--help"}, "--kv-cache-dtype auto|fp8"},
        {{"bench", "latency", "--help"}, "--kv-cache-dtype auto|fp8"},
        {{"bench", "throughput", "--help"}, "--kv-cache-dtype auto|fp8"},
        {{"bench", "serve", "--help"}, "server port [1, 65535] (default 8000)"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(cases); i++) {
        char *argv[6] = {(char *)bin};
        for (int k = 0; k < 4 && cases[i].args[k]; k++)
            argv[k + 1] = (char *)cases[i].args[k];
        int rc;
        char *out, *err;
        run(argv, &rc, &out, &err);
        ck_assert_msg(rc == 0 && strstr(out, cases[i].want), "%s %s: rc %d, lacks '%s'", cases[i].args[0],
                      cases[i].args[1], rc, cases[i].want);
        inferd_free(out);
        inferd_free(err);
    }
}
END_TEST

/* A bound through the binary: exit 2 (rejected by the options) vs exit 1
 * (accepted, then the load of a missing model fails). */
START_TEST(test_binary_bounds)
{
    const char *bin = test_inferd_bin();
    if (!bin)
        test_skip("INFERD_BIN not set");
    char *dir = test_make_temp_dir("opt-tables");
    char *missing = util_path_join(dir, "no-model");
    static const struct {
        const char *key, *value;
        int rc;
    } cases[] = {
        {"block-size", "1024", 1}, {"block-size", "1025", 2}, {"max-num-seqs", "0", 2},
        {"max-num-seqs", "65536", 1}, {"http-threads", "257", 2}, {"max-queued-requests", "0", 2},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(cases); i++) {
        for (int as_config = 0; as_config < 2; as_config++) {
            char flag[96], json[256];
            snprintf(flag, sizeof flag, "--%s=%s", cases[i].key, cases[i].value);
            snprintf(json, sizeof json, "{\"%s\": %s, \"port\": 0}", cases[i].key, cases[i].value);
            char *cfg = test_write_temp("opt-cfg", json, strlen(json));
            char *argv[] = {(char *)bin, "serve", "--model", missing, "--log-level=off",
                            as_config ? "--config" : "--port=0", as_config ? cfg : flag, NULL};
            int rc;
            char *out, *err;
            run(argv, &rc, &out, &err);
            ck_assert_msg(rc == cases[i].rc, "serve %s %s: exit %d, want %d\n%s", as_config ? "config" : "flag",
                          flag, rc, cases[i].rc, err);
            if (cases[i].rc == 2)
                ck_assert_msg(strstr(err, cases[i].key), "error does not name %s: %s", cases[i].key, err);
            inferd_free(out);
            inferd_free(err);
            unlink(cfg);
            inferd_free(cfg);
        }
    }
    /* generate rejects the same bound with a message naming the flag */
    char *argv[] = {(char *)bin, "generate", "--model", missing, "--prompt-ids", "1", "--block-size=1025", NULL};
    int rc;
    char *out, *err;
    run(argv, &rc, &out, &err);
    ck_assert_msg(rc != 0 && strstr(err, "block-size"), "generate --block-size=1025: exit %d: %s", rc, err);
    inferd_free(out);
    inferd_free(err);
    inferd_free(missing);
    inferd_free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("opt_tables");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_bounds_everywhere);
    tcase_add_test(tc, test_help_ranges);
    tcase_add_test(tc, test_binary_help);
    tcase_add_test(tc, test_binary_bounds);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
