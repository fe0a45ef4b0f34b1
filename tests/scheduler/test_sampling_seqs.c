/* tests/scheduler/test_sampling_seqs.c: the n / best_of rows next to the
 * sampling table (scheduler/params.c): each row at min-1, min, max, max+1
 * and non-integers / NaN / infinities (nothing stored on refusal, the
 * message naming the key and range), best_of >= n, and the request's
 * total of n_prompts x best_of sequences at its edge. */
#include <math.h>
#include <string.h>

#include "common/util.h"
#include "scheduler/engine.h"
#include "test_util.h"

START_TEST(test_rows_edges)
{
    static const char *const keys[] = {"n", "best_of"};
    const struct {
        double v;
        bool ok;
    } k_vals[] = {{0, false},
                  {1, true},
                  {SAMPLING_MAX_SEQS, true},
                  {SAMPLING_MAX_SEQS + 1, false},
                  {-1, false},
                  {2.5, false},
                  {1e300, false},
                  {NAN, false},
                  {INFINITY, false},
                  {-INFINITY, false}};
    for (size_t k = 0; k < INFERD_ARRAY_LEN(keys); k++) {
        const sampling_row *r = sampling_seqs_row_find(keys[k]);
        ck_assert_ptr_nonnull(r);
        ck_assert_str_eq(r->key, keys[k]);
        for (size_t i = 0; i < INFERD_ARRAY_LEN(k_vals); i++) {
            sampling_seqs q;
            sampling_seqs_default(&q);
            inferd_status st = sampling_seqs_set(&q, keys[k], k_vals[i].v);
            ck_assert_msg((st == INFERD_OK) == k_vals[i].ok, "%s = %g: %s", keys[k], k_vals[i].v,
                          st == INFERD_OK ? "accepted" : inferd_last_error());
            int32_t got = k == 0 ? q.n : q.best_of;
            if (k_vals[i].ok) {
                ck_assert_int_eq(got, (int32_t)k_vals[i].v);
            } else {
                ck_assert_int_eq(got, 1); /* nothing stored */
                ck_assert_msg(strstr(inferd_last_error(), keys[k]) && strstr(inferd_last_error(), "[1, 16]"),
                              "%s", inferd_last_error());
            }
        }
    }
    ck_assert_ptr_null(sampling_seqs_row_find("temperature"));
    sampling_seqs q;
    sampling_seqs_default(&q);
    ck_assert_int_eq(sampling_seqs_set(&q, "m", 2), INFERD_ERR_INVALID_ARG);
    ck_assert(q.n == 1 && q.best_of == 1);
}
END_TEST

START_TEST(test_validate_cross)
{
    const struct {
        int n, best_of, n_prompts;
        const char *param; /* NULL = valid */
    } k_rows[] = {
        {1, 1, 1, NULL},
        {16, 16, 1, NULL},
        {2, 5, 1, NULL},
        {3, 2, 1, "best_of"}, /* best_of < n */
        {0, 1, 1, "n"},
        {1, 17, 1, "best_of"},
        {16, 16, SAMPLING_MAX_REQUEST_SEQS / 16, NULL}, /* exactly the request bound */
        {16, 16, SAMPLING_MAX_REQUEST_SEQS / 16 + 1, "prompt"},
        {1, 2, SAMPLING_MAX_REQUEST_SEQS / 2 + 1, "prompt"}, /* best_of counts, not n */
        {1, 1, SAMPLING_MAX_REQUEST_SEQS, NULL},
        {1, 1, SAMPLING_MAX_REQUEST_SEQS + 1, "prompt"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_rows); i++) {
        sampling_seqs q = {.n = k_rows[i].n, .best_of = k_rows[i].best_of};
        const char *param = NULL;
        inferd_status st = sampling_seqs_validate(&q, k_rows[i].n_prompts, &param);
        if (!k_rows[i].param) {
            ck_assert_msg(st == INFERD_OK, "row %zu: %s", i, inferd_last_error());
            continue;
        }
        ck_assert_msg(st == INFERD_ERR_INVALID_ARG, "row %zu accepted", i);
        ck_assert_msg(param && !strcmp(param, k_rows[i].param), "row %zu: param %s want %s", i,
                      param ? param : "(null)", k_rows[i].param);
        ck_assert(strlen(inferd_last_error()) > 0);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sampling_seqs");
    TCase *tc = tcase_create("rows");
    tcase_add_test(tc, test_rows_edges);
    tcase_add_test(tc, test_validate_cross);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
