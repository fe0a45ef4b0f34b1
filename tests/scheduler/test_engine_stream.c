/* tests/scheduler/test_engine_stream.c: the per-request output channel
 * (scheduler/engine_stream.c) without an engine: the engine's side is
 * driven by hand (stream_publish and friends from engine_internal.h), the
 * consumer's through the public polls. engine_stream_poll takes all that
 * is pending; engine_stream_poll_step one publish at a time, with the
 * totals as of it, the prompt logprobs with the first and the finish with
 * the last, whether the consumer keeps up, lags far behind, or mixes the
 * two polls. */
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "scheduler/engine_internal.h"
#include "test_util.h"

/* One publish: tokens 'first .. first + n - 1', its text, and a finish. */
typedef struct {
    int n_tok, first;
    const char *text;
    finish_reason finish;
} pub;

/* What one poll must return; text NULL = the poll finds nothing. */
typedef struct {
    int n_tok, first;
    const char *text;
    int completion_tokens;
    bool finished;
} want;

static engine_stream *new_stream(bool logprobs)
{
    engine_request req;
    memset(&req, 0, sizeof req);
    req.n_prompt = 5;
    req.sp.logprobs = logprobs ? 1 : -1;
    return stream_new(1, &req);
}

/* Publish p with logprob -(token) per token and cum_logprob the running
 * total of tokens published so far (*total). */
static void publish(engine_stream *s, const pub *p, int *total)
{
    int32_t tok[64];
    engine_logprob lp[64];
    ck_assert_int_le(p->n_tok, 64);
    memset(lp, 0, sizeof lp);
    for (int i = 0; i < p->n_tok; i++) {
        tok[i] = p->first + i;
        lp[i].token = tok[i];
        lp[i].logprob = -(float)tok[i];
    }
    *total += p->n_tok;
    stream_set_cum_logprob(s, -(double)*total);
    stream_publish(s, tok, lp, p->n_tok, p->text, strlen(p->text), NULL, *total, 0, p->finish, NULL, true);
}

static void check(engine_stream *s, bool step, const want *w, const char *where)
{
    engine_output o;
    const bool got = step ? engine_stream_poll_step(s, &o) : engine_stream_poll(s, &o);
    ck_assert_msg(got == (w->text != NULL), "%s: poll returned %d", where, got);
    if (w->text) {
        ck_assert_msg(o.n_tokens == w->n_tok, "%s: %d tokens, want %d", where, o.n_tokens, w->n_tok);
        for (int i = 0; i < o.n_tokens; i++) {
            ck_assert_int_eq(o.token_ids[i], w->first + i);
            if (o.logprobs)
                ck_assert_float_eq(o.logprobs[i].logprob, -(float)(w->first + i));
        }
        ck_assert_msg(o.text_len == strlen(w->text) && !strcmp(o.text, w->text), "%s: text '%s', want '%s'",
                      where, o.text, w->text);
        ck_assert_msg(o.completion_tokens == w->completion_tokens, "%s: completion_tokens %d, want %d", where,
                      o.completion_tokens, w->completion_tokens);
        ck_assert(o.cum_logprob == -(double)w->completion_tokens);
        ck_assert_int_eq(o.prompt_tokens, 5);
    }
    ck_assert_msg(o.finished == w->finished, "%s: finished %d, want %d", where, o.finished, w->finished);
    engine_output_free(&o);
}

static void done(engine_stream *s)
{
    stream_unref(s);           /* the engine's reference */
    engine_stream_release(s);  /* the consumer's */
}

/* Three publishes (one of text without a token, as a held-back stop
 * string releases), a finish-only publish, then the polls: step-wise in
 * order with per-publish totals, the finish on the last; all at once as
 * one output. */
START_TEST(test_step_order)
{
    static const pub k_pubs[] = {
        {2, 10, "ab", FINISH_NONE},
        {1, 12, "c", FINISH_NONE},
        {0, 0, "d", FINISH_NONE},
        {0, 0, "", FINISH_LENGTH},
    };
    static const struct {
        bool step, logprobs;
        want w[5];
    } k_rows[] = {
        {true, false, {{2, 10, "ab", 2, false}, {1, 12, "c", 3, false}, {0, 0, "d", 3, true}, {0, 0, NULL, 3, true}}},
        {true, true, {{2, 10, "ab", 2, false}, {1, 12, "c", 3, false}, {0, 0, "d", 3, true}, {0, 0, NULL, 3, true}}},
        {false, true, {{3, 10, "abcd", 3, true}, {0, 0, NULL, 3, true}}},
    };
    for (size_t r = 0; r < INFERD_ARRAY_LEN(k_rows); r++) {
        engine_stream *s = new_stream(k_rows[r].logprobs);
        int total = 0;
        for (size_t i = 0; i < INFERD_ARRAY_LEN(k_pubs); i++)
            publish(s, &k_pubs[i], &total);
        for (int i = 0; i < 5 && (i == 0 || k_rows[r].w[i - 1].text); i++) {
            char where[64];
            snprintf(where, sizeof where, "row %zu poll %d", r, i);
            check(s, k_rows[r].step, &k_rows[r].w[i], where);
        }
        done(s);
    }
}
END_TEST

/* Publishes and polls interleaved, the two polls mixed: a poll_step that
 * empties the stream, a take-all after step-wise takes (the heads
 * compacted away), then step-wise again from the new buffers. */
START_TEST(test_step_mixed)
{
    engine_stream *s = new_stream(true);
    int total = 0;
    const pub a = {2, 1, "A", FINISH_NONE}, b = {1, 3, "B", FINISH_NONE}, c = {3, 4, "CC", FINISH_NONE},
              d = {1, 7, "D", FINISH_NONE}, e = {1, 8, "E", FINISH_STOP};
    publish(s, &a, &total);
    check(s, true, &(want){2, 1, "A", 2, false}, "a");
    check(s, true, &(want){0, 0, NULL, 0, false}, "empty");
    publish(s, &b, &total);
    publish(s, &c, &total);
    publish(s, &d, &total);
    check(s, true, &(want){1, 3, "B", 3, false}, "b");
    check(s, false, &(want){4, 4, "CCD", 7, false}, "c+d taken whole");
    publish(s, &e, &total);
    check(s, true, &(want){1, 8, "E", 8, true}, "e");
    check(s, true, &(want){0, 0, NULL, 0, true}, "after the finish");
    done(s);
}
END_TEST

/* Prompt logprobs (published before the first tokens) come with the first
 * step only. */
START_TEST(test_step_prompt_logprobs)
{
    engine_stream *s = new_stream(true);
    engine_logprob plp[3];
    memset(plp, 0, sizeof plp);
    for (int i = 0; i < 3; i++)
        plp[i].token = 100 + i;
    stream_publish_prompt(s, plp, 3);
    int total = 0;
    publish(s, &(pub){1, 1, "x", FINISH_NONE}, &total);
    publish(s, &(pub){1, 2, "y", FINISH_NONE}, &total);
    engine_output o;
    ck_assert(engine_stream_poll_step(s, &o));
    ck_assert_int_eq(o.n_prompt_logprobs, 3);
    ck_assert_int_eq(o.prompt_logprobs[2].token, 102);
    ck_assert_int_eq(o.n_tokens, 1);
    engine_output_free(&o);
    ck_assert(engine_stream_poll_step(s, &o));
    ck_assert_int_eq(o.n_prompt_logprobs, 0);
    ck_assert_int_eq(o.token_ids[0], 2);
    engine_output_free(&o);
    done(s);
}
END_TEST

/* A consumer that lags the whole generation: 2,000 publishes, then
 * 2,000 step-wise polls in order (each costs its own publish, not what is
 * left), then a second round on the reused buffers. */
START_TEST(test_step_lagging)
{
    engine_stream *s = new_stream(true);
    int total = 0;
    char text[16];
    for (int round = 0; round < 2; round++) {
        const int n = 2000, base = total;
        for (int i = 0; i < n; i++) {
            snprintf(text, sizeof text, "<%d>", base + i);
            publish(s, &(pub){1, base + i, text, round == 1 && i == n - 1 ? FINISH_LENGTH : FINISH_NONE}, &total);
        }
        for (int i = 0; i < n; i++) {
            snprintf(text, sizeof text, "<%d>", base + i);
            const bool last = round == 1 && i == n - 1;
            check(s, true, &(want){1, base + i, text, base + i + 1, last}, "lagging");
        }
        check(s, true, &(want){0, 0, NULL, 0, round == 1}, "drained");
    }
    done(s);
}
END_TEST

static void count_notify(void *user)
{
    (*(int *)user)++;
}

/* Publishes without a wake (wake = false, the engine's per-token form):
 * the output is there for a poll at once, notify runs only at
 * stream_wake_unref, once per publish; the reference each publish took
 * keeps the stream alive after the engine and the consumer dropped theirs,
 * and the last wake frees it (ASan checks both). */
START_TEST(test_deferred_wake)
{
    int notified = 0;
    engine_request req;
    memset(&req, 0, sizeof req);
    req.n_prompt = 5;
    req.sp.logprobs = -1;
    req.notify = count_notify;
    req.notify_user = &notified;
    engine_stream *s = stream_new(1, &req);
    const int32_t tok[2] = {7, 8};
    stream_set_cum_logprob(s, -1.0); /* check()'s convention: -(completion tokens) */
    stream_publish(s, &tok[0], NULL, 1, "a", 1, NULL, 1, 0, FINISH_NONE, NULL, false);
    ck_assert_int_eq(notified, 0);
    check(s, true, &(want){1, 7, "a", 1, false}, "deferred, before its wake");
    stream_set_cum_logprob(s, -2.0);
    stream_publish(s, &tok[1], NULL, 1, "b", 1, NULL, 2, 0, FINISH_LENGTH, NULL, false);
    stream_wake_unref(s);
    ck_assert_int_eq(notified, 1);
    stream_unref(s);          /* the engine's reference (retire) */
    engine_stream_release(s); /* the consumer's, before the second wake */
    stream_wake_unref(s);     /* the last reference: notify, then free */
    ck_assert_int_eq(notified, 2);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("engine_stream");
    TCase *tc = tcase_create("stream");
    tcase_add_test(tc, test_step_order);
    tcase_add_test(tc, test_step_mixed);
    tcase_add_test(tc, test_step_prompt_logprobs);
    tcase_add_test(tc, test_step_lagging);
    tcase_add_test(tc, test_deferred_wake);
    suite_add_tcase(su, tc);
    return test_run_suite(su);
}
