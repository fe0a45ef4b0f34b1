/* model/model_step.c: one engine step, launched and waited for in two
 * halves (model.h: model_step_launch / model_step_wait), so that with
 * async scheduling the next step is on the device before this one's
 * outputs reach the host.
 *
 * A launched step enqueues its inputs, the graph replay (graphs.c) or the
 * eager forward pass and sampler (forward.c), then an asynchronous copy of
 * its sampled tokens into one of two page-locked buffers and an event
 * after it; model_step_wait waits on the oldest step's event and hands its
 * tokens out. Two buffers because at most two steps are in flight: the
 * one running and the one launched behind it, whose input tokens may be
 * the running one's samples (prev_rows: kern_tokens_from on the device).
 * The trade-off: the launch returns before the sampled tokens exist, so a
 * step that needs them on the host (logprobs, penalty counts) is the
 * caller's to run one at a time; the model only checks that a chained step
 * has exactly one step before it.
 */
#include <string.h>

#include "common/check.h"
#include "model/model_internal.h"

void model_step_launched(const model_batch *b)
{
    if (b->launched_fn)
        b->launched_fn(b->launched_user);
}

bool model_step_chainable(const model *m)
{
    return !m->tp && !m->follower && !model_has_comm_planned(m) && !(m->prof.what & MODEL_PROF_OPS);
}

static inferd_status inflight_init(model *m)
{
    model_inflight *f = &m->fl;
    if (f->fence)
        return INFERD_OK;
    for (int k = 0; k < 2; k++)
        f->tok[k] = kern_host_alloc(m->kc, (size_t)m->R * sizeof(int32_t));
    f->fence = kern_timer_create(m->kc, 2);
    if (!f->tok[0] || !f->tok[1] || !f->fence) {
        model_inflight_free(m);
        return inferd_set_error(INFERD_ERR_NOMEM, "model: cannot allocate the step token buffers");
    }
    return INFERD_OK;
}

void model_inflight_free(model *m)
{
    model_inflight *f = &m->fl;
    if (f->count > 0)
        kern_sync(m->kc);
    for (int k = 0; k < 2; k++)
        kern_host_free(m->kc, f->tok[k]);
    if (f->fence)
        kern_timer_free(m->kc, f->fence);
    memset(f, 0, sizeof *f);
}

/* prev_rows: NULL, or one entry a token row, each -1 or a sampled row of
 * the step launched last (still in flight). */
static inferd_status check_prev_rows(const model *m, const model_batch *b, const int32_t *prev_rows)
{
    const model_inflight *f = &m->fl;
    if (!model_step_chainable(m) || f->count != 1)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "a chained step needs exactly one step in flight and "
                                "no tensor parallelism or op profile (%d in flight)",
                                f->count);
    const int prev_n = f->n[f->head];
    for (int i = 0; i < b->n_tokens; i++)
        if (prev_rows[i] < -1 || prev_rows[i] >= prev_n)
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "chained row %d names row %d of a step of %d", i,
                                    prev_rows[i], prev_n);
    return INFERD_OK;
}

inferd_status model_step_launch(model *m, const model_batch *b, const kern_sample_params *params,
                                const int32_t *prev_rows)
{
    inferd_status st = model_check_batch(m, b);
    if (st == INFERD_OK && prev_rows)
        st = check_prev_rows(m, b, prev_rows);
    if (st == INFERD_OK)
        st = inflight_init(m);
    if (st != INFERD_OK)
        return st;
    model_inflight *f = &m->fl;
    INFERD_CHECK_MSG(f->count < 2, "model: a third step launched before the first was waited for");
    /* a backend that runs its ops as they are called has nothing to overlap */
    const bool sync_ops = kern_ctx_backend(m->kc) == KERN_BACKEND_CPU;
    if (sync_ops)
        model_step_launched(b);
    model_prof_step_begin(m, b);
    model_tp_post(m, b, true);
    /* an op profile needs its events between the ops: eager steps only */
    if ((m->prof.what & MODEL_PROF_OPS) || b->n_extra > 0 || !model_graph_launch(m, b, params, prev_rows)) {
        m->gr.eager_steps++;
        model_forward_from(m, b, prev_rows);
        model_sample_ops(m, params);
        model_prof_step_end(m);
    }
    const int k = (f->head + f->count) & 1;
    f->n[k] = m->last_n_logits;
    f->prof_slot[k] = m->prof.cur;
    kern_memcpy_d2h_async(m->kc, f->tok[k], m->a.sampled, (size_t)f->n[k] * sizeof(int32_t));
    kern_timer_record(m->kc, f->fence, k);
    f->count++;
    if (!sync_ops) /* the step runs on the device while the hook does */
        model_step_launched(b);
    return INFERD_OK;
}

inferd_status model_step_wait(model *m, int32_t *tokens)
{
    model_inflight *f = &m->fl;
    INFERD_CHECK_MSG(f->count > 0, "model: no step in flight to wait for");
    const int k = f->head;
    kern_timer_wait(m->kc, f->fence, k);
    if (tokens)
        memcpy(tokens, f->tok[k], (size_t)f->n[k] * sizeof(int32_t));
    model_prof_step_done(m, f->prof_slot[k]);
    f->head ^= 1;
    f->count--;
    model_tp_wait(m);
    return INFERD_OK;
}

inferd_status model_step(model *m, const model_batch *b, const kern_sample_params *params, int32_t *tokens)
{
    INFERD_CHECK_MSG(m->fl.count == 0, "model_step with a step in flight (model_step_wait it first)");
    inferd_status st = model_step_launch(m, b, params, NULL);
    if (st != INFERD_OK)
        return st;
    return model_step_wait(m, tokens);
}

/* A rank > 0 of a group: the step rank 0 runs, without sampling, finished
 * before it returns (the batch's host arrays are the caller's). */
void model_step_follower(model *m, const model_batch *b)
{
    if (b->n_extra > 0 || !model_graph_launch(m, b, NULL, NULL)) {
        m->gr.eager_steps++;
        model_forward_checked(m, b);
    }
    kern_sync(m->kc);
}
