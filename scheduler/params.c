/* scheduler/params.c: defaults and names for the engine's public types. */
#include <string.h>

#include "scheduler/engine.h"

const char *finish_reason_str(finish_reason r)
{
    switch (r) {
    case FINISH_STOP: return "stop";
    case FINISH_LENGTH: return "length";
    case FINISH_ABORT: return "abort";
    case FINISH_ERROR: return "error";
    case FINISH_NONE: break;
    }
    return "none";
}

void sampling_params_default(sampling_params *sp)
{
    memset(sp, 0, sizeof *sp);
    sp->temperature = 1.0f;
    sp->top_p = 1.0f;
    sp->top_k = 0;
    sp->min_p = 0.0f;
    sp->max_tokens = 16;
    sp->logprobs = -1;
}

void engine_opts_default(engine_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_num_seqs = 64;
    o->max_num_batched_tokens = 2048;
    o->enable_prefix_caching = true;
    o->max_queued_requests = 1024;
    o->max_model_len = 0;
}
