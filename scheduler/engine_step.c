/* scheduler/engine_step.c: one engine step: ask the scheduler who runs,
 * flatten the chosen chunks into a model_batch (tokens, positions, slot
 * mapping, query_start_loc, seq_lens, block tables, logits indices for the
 * rows that sample), run the forward pass, sample, and hand every sampled
 * token to engine_output.c.
 *
 * Reproducible sampling: row i samples with counter = the index of the
 * token being generated within its request, and the request's seed, so the
 * draw does not depend on batch composition, chunking or preemption.
 * Forward and sampling are one model_step, which replays a decode CUDA
 * graph when the step is decode-only (model/graphs.c), so the sampling
 * parameters are filled before the forward pass. Logprobs are computed on
 * the host from the logits the sampler saw before temperature: the model's,
 * after a row's penalties and logit_bias (kern_penalty_apply works in
 * place; sampling itself leaves the logits unchanged), only in steps where
 * some row wants them. So a token forced by logit_bias +100 shows a
 * logprob near 0, as the distribution it was drawn from says.
 * Penalty state lives on the device (engine_penalty.c); a row only names
 * its slot and the one token generated since its previous row.
 *
 * Prompt logprobs (sp.prompt_logprobs): the prefill chunk's rows whose next
 * token is still a prompt token go to the model as extra rows
 * (model_batch.extra_rows); their raw logits (no penalty or bias: they
 * were never sampled from) become engine_logprob entries on the host, one
 * sub-batch at a time, published before the step's sampled tokens.
 */
#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/log.h"
#include "common/util.h"
#include "kvcache/kv_layout.h"
#include "scheduler/engine_internal.h"

static void extra_logits(void *user, int first, int n, const float *logits);

/* The prompt-logprob rows of item i (tokens [start, start + n_new) at
 * batch rows from `off`): a row at position pos predicts prompt token
 * pos + 1; tokens [1, plp_done] were published before a preemption. */
static int add_prompt_rows(engine *e, const sched_item *it, int i, int off, int n_extra)
{
    const eng_req *r = it->req->user;
    if (r->sp.prompt_logprobs < 0)
        return n_extra;
    if (!e->b_extra_rows) {
        size_t T = (size_t)e->opts.max_num_batched_tokens;
        e->b_extra_rows = inferd_malloc(T * sizeof *e->b_extra_rows);
        e->b_extra_item = inferd_malloc(T * sizeof *e->b_extra_item);
        e->b_extra_lp = inferd_malloc(T * sizeof *e->b_extra_lp);
    }
    for (int j = 0; j < it->n_new; j++) {
        int target = it->start + j + 1;
        if (target < it->req->n_prompt && target > r->plp_done) {
            e->b_extra_rows[n_extra] = off + j;
            e->b_extra_item[n_extra] = i;
            n_extra++;
        }
    }
    return n_extra;
}

/* Fill the batch arrays from the step's items; returns n_logits. In a
 * step planned ahead (sched_step_ahead) an item with from >= 0 computes
 * the token the step in flight samples for it, which the host does not
 * have yet: its id is 0 here and e->b_prev_rows names the in-flight
 * step's logits row it comes from on the device (-1 for every other row). */
static int build_batch(engine *e, const sched_output *out, model_batch *b, bool ahead)
{
    int bs = e->block_size;
    int width = 1;
    for (int i = 0; i < out->n_items; i++)
        width = INFERD_MAX(width, out->items[i].req->n_blocks);
    INFERD_CHECK(width <= e->max_blocks_per_seq);
    int off = 0, n_logits = 0, n_extra = 0;
    for (int i = 0; i < out->n_items; i++) {
        const sched_item *it = &out->items[i];
        const sched_req *r = it->req;
        e->b_qsl[i] = off;
        n_extra = add_prompt_rows(e, it, i, off, n_extra);
        const bool pending = ahead && it->from >= 0; /* then n_new is 1 */
        for (int j = 0; j < it->n_new; j++, off++) {
            int pos = it->start + j;
            e->b_tokens[off] = pending ? 0 : r->tokens[pos];
            e->b_positions[off] = pos;
            e->b_slots[off] = kv_slot(r->blocks, pos, bs);
            if (ahead)
                e->b_prev_rows[off] = pending ? e->fl_item_row[e->fl_k][it->from] : -1;
        }
        e->b_seq_lens[i] = it->start + it->n_new;
        int32_t *row = e->b_tables + (size_t)i * width;
        memcpy(row, r->blocks, (size_t)r->n_blocks * sizeof *row);
        for (int j = r->n_blocks; j < width; j++)
            row[j] = KV_NULL_BLOCK;
        if (it->sample) {
            e->b_logits_idx[n_logits] = off - 1;
            e->b_row_item[n_logits] = i;
            n_logits++;
        }
    }
    e->b_qsl[out->n_items] = off;
    INFERD_CHECK(off == out->n_tokens);
    memset(b, 0, sizeof *b);
    b->n_tokens = off;
    b->tokens = e->b_tokens;
    b->positions = e->b_positions;
    b->slot_mapping = e->b_slots;
    b->n_seqs = out->n_items;
    b->query_start_loc = e->b_qsl;
    b->seq_lens = e->b_seq_lens;
    b->block_tables = e->b_tables;
    b->max_blocks_per_seq = width;
    b->n_logits = n_logits;
    b->logits_indices = e->b_logits_idx;
    if (n_extra > 0) {
        if (!e->h_logits)
            e->h_logits = inferd_malloc((size_t)e->opts.max_num_seqs * (size_t)e->vocab * sizeof(float));
        b->n_extra = n_extra;
        b->extra_rows = e->b_extra_rows;
        b->extra_buf = e->h_logits;
        b->extra_fn = extra_logits;
        b->extra_user = e;
    }
    return n_logits;
}

/* Top-n logprobs and the sampled token's logprob from one raw logits row. */
static void row_logprobs(const float *logits, int vocab, int32_t token, int n_top, engine_logprob *lp)
{
    float mx = -INFINITY;
    for (int v = 0; v < vocab; v++)
        mx = fmaxf(mx, logits[v]);
    double sum = 0;
    for (int v = 0; v < vocab; v++)
        sum += exp((double)(logits[v] - mx));
    float lse = mx + (float)log(sum);
    memset(lp, 0, sizeof *lp);
    lp->token = token;
    lp->logprob = logits[token] - lse;
    n_top = INFERD_MIN(n_top, INFERD_MIN(vocab, SAMPLING_MAX_LOGPROBS));
    /* NOTE: n_top == 0 (logprobs without alternatives) must skip the list:
     * its insertion index would be n_top - 1 = -1. */
    /* insertion into a sorted top-n list: ties keep the lower id first */
    for (int v = 0; v < vocab && n_top > 0; v++) {
        float x = logits[v];
        if (lp->n_top == n_top && x <= lp->top_logprobs[n_top - 1])
            continue;
        int k = lp->n_top < n_top ? lp->n_top++ : n_top - 1;
        while (k > 0 && lp->top_logprobs[k - 1] < x) {
            lp->top_logprobs[k] = lp->top_logprobs[k - 1];
            lp->top_ids[k] = lp->top_ids[k - 1];
            k--;
        }
        lp->top_logprobs[k] = x;
        lp->top_ids[k] = v;
    }
    for (int k = 0; k < lp->n_top; k++)
        lp->top_logprobs[k] -= lse;
}

/* model_batch.extra_fn: logprob entries of extra rows [first, first + n)
 * from their raw logits; the target is the prompt token after the row. */
static void extra_logits(void *user, int first, int n, const float *logits)
{
    engine *e = user;
    const sched_output *out = e->cur_out;
    for (int k = 0; k < n; k++) {
        int x = first + k;
        const sched_item *it = &out->items[e->b_extra_item[x]];
        const eng_req *r = it->req->user;
        int pos = it->start + (e->b_extra_rows[x] - e->b_qsl[e->b_extra_item[x]]);
        row_logprobs(logits + (size_t)k * e->vocab, e->vocab, it->req->tokens[pos + 1], r->sp.prompt_logprobs,
                     &e->b_extra_lp[x]);
    }
}

/* Publish the step's prompt logprobs: each item's entries are contiguous
 * and in prompt order. Before the step's tokens (and forks). */
static void publish_prompt_logprobs(engine *e, const sched_output *out, int n_extra)
{
    for (int x = 0; x < n_extra;) {
        int i = e->b_extra_item[x], y = x;
        while (y < n_extra && e->b_extra_item[y] == i)
            y++;
        eng_req *r = out->items[i].req->user;
        stream_publish_prompt(r->stream, &e->b_extra_lp[x], y - x);
        r->plp_done += y - x;
        x = y;
    }
}

/* ahead: the step is planned before the step in flight has given its
 * requests their tokens, so a row that computes such a token (from >= 0)
 * samples the request's token n_gen + 1. */
static void fill_sample_params(engine *e, const sched_output *out, int n_logits, bool ahead, bool *want_lp)
{
    *want_lp = false;
    for (int k = 0; k < n_logits; k++) {
        eng_req *r = out->items[e->b_row_item[k]].req->user;
        kern_sample_params *p = &e->b_sparams[k];
        p->temperature = r->sp.temperature;
        p->top_p = r->sp.top_p;
        p->min_p = r->sp.min_p;
        p->top_k = r->sp.top_k;
        p->seed = r->seed;
        p->counter = (uint64_t)r->n_gen + (ahead && out->items[e->b_row_item[k]].from >= 0 ? 1u : 0u);
        p->counts = NULL;
        p->bias = NULL;
        p->n_bias = 0;
        p->count_token = -1;
        p->presence = p->frequency = 0.0f;
        p->repetition = 1.0f;
        if (eng_penalized(r))
            eng_penalty_fill(e, r, p);
        if (r->sp.logprobs >= 0)
            *want_lp = true;
    }
}

/* The forward pass failed: every request of the step finishes with an error. */
static void fail_step(engine *e, const sched_output *out, const char *why)
{
    INFERD_LOG_ERROR("engine: step failed: %s", why);
    for (int i = 0; i < out->n_items; i++)
        eng_finish(e, out->items[i].req->user, FINISH_ERROR, why);
}

/* Stamp first_scheduled before the step's forward pass runs, so queue time
 * excludes the step's compute and prefill time includes it. */
static void mark_scheduled(const sched_output *out, double now)
{
    for (int i = 0; i < out->n_items; i++) {
        eng_req *r = out->items[i].req->user;
        if (r->times.first_scheduled == 0)
            r->times.first_scheduled = now;
    }
}

static void mark_progress(engine *e, const sched_output *out, double now)
{
    for (int i = 0; i < out->n_items; i++) {
        sched_req *sr = out->items[i].req;
        if (!sr)
            continue;
        eng_req *r = sr->user;
        if (!r->prefill_counted && sr->n_computed >= sr->n_prompt) {
            r->prefill_counted = true;
            r->times.prefill_done = now;
            if (!r->forked) /* a group's prompt counts once, at its leader */
                e->n_prompt_tokens += (uint64_t)sr->n_prompt;
        }
    }
}

/* A decode-only step: every item one new token that samples, no extra rows. */
static bool is_decode_step(const sched_output *out, const model_batch *b, int n_logits)
{
    return out->n_tokens == out->n_items && n_logits == out->n_items && b->n_extra == 0;
}

/* A decode-only step whose predecessor was one too (it ended at prev_end)
 * adds the host time between them (engine_host_times): the predecessor's
 * outputs, the loop until this step began (t0), this step's scheduling
 * (t0..t1) and batch build (t1..t2). */
static void count_host_gap(engine *e, double prev_end, double t0, double t1, double t2)
{
    e->host.gaps++;
    e->host.outputs_s += e->h_outputs;
    e->host.loop_s += t0 - prev_end;
    e->host.schedule_s += t1 - t0;
    e->host.build_s += t2 - t1;
}

void eng_flush_wakes(engine *e)
{
    for (int i = 0; i < e->n_wake; i++)
        stream_wake_unref(e->wake[i]);
    e->n_wake = 0;
}

/* model_batch.launched_fn: the step runs on the device; wake the previous
 * step's consumers meanwhile. */
static void on_launched(void *user)
{
    eng_flush_wakes(user);
}

/* The outputs of a step that ran: commit, prompt logprobs, forks, and
 * each sampled token (rows: the logits row's item, NULL = row k is item
 * k, a decode step; tokens in e->b_sampled). Items whose req is NULL left
 * while the step was in flight and are skipped. */
static void step_outputs(engine *e, const sched_output *out, int n_logits, int n_extra, bool want_lp,
                         const int32_t *rows)
{
    sched_commit(e->s, out);
    mark_progress(e, out, util_now_s());
    publish_prompt_logprobs(e, out, n_extra);
    /* a group leader's prompt KV is complete: its held sequences share it
     * from the next step on (engine_fork.c); before the tokens below, which
     * may finish the leader */
    for (int i = 0; i < out->n_items; i++) {
        if (!out->items[i].req)
            continue;
        eng_req *r = out->items[i].req->user;
        if (r->n_held > 0 && out->items[i].req->n_computed >= out->items[i].req->n_prompt)
            eng_fork_held(e, r);
    }
    for (int k = 0; k < n_logits; k++) {
        const sched_item *it = &out->items[rows ? rows[k] : k];
        if (!it->req)
            continue;
        eng_req *r = it->req->user;
        engine_logprob lp;
        bool has_lp = want_lp && r->sp.logprobs >= 0;
        int32_t tok = e->b_sampled[k];
        INFERD_CHECK_MSG(tok >= 0 && tok < e->vocab, "sampled token outside the vocabulary");
        if (has_lp) {
            row_logprobs(e->h_logits + (size_t)k * e->vocab, e->vocab, tok, r->sp.logprobs, &lp);
            r->cum_logprob += lp.logprob;
            stream_set_cum_logprob(r->stream, r->cum_logprob);
        }
        eng_accept_token(e, r, tok, has_lp ? &lp : NULL);
    }
#ifndef NDEBUG
    /* debug builds: the full pool + scheduler invariant check every step */
    char msg[256];
    INFERD_CHECK_MSG(sched_check(e->s, msg, sizeof msg), msg);
#endif
}

/* A request that needs nothing from the host between its steps: no
 * logprobs (the logits on the host), penalties (its last token in the
 * counts), prompt logprobs (extra rows) or held sequences (a fork). */
static bool chain_plain(const eng_req *r)
{
    return r->sp.logprobs < 0 && r->sp.prompt_logprobs < 0 && !eng_penalized(r) && r->n_held == 0;
}

/* sched_admit_fn: a waiting request may join a step planned ahead. */
static bool admit_plain(const sched_req *r, void *user)
{
    (void)user;
    return chain_plain(r->user);
}

/* Every live item one token that samples (a decode-only step). */
static bool decode_only(const sched_output *out)
{
    int live = 0;
    for (int i = 0; i < out->n_items; i++) {
        const sched_item *it = &out->items[i];
        if (it->req && (it->n_new != 1 || !it->sample))
            return false;
        live += it->req != NULL;
    }
    return live > 0;
}

/* Can the step after `out` (launched, or about to be) be planned before
 * out's tokens are known? Only when every request in it is plain, and so
 * is the waiting queue's head (a request that is not would wait behind
 * the chain: it is admitted by a step planned after out is done). With
 * e->chain_decode, only decode-only steps with nobody waiting chain. */
static bool can_chain(const engine *e, const sched_output *out)
{
    if (!e->async)
        return false;
    const sched_req *head = sched_waiting_head(e->s);
    if (head && (e->chain_decode || !chain_plain(head->user)))
        return false;
    if (e->chain_decode && !decode_only(out))
        return false;
    for (int i = 0; i < out->n_items; i++)
        if (out->items[i].req && !chain_plain(out->items[i].req->user))
            return false;
    return true;
}

/* The step just launched stays in flight: keep its logits rows' items and
 * each item's row (-1: samples nothing) in the map set k. */
static void keep_rows(engine *e, const sched_output *out, int n_logits, int k)
{
    for (int i = 0; i < out->n_items; i++)
        e->fl_item_row[k][i] = -1;
    for (int r = 0; r < n_logits; r++) {
        e->fl_row_item[k][r] = e->b_row_item[r];
        e->fl_item_row[k][e->b_row_item[r]] = r;
    }
    e->fl_n_logits[k] = n_logits;
}

void eng_forget_inflight(engine *e, const eng_req *r)
{
    if (!e->fl_active || !r->sr)
        return;
    for (int i = 0; i < e->fl_out.n_items; i++)
        if (e->fl_out.items[i].req == r->sr)
            e->fl_out.items[i].req = NULL;
}

/* Plan and launch the step after the one in flight (prev): true when it
 * runs; its rows' tokens are prev's samples, taken on the device. */
static bool launch_ahead(engine *e, const sched_output *prev, sched_output *next)
{
    if (!can_chain(e, prev) || !sched_step_ahead(e->s, prev, next, admit_plain, NULL) || next->n_items == 0)
        return false;
    mark_scheduled(next, util_now_s());
    model_batch b;
    int n_logits = build_batch(e, next, &b, true);
    bool want_lp = false;
    if (n_logits > 0)
        fill_sample_params(e, next, n_logits, true, &want_lp);
    b.launched_fn = on_launched;
    b.launched_user = e;
    inferd_status st = model_step_launch(e->m, &b, e->b_sparams, e->b_prev_rows);
    if (st != INFERD_OK) { /* a bug, not a request's fault: fall back to one step at a time */
        INFERD_LOG_ERROR("engine: a step planned ahead was refused (%s); running without it",
                         inferd_last_error());
        e->async = false;
        return false;
    }
    keep_rows(e, next, n_logits, e->fl_k ^ 1);
    e->steps_ahead++;
    return true;
}

/* The step in flight: launch the one after it when possible, then wait
 * for it and process its outputs. true when a step is in flight again. */
static bool step_chained(engine *e)
{
    const double t0 = util_now_s();
    sched_output prev = e->fl_out, next;
    const int k = e->fl_k;
    bool ahead = launch_ahead(e, &prev, &next);
    const double t2 = util_now_s();
    /* from here retire() marks the items of `next`, the step now in flight */
    e->fl_active = ahead;
    if (ahead) {
        e->fl_out = next;
        e->fl_k = k ^ 1;
    }
    model_step_wait(e->m, e->b_sampled);
    /* with no step after it, the wake-ups wait for nothing */
    if (!ahead)
        eng_flush_wakes(e);
    const double t3 = util_now_s();
    step_outputs(e, &prev, e->fl_n_logits[k], 0, false, e->fl_row_item[k]);
    /* the step after is on the device already: wake prev's consumers now,
     * not at the next launch (it overlaps the device either way) */
    if (ahead)
        eng_flush_wakes(e);
    /* the host's part between two launches of decode-only steps, now
     * overlapped with the device: the loop since the last launch's call,
     * planning and building the step (schedule holds both), and the
     * outputs of the step before */
    const double t4 = util_now_s();
    if (ahead && e->c_end > 0 && decode_only(&prev) && decode_only(&next)) {
        e->host.gaps++;
        e->host.loop_s += t0 - e->c_end;
        e->host.schedule_s += t2 - t0;
        e->host.outputs_s += t4 - t3;
    }
    e->c_end = ahead ? t4 : 0;
    return ahead;
}

void eng_drain(engine *e)
{
    if (!e->fl_active)
        return;
    sched_output prev = e->fl_out;
    e->fl_active = false;
    model_step_wait(e->m, e->b_sampled);
    step_outputs(e, &prev, e->fl_n_logits[e->fl_k], 0, false, e->fl_row_item[e->fl_k]);
}

void eng_step(engine *e)
{
    if (e->fl_active && (step_chained(e) || !sched_has_work(e->s)))
        return;
    const double t0 = util_now_s(), prev_end = e->h_end;
    e->h_end = 0; /* set again below when this step is decode-only and completes */
    sched_output out;
    sched_step(e->s, &out);
    if (out.n_preempted > 0)
        eng_penalty_drop_preempted(e);
    if (out.n_items == 0) {
        eng_flush_wakes(e);
        return;
    }
    const double t1 = util_now_s();
    mark_scheduled(&out, t1);
    model_batch b;
    int n_logits = build_batch(e, &out, &b, false);
    e->cur_out = &out;
    bool want_lp = false;
    if (n_logits > 0)
        fill_sample_params(e, &out, n_logits, false, &want_lp);
    const bool decode = is_decode_step(&out, &b, n_logits);
    if (decode && prev_end > 0)
        count_host_gap(e, prev_end, t0, t1, util_now_s());
    /* a step the next one may follow at once: left in flight (can_chain
     * admits no logprobs or prompt logprobs, so no want_lp nor extra rows) */
    const bool leave = can_chain(e, &out);
    inferd_status st;
    if (n_logits > 0 || leave) {
        b.launched_fn = on_launched;
        b.launched_user = e;
        st = model_step_launch(e->m, &b, e->b_sparams, NULL);
        if (st == INFERD_OK && leave) {
            keep_rows(e, &out, n_logits, e->fl_k);
            e->fl_active = true;
            e->fl_out = out;
            e->c_end = util_now_s();
            return;
        }
        if (st == INFERD_OK)
            st = model_step_wait(e->m, e->b_sampled);
    } else {
        eng_flush_wakes(e);
        st = model_forward(e->m, &b);
    }
    if (st != INFERD_OK) {
        eng_flush_wakes(e); /* model_step may fail before its launch */
        fail_step(e, &out, inferd_last_error());
        return;
    }
    const double t3 = util_now_s();
    if (want_lp) {
        if (!e->h_logits)
            e->h_logits = inferd_malloc((size_t)e->opts.max_num_seqs * (size_t)e->vocab * sizeof(float));
        model_logits_to_host(e->m, e->h_logits);
    }
    step_outputs(e, &out, n_logits, b.n_extra, want_lp, e->b_row_item);
    if (decode) {
        e->h_end = util_now_s();
        e->h_outputs = e->h_end - t3;
    }
}
