/* tests/model/test_model_files.c: model files that load but cannot serve
 * (issue 11, finding 10), each refused or fixed at load with a message that
 * names what is wrong:
 *  (a) a tokenizer whose ids reach past the model's vocab_size: engine_create
 *      refuses, naming both sizes (a larger model vocab, as Qwen ships, is
 *      fine);
 *  (b) NaN / Inf weights: model_load refuses, naming the tensor, on a tiny
 *      safetensors model written here (F32, F16, BF16 files; a bad value in a
 *      plain tensor, in each part of the fused q|k|v and gate|up weights, in
 *      the untied lm_head and in a norm), while clean and dummy weights load;
 *  (c) a CPU weight slab + arena + KV cache beyond available memory: refused
 *      before allocating, with every number (INFERD_TEST_MEM_AVAILABLE stands
 *      in for MemAvailable);
 *  (d) an automatically sized KV cache holds one max_model_len sequence
 *      (--max-num-seqs 1 once sized it one block short), or max_model_len is
 *      lowered to what it holds.
 * (b) runs on the CUDA backend too with INFERD_TEST_DEVICE=cuda. The rest use
 * the CPU backend and stories260K (skips without fixtures).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/half.h"
#include "common/rng.h"
#include "common/util.h"
#include "kvcache/kv_layout.h"
#include "model/model.h"
#include "model/model_internal.h"
#include "scheduler/engine.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"

/* --- helpers ---------------------------------------------------------------- */

static char *stories_dir(void)
{
    char *dir = test_fixture_path("models/stories260K");
    if (!dir || access(dir, R_OK) != 0)
        test_skip("fixture models/stories260K not found");
    return dir;
}

static void opts_for(model_opts *o, const char *dir, kern_backend be, int max_seqs, int64_t kv_bytes)
{
    model_opts_default(o);
    o->model_dir = dir;
    o->backend = be;
    o->n_threads = 2;
    o->max_num_seqs = max_seqs;
    o->max_num_batched_tokens = 64;
    o->block_size = 16;
    o->kv_cache_bytes = kv_bytes;
}

static void set_mem_available(int64_t bytes)
{
    if (bytes < 0) {
        unsetenv("INFERD_TEST_MEM_AVAILABLE");
        return;
    }
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)bytes);
    setenv("INFERD_TEST_MEM_AVAILABLE", v, 1);
}

/* --- (a) tokenizer ids vs the model's vocab ----------------------------------- */

static const struct {
    const char *what;
    int max_vocab_id; /* largest id in model.vocab */
    int added_id;     /* id of one added token, -1 = none */
    bool ok;
    const char *needle[2];
} k_vocab_rows[] = {
    {"smaller tokenizer (model vocab padded, as Qwen)", 9, -1, true, {NULL, NULL}},
    {"tokenizer ids up to vocab_size - 1", 500, 511, true, {NULL, NULL}},
    {"an added token at vocab_size",
     300,
     512,
     false,
     {"largest token id is 512", "vocab_size (config.json) is 512"}},
    {"a vocab id past vocab_size", 600, -1, false, {"largest token id is 600 (601 ids", "is 512"}},
    {"an added token far out", 10, 70000, false, {"70000", "ids 512..70000"}},
};

static tokenizer *synthetic_tok(int max_vocab_id, int added_id)
{
    char json[1024];
    char added[160] = "";
    if (added_id >= 0)
        snprintf(added, sizeof added,
                 ", \"added_tokens\": [{\"id\": %d, \"content\": \"<|x|>\", \"special\": true}]", added_id);
    snprintf(json, sizeof json,
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": %d}, \"merges\": [\"a "
             "b\"]}%s}",
             max_vocab_id, added);
    tokenizer *t = NULL;
    ck_assert_msg(tok_load_json(json, NULL, &t) == INFERD_OK, "%s", inferd_last_error());
    return t;
}

START_TEST(test_tokenizer_vocab)
{
    char *dir = stories_dir();
    model_opts o;
    opts_for(&o, dir, KERN_BACKEND_CPU, 4, 0);
    model *m = NULL;
    ck_assert_msg(model_load(&o, &m) == INFERD_OK, "%s", inferd_last_error());
    ck_assert_int_eq(model_get_config(m)->vocab_size, 512);
    engine_opts eo;
    engine_opts_default(&eo);
    eo.max_num_seqs = 4;
    eo.max_num_batched_tokens = 64;
    for (size_t i = 0; i < sizeof k_vocab_rows / sizeof k_vocab_rows[0]; i++) {
        tokenizer *t = synthetic_tok(k_vocab_rows[i].max_vocab_id, k_vocab_rows[i].added_id);
        engine *e = NULL;
        inferd_status st = engine_create(&eo, m, t, &e);
        if (k_vocab_rows[i].ok) {
            ck_assert_msg(st == INFERD_OK, "%s: %s", k_vocab_rows[i].what, inferd_last_error());
            engine_free(e);
        } else {
            ck_assert_msg(st == INFERD_ERR_INVALID_ARG, "%s: accepted (tokenizer %d ids, model vocab 512)",
                          k_vocab_rows[i].what, tok_vocab_size(t));
            ck_assert_ptr_null(e);
            for (int k = 0; k < 2; k++)
                ck_assert_msg(strstr(inferd_last_error(), k_vocab_rows[i].needle[k]), "%s: '%s' lacks '%s'",
                              k_vocab_rows[i].what, inferd_last_error(), k_vocab_rows[i].needle[k]);
        }
        tok_free(t);
    }
    /* the model's own tokenizer, and none at all */
    tokenizer *t = NULL;
    ck_assert_int_eq(tok_load(dir, &t), INFERD_OK);
    engine *e = NULL;
    ck_assert_msg(engine_create(&eo, m, t, &e) == INFERD_OK, "%s", inferd_last_error());
    engine_free(e);
    ck_assert_msg(engine_create(&eo, m, NULL, &e) == INFERD_OK, "%s", inferd_last_error());
    engine_free(e);
    tok_free(t);
    model_free(m);
    inferd_free(dir);
}
END_TEST

/* --- (b) NaN / Inf weights ------------------------------------------------------ */

#define TD 64  /* hidden */
#define TF 96  /* intermediate */
#define TV 48  /* vocab */
#define TL 2   /* layers */
#define THD 16 /* head_dim; 4 q heads, 2 kv heads */

typedef struct {
    char name[96];
    int64_t rows, cols; /* rows 0: a vector of cols */
} tiny_tensor;

static int tiny_tensors(tiny_tensor *t)
{
    int n = 0;
#define ADD(r, c, ...)                                                                                       \
    do {                                                                                                     \
        snprintf(t[n].name, sizeof t[n].name, __VA_ARGS__);                                                  \
        t[n].rows = (r);                                                                                     \
        t[n].cols = (c);                                                                                     \
        n++;                                                                                                 \
    } while (0)
    ADD(TV, TD, "model.embed_tokens.weight");
    for (int l = 0; l < TL; l++) {
        ADD(0, TD, "model.layers.%d.input_layernorm.weight", l);
        ADD(4 * THD, TD, "model.layers.%d.self_attn.q_proj.weight", l);
        ADD(2 * THD, TD, "model.layers.%d.self_attn.k_proj.weight", l);
        ADD(2 * THD, TD, "model.layers.%d.self_attn.v_proj.weight", l);
        ADD(TD, 4 * THD, "model.layers.%d.self_attn.o_proj.weight", l);
        ADD(0, TD, "model.layers.%d.post_attention_layernorm.weight", l);
        ADD(TF, TD, "model.layers.%d.mlp.gate_proj.weight", l);
        ADD(TF, TD, "model.layers.%d.mlp.up_proj.weight", l);
        ADD(TD, TF, "model.layers.%d.mlp.down_proj.weight", l);
    }
    ADD(0, TD, "model.norm.weight");
    ADD(TV, TD, "lm_head.weight");
#undef ADD
    return n;
}

/* Write config.json and model.safetensors of the tiny model into dir, in
 * dtype dt (F32/F16/BF16); element `bad_index` of tensor `bad` (NULL: none;
 * index -1: the last) becomes bad_value. */
static void write_tiny_model(const char *dir, kern_dtype dt, const char *bad, int64_t bad_index,
                             float bad_value)
{
    static const char *torch[] = {"float32", "float16", "bfloat16"};
    static const char *st_dt[] = {"F32", "F16", "BF16"};
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(
        f,
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": %d, "
        "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"head_dim\": %d, \"vocab_size\": %d, \"max_position_embeddings\": 128, "
        "\"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"hidden_act\": \"silu\", "
        "\"tie_word_embeddings\": false, \"bos_token_id\": 1, \"eos_token_id\": 2, \"torch_dtype\": "
        "\"%s\"}\n",
        TD, TF, TL, THD, TV, torch[dt]);
    fclose(f);
    tiny_tensor t[4 + 9 * TL];
    const int n = tiny_tensors(t);
    const size_t es = kern_dtype_size(dt);
    inferd_buf hdr = {0};
    inferd_buf_printf(&hdr, "{\"__metadata__\": {\"format\": \"pt\"}");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const size_t cnt = (size_t)(t[i].rows ? t[i].rows * t[i].cols : t[i].cols);
        if (t[i].rows)
            inferd_buf_printf(
                &hdr, ", \"%s\": {\"dtype\": \"%s\", \"shape\": [%lld, %lld], \"data_offsets\": [%zu, %zu]}",
                t[i].name, st_dt[dt], (long long)t[i].rows, (long long)t[i].cols, off, off + cnt * es);
        else
            inferd_buf_printf(
                &hdr, ", \"%s\": {\"dtype\": \"%s\", \"shape\": [%lld], \"data_offsets\": [%zu, %zu]}",
                t[i].name, st_dt[dt], (long long)t[i].cols, off, off + cnt * es);
        off += cnt * es;
    }
    inferd_buf_printf(&hdr, "}");
    while (hdr.len % 8)
        inferd_buf_printf(&hdr, " ");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)hdr.len >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(hdr.data, 1, hdr.len, f);
    bool planted = bad == NULL;
    for (int i = 0; i < n; i++) {
        const int64_t cnt = t[i].rows ? t[i].rows * t[i].cols : t[i].cols;
        for (int64_t e = 0; e < cnt; e++) {
            float v = t[i].rows ? (float)(0.2 * rng_uniform(1234 + (uint64_t)i, (uint64_t)e) - 0.1) : 1.0f;
            if (bad && strcmp(t[i].name, bad) == 0 && e == (bad_index < 0 ? cnt - 1 : bad_index)) {
                v = bad_value;
                planted = true;
            }
            if (dt == KERN_DTYPE_F32) {
                fwrite(&v, 4, 1, f);
            } else {
                uint16_t h = dt == KERN_DTYPE_F16 ? half_f32_to_f16(v) : half_f32_to_bf16(v);
                fwrite(&h, 2, 1, f);
            }
        }
    }
    fclose(f);
    inferd_buf_free(&hdr);
    ck_assert_msg(planted, "tensor %s not in the tiny model", bad);
}

static void remove_tiny_model(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    remove(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    remove(path);
    rmdir(dir);
}

static const struct {
    const char *what;
    kern_dtype dt;
    const char *bad; /* tensor with the bad value, NULL = clean */
    int64_t index;   /* -1 = last element */
    float value;
    const char *not_named; /* a neighbour that must not be blamed */
} k_nan_rows[] = {
    {"clean F32", KERN_DTYPE_F32, NULL, 0, 0, NULL},
    {"clean BF16", KERN_DTYPE_BF16, NULL, 0, 0, NULL},
    {"clean F16", KERN_DTYPE_F16, NULL, 0, 0, NULL},
    {"NaN in layer 1 k_proj (F32, middle of fused qkv)", KERN_DTYPE_F32,
     "model.layers.1.self_attn.k_proj.weight", 5, NAN, "q_proj"},
    {"NaN in layer 0 q_proj, first element (BF16)", KERN_DTYPE_BF16, "model.layers.0.self_attn.q_proj.weight",
     0, NAN, "k_proj"},
    {"-Inf in layer 0 v_proj, last element (F16)", KERN_DTYPE_F16, "model.layers.0.self_attn.v_proj.weight",
     -1, -INFINITY, "k_proj"},
    {"NaN in layer 1 up_proj (BF16, second half of gate|up)", KERN_DTYPE_BF16,
     "model.layers.1.mlp.up_proj.weight", 100, NAN, "gate_proj"},
    {"+Inf in layer 0 gate_proj (F32)", KERN_DTYPE_F32, "model.layers.0.mlp.gate_proj.weight", 7, INFINITY,
     "up_proj"},
    {"+Inf in lm_head, last element (BF16)", KERN_DTYPE_BF16, "lm_head.weight", -1, INFINITY, "embed_tokens"},
    {"NaN in the embedding (F16)", KERN_DTYPE_F16, "model.embed_tokens.weight", 3 * TD + 1, NAN, "lm_head"},
    {"-Inf in the final norm (F32)", KERN_DTYPE_F32, "model.norm.weight", 0, -INFINITY, "layernorm"},
    {"NaN in layer 1 post_attention_layernorm (BF16)", KERN_DTYPE_BF16,
     "model.layers.1.post_attention_layernorm.weight", TD - 1, NAN, "input_layernorm"},
    {"NaN in layer 0 down_proj (F16)", KERN_DTYPE_F16, "model.layers.0.mlp.down_proj.weight", 1234, NAN,
     "up_proj"},
    {"NaN in layer 1 o_proj (F32)", KERN_DTYPE_F32, "model.layers.1.self_attn.o_proj.weight", 63, NAN,
     "v_proj"},
};

static kern_backend test_backend(void)
{
    if (!test_use_cuda())
        return KERN_BACKEND_CPU;
    if (!kern_cuda_available())
        test_skip("INFERD_TEST_DEVICE=cuda but no CUDA device");
    return KERN_BACKEND_CUDA;
}

START_TEST(test_nan_weights)
{
    const kern_backend be = test_backend();
    const size_t i = (size_t)_i;
    char *dir = test_make_temp_dir("inferd-nan");
    write_tiny_model(dir, k_nan_rows[i].dt, k_nan_rows[i].bad, k_nan_rows[i].index, k_nan_rows[i].value);
    model_opts o;
    opts_for(&o, dir, be, 2, 1 << 20);
    model *m = NULL;
    inferd_status st = model_load(&o, &m);
    const char *err = inferd_last_error();
    if (!k_nan_rows[i].bad) {
        ck_assert_msg(st == INFERD_OK, "%s: %s", k_nan_rows[i].what, err);
        model_free(m);
    } else {
        ck_assert_msg(st == INFERD_ERR_FORMAT, "%s: status %s (%s)", k_nan_rows[i].what,
                      inferd_status_str(st), st == INFERD_OK ? "loaded" : err);
        ck_assert_ptr_null(m);
        ck_assert_msg(strstr(err, k_nan_rows[i].bad) && strstr(err, "NaN or Inf") && strstr(err, "1 of") &&
                          strstr(err, "model.safetensors"),
                      "%s: message '%s'", k_nan_rows[i].what, err);
        ck_assert_msg(!strstr(err, k_nan_rows[i].not_named), "%s: message '%s' blames %s", k_nan_rows[i].what,
                      err, k_nan_rows[i].not_named);
    }
    remove_tiny_model(dir);
    inferd_free(dir);
}
END_TEST

/* Dummy weights are checked too, and always finite. */
START_TEST(test_nan_dummy)
{
    const kern_backend be = test_backend();
    char *dir = test_make_temp_dir("inferd-nan");
    write_tiny_model(dir, KERN_DTYPE_BF16, NULL, 0, 0);
    model_opts o;
    opts_for(&o, dir, be, 2, 1 << 20);
    o.load_format = MODEL_LOAD_DUMMY;
    for (uint64_t seed = 0; seed < 3; seed++) {
        o.dummy_seed = seed;
        model *m = NULL;
        ck_assert_msg(model_load(&o, &m) == INFERD_OK, "%s", inferd_last_error());
        model_free(m);
    }
    remove_tiny_model(dir);
    inferd_free(dir);
}
END_TEST

/* --- (b2) the norm fold's size rule (model_weights.c fold_wanted) ------------- */

/* A dummy Llama config of these dims: whether its layer norms are folded
 * under INFERD_NORM_FOLD = env and INFERD_GEMM_ACCUM = accum (NULL: unset).
 * O is hidden x heads * head_dim and down hidden x intermediate, bf16; the
 * floor is the add's, 1 MiB each. */
static const struct {
    int hidden, heads, head_dim, inter;
    const char *env, *accum;
    bool want;
} k_fold_rows[] = {
    {512, 8, 128, 1024, NULL, NULL, true},   /* O and down exactly 1 MiB */
    {512, 8, 128, 1023, NULL, NULL, false},  /* down one column short */
    {512, 4, 128, 4096, NULL, NULL, false},  /* O 512 KiB */
    {1024, 16, 64, 2048, NULL, NULL, true},  /* 2 MiB and 4 MiB */
    {1024, 16, 64, 2048, "", NULL, true},    /* empty: the rule */
    {1024, 16, 64, 2048, "0", NULL, false},  /* forced off */
    {64, 4, 16, 96, NULL, NULL, false},      /* the tiny model's shapes */
    {64, 4, 16, 96, "1", NULL, true},        /* forced on */
    {64, 4, 16, 96, "yes", NULL, true},      /* any value but 0 */
    {1024, 16, 64, 2048, NULL, "0", false},  /* the products may not add into x */
    {1024, 16, 64, 2048, "1", "0", true},    /* ... forced on regardless */
};

START_TEST(test_norm_fold_rule)
{
    const int i = _i;
    char *dir = test_make_temp_dir("inferd-fold");
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": %d, "
            "\"intermediate_size\": %d, \"num_hidden_layers\": 1, \"num_attention_heads\": %d, "
            "\"num_key_value_heads\": 2, \"head_dim\": %d, \"vocab_size\": 64, "
            "\"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-05, \"torch_dtype\": \"bfloat16\"}\n",
            k_fold_rows[i].hidden, k_fold_rows[i].inter, k_fold_rows[i].heads, k_fold_rows[i].head_dim);
    fclose(f);
    model_opts o;
    opts_for(&o, dir, test_backend(), 1, 1 << 20);
    o.load_format = MODEL_LOAD_DUMMY;
    if (k_fold_rows[i].env)
        setenv("INFERD_NORM_FOLD", k_fold_rows[i].env, 1);
    else
        unsetenv("INFERD_NORM_FOLD");
    if (k_fold_rows[i].accum)
        setenv("INFERD_GEMM_ACCUM", k_fold_rows[i].accum, 1);
    else
        unsetenv("INFERD_GEMM_ACCUM");
    model *m = NULL;
    const inferd_status st = model_load(&o, &m);
    unsetenv("INFERD_NORM_FOLD");
    unsetenv("INFERD_GEMM_ACCUM");
    ck_assert_msg(st == INFERD_OK, "row %d: %s", i, inferd_last_error());
    ck_assert_msg(m->norm_fold == k_fold_rows[i].want, "row %d (hidden %d, O %d x %d, intermediate %d, env %s, "
                  "accum %s): folded %d", i, k_fold_rows[i].hidden, k_fold_rows[i].heads, k_fold_rows[i].head_dim,
                  k_fold_rows[i].inter, k_fold_rows[i].env ? k_fold_rows[i].env : "unset",
                  k_fold_rows[i].accum ? k_fold_rows[i].accum : "unset", m->norm_fold);
    model_free(m);
    remove_tiny_model(dir);
    inferd_free(dir);
}
END_TEST

/* --- (c) host memory ----------------------------------------------------------- */

START_TEST(test_host_memory)
{
    char *dir = stories_dir();
    model_opts o;
    model *m = NULL;
    /* far too little: refused before allocating, every number named */
    opts_for(&o, dir, KERN_BACKEND_CPU, 4, 0);
    set_mem_available(200000);
    inferd_status st = model_load(&o, &m);
    set_mem_available(-1);
    ck_assert_msg(st == INFERD_ERR_NOMEM, "loaded with 200 kB available (%s)", inferd_status_str(st));
    ck_assert_ptr_null(m);
    const char *err = inferd_last_error();
    const char *want[] = {"not enough host memory",   "weights", "activations", "KV cache", "0.2 MiB",
                          "INFERD_TEST_MEM_AVAILABLE"};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        ck_assert_msg(strstr(err, want[k]), "message '%s' lacks '%s'", err, want[k]);
    /* an explicit KV cache larger than what is available */
    opts_for(&o, dir, KERN_BACKEND_CPU, 4, (int64_t)1 << 30);
    set_mem_available((int64_t)512 << 20);
    st = model_load(&o, &m);
    set_mem_available(-1);
    ck_assert_msg(st == INFERD_ERR_NOMEM, "1 GiB KV cache with 512 MiB available: %s", inferd_status_str(st));
    ck_assert_msg(strstr(inferd_last_error(), "--kv-cache-bytes"), "%s", inferd_last_error());
    /* plenty: loads */
    opts_for(&o, dir, KERN_BACKEND_CPU, 4, 0);
    set_mem_available((int64_t)64 << 30);
    st = model_load(&o, &m);
    set_mem_available(-1);
    ck_assert_msg(st == INFERD_OK, "%s", inferd_last_error());
    model_free(m);
    inferd_free(dir);
}
END_TEST

/* --- (d) KV capacity vs max_model_len -------------------------------------------- */

static const struct {
    int64_t blocks, block_size;
    int n_seqs, max_len;
    int64_t want_blocks, want_len; /* kv_blocks_for_seqs(n_seqs, max_len), kv_max_len_for_blocks(blocks) */
} k_layout_rows[] = {
    {33, 16, 1, 512, 33, 512}, {32, 16, 1, 512, 33, 496}, {2, 16, 4, 100, 29, 16},
    {1, 16, 1, 1, 2, 0},       {0, 16, 3, 17, 7, 0},      {100000, 1, 2, 7, 15, 99999},
};

START_TEST(test_kv_layout)
{
    for (size_t i = 0; i < sizeof k_layout_rows / sizeof k_layout_rows[0]; i++) {
        ck_assert_int_eq(kv_blocks_for_seqs(k_layout_rows[i].n_seqs, k_layout_rows[i].max_len,
                                            (int)k_layout_rows[i].block_size),
                         k_layout_rows[i].want_blocks);
        ck_assert_int_eq(kv_max_len_for_blocks(k_layout_rows[i].blocks, (int)k_layout_rows[i].block_size),
                         k_layout_rows[i].want_len);
    }
}
END_TEST

static const struct {
    const char *what;
    int max_seqs, max_model_len; /* 0 = the config's (512) */
    int64_t kv_blocks;           /* > 0: --kv-cache-bytes of that many blocks */
} k_fit_rows[] = {
    {"--max-num-seqs 1, auto", 1, 0, 0},
    {"--max-num-seqs 3, auto", 3, 0, 0},
    {"--max-num-seqs 1 --max-model-len 100, auto", 1, 100, 0},
    {"--max-num-seqs 1, explicit 5 blocks (kept: the user's choice)", 1, 0, 5},
};

/* Auto-sized KV holds max_num_seqs (at least one) max-length sequences. */
START_TEST(test_kv_fits_max_len)
{
    char *dir = stories_dir();
    for (size_t i = 0; i < sizeof k_fit_rows / sizeof k_fit_rows[0]; i++) {
        model_opts o;
        opts_for(&o, dir, KERN_BACKEND_CPU, k_fit_rows[i].max_seqs, 0);
        o.max_model_len = k_fit_rows[i].max_model_len;
        model *m = NULL;
        if (k_fit_rows[i].kv_blocks > 0) { /* learn the block size from a probe load */
            ck_assert_msg(model_load(&o, &m) == INFERD_OK, "%s", inferd_last_error());
            o.kv_cache_bytes = k_fit_rows[i].kv_blocks * model_kv_bytes_per_block(m);
            model_free(m);
        }
        ck_assert_msg(model_load(&o, &m) == INFERD_OK, "%s: %s", k_fit_rows[i].what, inferd_last_error());
        const int want_len = k_fit_rows[i].max_model_len ? k_fit_rows[i].max_model_len : 512;
        ck_assert_msg(model_max_model_len(m) == want_len, "%s: max_model_len %d", k_fit_rows[i].what,
                      model_max_model_len(m));
        const int64_t cap = kv_max_len_for_blocks(model_num_kv_blocks(m), model_block_size(m));
        if (k_fit_rows[i].kv_blocks > 0) {
            ck_assert_int_eq(model_num_kv_blocks(m), k_fit_rows[i].kv_blocks);
        } else {
            ck_assert_msg(cap >= (int64_t)k_fit_rows[i].max_seqs * want_len,
                          "%s: %d KV blocks of %d hold %lld tokens < %d x max_model_len %d",
                          k_fit_rows[i].what, model_num_kv_blocks(m), model_block_size(m), (long long)cap,
                          k_fit_rows[i].max_seqs, want_len);
        }
        model_free(m);
    }
    inferd_free(dir);
}
END_TEST

/* Memory for fewer blocks than one max-length sequence: max_model_len is
 * lowered to what the pool holds (and the block-table width with it), and
 * an engine over it takes that length. */
START_TEST(test_kv_lowers_max_len)
{
    char *dir = stories_dir();
    model_opts o;
    opts_for(&o, dir, KERN_BACKEND_CPU, 1, 0);
    model *m = NULL;
    ck_assert_msg(model_load(&o, &m) == INFERD_OK, "%s", inferd_last_error());
    const int64_t pb = model_kv_bytes_per_block(m);
    const int64_t fixed = (int64_t)m->weight_bytes + (int64_t)m->act_bytes + 2 * pb;
    const int per_seq = model_max_blocks_per_seq(m);
    model_free(m);
    /* the CPU auto budget is 1/4 of available memory: aim at nb blocks */
    int64_t nb = INFERD_MAX((int64_t)5, (fixed + 4 * pb - 1) / (4 * pb));
    ck_assert_msg(nb < per_seq + KV_NULL_BLOCKS, "test setup: %lld blocks would hold a whole sequence",
                  (long long)nb);
    set_mem_available(4 * nb * pb + pb);
    inferd_status st = model_load(&o, &m);
    set_mem_available(-1);
    ck_assert_msg(st == INFERD_OK, "%s", inferd_last_error());
    ck_assert_int_eq(model_num_kv_blocks(m), nb);
    ck_assert_int_eq(model_max_model_len(m), (nb - 1) * 16);
    ck_assert_int_eq(model_max_blocks_per_seq(m), nb - 1);
    engine_opts eo;
    engine_opts_default(&eo);
    eo.max_num_seqs = 1;
    eo.max_num_batched_tokens = 64;
    engine *e = NULL;
    ck_assert_msg(engine_create(&eo, m, NULL, &e) == INFERD_OK, "%s", inferd_last_error());
    engine_free(e);
    model_free(m);
    inferd_free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model_files");
    TCase *tc = tcase_create("finding10");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_nan_weights, 0, (int)(sizeof k_nan_rows / sizeof k_nan_rows[0]));
    tcase_add_test(tc, test_nan_dummy);
    tcase_add_test(tc, test_kv_layout);
    tcase_add_loop_test(tc, test_norm_fold_rule, 0, (int)(sizeof k_fold_rows / sizeof k_fold_rows[0]));
    char *stories = test_fixture_path("models/stories260K/model.safetensors");
    if (stories && access(stories, R_OK) == 0 && !test_use_cuda()) {
        tcase_add_test(tc, test_tokenizer_vocab);
        tcase_add_test(tc, test_host_memory);
        tcase_add_test(tc, test_kv_fits_max_len);
        tcase_add_test(tc, test_kv_lowers_max_len);
    } else {
        printf("test_model_files: stories260K tests not run (%s)\n",
               test_use_cuda() ? "they are CPU-only" : "fixture models/stories260K not found");
    }
    inferd_free(stories);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
