/* tests/scheduler/engine_test_util.c: see engine_test_util.h. */
#include "engine_test_util.h"

#include <check.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/util.h"
#include "test_util.h"

model *etu_load_stories(int max_seqs, int max_tokens, int kv_blocks)
{
    char *dir = test_fixture_path("models/stories260K");
    if (!dir || !util_file_exists(dir))
        test_skip("models/stories260K not found");
    model_opts o;
    model_opts_default(&o);
    o.model_dir = dir;
    o.backend = test_use_cuda() ? KERN_BACKEND_CUDA : KERN_BACKEND_CPU;
    o.n_threads = 1;
    o.tensor_parallel_size = test_tp_size();
    o.enforce_eager = test_enforce_eager();
    o.kv_cache_dtype = test_kv_fp8() ? MODEL_KV_CACHE_FP8_E4M3 : MODEL_KV_CACHE_AUTO;
    o.max_num_seqs = max_seqs;
    o.max_num_batched_tokens = max_tokens;
    o.kv_cache_bytes = 0;
    model *m = NULL;
    if (kv_blocks > 0) { /* learn the bytes of a block from a probe load */
        o.kv_cache_bytes = 1 << 20;
        ck_assert_msg(model_load(&o, &m) == INFERD_OK, "model_load: %s", inferd_last_error());
        o.kv_cache_bytes = (int64_t)kv_blocks * model_kv_budget_per_block(m);
        model_free(m);
        m = NULL;
    }
    ck_assert_msg(model_load(&o, &m) == INFERD_OK, "model_load: %s", inferd_last_error());
    if (kv_blocks > 0)
        ck_assert_int_eq(model_num_kv_blocks(m), kv_blocks);
    inferd_free(dir);
    return m;
}

/* The CUDA device count, asked in a child process: a process that has
 * initialized the CUDA runtime cannot hand a working device to the children
 * Check forks for each test ("initialization error" in every one). */
static int device_count_in_child(void)
{
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0)
        _exit(kern_cuda_device_count() & 0x7f);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return 0;
    return WEXITSTATUS(status);
}

void etu_require_tp_devices(void)
{
    if (!test_use_cuda())
        return;
    const int n = device_count_in_child();
    if (n < 1)
        test_skip("INFERD_TEST_DEVICE=cuda but no CUDA device");
    if (test_tp_size() <= 1)
        return;
    if (test_tp_size() <= n)
        return;
    char why[96];
    snprintf(why, sizeof why, "INFERD_TEST_TP=%d needs %d GPUs, this machine has %d", test_tp_size(), test_tp_size(),
             n);
    test_skip(why);
}

engine *etu_make_engine(model *m, const tokenizer *tok, int max_seqs, int max_tokens, bool caching)
{
    engine_opts eo;
    engine_opts_default(&eo);
    return etu_make_engine_async(m, tok, max_seqs, max_tokens, caching, eo.async_scheduling);
}

engine *etu_make_engine_async(model *m, const tokenizer *tok, int max_seqs, int max_tokens, bool caching,
                              bool async)
{
    engine_opts eo;
    engine_opts_default(&eo);
    eo.async_scheduling = async;
    eo.max_num_seqs = max_seqs;
    eo.max_num_batched_tokens = max_tokens;
    eo.enable_prefix_caching = caching;
    engine *e = NULL;
    ck_assert_msg(engine_create(&eo, m, tok, &e) == INFERD_OK, "engine_create: %s", inferd_last_error());
    ck_assert_int_eq(engine_start(e), INFERD_OK);
    return e;
}

void etu_finish_engine(engine *e, engine_stats *out)
{
    ck_assert_msg(engine_wait_idle(e, 60000), "engine not idle / blocks not all free");
    ck_assert_msg(engine_check_invariants(e), "%s", inferd_last_error());
    engine_stats st;
    engine_get_stats(e, &st);
    ck_assert_int_eq(st.kv_blocks_used, 0);
    ck_assert_int_eq(st.running + st.waiting, 0);
    if (out)
        *out = st;
    engine_free(e);
}
