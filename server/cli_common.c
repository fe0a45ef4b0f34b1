/* server/cli_common.c: see cli_common.h. */
#include "server/cli_common.h"

#include <stdarg.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"

int cli_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "inferd: error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

void cli_model_args_default(cli_model_args *a)
{
    memset(a, 0, sizeof *a);
    model_opts_default(&a->mo);
    engine_opts_default(&a->eo);
    a->mo.max_num_seqs = a->eo.max_num_seqs;
    a->mo.max_num_batched_tokens = a->eo.max_num_batched_tokens;
}

void cli_model_usage(FILE *f)
{
    fprintf(f,
            "model and engine:\n"
            "  --model DIR                    HF model directory (config.json, *.safetensors, tokenizer.json)\n"
            "  --tokenizer DIR                tokenizer directory (default: --model)\n"
            "  --load-format safetensors|dummy  dummy = random weights of the config's shapes\n"
            "  --device cpu|cuda              default: cuda when a GPU is present\n"
            "  --threads N                    CPU backend threads (default: all cores)\n"
            "  --max-num-seqs N               sequences per step (default 64)\n"
            "  --max-num-batched-tokens N     tokens per step (default 2048)\n"
            "  --block-size N                 KV block size in tokens (default 16)\n"
            "  --kv-cache-bytes N             KV cache size (default: from --gpu-memory-utilization)\n"
            "  --gpu-memory-utilization F     fraction of GPU memory to use (default 0.90)\n"
            "  --max-model-len N              context limit (default: the model's)\n"
            "  --enable-prefix-caching / --no-enable-prefix-caching   (default on)\n"
            "  --log-level debug|info|warn|error\n");
}

/* Flags with an integer value: name, bounds, destination. */
typedef struct {
    const char *name;
    long long lo, hi;
    int which;
} int_flag;

static int set_int_flag(cli_model_args *a, int which, long long v)
{
    switch (which) {
    case 0: a->mo.n_threads = (int)v; break;
    case 1: a->mo.max_num_seqs = a->eo.max_num_seqs = (int)v; break;
    case 2: a->mo.max_num_batched_tokens = a->eo.max_num_batched_tokens = (int)v; break;
    case 3: a->mo.block_size = (int)v; break;
    case 4: a->mo.kv_cache_bytes = v; break;
    case 5: a->mo.max_model_len = a->eo.max_model_len = (int)v; break;
    }
    return 1;
}

static int parse_valued(cli_model_args *a, const char *f, const char *v)
{
    static const int_flag ints[] = {
        {"--threads", 0, 1024, 0},          {"--max-num-seqs", 1, 65536, 1},
        {"--max-num-batched-tokens", 1, 1 << 20, 2}, {"--block-size", 1, 1024, 3},
        {"--kv-cache-bytes", 1, 1LL << 50, 4}, {"--max-model-len", 1, 1 << 24, 5},
    };
    for (size_t k = 0; k < ARRAY_LEN(ints); k++) {
        if (strcmp(f, ints[k].name) != 0)
            continue;
        long long x;
        if (!util_parse_int(v, ints[k].lo, ints[k].hi, &x))
            return cli_fail("%s: '%s' is not an integer in [%lld, %lld]", f, v, ints[k].lo, ints[k].hi);
        return set_int_flag(a, ints[k].which, x);
    }
    if (strcmp(f, "--model") == 0) {
        a->model_dir = v;
    } else if (strcmp(f, "--tokenizer") == 0) {
        a->tokenizer_dir = v;
    } else if (strcmp(f, "--load-format") == 0) {
        if (strcmp(v, "safetensors") && strcmp(v, "dummy") && strcmp(v, "auto"))
            return cli_fail("--load-format: '%s' is not safetensors|dummy", v);
        a->mo.load_format = strcmp(v, "dummy") == 0 ? MODEL_LOAD_DUMMY : MODEL_LOAD_SAFETENSORS;
    } else if (strcmp(f, "--device") == 0) {
        if (strcmp(v, "cpu") && strcmp(v, "cuda"))
            return cli_fail("--device: '%s' is not cpu|cuda", v);
        a->mo.backend = strcmp(v, "cuda") == 0 ? KERN_BACKEND_CUDA : KERN_BACKEND_CPU;
        a->device_set = true;
    } else if (strcmp(f, "--gpu-memory-utilization") == 0) {
        double d;
        if (!util_parse_double(v, &d) || d <= 0 || d > 1)
            return cli_fail("--gpu-memory-utilization: '%s' is not in (0, 1]", v);
        a->mo.gpu_memory_utilization = (float)d;
    } else if (strcmp(f, "--log-level") == 0) {
        int lvl = log_parse_level(v);
        if (lvl < 0)
            return cli_fail("--log-level: '%s' is not debug|info|warn|error|off", v);
        log_set_level((log_level)lvl);
    } else {
        return 0;
    }
    return 1;
}

int cli_parse_model_flag(int argc, char **argv, int *i, cli_model_args *a)
{
    const char *f = argv[*i];
    if (strcmp(f, "--enable-prefix-caching") == 0 || strcmp(f, "--no-enable-prefix-caching") == 0) {
        a->eo.enable_prefix_caching = f[2] == 'e';
        return 1;
    }
    static const char *valued[] = {"--model", "--tokenizer", "--load-format", "--device",
                                   "--threads", "--max-num-seqs", "--max-num-batched-tokens",
                                   "--block-size", "--kv-cache-bytes", "--max-model-len",
                                   "--gpu-memory-utilization", "--log-level"};
    for (size_t k = 0; k < ARRAY_LEN(valued); k++) {
        if (strcmp(f, valued[k]) != 0)
            continue;
        if (*i + 1 >= argc)
            return cli_fail("%s needs a value", f);
        int r = parse_valued(a, f, argv[*i + 1]);
        if (r > 0)
            (*i)++;
        return r;
    }
    return 0;
}

int cli_load(cli_model_args *a, cli_loaded *out)
{
    memset(out, 0, sizeof *out);
    if (!a->device_set)
        a->mo.backend = kern_cuda_available() ? KERN_BACKEND_CUDA : KERN_BACKEND_CPU;
    a->mo.model_dir = a->model_dir;
    const char *tdir = a->tokenizer_dir ? a->tokenizer_dir : a->model_dir;
    char *tpath = util_path_join(tdir, "tokenizer.json");
    bool have_tok = util_file_exists(tpath);
    xfree(tpath);
    if (a->tokenizer_dir && !have_tok) {
        cli_fail("--tokenizer %s: no tokenizer.json there", tdir);
        return 1;
    }
    if (have_tok && tok_load(tdir, &out->tok) != INFERD_OK) {
        cli_fail("%s", inferd_last_error());
        return 1;
    }
    if (model_load(&a->mo, &out->m) != INFERD_OK) {
        cli_fail("%s", inferd_last_error());
        tok_free(out->tok);
        out->tok = NULL;
        return 1;
    }
    out->eo = a->eo;
    out->eo.max_model_len = model_max_model_len(out->m);
    return 0;
}

void cli_unload(cli_loaded *l)
{
    model_free(l->m);
    if (l->tok)
        tok_free(l->tok);
    memset(l, 0, sizeof *l);
}
