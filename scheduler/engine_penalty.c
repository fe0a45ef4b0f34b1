/* scheduler/engine_penalty.c: the device-side state behind presence,
 * frequency and repetition penalties and logit_bias.
 *
 * Each running request that uses any of them owns a slot: a row of token
 * counts ([vocab] int32: generated occurrences << 1 | in-prompt bit) and a
 * row of logit_bias entries, both in device memory. The slot is filled on
 * the device (kern_penalty_init) at the request's first sampling row after
 * admission, from the token ids the scheduler already holds (prompt +
 * anything generated before a preemption); from then on every sampling row
 * names the one token generated since the previous row (count_token) and
 * kern_penalty_apply adds it before penalizing. So no step copies counts
 * to or from the host, and the decode CUDA graphs stay valid: the slot's
 * pointers ride in the per-step sampling parameters.
 *
 * Slots follow the running set, not the request's life: a preempted
 * request gives its slot back and rebuilds it when it samples again (its
 * tokens are all in sched_req.tokens), so max_num_seqs slots always
 * suffice. The memory (max_num_seqs * vocab * 4 bytes of counts, e.g. 128
 * MiB for 256 sequences of a 128k vocabulary) is allocated by the first
 * request that needs it, so deployments that never send penalties pay
 * nothing. The cost of a slot build is one upload of the request's tokens
 * and two small ops, once per admission.
 */
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "scheduler/engine_internal.h"

bool eng_penalized(const eng_req *r)
{
    const sampling_params *sp = &r->sp;
    return sp->presence_penalty != 0.0f || sp->frequency_penalty != 0.0f || sp->repetition_penalty != 1.0f ||
           sp->n_logit_bias > 0;
}

inferd_status eng_penalty_reserve(engine *e)
{
    eng_penalty *pn = &e->pen;
    if (pn->n_slots > 0)
        return INFERD_OK;
    kern_ctx *kc = model_kern(e->m);
    const int n = e->opts.max_num_seqs;
    const size_t counts_b = (size_t)n * (size_t)e->vocab * sizeof(int32_t);
    const size_t bias_b = (size_t)n * SAMPLING_MAX_LOGIT_BIAS * sizeof(kern_logit_bias);
    const size_t stage_b = (size_t)e->opts.max_model_len * sizeof(int32_t);
    pn->counts = kern_alloc(kc, counts_b);
    pn->bias = kern_alloc(kc, bias_b);
    pn->staging = kern_alloc(kc, stage_b);
    if (!pn->counts || !pn->bias || !pn->staging) {
        kern_free(kc, pn->counts);
        kern_free(kc, pn->bias);
        kern_free(kc, pn->staging);
        memset(pn, 0, sizeof *pn);
        return inferd_set_error(INFERD_ERR_NOMEM,
                                "penalties: cannot allocate %.1f MiB of device memory for the token counts of %d "
                                "sequences (vocabulary %d)",
                                (double)(counts_b + bias_b + stage_b) / 1048576.0, n, e->vocab);
    }
    pn->free_slots = inferd_malloc((size_t)n * sizeof *pn->free_slots);
    for (int i = 0; i < n; i++)
        pn->free_slots[i] = n - 1 - i; /* slot 0 on top */
    pn->n_free = n;
    pn->h_bias = inferd_malloc(SAMPLING_MAX_LOGIT_BIAS * sizeof *pn->h_bias);
    pn->n_slots = n;
    return INFERD_OK;
}

/* Take a slot and build it from r's tokens (prompt + generated so far). */
static void slot_build(engine *e, eng_req *r)
{
    eng_penalty *pn = &e->pen;
    kern_ctx *kc = model_kern(e->m);
    /* running requests <= max_num_seqs = n_slots, and a request that stops
     * running (finish, preemption) returns its slot before the next fill */
    INFERD_CHECK_MSG(pn->n_slots > 0 && pn->n_free > 0, "penalties: no free slot for a running request");
    r->pen_slot = pn->free_slots[--pn->n_free];
    const sched_req *sr = r->sr;
    /* NOTE: a pageable source: kern_memcpy_h2d returns once it is staged,
     * and the staging buffer is reused only in stream order */
    kern_memcpy_h2d(kc, pn->staging, sr->tokens, (size_t)sr->n_total * sizeof(int32_t));
    kern_penalty_init(kc, pn->counts + (size_t)r->pen_slot * (size_t)e->vocab, pn->staging, sr->n_total,
                      sr->n_prompt, e->vocab);
    for (int k = 0; k < r->sp.n_logit_bias; k++) {
        pn->h_bias[k].token = r->sp.logit_bias[k].token;
        pn->h_bias[k].bias = r->sp.logit_bias[k].bias;
    }
    kern_memcpy_h2d(kc, pn->bias + (size_t)r->pen_slot * SAMPLING_MAX_LOGIT_BIAS, pn->h_bias,
                    (size_t)r->sp.n_logit_bias * sizeof *pn->h_bias);
    r->pen_counted = sr->n_total;
}

void eng_penalty_fill(engine *e, eng_req *r, kern_sample_params *p)
{
    eng_penalty *pn = &e->pen;
    const sched_req *sr = r->sr;
    p->count_token = -1;
    if (r->pen_slot < 0) {
        slot_build(e, r);
    } else {
        /* one row per step: exactly the token sampled by the previous row */
        const int pending = sr->n_total - r->pen_counted;
        INFERD_CHECK_MSG(pending == 0 || pending == 1, "penalties: counts behind by more than one token");
        if (pending == 1)
            p->count_token = sr->tokens[sr->n_total - 1];
        r->pen_counted = sr->n_total;
    }
    p->counts = pn->counts + (size_t)r->pen_slot * (size_t)e->vocab;
    p->bias = pn->bias + (size_t)r->pen_slot * SAMPLING_MAX_LOGIT_BIAS;
    p->n_bias = r->sp.n_logit_bias;
    p->presence = r->sp.presence_penalty;
    p->frequency = r->sp.frequency_penalty;
    p->repetition = r->sp.repetition_penalty;
}

void eng_penalty_release(engine *e, eng_req *r)
{
    if (r->pen_slot < 0)
        return;
    e->pen.free_slots[e->pen.n_free++] = r->pen_slot;
    r->pen_slot = -1;
}

void eng_penalty_drop_preempted(engine *e)
{
    inferd_list_node *it;
    INFERD_LIST_FOR_EACH(&e->live, it) {
        eng_req *r = ENG_REQ_OF(it);
        if (r->pen_slot >= 0 && r->sr && r->sr->state != REQ_STATE_RUNNING)
            eng_penalty_release(e, r);
    }
}

void eng_penalty_free(engine *e)
{
    eng_penalty *pn = &e->pen;
    if (pn->n_slots > 0) {
        kern_ctx *kc = model_kern(e->m);
        kern_free(kc, pn->counts);
        kern_free(kc, pn->bias);
        kern_free(kc, pn->staging);
    }
    inferd_free(pn->free_slots);
    inferd_free(pn->h_bias);
    memset(pn, 0, sizeof *pn);
}
