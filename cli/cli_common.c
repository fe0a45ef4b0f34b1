/* cli/cli_common.c: see cli_common.h.
 *
 * The model/engine option rows live here once (k_model_opts); `inferd
 * generate` parses them through cli_parse_model_flag and `inferd serve`
 * through srv_opts.c, which adds its own rows and the config file. Values are
 * checked and stored by cli_opt_set; every error names the flag.
 */
#include "cli/cli_common.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"

#define MOFF(f) offsetof(cli_model_vals, f)

static const cli_opt_def k_model_opts[] = {
    {"model", CLI_OPT_STR, MOFF(model_dir), 0, 0,
     "DIR: HF model directory (config.json, *.safetensors, tokenizer.json)"},
    {"tokenizer", CLI_OPT_STR, MOFF(tokenizer_dir), 0, 0, "DIR: tokenizer.json directory (default: --model)"},
    {"load-format", CLI_OPT_FORMAT, MOFF(load_format), 0, 0,
     "safetensors|dummy (dummy: random weights of the config's shapes)"},
    {"device", CLI_OPT_DEVICE, MOFF(backend), 0, 0, "cpu|cuda (default: cuda when a GPU is present)"},
    {"threads", CLI_OPT_INT, MOFF(threads), 0, 4096, "N: CPU backend threads (default 0 = all cores)"},
    {"gpu-memory-utilization", CLI_OPT_DOUBLE, MOFF(gpu_memory_utilization), 0.01, 1.0,
     "F: fraction of GPU memory to use (default 0.90)"},
    {"max-num-seqs", CLI_OPT_INT, MOFF(max_num_seqs), 1, 1 << 20,
     "N: sequences per engine step (default 64)"},
    {"max-num-batched-tokens", CLI_OPT_INT, MOFF(max_num_batched_tokens), 1, 1 << 24,
     "N: tokens per engine step (default 2048)"},
    {"block-size", CLI_OPT_INT, MOFF(block_size), 1, 4096, "N: KV cache block size in tokens (default 16)"},
    {"kv-cache-bytes", CLI_OPT_SIZE, MOFF(kv_cache_bytes), 0, 9.2e18,
     "BYTES: KV cache size (K/M/G suffix; default 0 = from --gpu-memory-utilization)"},
    {"enable-prefix-caching", CLI_OPT_BOOL, MOFF(enable_prefix_caching), 0, 0,
     "prefix caching (default on; --no-enable-prefix-caching)"},
    {"max-model-len", CLI_OPT_INT, MOFF(max_model_len), 0, 1 << 24,
     "N: context limit (default 0 = the model's)"},
    {"log-level", CLI_OPT_LOGLEVEL, MOFF(log_level), 0, 0, "debug|info|warn|error|off"},
};

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

/* ---- generic option tables ------------------------------------------------- */

/* Set the thread's error message; always false. */
static bool opt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool opt_fail(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    inferd_set_error(INFERD_ERR_INVALID_ARG, "%s", msg);
    return false;
}

const cli_opt_def *cli_opt_find(const cli_opt_def *t, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++) {
        const char *nm = t[i].name;
        if (strlen(nm) != len)
            continue;
        size_t k = 0;
        while (k < len && (nm[k] == name[k] || (nm[k] == '-' && name[k] == '_')))
            k++;
        if (k == len)
            return &t[i];
    }
    return NULL;
}

int cli_opt_arg(const cli_opt_def *t, size_t n, int argc, char **argv, int *i, const cli_opt_def **d,
                const char **val)
{
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0)
        return 0;
    const char *name = a + 2;
    const char *eq = strchr(name, '=');
    size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
    const cli_opt_def *r = cli_opt_find(t, n, name, nlen);
    bool negated = false;
    if (!r && nlen > 3 && strncmp(name, "no-", 3) == 0) {
        r = cli_opt_find(t, n, name + 3, nlen - 3);
        negated = r && r->kind == CLI_OPT_BOOL;
        if (!negated)
            r = NULL;
    }
    if (!r)
        return 0;
    if (r->kind == CLI_OPT_BOOL && !eq) {
        *val = negated ? "false" : "true";
    } else if (negated) {
        opt_fail("--no-%s takes no value", r->name);
        return -1;
    } else if (eq) {
        *val = eq + 1;
    } else if (*i + 1 >= argc) {
        opt_fail("--%s needs a value", r->name);
        return -1;
    } else {
        *val = argv[++*i];
    }
    *d = r;
    return 1;
}

bool cli_parse_size(const char *s, int64_t *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0)
        return false;
    double mul = 1;
    if (*end) {
        switch (*end) {
        case 'k':
        case 'K': mul = 1024.0; break;
        case 'm':
        case 'M': mul = 1024.0 * 1024; break;
        case 'g':
        case 'G': mul = 1024.0 * 1024 * 1024; break;
        case 't':
        case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
        default: return false;
        }
        end++;
        if (*end == 'i')
            end++;
        if (*end == 'B' || *end == 'b')
            end++;
        if (*end)
            return false;
    }
    v *= mul;
    if (v > 9.2e18 || v != floor(v))
        return false;
    *out = (int64_t)v;
    return true;
}

static bool set_str(void *p, const char *val)
{
    char **s = p;
    inferd_free(*s);
    *s = inferd_strdup(val);
    return true;
}

/* The kinds whose values are names: device, load format, log level. */
static bool set_named(void *p, const cli_opt_def *d, const char *val)
{
    switch (d->kind) {
    case CLI_OPT_DEVICE:
        if (strcmp(val, "cpu") == 0)
            *(kern_backend *)p = KERN_BACKEND_CPU;
        else if (strcmp(val, "cuda") == 0 || strcmp(val, "gpu") == 0)
            *(kern_backend *)p = KERN_BACKEND_CUDA;
        else
            return opt_fail("--%s must be cpu or cuda, got '%s'", d->name, val);
        return true;
    case CLI_OPT_FORMAT:
        if (strcmp(val, "safetensors") == 0 || strcmp(val, "auto") == 0)
            *(model_load_format *)p = MODEL_LOAD_SAFETENSORS;
        else if (strcmp(val, "dummy") == 0)
            *(model_load_format *)p = MODEL_LOAD_DUMMY;
        else
            return opt_fail("--%s must be safetensors or dummy, got '%s'", d->name, val);
        return true;
    case CLI_OPT_LOGLEVEL:
        if (log_parse_level(val) < 0)
            return opt_fail("--%s: unknown level '%s' (debug|info|warn|error|off)", d->name, val);
        return set_str(p, val);
    default: return opt_fail("--%s: cannot be set here", d->name);
    }
}

bool cli_opt_set(void *base, const cli_opt_def *d, const char *val)
{
    void *p = (char *)base + d->off;
    long long iv;
    double dv;
    int64_t sv;
    switch (d->kind) {
    case CLI_OPT_STR:
        if (!*val)
            return opt_fail("--%s must not be empty", d->name);
        return set_str(p, val);
    case CLI_OPT_INT:
        if (!util_parse_int(val, (long long)d->lo, (long long)d->hi, &iv))
            return opt_fail("--%s: expected an integer in [%.0f, %.0f], got '%s'", d->name, d->lo, d->hi,
                            val);
        *(int *)p = (int)iv;
        return true;
    case CLI_OPT_SIZE:
        if (!cli_parse_size(val, &sv) || (double)sv < d->lo || (double)sv > d->hi)
            return opt_fail("--%s: expected a size in [%.0f, %.0f], got '%s'", d->name, d->lo, d->hi, val);
        *(int64_t *)p = sv;
        return true;
    case CLI_OPT_DOUBLE:
        if (!util_parse_double(val, &dv) || !(dv >= d->lo && dv <= d->hi))
            return opt_fail("--%s: expected a number in [%g, %g], got '%s'", d->name, d->lo, d->hi, val);
        *(double *)p = dv;
        return true;
    case CLI_OPT_BOOL:
        if (strcmp(val, "true") == 0 || strcmp(val, "1") == 0)
            *(bool *)p = true;
        else if (strcmp(val, "false") == 0 || strcmp(val, "0") == 0)
            *(bool *)p = false;
        else
            return opt_fail("--%s: expected true or false, got '%s'", d->name, val);
        return true;
    default: return set_named(p, d, val);
    }
}

void cli_opt_usage(FILE *f, const cli_opt_def *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(f, "  --%-24s %s\n", t[i].name, t[i].help);
}

/* ---- the shared model/engine options --------------------------------------- */

const cli_opt_def *cli_model_opt_table(size_t *n)
{
    *n = INFERD_ARRAY_LEN(k_model_opts);
    return k_model_opts;
}

void cli_model_vals_default(cli_model_vals *v)
{
    memset(v, 0, sizeof *v);
    model_opts mo;
    model_opts_default(&mo);
    engine_opts eo;
    engine_opts_default(&eo);
    v->load_format = mo.load_format;
    v->backend = mo.backend;
    v->device_auto = true;
    v->threads = mo.n_threads;
    v->gpu_memory_utilization = mo.gpu_memory_utilization;
    v->block_size = mo.block_size;
    v->kv_cache_bytes = mo.kv_cache_bytes;
    v->max_num_seqs = eo.max_num_seqs;
    v->max_num_batched_tokens = eo.max_num_batched_tokens;
    v->enable_prefix_caching = eo.enable_prefix_caching;
    v->max_model_len = eo.max_model_len;
    v->log_level = inferd_strdup("info");
}

void cli_model_vals_free(cli_model_vals *v)
{
    inferd_free(v->model_dir);
    inferd_free(v->tokenizer_dir);
    inferd_free(v->log_level);
    memset(v, 0, sizeof *v);
}

bool cli_model_vals_set(cli_model_vals *v, const cli_opt_def *d, const char *val)
{
    if (!cli_opt_set(v, d, val))
        return false;
    if (d->kind == CLI_OPT_DEVICE)
        v->device_auto = false;
    return true;
}

/* ---- `inferd generate`'s view of them -------------------------------------- */

/* Mirror the parsed values into the model/engine options. */
static void args_sync(cli_model_args *a)
{
    const cli_model_vals *v = &a->v;
    a->model_dir = v->model_dir;
    a->tokenizer_dir = v->tokenizer_dir;
    a->device_set = !v->device_auto;
    a->mo.load_format = v->load_format;
    a->mo.backend = v->backend;
    a->mo.n_threads = v->threads;
    a->mo.gpu_memory_utilization = (float)v->gpu_memory_utilization;
    a->mo.max_num_seqs = a->eo.max_num_seqs = v->max_num_seqs;
    a->mo.max_num_batched_tokens = a->eo.max_num_batched_tokens = v->max_num_batched_tokens;
    a->mo.block_size = v->block_size;
    a->mo.kv_cache_bytes = v->kv_cache_bytes;
    a->eo.enable_prefix_caching = v->enable_prefix_caching;
    a->mo.max_model_len = a->eo.max_model_len = v->max_model_len;
}

void cli_model_args_default(cli_model_args *a)
{
    memset(a, 0, sizeof *a);
    model_opts_default(&a->mo);
    engine_opts_default(&a->eo);
    cli_model_vals_default(&a->v);
    args_sync(a);
}

void cli_model_args_free(cli_model_args *a)
{
    cli_model_vals_free(&a->v);
    memset(a, 0, sizeof *a);
}

void cli_model_usage(FILE *f)
{
    fprintf(f, "model and engine:\n");
    cli_opt_usage(f, k_model_opts, INFERD_ARRAY_LEN(k_model_opts));
}

int cli_parse_model_flag(int argc, char **argv, int *i, cli_model_args *a)
{
    const cli_opt_def *d = NULL;
    const char *val = NULL;
    int r = cli_opt_arg(k_model_opts, INFERD_ARRAY_LEN(k_model_opts), argc, argv, i, &d, &val);
    if (r < 0)
        return cli_fail("%s", inferd_last_error());
    if (r == 0)
        return 0;
    if (!cli_model_vals_set(&a->v, d, val))
        return cli_fail("%s", inferd_last_error());
    if (d->kind == CLI_OPT_LOGLEVEL)
        log_set_level((log_level)log_parse_level(a->v.log_level));
    args_sync(a);
    return 1;
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
    inferd_free(tpath);
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
