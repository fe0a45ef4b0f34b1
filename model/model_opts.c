/* model/model_opts.c: default load options. */
#include <string.h>

#include "model/model.h"

void model_opts_default(model_opts *o)
{
    memset(o, 0, sizeof *o);
    o->load_format = MODEL_LOAD_SAFETENSORS;
    o->backend = KERN_BACKEND_CPU;
    o->max_num_batched_tokens = 2048;
    o->max_num_seqs = 64;
    o->block_size = 16;
    o->gpu_memory_utilization = 0.90f;
    o->dummy_seed = 0;
}
