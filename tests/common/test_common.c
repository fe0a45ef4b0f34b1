/* tests/common/test_common.c: status messages, number parsing, UTF-8
 * validation and fp16/bf16 conversion. */
#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "common/half.h"
#include "common/status.h"
#include "common/util.h"
#include "test_util.h"

START_TEST(test_status_message)
{
    inferd_status st = inferd_set_error(INFERD_ERR_FORMAT, "%s: bad %d", "x.json", 3);
    ck_assert_int_eq(st, INFERD_ERR_FORMAT);
    ck_assert_str_eq(inferd_last_error(), "x.json: bad 3");
    ck_assert_str_eq(inferd_status_str(INFERD_ERR_NO_BLOCKS), "no free KV blocks");
    ck_assert_str_eq(inferd_status_str((inferd_status)999), "unknown status");
}
END_TEST

/* The field an error names: set with the message, kept by
 * inferd_set_error_param, cleared by a plain inferd_set_error and by
 * inferd_clear_error. */
START_TEST(test_status_param)
{
    ck_assert_int_eq(inferd_set_error_at(INFERD_ERR_INVALID_ARG, "top_p", "bad %s", "top_p"),
                     INFERD_ERR_INVALID_ARG);
    ck_assert_str_eq(inferd_last_error(), "bad top_p");
    ck_assert_str_eq(inferd_last_error_param(), "top_p");
    inferd_set_error(INFERD_ERR_FORMAT, "plain");
    ck_assert_ptr_null(inferd_last_error_param());
    ck_assert_int_eq(inferd_set_error_param(INFERD_ERR_TOO_LONG, "max_tokens"), INFERD_ERR_TOO_LONG);
    ck_assert_str_eq(inferd_last_error(), "plain");
    ck_assert_str_eq(inferd_last_error_param(), "max_tokens");
    char long_name[200];
    memset(long_name, 'k', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    inferd_set_error_param(INFERD_ERR_INVALID_ARG, long_name); /* truncated, not overrun */
    ck_assert_uint_eq(strlen(inferd_last_error_param()), 63);
    inferd_set_error_at(INFERD_ERR_INVALID_ARG, NULL, "no field");
    ck_assert_ptr_null(inferd_last_error_param());
    inferd_set_error_param(INFERD_ERR_INVALID_ARG, "x");
    inferd_clear_error();
    ck_assert_ptr_null(inferd_last_error_param());
    ck_assert_str_eq(inferd_last_error(), "");
}
END_TEST

START_TEST(test_int_list)
{
    static const struct {
        const char *in;
        int ok, n;
    } rows[] = {
        {"1,2,3", 1, 3}, {"7", 1, 1}, {"-5,0", 1, 2}, {"", 0, 0}, {"1,,2", 0, 0},
        {"1,", 0, 0},   {"a", 0, 0},  {"1.5", 0, 0}, {"99999999999", 0, 0},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        int32_t *v = NULL;
        int n = 0;
        inferd_status st = util_parse_int_list(rows[i].in, &v, &n);
        ck_assert_msg((st == INFERD_OK) == rows[i].ok, "row %zu '%s'", i, rows[i].in);
        if (st == INFERD_OK) {
            ck_assert_int_eq(n, rows[i].n);
            inferd_free(v);
        }
    }
}
END_TEST

START_TEST(test_utf8)
{
    ck_assert(util_utf8_valid("h\xc3\xa9llo \xe4\xb8\xad \xf0\x9f\x98\x80", 15));
    ck_assert(!util_utf8_valid("\xc3", 1));          /* truncated */
    ck_assert(!util_utf8_valid("\xc0\xaf", 2));      /* overlong */
    ck_assert(!util_utf8_valid("\xed\xa0\x80", 3));  /* surrogate */
    ck_assert(!util_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    ck_assert(!util_utf8_valid("\xff", 1));
}
END_TEST

START_TEST(test_half_roundtrip)
{
    float vals[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 3.14159f};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(vals); i++) {
        float h = half_f16_to_f32(half_f32_to_f16(vals[i]));
        ck_assert_msg(fabsf(h - vals[i]) <= fabsf(vals[i]) * 1e-3f, "f16 %g -> %g", vals[i], h);
        float b = half_bf16_to_f32(half_f32_to_bf16(vals[i]));
        ck_assert_msg(fabsf(b - vals[i]) <= fabsf(vals[i]) * 8e-3f, "bf16 %g -> %g", vals[i], b);
    }
    /* round to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 */
    ck_assert_uint_eq(half_f32_to_bf16(1.00390625f), 0x3F80);
    ck_assert(isinf(half_f16_to_f32(half_f32_to_f16(1e6f))));
    ck_assert(isnan(half_bf16_to_f32(half_f32_to_bf16(NAN))));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("common");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_status_message);
    tcase_add_test(tc, test_status_param);
    tcase_add_test(tc, test_int_list);
    tcase_add_test(tc, test_utf8);
    tcase_add_test(tc, test_half_roundtrip);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
