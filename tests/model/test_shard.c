/* tests/model/test_shard.c: the tensor-parallel split (model/model_shard.c).
 *
 *  - TP=1 holds the whole model: Llama-3-8B's and Llama-3-70B's published
 *    parameter counts (8,030,261,248 and 70,553,706,496) to the element.
 *  - For every preset in configs/models and the 70B shape, at every TP size
 *    it accepts: the ranks' q heads, intermediate columns and vocabulary
 *    rows are disjoint and cover their index spaces; every rank holds the kv
 *    head of each of its q heads (GQA groups stay whole); each kv head is
 *    held by exactly kv_replicas ranks; the ranks' weights add up to the
 *    whole model plus the replicated norms and kv heads.
 *  - The refusals as a table (tp and rank out of range, heads, kv heads and
 *    intermediate_size not divisible), each naming the flag and the count.
 */
#include <stdio.h>
#include <string.h>

#include "model/config.h"
#include "model/model_shard.h"
#include "test_util.h"

static const char *k_70b =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 8192,"
    " \"intermediate_size\": 28672, \"num_hidden_layers\": 80, \"num_attention_heads\": 64,"
    " \"num_key_value_heads\": 8, \"vocab_size\": 128256, \"max_position_embeddings\": 8192,"
    " \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"tie_word_embeddings\": false}";

static model_config preset(const char *name)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/configs/models/%s", INFERD_TEST_SOURCE_DIR, name);
    model_config c;
    ck_assert_msg(model_config_load(dir, &c) == INFERD_OK, "%s: %s", name, inferd_last_error());
    return c;
}

static model_config parsed(const char *json)
{
    model_config c;
    ck_assert_msg(model_config_parse(json, "test", &c) == INFERD_OK, "%s", inferd_last_error());
    return c;
}

START_TEST(test_whole_model_at_tp1)
{
    model_shard s;
    model_config c8 = preset("llama3-8b"), c70 = parsed(k_70b);
    ck_assert_int_eq(model_shard_plan(&c8, 1, 0, &s), INFERD_OK);
    ck_assert_int_eq(s.weight_elems, 8030261248LL);
    ck_assert_int_eq(s.kv_elems_per_token, 2LL * 32 * 8 * 128);
    ck_assert_int_eq(model_shard_plan(&c70, 1, 0, &s), INFERD_OK);
    ck_assert_int_eq(s.weight_elems, 70553706496LL);
    ck_assert(s.q_heads.count == 64 && s.kv_heads.count == 8 && s.inter.count == 28672 && s.vocab.count == 128256);
}
END_TEST

/* Marks [r.begin, r.begin + r.count) in seen[] (n entries); false on an
 * overlap or a range outside [0, n). */
static bool mark(int *seen, int64_t n, model_range r, int times_allowed)
{
    if (r.begin < 0 || r.count < 0 || r.begin + r.count > n)
        return false;
    for (int64_t i = r.begin; i < r.begin + r.count; i++)
        if (++seen[i] > times_allowed)
            return false;
    return true;
}

static bool all_equal(const int *seen, int64_t n, int v)
{
    for (int64_t i = 0; i < n; i++)
        if (seen[i] != v)
            return false;
    return true;
}

/* The invariants of the file comment for c at tp; returns the number of
 * ranks checked (0 when the split is refused). */
static int check_split(const char *name, const model_config *c, int tp)
{
    model_shard whole, s;
    ck_assert_int_eq(model_shard_plan(c, 1, 0, &whole), INFERD_OK);
    if (model_shard_plan(c, tp, 0, &s) != INFERD_OK)
        return 0;
    static int q[4096], kv[4096], inter[65536], vocab[1 << 18];
    ck_assert(c->n_heads <= 4096 && c->intermediate_size <= 65536 && c->vocab_size <= (1 << 18));
    memset(q, 0, sizeof q);
    memset(kv, 0, sizeof kv);
    memset(inter, 0, sizeof inter);
    memset(vocab, 0, sizeof vocab);
    const int group = c->n_heads / c->n_kv_heads;
    int64_t sum = 0, replicated = 0;
    for (int r = 0; r < tp; r++) {
        ck_assert_int_eq(model_shard_plan(c, tp, r, &s), INFERD_OK);
        ck_assert_msg(s.tp == tp && s.rank == r, "%s tp %d: rank fields", name, tp);
        ck_assert_msg(mark(q, c->n_heads, s.q_heads, 1), "%s tp %d rank %d: q heads overlap", name, tp, r);
        ck_assert_msg(mark(kv, c->n_kv_heads, s.kv_heads, s.kv_replicas), "%s tp %d rank %d: kv heads", name, tp, r);
        ck_assert_msg(mark(inter, c->intermediate_size, s.inter, 1), "%s tp %d rank %d: inter", name, tp, r);
        ck_assert_msg(mark(vocab, c->vocab_size, s.vocab, 1), "%s tp %d rank %d: vocab", name, tp, r);
        for (int64_t h = s.q_heads.begin; h < s.q_heads.begin + s.q_heads.count; h++) {
            const int64_t k = h / group;
            ck_assert_msg(k >= s.kv_heads.begin && k < s.kv_heads.begin + s.kv_heads.count,
                          "%s tp %d rank %d: q head %lld reads kv head %lld, not held", name, tp, r, (long long)h,
                          (long long)k);
        }
        sum += s.weight_elems;
    }
    ck_assert_msg(all_equal(q, c->n_heads, 1) && all_equal(inter, c->intermediate_size, 1) &&
                      all_equal(vocab, c->vocab_size, 1) && all_equal(kv, c->n_kv_heads, s.kv_replicas),
                  "%s tp %d: a range is not covered", name, tp);
    /* what every rank holds again: the norms; and the replicas' kv rows */
    const int64_t d = c->hidden_size, hd = c->head_dim;
    replicated = (int64_t)(tp - 1) * (c->n_layers * (2 * d + (c->qk_norm ? 2 * hd : 0)) + d);
    replicated += (int64_t)(s.kv_replicas - 1) * c->n_kv_heads * c->n_layers * 2 * hd * (d + (c->qkv_bias ? 1 : 0));
    ck_assert_msg(sum == whole.weight_elems + replicated, "%s tp %d: ranks hold %lld elements, want %lld", name, tp,
                  (long long)sum, (long long)(whole.weight_elems + replicated));
    return tp;
}

START_TEST(test_splits_cover)
{
    static const char *presets[] = {"llama3-8b", "llama3.1-8b", "llama3.2-1b", "llama2-7b", "test-qwen2-small",
                                    "test-qwen3-small", "tiny"};
    int splits = 0;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        model_config c = preset(presets[i]);
        for (int tp = 1; tp <= 16; tp++)
            splits += check_split(presets[i], &c, tp) > 0;
    }
    model_config c70 = parsed(k_70b);
    for (int tp = 1; tp <= MODEL_MAX_TP; tp++)
        splits += check_split("llama3-70b", &c70, tp) > 0;
    printf("tensor-parallel splits checked: %d\n", splits);
    /* the sizes users ask for are among them */
    model_config c8 = preset("llama3-8b");
    model_shard s;
    for (int tp = 1; tp <= 16; tp *= 2)
        ck_assert_msg(model_shard_plan(&c8, tp, tp - 1, &s) == INFERD_OK, "llama3-8b tp %d: %s", tp,
                      inferd_last_error());
    ck_assert_int_eq(model_shard_plan(&c8, 16, 15, &s), INFERD_OK); /* 8 kv heads, each on 2 ranks */
    ck_assert(s.kv_replicas == 2 && s.kv_heads.begin == 7 && s.kv_heads.count == 1 && s.q_heads.begin == 30);
    ck_assert_int_eq(model_shard_plan(&c70, 2, 1, &s), INFERD_OK);
    printf("llama3-70b at TP=2: %.2f GB of bf16 weights per rank\n", 2.0 * (double)s.weight_elems / 1e9);
}
END_TEST

START_TEST(test_refusals)
{
    model_config c8 = preset("llama3-8b");
    model_config odd = parsed("{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 96,"
                              " \"intermediate_size\": 172, \"num_hidden_layers\": 2, \"num_attention_heads\": 12,"
                              " \"num_key_value_heads\": 6, \"vocab_size\": 1000}");
    const struct {
        const model_config *c;
        int tp, rank;
        const char *want;
    } rows[] = {
        {&c8, 0, 0, "--tensor-parallel-size 0: must be in [1, 64]"},
        {&c8, MODEL_MAX_TP + 1, 0, "must be in [1, 64]"},
        {&c8, 2, -1, "rank -1: must be in [0, 2)"},
        {&c8, 2, 2, "rank 2: must be in [0, 2)"},
        {&c8, 3, 0, "32 attention heads must be divisible"},
        {&c8, 64, 0, "32 attention heads"},
        {&odd, 8, 0, "12 attention heads"},
        {&odd, 4, 0, "6 key/value heads"},      /* 12 heads divide; 6 kv heads neither way */
        {&odd, 12, 0, "intermediate_size 172"}, /* kv heads replicated (12 = 2 x 6), but 172 % 12 */
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        model_shard s;
        inferd_status st = model_shard_plan(rows[i].c, rows[i].tp, rows[i].rank, &s);
        const char *msg = inferd_last_error();
        if (st != INFERD_ERR_INVALID_ARG || !strstr(msg, rows[i].want)) {
            printf("row %zu (tp %d rank %d): status %d, message '%s', want '%s'\n", i, rows[i].tp, rows[i].rank,
                   (int)st, msg, rows[i].want);
            bad++;
        }
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model_shard");
    TCase *tc = tcase_create("shard");
    tcase_add_test(tc, test_whole_model_at_tp1);
    tcase_add_test(tc, test_splits_cover);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
