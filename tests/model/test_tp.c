/* tests/model/test_tp.c: tensor parallelism (model/model_tp.c, the split
 * forward pass of forward.c) against the unsplit model, on the CPU backend
 * (ranks are threads meeting in shared memory) or, with
 * INFERD_TEST_DEVICE=cuda, on GPUs through NCCL (cases needing more GPUs
 * than the machine has skip, saying so).
 *
 * Every case runs one sequence through model_step, the engine's entry (the
 * decode CUDA graphs on the GPU): a prompt prefill, then greedy decode
 * steps, keeping each step's logits and token.
 *  - tp 1 through the collective path (force_comm: the sharded embedding,
 *    every all-reduce and the logits all-gather, each a copy or nothing)
 *    equals the plain model bitwise, logits and tokens: stories260K, and
 *    the Llama-3-shaped dummy, whose decode steps take the fused layers on
 *    the GPU (fused_resid's collective variant).
 *  - tp 2 and 4 on stories260K (tied embeddings split by vocabulary, GQA
 *    4 kv heads), fed tp 1's greedy tokens (so both see one context): logits
 *    within the backend's tolerance at every step (fp32 summation order on
 *    the CPU, bf16 on the GPU), and greedy picks equal but where tp 1's
 *    margin between the two picks is within twice that tolerance (a
 *    near-tie: a random model has them), each printed; and tp 2 with
 *    --kv-cache-dtype fp8 against tp 1 with it (every rank's cache fp8).
 *  - dummy weights, filled shard by shard with the unsplit model's values
 *    (kern_weight_fill_random_part): Llama-3-shaped at tp 2 and 8 (kv heads
 *    replicated), Qwen2 (q/k/v biases, tied) at tp 2, Qwen3 (q/k norms) at
 *    tp 2 and 8: the same comparison.
 *  - two processes (the multi-host code path, CPU: node 1 a child process
 *    following node 0's steps over the loopback control channel) equal one
 *    process at tp 2, bitwise.
 *  - refusals: a size the heads do not divide, named in the error; the
 *    multi-node options (tp not a multiple of --nnodes, several CPU ranks a
 *    node, a node rank out of range).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/util.h"
#include "kvcache/kv_layout.h"
#include "model/model.h"
#include "test_util.h"

#define MAX_STEPS 33
#define PROMPT_LEN 12
#define BLOCK 16

/* What one run produced: the token and the logits of every step. */
typedef struct {
    int steps, vocab;
    int32_t tok[MAX_STEPS];
    float *logits; /* [steps, vocab] */
} run_out;

static const char *g_preset_dir;

static void opts_for(model_opts *o, const char *dir, bool dummy, int tp, bool force_comm)
{
    model_opts_default(o);
    o->model_dir = dir;
    o->load_format = dummy ? MODEL_LOAD_DUMMY : MODEL_LOAD_SAFETENSORS;
    o->backend = test_use_cuda() ? KERN_BACKEND_CUDA : KERN_BACKEND_CPU;
    o->n_threads = 1;
    o->max_num_batched_tokens = 64;
    o->max_num_seqs = 4;
    o->max_model_len = 256;
    o->kv_cache_bytes = 0;
    o->gpu_memory_utilization = 0.3f;
    o->tensor_parallel_size = tp;
    o->force_comm = force_comm;
}

/* One step of sequence 0 over toks[0, n) at start; logits of the last row. */
static void step(model *m, const int32_t *table, const int32_t *toks, int start, int n, int32_t *out_tok)
{
    int32_t pos[PROMPT_LEN], qsl[2] = {0, n}, len = start + n, idx = n - 1;
    int64_t slots[PROMPT_LEN];
    for (int i = 0; i < n; i++) {
        pos[i] = start + i;
        slots[i] = kv_slot(table, start + i, model_block_size(m));
    }
    model_batch b = {.n_tokens = n, .tokens = toks, .positions = pos, .slot_mapping = slots, .n_seqs = 1,
                     .query_start_loc = qsl, .seq_lens = &len, .block_tables = table,
                     .max_blocks_per_seq = model_max_blocks_per_seq(m), .n_logits = 1, .logits_indices = &idx};
    kern_sample_params sp = {.temperature = 0, .top_p = 1.0f};
    ck_assert_msg(model_step(m, &b, &sp, out_tok) == INFERD_OK, "step: %s", inferd_last_error());
}

/* Load, prefill a fixed prompt, decode greedily; NULL-free *out. force
 * (NULL: none): the tokens to feed instead of this run's own picks (another
 * run's greedy tokens), so two runs see the same context at every step;
 * out->tok keeps this run's picks. */
static bool run_forced(const model_opts *o, int steps, const int32_t *force, run_out *out)
{
    model *m = NULL;
    if (model_load(o, &m) != INFERD_OK) {
        printf("load (tp %d): %s\n", o->tensor_parallel_size, inferd_last_error());
        return false;
    }
    const int vocab = model_get_config(m)->vocab_size, width = model_max_blocks_per_seq(m);
    int32_t *table = inferd_calloc((size_t)width, sizeof(int32_t));
    for (int i = 0; i < width; i++)
        table[i] = 1 + i % (model_num_kv_blocks(m) - 1);
    int32_t prompt[PROMPT_LEN];
    for (int i = 0; i < PROMPT_LEN; i++)
        prompt[i] = (int32_t)((i * 37 + 11) % vocab);
    out->steps = steps;
    out->vocab = vocab;
    out->logits = inferd_malloc((size_t)steps * (size_t)vocab * sizeof(float));
    int pos = 0;
    for (int s = 0; s < steps; s++) {
        const int32_t *toks = s == 0 ? prompt : force ? &force[s - 1] : &out->tok[s - 1];
        int n = s == 0 ? PROMPT_LEN : 1;
        step(m, table, toks, pos, n, &out->tok[s]);
        model_logits_to_host(m, out->logits + (size_t)s * vocab);
        pos += n;
    }
    inferd_free(table);
    model_free(m);
    return true;
}

static bool run(const model_opts *o, int steps, run_out *out)
{
    return run_forced(o, steps, NULL, out);
}

/* Greedy tokens and logits bitwise equal. */
static void compare_bitwise(const char *what, const run_out *a, const run_out *b)
{
    double max_diff = 0;
    size_t n = (size_t)a->steps * (size_t)a->vocab, differ = 0;
    for (size_t i = 0; i < n; i++) {
        max_diff = fmax(max_diff, fabs((double)a->logits[i] - (double)b->logits[i]));
        differ += memcmp(&a->logits[i], &b->logits[i], sizeof(float)) != 0;
    }
    printf("%-44s %d steps: logits max |diff| %.3g, %zu of %zu values differ\n", what, a->steps, max_diff, differ, n);
    fflush(stdout);
    for (int s = 0; s < a->steps; s++)
        ck_assert_msg(a->tok[s] == b->tok[s], "%s: step %d token %d vs %d", what, s, a->tok[s], b->tok[s]);
    ck_assert_msg(differ == 0, "%s: %zu logits differ (max %.3g), expected bitwise", what, differ, max_diff);
}

/* b ran on a's tokens (run_forced): logits within tol (abs) at every step.
 * Greedy picks may then differ only where a's margin between its pick and
 * b's is at most 2 tol (a near-tie both runs see within tolerance); a
 * larger margin is a failure. Prints how many picks agree and the
 * near-ties. */
static void compare_forced(const char *what, const run_out *a, const run_out *b, double tol)
{
    double max_diff = 0;
    const size_t n = (size_t)a->steps * (size_t)a->vocab;
    for (size_t i = 0; i < n; i++)
        max_diff = fmax(max_diff, fabs((double)a->logits[i] - (double)b->logits[i]));
    int same = 0;
    for (int s = 0; s < a->steps; s++) {
        const float *la = a->logits + (size_t)s * (size_t)a->vocab;
        if (a->tok[s] == b->tok[s]) {
            same++;
            continue;
        }
        const double margin = (double)la[a->tok[s]] - (double)la[b->tok[s]];
        printf("  %s: step %d picks %d vs %d, a near-tie: margin %.3g <= 2 x %.3g\n", what, s, a->tok[s], b->tok[s],
               margin, tol);
        ck_assert_msg(margin <= 2 * tol, "%s: step %d token %d vs %d with a margin of %.3g > 2 x %.3g", what, s,
                      a->tok[s], b->tok[s], margin, tol);
    }
    printf("%-44s %d steps on the same tokens: logits max |diff| %.3g, greedy picks equal at %d\n", what, a->steps,
           max_diff, same);
    fflush(stdout);
    ck_assert_msg(max_diff <= tol, "%s: logits max |diff| %.3g > %.3g", what, max_diff, tol);
}

static void free_run(run_out *r)
{
    inferd_free(r->logits);
    r->logits = NULL;
}

/* Logit tolerance of tp > 1 against tp 1: fp32 summation order (CPU), or
 * bf16 partial sums rounded before the all-reduce (GPU). */
/* CPU: fp32 summation order only. CUDA: the project's stated bf16
 * tolerance on logits (test_stories_gpu's LOGIT_ATOL: bf16 activations
 * round differently in the sliced products). */
static double tp_tol(void)
{
    return test_use_cuda() ? 0.25 : 2e-4;
}

static int n_devices(void)
{
    return test_use_cuda() ? kern_cuda_device_count() : 1 << 20;
}

static char *stories_dir(void)
{
    char *dir = test_fixture_path("models/stories260K");
    if (!dir || !util_file_exists(dir))
        test_skip("models/stories260K not found");
    return dir;
}

/* Dummy presets decode fewer steps on the CPU (seconds each there). */
static int dummy_steps(void)
{
    return test_use_cuda() ? MAX_STEPS : 6;
}

static char *preset(const char *name)
{
    char *p = inferd_malloc(strlen(g_preset_dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", g_preset_dir, name);
    return p;
}

/* The model at dir through the collective path at tp 1 against plain. */
static void tp1_case(const char *name, const char *dir, bool dummy, int steps)
{
    model_opts o;
    run_out plain = {0}, comm = {0};
    opts_for(&o, dir, dummy, 1, false);
    ck_assert(run(&o, steps, &plain));
    opts_for(&o, dir, dummy, 1, true);
    if (!run(&o, steps, &comm)) {
        ck_assert_msg(!test_use_cuda() || !getenv("INFERD_REQUIRE_NCCL"), "no communicator: %s", inferd_last_error());
        printf("%s tp 1 via collectives: skipped, no communicator (NCCL not loadable)\n", name);
        free_run(&plain);
        return;
    }
    char what[128];
    snprintf(what, sizeof what, "%s tp 1 via collectives vs plain", name);
    compare_bitwise(what, &plain, &comm);
    free_run(&plain);
    free_run(&comm);
}

/* stories260K (unfused layers: its weights are below the GEMV threshold)
 * and the Llama-3-shaped dummy (the fused decode layers on the GPU). */
START_TEST(test_tp1_comm_bitwise)
{
    char *dir = stories_dir();
    tp1_case("stories260K", dir, false, MAX_STEPS);
    inferd_free(dir);
    dir = preset("test-llama3-small");
    tp1_case("test-llama3-small", dir, true, dummy_steps());
    inferd_free(dir);
}
END_TEST

/* tp ranks of the model at dir against tp 1, both with KV cache dtype kv,
 * logits within tol. */
static void tp_case_kv(const char *name, const char *dir, bool dummy, int tp, int steps,
                       model_kv_cache_dtype kv, double tol)
{
    if (tp > n_devices()) {
        printf("%s tp %d: skipped, %d device(s)\n", name, tp, n_devices());
        return;
    }
    model_opts o;
    run_out one = {0}, split = {0};
    opts_for(&o, dir, dummy, 1, false);
    o.kv_cache_dtype = kv;
    ck_assert(run(&o, steps, &one));
    opts_for(&o, dir, dummy, tp, false);
    o.kv_cache_dtype = kv;
    ck_assert_msg(run_forced(&o, steps, one.tok, &split), "tp %d load failed", tp);
    char what[128];
    snprintf(what, sizeof what, "%s tp %d vs tp 1%s", name, tp, kv == MODEL_KV_CACHE_AUTO ? "" : " (kv fp8)");
    compare_forced(what, &one, &split, tol);
    free_run(&one);
    free_run(&split);
}

static void tp_case(const char *name, const char *dir, bool dummy, int tp, int steps)
{
    tp_case_kv(name, dir, dummy, tp, steps, MODEL_KV_CACHE_AUTO, tp_tol());
}

START_TEST(test_tp_stories)
{
    char *dir = stories_dir();
    tp_case("stories260K", dir, false, 2, MAX_STEPS);
    tp_case("stories260K", dir, false, 4, MAX_STEPS);
    /* every rank with the fp8 cache (a rank on fp32 would be ~1 off: test_stories_golden's fp8 vs auto).
     * CPU measured 6.2e-6: no K/V element crossed an e4m3 rounding boundary between the splits; the GPU
     * bound allows a few such one-step flips on top of bf16's. */
    tp_case_kv("stories260K", dir, false, 2, MAX_STEPS, MODEL_KV_CACHE_FP8_E4M3,
               test_use_cuda() ? 0.5 : tp_tol());
    inferd_free(dir);
}
END_TEST

START_TEST(test_tp_dummy_presets)
{
    static const struct {
        const char *name;
        int tp;
    } cases[] = {
        {"test-llama3-small", 2}, {"test-llama3-small", 8}, /* 4 kv heads: replicated at 8 */
        {"test-qwen2-small", 2},                            /* q/k/v biases, tied embeddings */
        {"test-qwen3-small", 2},  {"test-qwen3-small", 8},  /* per-head q/k norms */
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(cases); i++) {
        char *dir = preset(cases[i].name);
        tp_case(cases[i].name, dir, true, cases[i].tp, dummy_steps());
        inferd_free(dir);
    }
}
END_TEST

/* Node node_rank of 2 over loopback. */
static void dist_opts(model_opts *o, int node_rank, int port)
{
    o->dist.nnodes = 2;
    o->dist.node_rank = node_rank;
    o->dist.master_addr = "127.0.0.1";
    o->dist.master_port = port;
    o->dist.timeout_s = 60;
}

/* The two-process cases fork node 1: the CPU backend only (a forked child
 * cannot use CUDA initialized in its parent); on GPUs device-tp.sh runs
 * two `inferd generate` processes instead. */
static bool two_processes_here(void)
{
    if (test_use_cuda())
        printf("two processes: on the GPU in scripts/device-tp.sh (CUDA cannot be forked here)\n");
    return !test_use_cuda();
}

/* Node 1 of a two-process group at tp 2 (CPU) in a forked child; never
 * returns. max_seqs > 0 overrides opts_for's --max-num-seqs. It loads,
 * follows node 0 until node 0 closes the group, writes its error (if
 * any) to err_fd, and exits 0 when loaded and followed, 2 when the load
 * was refused as an invalid argument, else 1. */
static void node1_child(const char *dir, int port, int max_seqs, int err_fd)
{
    model_opts o;
    opts_for(&o, dir, false, 2, false);
    dist_opts(&o, 1, port);
    if (max_seqs > 0)
        o.max_num_seqs = max_seqs;
    model *m = NULL;
    inferd_status st = model_load(&o, &m);
    if (st == INFERD_OK)
        st = model_tp_follow(m);
    if (st != INFERD_OK) {
        const char *e = inferd_last_error();
        ssize_t w = write(err_fd, e, strlen(e));
        (void)w;
    }
    model_free(m);
    _exit(st == INFERD_OK ? 0 : st == INFERD_ERR_INVALID_ARG ? 2 : 1);
}

/* The multi-host code path on one machine (CPU backend: one rank a
 * process, collectives through the control channel): node 1 is a child
 * process following node 0's steps; node 0's logits and tokens equal the
 * one-process tp 2 run's bitwise (the same rank-ordered fp32 sums). */
START_TEST(test_tp_two_processes)
{
    if (!two_processes_here())
        return;
    char *dir = stories_dir();
    model_opts o;
    run_out one = {0}, two = {0};
    opts_for(&o, dir, false, 2, false);
    ck_assert(run(&o, MAX_STEPS, &one));
    const int port = test_free_port();
    pid_t child = fork();
    ck_assert(child >= 0);
    if (child == 0)
        node1_child(dir, port, 0, STDERR_FILENO);
    opts_for(&o, dir, false, 2, false);
    dist_opts(&o, 0, port);
    bool ok = run(&o, MAX_STEPS, &two); /* model_free closes the group: the child returns */
    int status = 0;
    ck_assert(waitpid(child, &status, 0) == child);
    ck_assert_msg(ok, "node 0 failed");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "node 1 exited with status %d", status);
    compare_bitwise("stories260K tp 2 as two processes vs one", &one, &two);
    free_run(&one);
    free_run(&two);
    inferd_free(dir);
}
END_TEST

/* Nodes given different step shapes would meet in collectives of other
 * sizes: node 1 with another --max-num-seqs refuses to load, naming the
 * option and both values, and node 0 then fails instead of waiting on it. */
START_TEST(test_tp_two_processes_disagree)
{
    if (!two_processes_here())
        return;
    char *dir = stories_dir();
    model_opts o;
    const int port = test_free_port();
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t child = fork();
    ck_assert(child >= 0);
    if (child == 0) {
        close(fds[0]);
        node1_child(dir, port, 3, fds[1]);
    }
    close(fds[1]);
    opts_for(&o, dir, false, 2, false);
    dist_opts(&o, 0, port);
    o.dist.timeout_s = 20;
    model *m = NULL;
    inferd_status st = model_load(&o, &m);
    char err[512] = {0};
    ssize_t r = read(fds[0], err, sizeof err - 1);
    close(fds[0]);
    int status = 0;
    ck_assert(waitpid(child, &status, 0) == child);
    ck_assert_msg(r > 0 && strstr(err, "--max-num-seqs is 3 on node 1 and 4 on node 0"), "node 1 said: %s", err);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 2, "node 1 exited with status %d", status);
    ck_assert_msg(st != INFERD_OK && m == NULL, "node 0 loaded without node 1");
    model_free(m);
    inferd_free(dir);
}
END_TEST

/* Option and split refusals of the multi-node path, before any network. */
START_TEST(test_tp_dist_refusals)
{
    char *dir = stories_dir();
    static const struct {
        int tp, nnodes, node_rank;
        const char *needle;
    } cases[] = {
        {2, 4, 0, "multiple of --nnodes"},
        {3, 2, 0, "multiple of --nnodes"},
        {4, 2, 0, "one rank a node"}, /* cpu: 2 ranks a node */
        {2, 2, 2, "--node-rank"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(cases); i++) {
        if (test_use_cuda() && strstr(cases[i].needle, "one rank"))
            continue;
        model_opts o;
        opts_for(&o, dir, false, cases[i].tp, false);
        dist_opts(&o, cases[i].node_rank, 1);
        o.dist.nnodes = cases[i].nnodes;
        model *m = NULL;
        inferd_status st = model_load(&o, &m);
        ck_assert_msg(st == INFERD_ERR_INVALID_ARG && m == NULL, "case %zu: status %d (%s)", i, st,
                      inferd_last_error());
        ck_assert_msg(strstr(inferd_last_error(), cases[i].needle), "case %zu: %s", i, inferd_last_error());
    }
    inferd_free(dir);
}
END_TEST

START_TEST(test_tp_refusals)
{
    char *dir = stories_dir();
    static const struct {
        int tp;
        const char *needle;
    } cases[] = {
        {3, "attention heads"}, /* 8 heads */
        {16, "attention heads"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(cases); i++) {
        model_opts o;
        opts_for(&o, dir, false, cases[i].tp, false);
        model *m = NULL;
        inferd_status st = model_load(&o, &m);
        ck_assert_msg(st == INFERD_ERR_INVALID_ARG && m == NULL, "tp %d: status %d", cases[i].tp, st);
        ck_assert_msg(strstr(inferd_last_error(), "--tensor-parallel-size") &&
                          strstr(inferd_last_error(), cases[i].needle),
                      "tp %d: %s", cases[i].tp, inferd_last_error());
    }
    inferd_free(dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("tp");
    TCase *tc = tcase_create("tp");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_tp1_comm_bitwise);
    tcase_add_test(tc, test_tp_stories);
    tcase_add_test(tc, test_tp_dummy_presets);
    tcase_add_test(tc, test_tp_refusals);
    tcase_add_test(tc, test_tp_two_processes);
    tcase_add_test(tc, test_tp_two_processes_disagree);
    tcase_add_test(tc, test_tp_dist_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    g_preset_dir = INFERD_TEST_SOURCE_DIR "/configs/models";
    return test_run_suite(suite());
}
