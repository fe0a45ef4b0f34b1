/* model/model_prof.h: where a step's time goes (issues 12 and 13, `inferd
 * bench latency --profile-ops`).
 *
 * Two measurements, both off unless enabled, both timed with the backend's
 * timers (CUDA events on the model's stream; kern_timer_*), over steps that
 * go through model_step:
 *  - MODEL_PROF_GAPS (decode-only steps): each step gets an event before its input upload and
 *    one after its sampler (before the sampled tokens are copied back). The
 *    GPU busy time of a step is begin -> end; the host gap between two
 *    consecutive decode steps is end(N) -> begin(N+1): the time the GPU sat
 *    idle while the host copied the tokens back, ran the scheduler, built
 *    and uploaded the next batch. Works with graphs and eagerly.
 *  - MODEL_PROF_OPS: an event before every op of the forward pass (and the
 *    sampler), summed per op kind over layers and steps, with the bytes each
 *    op must move. Events cannot sit inside a replayed graph, so while this
 *    is on model_step runs every step eagerly: the per-op times are those of
 *    the eager path (same kernels as the graph, launched one by one).
 *    Decode-only steps and steps with a prompt chunk (prefill or mixed)
 *    are summed apart, each op with its bytes and FLOPs.
 * The accumulators are read and reset by the thread that drives the model
 * while no step runs (bench: after engine_wait_idle).
 */
#ifndef INFERD_MODEL_PROF_H
#define INFERD_MODEL_PROF_H

#include <stdint.h>

#include "common/status.h"
#include "model/model.h"

typedef enum {
    MODEL_OP_EMBED = 0,
    MODEL_OP_ATTN_NORM,  /* add + RMSNorm before attention */
    MODEL_OP_QKV,        /* QKV GEMM */
    MODEL_OP_ROPE_KV,    /* RoPE + KV cache write */
    MODEL_OP_ATTENTION,
    MODEL_OP_O_PROJ,     /* O GEMM */
    MODEL_OP_MLP_NORM,   /* add + RMSNorm before the MLP */
    MODEL_OP_GATE_UP,    /* gate/up GEMM */
    MODEL_OP_SILU_MUL,
    MODEL_OP_DOWN,       /* down GEMM */
    MODEL_OP_FINAL_NORM, /* gather of the sampled rows + final add + RMSNorm */
    MODEL_OP_LM_HEAD,
    MODEL_OP_ALL_REDUCE, /* tensor parallelism: after the embedding, O and down */
    MODEL_OP_GATHER,     /* tensor parallelism: every rank's logits to one row */
    MODEL_OP_SAMPLE,
    MODEL_OP_COUNT
} model_op;

#define MODEL_PROF_OPS 1u
#define MODEL_PROF_GAPS 2u

/* Per-op sums over the steps of one kind. */
typedef struct {
    uint64_t steps;                 /* steps profiled op by op */
    double tokens;                  /* their new tokens */
    double ms[MODEL_OP_COUNT];      /* summed over layers and steps */
    double bytes[MODEL_OP_COUNT];   /* bytes each op must move, same sums */
    double flops[MODEL_OP_COUNT];   /* FLOPs of the op (GEMMs, attention, lm_head; 0 elsewhere) */
    uint64_t calls[MODEL_OP_COUNT];
} model_prof_ops;

typedef struct {
    model_prof_ops dec;               /* decode-only steps */
    model_prof_ops pf;                /* steps with a prompt chunk (prefill or mixed) */
    uint64_t busy_steps;              /* decode steps with begin/end events */
    double busy_ms;                   /* sum of begin -> end */
    uint64_t gaps;                    /* consecutive decode-step pairs */
    double gap_ms, gap_max_ms;        /* sum and max of end(N) -> begin(N+1) */
} model_prof_stats;

/* Contract: measure `what` (MODEL_PROF_* bits; 0 turns profiling off and
 * frees its timers) from the next model_step on; resets the accumulators.
 * INFERD_ERR_NOMEM when the timers cannot be made (nothing changes). Call
 * while no step runs. model_free releases the timers. */
inferd_status model_prof_enable(model *m, unsigned what);
void model_prof_reset(model *m);
void model_prof_get(const model *m, model_prof_stats *out);
const char *model_op_name(model_op op);

#endif
