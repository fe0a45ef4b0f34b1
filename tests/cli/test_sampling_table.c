/* tests/cli/test_sampling_table.c: the sampling table's bounds are the same
 * in all three request faces. For every row with numeric bounds, the
 * values min-1, min, max, max+1 go in as an `inferd generate` flag (the
 * built binary; a missing --model dir makes an accepted flag exit 1 at
 * load, a rejected one exits 2 before it), as a prompts-file line
 * (gen_check_line) and as a /v1/completions body (srv_request_parse); each
 * must accept exactly min and max (min too unless the row's minimum is
 * open). JSON numbers are doubles, so the seed's int64 ends are given to the
 * JSON faces as the nearest doubles (-2^63 - 2048, -2^63, 2^63 - 1024, 2^63)
 * and to the flag exactly. */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "cli/gen_batch.h"
#include "server/srv_openai.h"
#include "test_util.h"

static const char *g_bin;

static bool cli_accepts(const char *flag, const char *v, const char *extra_flag, const char *extra_v)
{
    char *argv[16] = {(char *)g_bin, "generate", "--model", "/nonexistent/inferd-model", "--device", "cpu",
                      "--prompt-ids", "1", (char *)flag, (char *)v};
    int k = 10;
    if (extra_flag) {
        argv[k++] = (char *)extra_flag;
        argv[k++] = (char *)extra_v;
    }
    argv[k] = NULL;
    char *out, *err;
    int rc;
    ck_assert(test_run_cmd(argv, &out, &err, &rc));
    ck_assert_msg(rc == 1 || rc == 2, "%s %s: exit %d (%s)", flag, v, rc, err);
    inferd_free(out);
    inferd_free(err);
    return rc == 1;
}

static bool line_accepts(const char *key, const char *v, const char *extra)
{
    char line[256];
    snprintf(line, sizeof line, "{\"prompt_ids\": [1], \"%s\": %s%s}", key, v, extra ? extra : "");
    sampling_params sp;
    sampling_params_default(&sp);
    fflush(stderr);
    return gen_check_line(line, 512, &sp) == 0;
}

static bool api_accepts(const char *key, const char *v, const char *extra)
{
    char body[256];
    snprintf(body, sizeof body, "{\"prompt\": [1], \"%s\": %s%s}", key, v, extra ? extra : "");
    srv_parse_limits lim = {"m", 512, NULL};
    srv_request r;
    srv_error e;
    memset(&e, 0, sizeof e);
    bool ok = srv_request_parse(SRV_API_COMPLETIONS, body, strlen(body), &lim, &r, &e);
    if (ok)
        srv_request_free(&r);
    else
        ck_assert_msg(strcmp(e.param, key) == 0, "%s: param '%s'", body, e.param);
    return ok;
}

START_TEST(test_bounds_everywhere)
{
    size_t n;
    const sampling_row *rows = sampling_rows(&n);
    int checked = 0;
    for (size_t i = 0; i < n; i++) {
        const sampling_row *r = &rows[i];
        if (r->opt.kind != OPT_FLOAT && r->opt.kind != OPT_INT && r->opt.kind != OPT_INT64)
            continue;
        char flag[64], text[4][48], json[4][48];
        snprintf(flag, sizeof flag, "--%s", r->opt.name);
        bool want[4] = {false, !r->min_open, true, false};
        if (r->opt.kind == OPT_INT64) {
            static const char *t[4] = {"-9223372036854775809", "-9223372036854775808", "9223372036854775807",
                                       "9223372036854775808"};
            static const char *j[4] = {"-9223372036854777856", "-9223372036854775808", "9223372036854774784",
                                       "9223372036854775808"};
            for (int k = 0; k < 4; k++) {
                snprintf(text[k], sizeof text[k], "%s", t[k]);
                snprintf(json[k], sizeof json[k], "%s", j[k]);
            }
        } else {
            double v[4] = {r->opt.min - 1, r->opt.min, r->opt.max, r->opt.max + 1};
            for (int k = 0; k < 4; k++) {
                snprintf(text[k], sizeof text[k], "%.17g", v[k]);
                snprintf(json[k], sizeof json[k], "%.17g", v[k]);
            }
        }
        /* min_tokens is checked against max_tokens: give the largest */
        bool is_min_tokens = strcmp(r->key, "min_tokens") == 0;
        for (int k = 0; k < 4; k++) {
            bool c = cli_accepts(flag, text[k], is_min_tokens ? "--max-tokens" : NULL, "2147483647");
            bool l = line_accepts(r->key, json[k], is_min_tokens ? ", \"max_tokens\": 2147483647" : NULL);
            bool a = api_accepts(r->key, json[k], is_min_tokens ? ", \"max_tokens\": 2147483647" : NULL);
            ck_assert_msg(c == want[k] && l == want[k] && a == want[k],
                          "%s = %s: flag %d, prompts-file %d, API %d, want %d", r->key, text[k], c, l, a,
                          want[k]);
            checked++;
        }
    }
    /* temperature top_p top_k min_p seed max/min_tokens logprobs presence/frequency/repetition_penalty */
    ck_assert_int_eq(checked, 4 * 11);
}
END_TEST

START_TEST(test_help_prints_ranges)
{
    char *argv[] = {(char *)g_bin, "generate", "--help", NULL};
    char *out, *err;
    int rc;
    ck_assert(test_run_cmd(argv, &out, &err, &rc));
    ck_assert_int_eq(rc, 0);
    size_t n;
    const sampling_row *rows = sampling_rows(&n);
    for (size_t i = 0; i < n; i++) {
        char flag[64], range[64];
        snprintf(flag, sizeof flag, "--%s", rows[i].opt.name);
        ck_assert_msg(strstr(out, flag), "--help lacks %s", flag);
        if (rows[i].opt.kind != OPT_BOOL)
            ck_assert_msg(strstr(out, sampling_row_range(&rows[i], range, sizeof range)), "--help lacks %s %s",
                          flag, range);
    }
    inferd_free(out);
    inferd_free(err);
}
END_TEST

int main(void)
{
    log_set_level(LOG_LEVEL_ERROR);
    g_bin = test_inferd_bin();
    if (!g_bin)
        test_skip("inferd binary not found");
    Suite *s = suite_create("sampling table");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_bounds_everywhere);
    tcase_add_test(tc, test_help_prints_ranges);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
