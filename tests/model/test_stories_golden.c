/* tests/model/test_stories_golden.c: the fp32 CPU forward pass against the
 * reference C implementation (llama2.c run.c) on the real stories260K model.
 *
 *  - teacher forcing: the prompt + golden continuation of case 0 in one
 *    forward pass; the top-5 logits at every position and the two stored full
 *    logit rows must match within 1e-4;
 *  - greedy generation of every case, one decode step per token through the
 *    paged cache, reproduces generated_ids exactly (stop at BOS = 1);
 *  - the same with block size 1 and 7 and prefill split into odd chunks,
 *    which must not change a single token.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"
#include "model/model.h"
#include "test_util.h"

static cJSON *g_golden;
static char *g_model_dir;

static void load_golden(void)
{
    char *path = test_fixture_path("golden/stories260K.json");
    g_model_dir = test_fixture_path("models/stories260K");
    if (!path || !util_file_exists(path) || !util_file_exists(g_model_dir))
        test_skip("fixtures (golden/stories260K.json, models/stories260K) not found");
    char *text;
    if (util_read_file(path, 0, &text, NULL) != INFERD_OK) {
        fprintf(stderr, "%s\n", inferd_last_error());
        exit(1);
    }
    g_golden = cJSON_Parse(text);
    inferd_free(text);
    if (!g_golden) {
        fprintf(stderr, "%s: invalid JSON\n", path);
        exit(1);
    }
    inferd_free(path);
}

static model *load_model(int block_size, int max_tokens, int threads)
{
    model_opts o;
    model_opts_default(&o);
    o.model_dir = g_model_dir;
    o.backend = KERN_BACKEND_CPU;
    o.block_size = block_size;
    o.max_num_batched_tokens = max_tokens;
    o.max_num_seqs = 64;
    o.n_threads = threads;
    model *m = NULL;
    inferd_status st = model_load(&o, &m);
    ck_assert_msg(st == INFERD_OK, "model_load: %s", inferd_last_error());
    return m;
}

static int json_ints(const cJSON *arr, int32_t *out, int cap)
{
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        ck_assert_int_lt(n, cap);
        out[n++] = (int32_t)it->valuedouble;
    }
    return n;
}

/* Forward `n` tokens of one sequence starting at position `start`, with
 * logits for rows [logit_from, n), through a reversed block table. */
static void forward_seq(model *m, const int32_t *toks, int start, int n, int logit_from)
{
    int nb = model_max_blocks_per_seq(m);
    int32_t *table = inferd_malloc(sizeof(int32_t) * (size_t)nb);
    for (int i = 0; i < nb; i++)
        table[i] = nb - i; /* reversed: block ids need not be contiguous or increasing */
    inferd_status st = model_forward_seq(m, table, toks, start, n, logit_from);
    ck_assert_msg(st == INFERD_OK, "forward: %s", inferd_last_error());
    inferd_free(table);
}

START_TEST(test_teacher_forced_logits)
{
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(g_golden, "cases"), 0);
    int32_t toks[512];
    int np = json_ints(cJSON_GetObjectItem(c0, "prompt_ids"), toks, 512);
    int ng = json_ints(cJSON_GetObjectItem(c0, "generated_ids"), toks + np, 512 - np);
    const cJSON *top5 = cJSON_GetObjectItem(c0, "top5_per_position");
    int n_pos = cJSON_GetArraySize(top5);
    ck_assert_int_le(n_pos, np + ng);
    model *m = load_model(16, 64, 0);
    int vocab = model_get_config(m)->vocab_size;
    float *logits = inferd_malloc(sizeof(float) * (size_t)vocab * 64);
    double max_err = 0;
    for (int start = 0; start < n_pos; start += 64) {
        int n = INFERD_MIN(64, n_pos - start);
        forward_seq(m, toks + start, start, n, 0);
        model_logits_to_host(m, logits);
        for (int i = 0; i < n; i++) {
            const cJSON *row = cJSON_GetArrayItem(top5, start + i), *pair;
            cJSON_ArrayForEach(pair, row)
            {
                int id = cJSON_GetArrayItem(pair, 0)->valueint;
                double want = cJSON_GetArrayItem(pair, 1)->valuedouble;
                double err = fabs(logits[(size_t)i * vocab + id] - want);
                max_err = fmax(max_err, err);
                ck_assert_msg(err <= 1e-4, "pos %d id %d: %f vs %f", start + i, id,
                              logits[(size_t)i * vocab + id], want);
            }
            if (start + i == 0) {
                const cJSON *full = cJSON_GetObjectItem(c0, "full_logits_pos0_after_BOS");
                for (int v = 0; v < vocab; v++)
                    ck_assert(fabs(logits[v] - cJSON_GetArrayItem(full, v)->valuedouble) <= 1e-4);
            }
        }
    }
    printf("teacher-forced top-5 logits over %d positions: max |err| = %.2e\n", n_pos, max_err);
    /* the stored full row at the last prompt position */
    const cJSON *last = cJSON_GetObjectItem(c0, "full_logits_last_prompt_pos");
    int pos = cJSON_GetObjectItem(last, "pos")->valueint;
    forward_seq(m, toks, 0, pos + 1, pos);
    model_logits_to_host(m, logits);
    const cJSON *lg = cJSON_GetObjectItem(last, "logits");
    for (int v = 0; v < vocab; v++)
        ck_assert(fabs(logits[v] - cJSON_GetArrayItem(lg, v)->valuedouble) <= 1e-4);
    inferd_free(logits);
    model_free(m);
}
END_TEST

/* Greedy decode of every golden case; prefill in chunks of `chunk`. */
static void greedy_cases(int block_size, int chunk)
{
    model *m = load_model(block_size, 64, 0);
    const cJSON *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g_golden, "cases"))
    {
        int32_t toks[512], want[512];
        int np = json_ints(cJSON_GetObjectItem(c, "prompt_ids"), toks, 512);
        int nw = json_ints(cJSON_GetObjectItem(c, "generated_ids"), want, 512);
        int steps = cJSON_GetObjectItem(c, "steps")->valueint;
        for (int off = 0; off < np; off += chunk) {
            int n = INFERD_MIN(chunk, np - off);
            forward_seq(m, toks + off, off, n, n - 1);
        }
        int n = np, got = 0;
        while (n <= steps) { /* run.c samples after every position 0..steps-1 */
            kern_sample_params sp = {.temperature = 0, .top_p = 1};
            int32_t next;
            ck_assert_int_eq(model_sample(m, &sp, &next), INFERD_OK);
            if (next == 1)
                break;
            ck_assert_msg(got < nw && next == want[got], "block %d chunk %d: token %d: got %d want %d",
                          block_size, chunk, got, next, got < nw ? want[got] : -1);
            toks[n] = next;
            got++;
            forward_seq(m, &toks[n], n, 1, 0);
            n++;
        }
        ck_assert_int_eq(got, nw);
        n_cases++;
    }
    printf("greedy: %d golden cases reproduced (block size %d, prefill chunk %d)\n", n_cases, block_size,
           chunk);
    model_free(m);
}

START_TEST(test_greedy_golden)
{
    greedy_cases(16, 64);
}
END_TEST
START_TEST(test_greedy_golden_block1_chunk3)
{
    greedy_cases(1, 3);
}
END_TEST
START_TEST(test_greedy_golden_block7_chunk2)
{
    greedy_cases(7, 2);
}
END_TEST

START_TEST(test_bad_batch_rejected)
{
    model *m = load_model(16, 64, 1);
    int32_t tok = 9999, pos = 0, qsl[2] = {0, 1}, len = 1, table[64] = {1}, idx = 0;
    int64_t slot = 16;
    model_batch b = {.n_tokens = 1,
                     .tokens = &tok,
                     .positions = &pos,
                     .slot_mapping = &slot,
                     .n_seqs = 1,
                     .query_start_loc = qsl,
                     .seq_lens = &len,
                     .block_tables = table,
                     .max_blocks_per_seq = model_max_blocks_per_seq(m),
                     .n_logits = 1,
                     .logits_indices = &idx};
    ck_assert_int_eq(model_forward(m, &b), INFERD_ERR_INVALID_ARG); /* token outside vocab */
    tok = 5;
    b.n_tokens = 65;
    ck_assert_int_eq(model_forward(m, &b), INFERD_ERR_INVALID_ARG); /* over the arena */
    b.n_tokens = 1;
    idx = 3;
    ck_assert_int_eq(model_forward(m, &b), INFERD_ERR_INVALID_ARG); /* logits row out of range */
    idx = 0;
    ck_assert_int_eq(model_forward(m, &b), INFERD_OK);
    model_free(m);
}
END_TEST

int main(void)
{
    load_golden();
    Suite *s = suite_create("stories260K golden");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_teacher_forced_logits);
    tcase_add_test(tc, test_greedy_golden);
    tcase_add_test(tc, test_greedy_golden_block1_chunk3);
    tcase_add_test(tc, test_greedy_golden_block7_chunk2);
    tcase_add_test(tc, test_bad_batch_rejected);
    suite_add_tcase(s, tc);
    int rc = test_run_suite(s);
    cJSON_Delete(g_golden);
    inferd_free(g_model_dir);
    return rc;
}
