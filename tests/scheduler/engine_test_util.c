/* tests/scheduler/engine_test_util.c: see engine_test_util.h. */
#include "engine_test_util.h"

#include <check.h>

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
    o.max_num_seqs = max_seqs;
    o.max_num_batched_tokens = max_tokens;
    o.kv_cache_bytes = 0;
    model *m = NULL;
    if (kv_blocks > 0) { /* learn the bytes of a block from a probe load */
        o.kv_cache_bytes = 1 << 20;
        ck_assert_msg(model_load(&o, &m) == INFERD_OK, "model_load: %s", inferd_last_error());
        o.kv_cache_bytes = (int64_t)kv_blocks * model_kv_bytes_per_block(m);
        model_free(m);
        m = NULL;
    }
    ck_assert_msg(model_load(&o, &m) == INFERD_OK, "model_load: %s", inferd_last_error());
    if (kv_blocks > 0)
        ck_assert_int_eq(model_num_kv_blocks(m), kv_blocks);
    inferd_free(dir);
    return m;
}
