/* kernels/limits.c: the backend capability check (kern_check_model,
 * kern_ctx_check_model): can this backend's kernels run every batch of a
 * model of this shape?
 *
 * The kernels state their limits as INFERD_CHECK aborts (a violated limit
 * inside a forward pass is a broken invariant). A valid model beyond those
 * limits must therefore be refused before the first forward pass: model
 * loading calls this once, and gets a status whose message names the field,
 * its value, the limit and the kernel behind it. The rules are a table over
 * the shape's fields and the derived widths the kernels index with; every
 * number comes from kernels/kern_limits.h, which the kernels themselves size
 * their buffers and grids from. Only the opt-in shared memory of a CUDA
 * device needs the device (kern_check_model_device); everything else is host
 * logic, compiled in every build so the CUDA rules are tested without a GPU.
 */
#include <limits.h>

#include "common/util.h"
#include "kernels/kern_internal.h"

#define ON_CPU (1u << KERN_BACKEND_CPU)
#define ON_CUDA (1u << KERN_BACKEND_CUDA)
#define ON_ALL (ON_CPU | ON_CUDA)

/* The values the rules read: the shape's fields, then derived widths. */
typedef enum {
    V_HIDDEN,
    V_INTERMEDIATE,
    V_N_HEADS,
    V_N_KV_HEADS,
    V_HEAD_DIM,
    V_VOCAB,
    V_BLOCK_SIZE,
    V_MAX_MODEL_LEN,
    V_MAX_BATCH_TOKENS,
    V_N_FIELDS,               /* the fields above must all be >= 1 */
    V_QKV_WIDTH = V_N_FIELDS, /* fused q | k | v projection rows */
    V_GATE_UP_WIDTH,          /* fused gate | up projection rows */
    V_MAX_QUERY_LEN,          /* longest query of one sequence in one step */
    V_COUNT
} value_id;

/* Names in messages: the HF config.json / engine option names. */
static const char *const value_names[V_COUNT] = {
    [V_HIDDEN] = "hidden_size",
    [V_INTERMEDIATE] = "intermediate_size",
    [V_N_HEADS] = "num_attention_heads",
    [V_N_KV_HEADS] = "num_key_value_heads",
    [V_HEAD_DIM] = "head_dim",
    [V_VOCAB] = "vocab_size",
    [V_BLOCK_SIZE] = "block_size",
    [V_MAX_MODEL_LEN] = "max_model_len",
    [V_MAX_BATCH_TOKENS] = "max_num_batched_tokens",
    [V_QKV_WIDTH] = "(num_attention_heads + 2 * num_key_value_heads) * head_dim",
    [V_GATE_UP_WIDTH] = "2 * intermediate_size",
    [V_MAX_QUERY_LEN] = "min(max_num_batched_tokens, max_model_len)",
};

typedef enum { RULE_MAX, RULE_MULTIPLE } rule_kind;

typedef struct {
    unsigned backends; /* ON_* mask */
    value_id v;
    rule_kind kind;
    int64_t limit;
    const char *why; /* the kernel that sets the limit */
} model_rule;

/* First failing row wins, so a field's tighter rule of a backend comes
 * after its shape rule (multiple of 8 before at most 256). */
static const model_rule g_rules[] = {
    {ON_ALL, V_HEAD_DIM, RULE_MULTIPLE, 2, "RoPE rotates the pairs (j, j + head_dim / 2)"},
    {ON_ALL, V_HIDDEN, RULE_MAX, INT32_MAX, "the op API passes row widths as int"},
    {ON_ALL, V_QKV_WIDTH, RULE_MAX, INT32_MAX, "the op API passes row widths as int"},
    {ON_ALL, V_GATE_UP_WIDTH, RULE_MAX, INT32_MAX, "the op API passes row widths as int"},
    {ON_ALL, V_VOCAB, RULE_MAX, INT32_MAX, "token ids are int32"},
    {ON_ALL, V_MAX_MODEL_LEN, RULE_MAX, KERN_MAX_POSITION,
     "RoPE converts positions to fp32, which is exact only up to 2^24"},
    {ON_CPU, V_HEAD_DIM, RULE_MAX, KERN_CPU_MAX_HEAD_DIM,
     "CPU attention and RoPE keep a head in fixed-size stack buffers"},
    {ON_CUDA, V_HEAD_DIM, RULE_MULTIPLE, KERN_CUDA_ATTN_DIM_MULTIPLE,
     "CUDA attention reads 8 dims per lane with 16-byte loads and has no scalar path"},
    {ON_CUDA, V_HEAD_DIM, RULE_MAX, KERN_CUDA_ATTN_MAX_HEAD_DIM,
     "CUDA decode attention covers a head with at most one warp of 8-dim lanes and a 256-dim shared accumulator"},
    {ON_CUDA, V_N_HEADS, RULE_MAX, KERN_CUDA_MAX_GRID_YZ,
     "CUDA prefill and split-KV merge attention launch one grid row per query head (grid y <= 65535)"},
    {ON_CUDA, V_MAX_QUERY_LEN, RULE_MAX, (int64_t)KERN_CUDA_MAX_GRID_YZ * KERN_CUDA_PREFILL_BQ,
     "CUDA prefill attention launches one grid slice per 32 query rows (grid z <= 65535)"},
    {ON_CUDA, V_VOCAB, RULE_MAX, (int64_t)INT_MAX - KERN_CUDA_SAMPLE_THREADS,
     "the CUDA sampler steps an int index over the vocabulary by its 1024-thread block"},
};

static void shape_fields(const kern_model_shape *s, int64_t v[V_COUNT])
{
    v[V_HIDDEN] = s->hidden;
    v[V_INTERMEDIATE] = s->intermediate;
    v[V_N_HEADS] = s->n_heads;
    v[V_N_KV_HEADS] = s->n_kv_heads;
    v[V_HEAD_DIM] = s->head_dim;
    v[V_VOCAB] = s->vocab;
    v[V_BLOCK_SIZE] = s->block_size;
    v[V_MAX_MODEL_LEN] = s->max_model_len;
    v[V_MAX_BATCH_TOKENS] = s->max_batch_tokens;
}

/* Call only once every field is in [1, INT32_MAX]: then no product
 * overflows int64. */
static void shape_derived(const kern_model_shape *s, int64_t v[V_COUNT])
{
    v[V_QKV_WIDTH] = (s->n_heads + 2 * s->n_kv_heads) * s->head_dim;
    v[V_GATE_UP_WIDTH] = 2 * s->intermediate;
    v[V_MAX_QUERY_LEN] = s->max_batch_tokens < s->max_model_len ? s->max_batch_tokens : s->max_model_len;
}

static inferd_status refuse(inferd_status st, kern_backend b, const char *field, int64_t val, const char *rule,
                            int64_t limit, const char *why)
{
    return inferd_set_error(st, "the %s backend cannot run this model: %s is %lld, must be %s %lld (%s)",
                            kern_backend_name(b), field, (long long)val, rule, (long long)limit, why);
}

inferd_status kern_check_model(kern_backend b, const kern_model_shape *s)
{
    if (b != KERN_BACKEND_CPU && b != KERN_BACKEND_CUDA)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "kern_check_model: unknown backend %d", (int)b);
    int64_t v[V_COUNT];
    shape_fields(s, v);
    /* Every field in [1, INT32_MAX]: no backend runs other sizes. */
    for (int i = 0; i < V_N_FIELDS; i++) {
        if (v[i] < 1)
            return refuse(INFERD_ERR_INVALID_ARG, b, value_names[i], v[i], "at least", 1, "a model dimension");
        if (v[i] > INT32_MAX)
            return refuse(INFERD_ERR_UNSUPPORTED, b, value_names[i], v[i], "at most", INT32_MAX,
                          "the op API passes sizes as int");
    }
    shape_derived(s, v);
    if (s->n_heads % s->n_kv_heads != 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "the %s backend cannot run this model: num_attention_heads %lld is not a multiple of "
                                "num_key_value_heads %lld (every query head belongs to one GQA group)",
                                kern_backend_name(b), (long long)s->n_heads, (long long)s->n_kv_heads);
    if (s->weight_dtype != KERN_DTYPE_F32 && s->weight_dtype != KERN_DTYPE_F16 && s->weight_dtype != KERN_DTYPE_BF16)
        return inferd_set_error(INFERD_ERR_UNSUPPORTED,
                                "the %s backend cannot run this model: torch_dtype (weight dtype %d) is not F32, F16 "
                                "or BF16 (%s)",
                                kern_backend_name(b), (int)s->weight_dtype,
                                b == KERN_BACKEND_CPU ? "CPU matmul reads those three directly"
                                                      : "CUDA weight upload converts those three to BF16");
    const unsigned on = 1u << b;
    for (size_t i = 0; i < INFERD_ARRAY_LEN(g_rules); i++) {
        const model_rule *r = &g_rules[i];
        if (!(r->backends & on))
            continue;
        const int64_t x = v[r->v];
        if (r->kind == RULE_MAX && x > r->limit)
            return refuse(INFERD_ERR_UNSUPPORTED, b, value_names[r->v], x, "at most", r->limit, r->why);
        if (r->kind == RULE_MULTIPLE && x % r->limit != 0)
            return refuse(INFERD_ERR_UNSUPPORTED, b, value_names[r->v], x, "a multiple of", r->limit, r->why);
    }
    return INFERD_OK;
}

inferd_status kern_check_model_device(kern_backend b, const kern_model_shape *s, size_t smem_per_block)
{
    if (b != KERN_BACKEND_CUDA || smem_per_block == 0)
        return INFERD_OK;
    const size_t need = kern_cuda_prefill_smem_bytes(s->head_dim);
    if (need > smem_per_block)
        return inferd_set_error(INFERD_ERR_UNSUPPORTED,
                                "the cuda backend cannot run this model on this device: head_dim %lld needs %zu bytes "
                                "of shared memory per block for the CUDA prefill attention tile, the device allows "
                                "%zu",
                                (long long)s->head_dim, need, smem_per_block);
    return INFERD_OK;
}

inferd_status kern_ctx_check_model(const kern_ctx *ctx, const kern_model_shape *s)
{
    inferd_status st = kern_check_model(ctx->backend, s);
    if (st != INFERD_OK)
        return st;
    size_t smem = 0;
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        smem = kcuda_smem_per_block(ctx);
#endif
    return kern_check_model_device(ctx->backend, s, smem);
}
