/* tests/model/test_stories_gpu.c: stories260K on the CUDA backend (bf16
 * weights, activations and KV cache) against the fp32 CPU reference:
 *  - teacher-forced logits of golden case 0 at every position within a
 *    stated bf16 tolerance of the CPU backend's (max |err| printed);
 *  - greedy generation of case 0 on the GPU equals the golden tokens.
 * Label gpu; skips without a CUDA device. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "common/util.h"
#include "model/model.h"
#include "test_util.h"

/* bf16 tolerance on logits of magnitude ~10-20: |gpu - cpu| <= ATOL + RTOL * |cpu| */
#define LOGIT_ATOL 0.25
#define LOGIT_RTOL 0.02

static cJSON *g_case0;
static char *g_model_dir;

static model *load(kern_backend be)
{
    model_opts o;
    model_opts_default(&o);
    o.model_dir = g_model_dir;
    o.backend = be;
    o.max_num_batched_tokens = 128;
    o.max_num_seqs = 64;
    o.kv_cache_bytes = 64 << 20;
    model *m = NULL;
    ck_assert_msg(model_load(&o, &m) == INFERD_OK, "load: %s", inferd_last_error());
    return m;
}

static int ints(const char *key, int32_t *out)
{
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(g_case0, key)) out[n++] = it->valueint;
    return n;
}

/* One sequence, tokens [start, start+n), logits for rows [from, n). */
static void fwd(model *m, const int32_t *toks, int start, int n, int from)
{
    int nb = model_max_blocks_per_seq(m);
    int32_t table[1024];
    for (int i = 0; i < nb; i++)
        table[i] = 2 * i + 3; /* sparse, non-contiguous block ids */
    ck_assert_msg(model_forward_seq(m, table, toks, start, n, from) == INFERD_OK, "forward: %s",
                  inferd_last_error());
}

START_TEST(test_logits_vs_cpu)
{
    int32_t toks[512];
    int np = ints("prompt_ids", toks);
    int ng = ints("generated_ids", toks + np);
    int n = INFERD_MIN(64, np + ng);
    model *cpu = load(KERN_BACKEND_CPU), *gpu = load(KERN_BACKEND_CUDA);
    int V = model_get_config(cpu)->vocab_size;
    float *a = inferd_malloc(sizeof(float) * (size_t)V * n), *b = inferd_malloc(sizeof(float) * (size_t)V * n);
    fwd(cpu, toks, 0, n, 0);
    fwd(gpu, toks, 0, n, 0);
    model_logits_to_host(cpu, a);
    model_logits_to_host(gpu, b);
    double max_err = 0, sum_err = 0;
    int argmax_same = 0;
    for (int t = 0; t < n; t++) {
        int ia = 0, ib = 0;
        for (int v = 0; v < V; v++) {
            double r = a[(size_t)t * V + v], g = b[(size_t)t * V + v], e = fabs(r - g);
            ck_assert_msg(e <= LOGIT_ATOL + LOGIT_RTOL * fabs(r), "pos %d id %d: gpu %f cpu %f", t, v, g, r);
            max_err = fmax(max_err, e);
            sum_err += e;
            if (a[(size_t)t * V + v] > a[(size_t)t * V + ia])
                ia = v;
            if (b[(size_t)t * V + v] > b[(size_t)t * V + ib])
                ib = v;
        }
        argmax_same += ia == ib;
    }
    printf("stories260K GPU vs CPU logits over %d positions: max |err| %.4f, mean |err| %.5f, "
           "argmax equal at %d/%d (tolerance %.2f + %.2f*|ref|)\n",
           n, max_err, sum_err / ((double)n * V), argmax_same, n, LOGIT_ATOL, LOGIT_RTOL);
    inferd_free(a);
    inferd_free(b);
    model_free(cpu);
    model_free(gpu);
}
END_TEST

START_TEST(test_greedy_case0)
{
    int32_t toks[600], want[512];
    int np = ints("prompt_ids", toks);
    int nw = ints("generated_ids", want);
    int steps = cJSON_GetObjectItem(g_case0, "steps")->valueint;
    model *m = load(KERN_BACKEND_CUDA);
    fwd(m, toks, 0, np, np - 1);
    int n = np, got = 0;
    while (n <= steps) {
        kern_sample_params sp = {.temperature = 0, .top_p = 1};
        int32_t next;
        ck_assert_int_eq(model_sample(m, &sp, &next), INFERD_OK);
        if (next == 1)
            break;
        ck_assert_msg(got < nw && next == want[got], "token %d: got %d want %d", got, next,
                      got < nw ? want[got] : -1);
        toks[n] = next;
        got++;
        fwd(m, &toks[n], n, 1, 0);
        n++;
    }
    ck_assert_int_eq(got, nw);
    printf("stories260K greedy on the GPU: %d/%d golden tokens of case 0\n", got, nw);
    model_free(m);
}
END_TEST

int main(void)
{
    /* the CUDA runtime cannot be used in a child forked after the parent
     * touched it (kern_cuda_available does): run the tests in-process */
    setenv("CK_FORK", "no", 1);
    if (!kern_cuda_available())
        test_skip("no CUDA device");
    g_model_dir = test_fixture_path("models/stories260K");
    cJSON *root = test_golden_stories();
    g_case0 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "cases"), 0);
    Suite *s = suite_create("stories260K gpu");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_logits_vs_cpu);
    tcase_add_test(tc, test_greedy_case0);
    suite_add_tcase(s, tc);
    int rc = test_run_suite(s);
    cJSON_Delete(root);
    inferd_free(g_model_dir);
    return rc;
}
