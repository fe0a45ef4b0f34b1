/* model/model_opts.c: the model option table: every user-settable field of
 * model_opts with its flag / config-key name, accepted range, default and
 * help, and the validation model_load runs with the same rows.
 *
 * The limits here are the only place they are written: `inferd generate`,
 * `inferd serve` (flags and --config keys) and --help read these rows, and
 * model_load rejects what they reject. The engine's step limits
 * (max_num_seqs, max_num_batched_tokens, max_model_len) are rows of this
 * table because the model sizes its activation arena and block tables from
 * them; engine_opts validates its copies against these same rows.
 *
 * Ranges, and why:
 *   block-size [1, 1024]: what load has always accepted (the CLI used to
 *       say 4096); larger blocks only waste KV at the end of sequences.
 *   max-num-seqs [1, 65536], max-num-batched-tokens [1, 2^20]: host and
 *       device batch buffers are sized from them at load.
 *   max-model-len [0, 2^24]: 0 = the model's context: max_position_embeddings,
 *       scaled by a linear / dynamic / yarn rope factor as vLLM does
 *       (model_config_context_len; load also rejects more than that).
 *   generation-config auto|vllm|DIR: vLLM's --generation-config; which
 *       generation_config.json gives the sampling defaults (model.c).
 *   gpu-memory-utilization [0.01, 1]: a fraction of device memory.
 *   kv-cache-dtype auto|fp8|fp8_e4m3: vLLM's --kv-cache-dtype (fp8 is
 *       fp8_e4m3, scale 1; no fp8_e5m2: no kernel reads it).
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "common/status.h"
#include "common/util.h"
#include "model/model.h"
#include "model/model_shard.h"

#define OFF(f) offsetof(model_opts, f)

static const opt_name k_formats[] = {
    {"safetensors", MODEL_LOAD_SAFETENSORS}, {"auto", MODEL_LOAD_SAFETENSORS}, {"dummy", MODEL_LOAD_DUMMY}, {NULL, 0}};

static const opt_name k_kv_dtypes[] = {{"auto", MODEL_KV_CACHE_AUTO},
                                       {"fp8", MODEL_KV_CACHE_FP8_E4M3},
                                       {"fp8_e4m3", MODEL_KV_CACHE_FP8_E4M3},
                                       {NULL, 0}};

static const opt_name k_tp_reduce[] = {{"float32", MODEL_TP_REDUCE_F32}, {"bfloat16", MODEL_TP_REDUCE_ACT}, {NULL, 0}};

/* --device: auto|cpu|cuda|gpu sets backend and device_auto together. */
static bool parse_device(void *base, const opt_row *row, const char *text)
{
    (void)row;
    model_opts *o = base;
    if (strcmp(text, "auto") == 0) {
        o->device_auto = true;
        return true;
    }
    if (strcmp(text, "cpu") == 0)
        o->backend = KERN_BACKEND_CPU;
    else if (strcmp(text, "cuda") == 0 || strcmp(text, "gpu") == 0)
        o->backend = KERN_BACKEND_CUDA;
    else {
        inferd_set_error(INFERD_ERR_INVALID_ARG, "expected auto, cpu or cuda, got '%s'", text);
        return false;
    }
    o->device_auto = false;
    return true;
}

static const opt_row k_rows[] = {
    {.name = "model", .kind = OPT_STR, .off = OFF(model_dir), .meta = "DIR",
     .help = "HF model directory (config.json, *.safetensors, tokenizer.json)"},
    {.name = "tokenizer", .kind = OPT_STR, .off = OFF(tokenizer_dir), .meta = "DIR",
     .help = "tokenizer.json directory (default: --model)"},
    {.name = "load-format", .kind = OPT_ENUM, .off = OFF(load_format), .names = k_formats,
     .def = MODEL_LOAD_SAFETENSORS, .help = "weights: safetensors, or dummy (random weights of the config's shapes)"},
    {.name = "device", .kind = OPT_CUSTOM, .parse = parse_device, .meta = "auto|cpu|cuda",
     .help = "backend (default: cuda when a GPU is present, else cpu)", .flags = OPT_F_NO_DEFAULT},
    {.name = "threads", .kind = OPT_INT, .off = OFF(n_threads), .min = 0, .max = 4096, .def = 0,
     .help = "CPU backend threads (0 = all cores)"},
    {.name = "device-id", .kind = OPT_INT, .off = OFF(device_id), .min = 0, .max = 1024, .def = 0,
     .help = "CUDA device ordinal"},
    {.name = "gpu-memory-utilization", .kind = OPT_FLOAT, .off = OFF(gpu_memory_utilization), .min = 0.01,
     .max = 1.0, .def = 0.90, .help = "fraction of GPU memory to use"},
    {.name = "max-num-seqs", .kind = OPT_INT, .off = OFF(max_num_seqs), .min = 1, .max = 65536, .def = 64,
     .help = "sequences per engine step"},
    {.name = "max-num-batched-tokens", .kind = OPT_INT, .off = OFF(max_num_batched_tokens), .min = 1,
     .max = 1 << 20, .def = 2048, .help = "tokens per engine step"},
    {.name = "block-size", .kind = OPT_INT, .off = OFF(block_size), .min = 1, .max = 1024, .def = 16,
     .help = "KV block size in tokens"},
    {.name = "kv-cache-bytes", .kind = OPT_INT64, .off = OFF(kv_cache_bytes), .min = 0, .max = 9.2e18, .def = 0,
     .meta = "BYTES", .help = "KV cache size (0 = from --gpu-memory-utilization)"},
    {.name = "kv-cache-dtype", .kind = OPT_ENUM, .off = OFF(kv_cache_dtype), .names = k_kv_dtypes,
     .def = MODEL_KV_CACHE_AUTO, .meta = "auto|fp8",
     .help = "data type of the KV cache: auto (the activations' dtype: bfloat16 on cuda, float32 on cpu) "
             "or fp8 (= fp8_e4m3, scale 1: half the bytes of bfloat16 per token)"},
    {.name = "max-model-len", .kind = OPT_INT, .off = OFF(max_model_len), .min = 0, .max = 1 << 24, .def = 0,
     .help = "context limit (0 = the model's)"},
    {.name = "enforce-eager", .kind = OPT_BOOL, .off = OFF(enforce_eager), .def = 0,
     .help = "CUDA: run every step op by op (no decode CUDA graphs)"},
    {.name = "tensor-parallel-size", .kind = OPT_INT, .off = OFF(tensor_parallel_size), .min = 1,
     .max = MODEL_MAX_TP, .def = 1,
     .help = "split the model over this many GPUs of this host (devices --device-id and up; CPU: threads)"},
    {.name = "tp-reduce-dtype", .kind = OPT_ENUM, .off = OFF(tp_reduce_dtype), .names = k_tp_reduce,
     .def = MODEL_TP_REDUCE_F32,
     .help = "tensor parallelism: partial sums through the all-reduce in float32 (tp 2 gives the logits of tp 1; "
             "the prefill all-reduce moves twice the bytes) or bfloat16 (the activations' dtype; faster, one "
             "more rounding per partial); the same on every node"},
    {.name = "dummy-seed", .kind = OPT_INT64, .off = OFF(dummy_seed), .min = 0, .max = 9.2e18, .def = 0,
     .help = "seed of --load-format dummy weights"},
    /* no def_str: unset means auto, so model_opts_default allocates nothing
     * (most users of a model_opts never opt_free it) */
    {.name = "generation-config", .kind = OPT_STR, .off = OFF(generation_config),
     .meta = "auto|vllm|DIR",
     .help = "sampling defaults for requests that omit them: the model's generation_config.json (auto), "
             "none (vllm), or DIR/generation_config.json (default auto)"},
};
#undef OFF

const opt_row *model_opts_rows(size_t *n)
{
    *n = INFERD_ARRAY_LEN(k_rows);
    return k_rows;
}

void model_opts_free(model_opts *o)
{
    size_t n;
    const opt_row *rows = dist_rdzv_opts_rows(&n);
    opt_free(rows, n, &o->dist);
    opt_free(k_rows, INFERD_ARRAY_LEN(k_rows), o);
}

void model_opts_default(model_opts *o)
{
    memset(o, 0, sizeof *o);
    opt_defaults(k_rows, INFERD_ARRAY_LEN(k_rows), o);
    dist_rdzv_opts_default(&o->dist);
    o->backend = KERN_BACKEND_CPU;
    o->device_auto = false;
}

inferd_status model_opts_validate(const model_opts *o)
{
    if (!opt_validate(k_rows, INFERD_ARRAY_LEN(k_rows), o, "model options"))
        return INFERD_ERR_INVALID_ARG;
    if (o->dist.nnodes <= 1)
        return INFERD_OK;
    if (o->tensor_parallel_size % o->dist.nnodes != 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "--tensor-parallel-size %d must be a multiple of --nnodes %d (each node holds "
                                "the same number of ranks)",
                                o->tensor_parallel_size, o->dist.nnodes);
    return dist_rdzv_opts_validate(&o->dist);
}
