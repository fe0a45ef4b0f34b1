/* scheduler/engine_fork.c: several sequences of one prompt (engine_submit_n:
 * OpenAI n and best_of) computing the prompt once.
 *
 * A group is a leader (sequence 0) and held sequences. The leader enters
 * the scheduler like any request; the held ones wait in e->live outside
 * the scheduler, each with its own stream, seed and prompt copy. When the
 * step that completes the leader's prompt has run (its KV is in the
 * cache), eng_step calls eng_fork_held, and each held sequence becomes a
 * scheduler request sharing the leader's full prompt blocks (sched_fork):
 * it computes only the prompt's last partial block and samples its own
 * first token one step after the leader.
 *
 * Why a fork and not the prefix cache: the cache only serves blocks
 * committed before a request is admitted, so n copies admitted together
 * would each compute the prompt; it is also optional (--no-prefix-caching).
 * The fork shares by block references, which the pool and sched_check
 * already account for, so preemption, aborts and the cache need no new
 * rule: a preempted child drops its references and is recomputed like any
 * request. Why the partial block is recomputed rather than copied: a copy
 * needs a device block-copy op over every layer; recomputing < block_size
 * tokens per child costs less than one decode step of the batch.
 *
 * A group member may leave early (abort, timeout, error, shutdown);
 * eng_group_detach keeps the rest consistent: a leader leaving before the
 * fork lets its held sequences run on their own (the prompt is then
 * computed by each, correct if not shared), and a held sequence leaving
 * just drops out of its leader's list.
 */
#include "common/alloc.h"
#include "common/check.h"
#include "common/util.h"
#include "scheduler/engine_internal.h"

void eng_fork_held(engine *e, eng_req *r)
{
    INFERD_CHECK(r->sr && r->sr->n_computed >= r->sr->n_prompt);
    double now = util_now_s();
    for (int i = 0; i < r->n_held; i++) {
        eng_req *c = r->held[i];
        c->leader = NULL;
        if (!c->in_live)
            continue; /* not taken yet: admit() adds it on its own */
        inferd_status st = sched_fork(e->s, r->sr, c->stream->id, c->sp.max_tokens, c, &c->sr);
        /* the leader passed the same checks with the same prompt and limits */
        INFERD_CHECK_MSG(st == INFERD_OK, "fork of an accepted sequence refused");
        inferd_free(c->prompt);
        c->prompt = NULL;
        c->forked = true;
        c->times.first_scheduled = now;
    }
    inferd_free(r->held);
    r->held = NULL;
    r->n_held = 0;
}

/* NOTE: a held sequence is put into the scheduler here, not finished on
 * refusal: this runs inside retire(), possibly from a walk over e->live,
 * where finishing another request would free a node the walk holds. The
 * refusal cannot happen (the leader passed sched_add with the same
 * prompt and limits), hence a check. */
void eng_group_detach(engine *e, eng_req *r)
{
    if (r->leader) {
        eng_req *l = r->leader;
        for (int i = 0; i < l->n_held; i++) {
            if (l->held[i] == r) {
                l->held[i] = l->held[--l->n_held];
                break;
            }
        }
        r->leader = NULL;
    }
    for (int i = 0; i < r->n_held; i++) {
        eng_req *c = r->held[i];
        c->leader = NULL;
        if (!c->in_live)
            continue;
        inferd_status st = sched_add(e->s, c->stream->id, c->prompt, c->n_prompt, c->sp.max_tokens, c, &c->sr);
        INFERD_CHECK_MSG(st == INFERD_OK, "scheduler refused an accepted sequence");
        inferd_free(c->prompt);
        c->prompt = NULL;
    }
    inferd_free(r->held);
    r->held = NULL;
    r->n_held = 0;
}
