/* tests/kernels/cpu/test_kern_limits.c: the backend capability check
 * (kern_check_model, kernels/limits.c) as a table: each row changes a few
 * fields of a valid Llama-3-8B-shaped model and states the CPU and the CUDA
 * verdict (status and the words the message must contain: field, value,
 * limit). The CUDA rules are host logic, so they run here without a GPU;
 * the device rule (prefill tile vs shared memory per block) takes the
 * device's limit as an argument. Last, the CPU kernels run at the largest
 * head_dim the check accepts, so the limit is the kernels' real one.
 */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"
#include "kernels/kern_internal.h"
#include "kt_util.h"

#define OK INFERD_OK
#define BAD INFERD_ERR_INVALID_ARG
#define UNS INFERD_ERR_UNSUPPORTED

/* Fields a row may set: 1 + the offset in kern_model_shape (every field an
 * int64_t but the dtype), so that 0 ends a row's list. */
#define F(name) (offsetof(kern_model_shape, name) + 1)
#define F_DTYPE ((size_t)-1)

static kern_model_shape base_shape(void)
{
    return (kern_model_shape){.hidden = 4096, .intermediate = 14336, .n_heads = 32, .n_kv_heads = 8,
                              .head_dim = 128, .vocab = 128256, .weight_dtype = KERN_DTYPE_BF16,
                              .block_size = 16, .max_model_len = 8192, .max_batch_tokens = 8192};
}

typedef struct {
    size_t field;
    int64_t value;
} field_set;

typedef struct {
    field_set set[3];          /* applied in order; field 0 ends the list */
    inferd_status cpu, cuda;   /* expected statuses */
    const char *cpu_msg;       /* substring of the CPU error (NULL when OK) */
    const char *cuda_msg;      /* substring of the CUDA error */
} limit_row;

static const limit_row rows[] = {
    /* the base model runs everywhere */
    {{{0, 0}}, OK, OK, NULL, NULL},
    /* head_dim: CPU stack buffers (512), CUDA 8-dim lanes (multiple of 8, <= 256), RoPE pairs (even) */
    {{{F(head_dim), 520}}, UNS, UNS, "head_dim is 520, must be at most 512", "head_dim is 520, must be at most 256"},
    {{{F(head_dim), 512}}, OK, UNS, NULL, "head_dim is 512, must be at most 256"},
    {{{F(head_dim), 514}}, UNS, UNS, "at most 512", "must be a multiple of 8"},
    {{{F(head_dim), 264}}, OK, UNS, NULL, "head_dim is 264, must be at most 256"},
    {{{F(head_dim), 256}}, OK, OK, NULL, NULL},
    {{{F(head_dim), 100}}, OK, UNS, NULL, "head_dim is 100, must be a multiple of 8"},
    {{{F(head_dim), 2}}, OK, UNS, NULL, "must be a multiple of 8"},
    {{{F(head_dim), 8}}, OK, OK, NULL, NULL},
    {{{F(head_dim), 63}}, UNS, UNS, "head_dim is 63, must be a multiple of 2", "head_dim is 63, must be a multiple of 2"},
    {{{F(head_dim), 0}}, BAD, BAD, "head_dim is 0, must be at least 1", "head_dim is 0, must be at least 1"},
    /* GQA: any group size divides; both backends handle MHA, GQA and MQA */
    {{{F(n_kv_heads), 5}}, BAD, BAD, "not a multiple of num_key_value_heads 5", "num_key_value_heads 5"},
    {{{F(n_kv_heads), 1}}, OK, OK, NULL, NULL},
    {{{F(n_kv_heads), 32}}, OK, OK, NULL, NULL},
    {{{F(n_heads), 40}, {F(n_kv_heads), 8}}, OK, OK, NULL, NULL}, /* group 5: not a power of 2 */
    {{{F(n_heads), 64}, {F(n_kv_heads), 2}}, OK, OK, NULL, NULL}, /* group 32: several decode head chunks */
    {{{F(n_heads), -4}}, BAD, BAD, "num_attention_heads is -4", "num_attention_heads is -4"},
    /* CUDA grid y: one prefill / merge row per query head */
    {{{F(n_heads), 65535}, {F(n_kv_heads), 65535}, {F(head_dim), 8}}, OK, OK, NULL, NULL},
    {{{F(n_heads), 65536}, {F(n_kv_heads), 65536}, {F(head_dim), 8}}, OK, UNS, NULL,
     "num_attention_heads is 65536, must be at most 65535"},
    /* int32 row widths of the op API */
    {{{F(n_heads), 1 << 22}, {F(n_kv_heads), 1 << 22}, {F(head_dim), 256}}, UNS, UNS,
     "(num_attention_heads + 2 * num_key_value_heads) * head_dim is 3221225472",
     "(num_attention_heads + 2 * num_key_value_heads) * head_dim is 3221225472"},
    {{{F(intermediate), 1 << 30}}, UNS, UNS, "2 * intermediate_size is 2147483648, must be at most 2147483647",
     "2 * intermediate_size"},
    {{{F(intermediate), (1 << 30) - 1}}, OK, OK, NULL, NULL},
    {{{F(hidden), (int64_t)INT32_MAX + 1}}, UNS, UNS, "hidden_size is 2147483648", "hidden_size is 2147483648"},
    {{{F(hidden), 0}}, BAD, BAD, "hidden_size is 0", "hidden_size is 0"},
    /* extreme values are refused before any derived width is computed (no overflow) */
    {{{F(n_heads), INT64_MAX}, {F(n_kv_heads), INT64_MAX}}, UNS, UNS, "num_attention_heads is 9223372036854775807",
     "num_attention_heads is 9223372036854775807"},
    {{{F(intermediate), INT64_MIN}}, BAD, BAD, "intermediate_size is -9223372036854775808", "intermediate_size"},
    /* vocabulary: int32 token ids; the CUDA sampler's int loop needs 1024 of headroom */
    {{{F(vocab), INT32_MAX}}, OK, UNS, NULL, "vocab_size is 2147483647, must be at most 2147482623"},
    {{{F(vocab), (int64_t)INT32_MAX - 1024}}, OK, OK, NULL, NULL},
    {{{F(vocab), (int64_t)INT32_MAX + 1}}, UNS, UNS, "vocab_size is 2147483648", "vocab_size is 2147483648"},
    {{{F(vocab), 1}}, OK, OK, NULL, NULL},
    /* lengths: fp32 RoPE positions; CUDA prefill grid z holds 32-row query tiles */
    {{{F(max_model_len), 1 << 24}}, OK, OK, NULL, NULL},
    {{{F(max_model_len), (1 << 24) + 1}}, UNS, UNS, "max_model_len is 16777217, must be at most 16777216",
     "max_model_len is 16777217"},
    {{{F(max_model_len), 1 << 24}, {F(max_batch_tokens), 65535 * 32}}, OK, OK, NULL, NULL},
    {{{F(max_model_len), 1 << 24}, {F(max_batch_tokens), 65535 * 32 + 1}}, OK, UNS, NULL,
     "min(max_num_batched_tokens, max_model_len) is 2097121, must be at most 2097120"},
    {{{F(max_model_len), 2048}, {F(max_batch_tokens), 1 << 24}}, OK, OK, NULL, NULL}, /* queries <= 2048 */
    {{{F(max_batch_tokens), 0}}, BAD, BAD, "max_num_batched_tokens is 0", "max_num_batched_tokens is 0"},
    {{{F(block_size), 0}}, BAD, BAD, "block_size is 0", "block_size is 0"},
    {{{F(block_size), 1}}, OK, OK, NULL, NULL},
    {{{F(block_size), 1000}}, OK, OK, NULL, NULL},
    /* weight dtypes: CPU reads F32/F16/BF16 directly, CUDA converts them to BF16 */
    {{{F_DTYPE, KERN_DTYPE_F32}}, OK, OK, NULL, NULL},
    {{{F_DTYPE, KERN_DTYPE_F16}}, OK, OK, NULL, NULL},
    {{{F_DTYPE, 7}}, UNS, UNS, "torch_dtype", "torch_dtype"},
};

static kern_model_shape row_shape(const limit_row *r)
{
    kern_model_shape s = base_shape();
    for (size_t i = 0; i < INFERD_ARRAY_LEN(r->set) && r->set[i].field; i++) {
        if (r->set[i].field == F_DTYPE)
            s.weight_dtype = (kern_dtype)r->set[i].value;
        else
            memcpy((char *)&s + r->set[i].field - 1, &r->set[i].value, sizeof(int64_t));
    }
    return s;
}

static void expect(size_t row, kern_backend b, inferd_status got, inferd_status want, const char *msg)
{
    const char *err = inferd_last_error();
    ck_assert_msg(got == want, "row %zu, %s: status %d, want %d (%s)", row, kern_backend_name(b), (int)got,
                  (int)want, err);
    if (want == INFERD_OK)
        return;
    ck_assert_msg(strstr(err, msg) != NULL, "row %zu, %s: message '%s' lacks '%s'", row, kern_backend_name(b), err,
                  msg);
    char head[64];
    snprintf(head, sizeof head, "the %s backend cannot run this model", kern_backend_name(b));
    ck_assert_msg(strstr(err, head) != NULL, "row %zu: message '%s' does not name the backend", row, err);
}

START_TEST(test_rule_table)
{
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        const limit_row *r = &rows[i];
        kern_model_shape s = row_shape(r);
        inferd_clear_error();
        expect(i, KERN_BACKEND_CPU, kern_check_model(KERN_BACKEND_CPU, &s), r->cpu, r->cpu_msg);
        inferd_clear_error();
        expect(i, KERN_BACKEND_CUDA, kern_check_model(KERN_BACKEND_CUDA, &s), r->cuda, r->cuda_msg);
    }
}
END_TEST

/* Prefill attention's shared memory: 32 x (hd + 4) x 4 tiles + 32 x 33
 * probabilities, fp32, against the device's opt-in limit per block. */
START_TEST(test_device_smem)
{
    static const struct {
        int64_t head_dim;
        size_t smem;
        inferd_status want;
    } dev_rows[] = {
        {256, 232448, OK},  /* H100 / H200: 227 KiB */
        {256, 166912, OK},  /* A100: 163 KiB */
        {256, 101376, UNS}, /* sm_86 / sm_89: 99 KiB; needs 137344 */
        {128, 101376, OK},  /* needs 71808 */
        {128, 65536, UNS},  /* sm_75: 64 KiB */
        {64, 65536, OK},
        {256, 0, OK}, /* unknown device limit: not checked */
    };
    ck_assert_uint_eq(kern_cuda_prefill_smem_bytes(256), 137344);
    ck_assert_uint_eq(kern_cuda_prefill_smem_bytes(128), 71808);
    for (size_t i = 0; i < INFERD_ARRAY_LEN(dev_rows); i++) {
        kern_model_shape s = base_shape();
        s.head_dim = dev_rows[i].head_dim;
        inferd_clear_error();
        inferd_status st = kern_check_model_device(KERN_BACKEND_CUDA, &s, dev_rows[i].smem);
        ck_assert_msg(st == dev_rows[i].want, "row %zu: status %d (%s)", i, (int)st, inferd_last_error());
        if (st != INFERD_OK)
            ck_assert_msg(strstr(inferd_last_error(), "head_dim") && strstr(inferd_last_error(), "shared memory"),
                          "row %zu: %s", i, inferd_last_error());
        /* the CPU backend has no device rule */
        ck_assert_int_eq(kern_check_model_device(KERN_BACKEND_CPU, &s, dev_rows[i].smem), INFERD_OK);
    }
}
END_TEST

/* kern_ctx_check_model on a CPU context is kern_check_model(CPU). */
START_TEST(test_ctx_check)
{
    kern_ctx *ctx = kt_ctx(1);
    kern_model_shape s = base_shape();
    ck_assert_int_eq(kern_ctx_check_model(ctx, &s), INFERD_OK);
    s.head_dim = 520;
    ck_assert_int_eq(kern_ctx_check_model(ctx, &s), INFERD_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(inferd_last_error(), "head_dim is 520"));
    ck_assert_int_eq(kern_check_model((kern_backend)5, &s), INFERD_ERR_INVALID_ARG);
    kern_ctx_free(ctx);
}
END_TEST

/* The CPU kernels run at the largest head_dim the check accepts: RoPE + KV
 * write, then attention, for 2 tokens of one sequence (2 query heads, 1 kv
 * head). Token 0 attends to itself only, so its output is its v exactly. */
START_TEST(test_cpu_runs_max_head_dim)
{
    const int hd = KERN_CPU_MAX_HEAD_DIM, nh = 2, nkv = 1, bs = 4, L = 2;
    kern_model_shape s = base_shape();
    s.head_dim = hd;
    ck_assert_int_eq(kern_check_model(KERN_BACKEND_CPU, &s), INFERD_OK);
    s.head_dim = hd + 2;
    ck_assert_int_eq(kern_check_model(KERN_BACKEND_CPU, &s), INFERD_ERR_UNSUPPORTED);
    kern_ctx *ctx = kt_ctx(2);
    const int row = (nh + 2 * nkv) * hd;
    float *qkv = inferd_malloc((size_t)L * row * sizeof(float));
    test_fill_uniform(qkv, (size_t)L * row, 11, -1.0f, 1.0f);
    float *v0 = inferd_malloc((size_t)hd * sizeof(float));
    memcpy(v0, qkv + (nh + nkv) * hd, (size_t)hd * sizeof(float));
    float *inv = inferd_malloc((size_t)hd / 2 * sizeof(float));
    for (int j = 0; j < hd / 2; j++)
        inv[j] = powf(10000.0f, -2.0f * (float)j / (float)hd);
    float *kc = inferd_calloc((size_t)2 * nkv * bs * hd, sizeof(float)); /* 2 blocks */
    float *vc = inferd_calloc((size_t)2 * nkv * bs * hd, sizeof(float));
    float *out = kt_galloc(ctx, (size_t)L * nh * hd);
    int32_t pos[2] = {0, 1}, qsl[2] = {0, 2}, lens[1] = {2}, bt[2] = {1, 0};
    int64_t slots[2] = {1 * bs + 0, 1 * bs + 1};
    kern_rope_kv_params rp = {.qkv = qkv, .positions = pos, .slot_mapping = slots, .inv_freq = inv,
                              .k_cache = kc, .v_cache = vc, .n_tokens = L, .n_heads = nh,
                              .n_kv_heads = nkv, .head_dim = hd, .block_size = bs};
    kern_rope_kv_write(ctx, &rp);
    kern_attn_params ap = {.out = out, .qkv = qkv, .k_cache = kc, .v_cache = vc, .query_start_loc = qsl,
                           .seq_lens = lens, .block_tables = bt, .h_query_start_loc = qsl, .h_seq_lens = lens,
                           .n_seqs = 1, .n_tokens = L, .max_blocks_per_seq = 2, .n_heads = nh,
                           .n_kv_heads = nkv, .head_dim = hd, .block_size = bs, .max_query_len = L,
                           .max_seq_len = L, .scale = 1.0f / sqrtf((float)hd)};
    kern_attention(ctx, &ap);
    kt_gcheck(out, (size_t)L * nh * hd, "attention out");
    for (int h = 0; h < nh; h++)
        for (int d = 0; d < hd; d++)
            KT_MSG(kt_bits(out[h * hd + d]) == kt_bits(v0[d]), "token 0 head %d dim %d: %g vs v %g", h, d,
                   out[h * hd + d], v0[d]);
    for (int i = 0; i < nh * hd; i++)
        KT_CHECK(isfinite(out[nh * hd + i]));
    kt_gfree(ctx, out);
    inferd_free(qkv);
    inferd_free(v0);
    inferd_free(inv);
    inferd_free(kc);
    inferd_free(vc);
    kern_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernels_limits");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_rule_table);
    tcase_add_test(tc, test_device_smem);
    tcase_add_test(tc, test_ctx_check);
    tcase_add_test(tc, test_cpu_runs_max_head_dim);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
