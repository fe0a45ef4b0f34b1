/* tests/common/test_common_ds.c: the common building blocks every module
 * shares: the intrusive list (common/list.h), the growable byte buffer
 * (common/buf.h), deadlines (common/util.h) and the usage JSON
 * (common/usage.h).
 *
 * The list is checked against an array model: a table of operation scripts
 * and a long random script, with the structure check and the model compared
 * after every operation, so a broken link shows up at the step that made it.
 */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/list.h"
#include "common/rng.h"
#include "common/usage.h"
#include "common/util.h"
#include "test_util.h"

/* ---- list ------------------------------------------------------------------ */

typedef struct {
    int id;
    inferd_list_node link;
} item;

#define ITEM_OF(n) INFERD_LIST_ENTRY(n, item, link)
#define N_ITEMS 16

/* Model of a list: the ids in order. */
typedef struct {
    int ids[N_ITEMS];
    int n;
} model;

static void model_insert(model *m, int at, int id)
{
    memmove(&m->ids[at + 1], &m->ids[at], (size_t)(m->n - at) * sizeof m->ids[0]);
    m->ids[at] = id;
    m->n++;
}

static int model_find(const model *m, int id)
{
    for (int i = 0; i < m->n; i++)
        if (m->ids[i] == id)
            return i;
    return -1;
}

static void model_remove(model *m, int id)
{
    int at = model_find(m, id);
    ck_assert_int_ge(at, 0);
    memmove(&m->ids[at], &m->ids[at + 1], (size_t)(m->n - at - 1) * sizeof m->ids[0]);
    m->n--;
}

/* The list equals the model forwards and backwards, and is well formed. */
static void expect_list(const inferd_list *l, const model *m, const char *what)
{
    ck_assert_msg(inferd_list_check(l), "%s: structure", what);
    ck_assert_msg(inferd_list_len(l) == (size_t)m->n, "%s: len %zu, want %d", what, inferd_list_len(l), m->n);
    ck_assert_int_eq(inferd_list_empty(l), m->n == 0);
    int i = 0;
    for (inferd_list_node *n = inferd_list_first(l); n; n = inferd_list_next(l, n), i++)
        ck_assert_msg(i < m->n && ITEM_OF(n)->id == m->ids[i], "%s: forward %d", what, i);
    ck_assert_int_eq(i, m->n);
    for (inferd_list_node *n = inferd_list_last(l); n; n = inferd_list_prev(l, n))
        ck_assert_msg(ITEM_OF(n)->id == m->ids[--i], "%s: backward %d", what, i);
    ck_assert_int_eq(i, 0);
}

typedef enum { OP_BACK, OP_FRONT, OP_AFTER, OP_BEFORE, OP_UNLINK, OP_POP } list_op;

/* Apply op to item `id` (`ref` is the anchor of AFTER/BEFORE). */
static void apply(inferd_list *l, model *m, item *it, list_op op, int id, int ref)
{
    switch (op) {
    case OP_BACK:
        inferd_list_push_back(l, &it[id].link);
        model_insert(m, m->n, id);
        break;
    case OP_FRONT:
        inferd_list_push_front(l, &it[id].link);
        model_insert(m, 0, id);
        break;
    case OP_AFTER:
        inferd_list_insert_after(l, &it[ref].link, &it[id].link);
        model_insert(m, model_find(m, ref) + 1, id);
        break;
    case OP_BEFORE:
        inferd_list_insert_before(l, &it[ref].link, &it[id].link);
        model_insert(m, model_find(m, ref), id);
        break;
    case OP_UNLINK:
        inferd_list_unlink(l, &it[id].link);
        ck_assert(!inferd_list_linked(&it[id].link));
        model_remove(m, id);
        break;
    case OP_POP: {
        inferd_list_node *n = inferd_list_pop_front(l);
        if (m->n == 0) {
            ck_assert_ptr_null(n);
        } else {
            ck_assert_int_eq(ITEM_OF(n)->id, m->ids[0]);
            model_remove(m, m->ids[0]);
        }
        break;
    }
    }
}

START_TEST(test_list_scripts)
{
    static const struct {
        const char *name;
        int n;
        struct {
            list_op op;
            int id, ref;
        } s[8];
    } rows[] = {
        {"push back x3", 3, {{OP_BACK, 0, 0}, {OP_BACK, 1, 0}, {OP_BACK, 2, 0}}},
        {"push front x3", 3, {{OP_FRONT, 0, 0}, {OP_FRONT, 1, 0}, {OP_FRONT, 2, 0}}},
        {"unlink only", 2, {{OP_BACK, 0, 0}, {OP_UNLINK, 0, 0}}},
        {"unlink head", 4, {{OP_BACK, 0, 0}, {OP_BACK, 1, 0}, {OP_BACK, 2, 0}, {OP_UNLINK, 0, 0}}},
        {"unlink middle", 4, {{OP_BACK, 0, 0}, {OP_BACK, 1, 0}, {OP_BACK, 2, 0}, {OP_UNLINK, 1, 0}}},
        {"unlink tail", 4, {{OP_BACK, 0, 0}, {OP_BACK, 1, 0}, {OP_BACK, 2, 0}, {OP_UNLINK, 2, 0}}},
        {"insert after tail", 3, {{OP_BACK, 0, 0}, {OP_BACK, 1, 0}, {OP_AFTER, 2, 1}}},
        {"insert before head", 3, {{OP_BACK, 0, 0}, {OP_BACK, 1, 0}, {OP_BEFORE, 2, 0}}},
        {"insert in the middle", 4, {{OP_BACK, 0, 0}, {OP_BACK, 1, 0}, {OP_AFTER, 2, 0}, {OP_BEFORE, 3, 1}}},
        {"pop empty", 1, {{OP_POP, 0, 0}}},
        {"pop all", 4, {{OP_FRONT, 0, 0}, {OP_BACK, 1, 0}, {OP_POP, 0, 0}, {OP_POP, 0, 0}}},
        {"relink after unlink", 5,
         {{OP_BACK, 0, 0}, {OP_BACK, 1, 0}, {OP_UNLINK, 0, 0}, {OP_FRONT, 0, 0}, {OP_UNLINK, 1, 0}}},
    };
    for (size_t r = 0; r < INFERD_ARRAY_LEN(rows); r++) {
        item it[N_ITEMS];
        memset(it, 0, sizeof it);
        for (int i = 0; i < N_ITEMS; i++) {
            it[i].id = i;
            ck_assert(!inferd_list_linked(&it[i].link)); /* zeroed = unlinked */
        }
        inferd_list l;
        inferd_list_init(&l);
        model m = {.n = 0};
        expect_list(&l, &m, rows[r].name);
        for (int k = 0; k < rows[r].n; k++) {
            apply(&l, &m, it, rows[r].s[k].op, rows[r].s[k].id, rows[r].s[k].ref);
            expect_list(&l, &m, rows[r].name);
        }
    }
}
END_TEST

static uint64_t rnd(uint64_t *state)
{
    return rng_mix64(++*state);
}

START_TEST(test_list_random)
{
    item it[N_ITEMS];
    memset(it, 0, sizeof it);
    for (int i = 0; i < N_ITEMS; i++)
        it[i].id = i;
    inferd_list l;
    inferd_list_init(&l);
    model m = {.n = 0};
    uint64_t st = 12345;
    for (int step = 0; step < 20000; step++) {
        int id = (int)(rnd(&st) % N_ITEMS);
        list_op op = (list_op)(rnd(&st) % 6);
        if (op == OP_POP) {
            apply(&l, &m, it, op, 0, 0);
        } else if (inferd_list_linked(&it[id].link)) {
            apply(&l, &m, it, OP_UNLINK, id, 0);
        } else if ((op == OP_AFTER || op == OP_BEFORE) && m.n > 0) {
            apply(&l, &m, it, op, id, m.ids[rnd(&st) % (uint64_t)m.n]);
        } else {
            apply(&l, &m, it, op == OP_FRONT ? OP_FRONT : OP_BACK, id, 0);
        }
        expect_list(&l, &m, "random");
    }
}
END_TEST

START_TEST(test_list_splice_and_safe_iteration)
{
    item it[N_ITEMS];
    memset(it, 0, sizeof it);
    inferd_list a, b;
    inferd_list_init(&a);
    inferd_list_init(&b);
    model ma = {.n = 0}, mb = {.n = 0};
    /* splicing an empty list changes nothing */
    inferd_list_splice_back(&a, &b);
    expect_list(&a, &ma, "splice empty");
    for (int i = 0; i < 6; i++) {
        it[i].id = i;
        apply(i < 3 ? &a : &b, i < 3 ? &ma : &mb, it, OP_BACK, i, 0);
    }
    inferd_list_splice_back(&a, &b);
    for (int i = 0; i < mb.n; i++)
        model_insert(&ma, ma.n, mb.ids[i]);
    mb.n = 0;
    expect_list(&a, &ma, "spliced");
    expect_list(&b, &mb, "splice source");
    /* into an empty destination */
    inferd_list_splice_back(&b, &a);
    expect_list(&b, &ma, "splice into empty");
    mb = ma;
    ma.n = 0;
    expect_list(&a, &ma, "emptied");

    /* unlink every even id while iterating */
    inferd_list_node *n, *tmp;
    INFERD_LIST_FOR_EACH_SAFE(&b, n, tmp) {
        if (ITEM_OF(n)->id % 2 == 0) {
            int id = ITEM_OF(n)->id;
            inferd_list_unlink(&b, n);
            model_remove(&mb, id);
        }
    }
    expect_list(&b, &mb, "safe iteration");
    int seen = 0;
    INFERD_LIST_FOR_EACH(&b, n)
        seen += ITEM_OF(n)->id;
    ck_assert_int_eq(seen, 1 + 3 + 5);
    ck_assert_ptr_null(INFERD_LIST_ENTRY((inferd_list_node *)NULL, item, link));
}
END_TEST

START_TEST(test_list_check_detects_corruption)
{
    item it[3];
    memset(it, 0, sizeof it);
    inferd_list l;
    inferd_list_init(&l);
    for (int i = 0; i < 3; i++)
        inferd_list_push_back(&l, &it[i].link);
    ck_assert(inferd_list_check(&l));
    inferd_list_node *saved = it[1].link.prev;
    it[1].link.prev = &it[2].link; /* broken back link */
    ck_assert(!inferd_list_check(&l));
    it[1].link.prev = saved;
    l.len = 2; /* count out of step */
    ck_assert(!inferd_list_check(&l));
    l.len = 3;
    ck_assert(inferd_list_check(&l));
}
END_TEST

/* ---- buffer ------------------------------------------------------------------ */

START_TEST(test_buf_ops)
{
    static const struct {
        const char *name;
        const char *parts[4]; /* appended in order (NULL ends) */
        size_t consume;
        const char *want;
    } rows[] = {
        {"nothing", {NULL}, 0, ""},
        {"one", {"abc", NULL}, 0, "abc"},
        {"several", {"ab", "", "cd", "e"}, 0, "abcde"},
        {"consume part", {"hello ", "world", NULL}, 6, "world"},
        {"consume all", {"abc", NULL}, 3, ""},
        {"consume more than all", {"abc", NULL}, 99, ""},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        inferd_buf b = INFERD_BUF_INIT;
        ck_assert_str_eq(inferd_buf_str(&b), "");
        for (int k = 0; k < 4 && rows[i].parts[k]; k++)
            inferd_buf_append_str(&b, rows[i].parts[k]);
        inferd_buf_consume(&b, rows[i].consume);
        ck_assert_msg(b.len == strlen(rows[i].want), "%s: len %zu", rows[i].name, b.len);
        ck_assert_msg(strcmp(inferd_buf_str(&b), rows[i].want) == 0, "%s: '%s'", rows[i].name,
                      inferd_buf_str(&b));
        size_t len = 12345;
        char *s = inferd_buf_steal(&b, &len);
        ck_assert_ptr_nonnull(s);
        ck_assert_str_eq(s, rows[i].want);
        ck_assert_uint_eq(len, strlen(rows[i].want));
        ck_assert_ptr_null(b.data);
        ck_assert_uint_eq(b.len, 0);
        ck_assert_uint_eq(b.cap, 0);
        inferd_free(s);
        inferd_buf_free(&b); /* free after steal is harmless */
    }
}
END_TEST

START_TEST(test_buf_printf_bytes_and_growth)
{
    inferd_buf b = INFERD_BUF_INIT;
    inferd_buf_printf(&b, "%d-%s", 12, "ab");
    ck_assert_str_eq(b.data, "12-ab");
    inferd_buf_printf(&b, "%s", ""); /* empty format output appends nothing */
    ck_assert_uint_eq(b.len, 5);
    /* bytes with NULs inside: len counts them, data stays terminated */
    inferd_buf_append(&b, "x\0y", 3);
    ck_assert_uint_eq(b.len, 8);
    ck_assert(memcmp(b.data, "12-abx\0y", 8) == 0 && b.data[8] == '\0');
    inferd_buf_append(&b, NULL, 0);
    ck_assert_uint_eq(b.len, 8);
    /* a long printf, then byte-at-a-time growth over many doublings */
    char big[5000];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    inferd_buf_reset(&b);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(b.data, "");
    inferd_buf_printf(&b, "<%s>", big);
    ck_assert_uint_eq(b.len, sizeof big + 1);
    ck_assert(b.data[0] == '<' && b.data[b.len - 1] == '>' && b.data[b.len] == '\0');
    inferd_buf_reset(&b);
    for (int i = 0; i < 100000; i++)
        inferd_buf_append_char(&b, (char)('a' + i % 26));
    ck_assert_uint_eq(b.len, 100000);
    ck_assert_uint_ge(b.cap, b.len + 1);
    ck_assert_uint_le(b.cap, 2 * (b.len + 1)); /* doubling, not over-allocation */
    for (int i = 0; i < 100000; i += 9973)
        ck_assert_int_eq(b.data[i], 'a' + i % 26);
    ck_assert_int_eq(b.data[b.len], '\0');
    /* reserve(0) gives an empty buffer a string */
    inferd_buf e = INFERD_BUF_INIT;
    inferd_buf_reserve(&e, 0);
    ck_assert_ptr_nonnull(e.data);
    ck_assert_str_eq(e.data, "");
    inferd_buf_free(&e);
    inferd_buf_free(&b);
    ck_assert_ptr_null(b.data);
}
END_TEST

/* ---- deadlines ----------------------------------------------------------------- */

START_TEST(test_deadline_values)
{
    static const struct {
        int64_t timeout_ms;
        bool never, expired;
        int ms_lo, ms_hi; /* remaining_ms range right after creation */
    } rows[] = {
        {-1, true, false, -1, -1},        {-1000, true, false, -1, -1},
        {0, false, true, 0, 0},           {50, false, false, 1, 50},
        {60000, false, false, 59000, 60000}, {(int64_t)1 << 50, false, false, INT_MAX, INT_MAX},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        inferd_deadline d = inferd_deadline_in_ms(rows[i].timeout_ms);
        ck_assert_msg(d.never == rows[i].never, "row %zu never", i);
        ck_assert_msg(inferd_deadline_expired(d) == rows[i].expired, "row %zu expired", i);
        int ms = inferd_deadline_remaining_ms(d);
        ck_assert_msg(ms >= rows[i].ms_lo && ms <= rows[i].ms_hi, "row %zu: %d ms", i, ms);
        double s = inferd_deadline_remaining_s(d);
        ck_assert_msg(rows[i].never ? isinf(s) : (s >= 0 && s <= (double)rows[i].timeout_ms * 1e-3),
                      "row %zu: %g s", i, s);
    }
    ck_assert(inferd_deadline_never().never);
    ck_assert(inferd_deadline_in_s(-0.5).never);
    ck_assert(inferd_deadline_in_s(NAN).never);
    /* from(): relative to a given start, so a past start is already expired */
    double now = util_now_s();
    ck_assert(inferd_deadline_expired(inferd_deadline_from(now - 10, 5)));
    ck_assert(!inferd_deadline_expired(inferd_deadline_from(now, 5)));
    ck_assert_double_eq_tol(inferd_deadline_from(now, 5).at, now + 5, 1e-9);
    ck_assert_double_eq(inferd_deadline_remaining_s(inferd_deadline_from(now - 10, 5)), 0.0);
    ck_assert_int_eq(inferd_deadline_remaining_ms(inferd_deadline_from(now - 10, 5)), 0);
    /* a short deadline passes */
    inferd_deadline d = inferd_deadline_in_ms(20);
    while (!inferd_deadline_expired(d))
        ;
    ck_assert(util_now_s() >= d.at);
}
END_TEST

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool flag;
} waiter;

static void *set_flag_later(void *arg)
{
    waiter *w = arg;
    struct timespec ts = {0, 30 * 1000000L};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&w->mu);
    w->flag = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

START_TEST(test_deadline_cond_wait)
{
    waiter w = {.flag = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w.cv, &ca);
    pthread_condattr_destroy(&ca);

    /* nobody signals: times out, not before the deadline */
    double t0 = util_now_s();
    inferd_deadline d = inferd_deadline_in_ms(40);
    pthread_mutex_lock(&w.mu);
    bool woke = true;
    while (!w.flag && (woke = inferd_deadline_cond_wait(d, &w.cv, &w.mu)))
        ;
    pthread_mutex_unlock(&w.mu);
    ck_assert(!woke);
    ck_assert(util_now_s() - t0 >= 0.039);
    /* an expired deadline returns at once */
    pthread_mutex_lock(&w.mu);
    ck_assert(!inferd_deadline_cond_wait(inferd_deadline_in_ms(0), &w.cv, &w.mu));
    pthread_mutex_unlock(&w.mu);

    /* a signal before the deadline (and a never deadline) wakes the waiter */
    for (int never = 0; never < 2; never++) {
        w.flag = false;
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, set_flag_later, &w), 0);
        d = never ? inferd_deadline_never() : inferd_deadline_in_s(30);
        pthread_mutex_lock(&w.mu);
        woke = true;
        while (!w.flag && (woke = inferd_deadline_cond_wait(d, &w.cv, &w.mu)))
            ;
        pthread_mutex_unlock(&w.mu);
        pthread_join(th, NULL);
        ck_assert(woke && w.flag);
    }
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
}
END_TEST

/* ---- usage JSON ---------------------------------------------------------------- */

START_TEST(test_usage_json)
{
    inferd_usage u = {.prompt_tokens = 5, .completion_tokens = 3, .cached_tokens = 2};
    cJSON *o = inferd_usage_json(&u);
    char *s = cJSON_PrintUnformatted(o);
    ck_assert_str_eq(s, "{\"prompt_tokens\":5,\"completion_tokens\":3,\"total_tokens\":8,"
                        "\"prompt_tokens_details\":{\"cached_tokens\":2}}");
    inferd_usage back = {-1, -1, -1};
    ck_assert(inferd_usage_parse(o, &back));
    ck_assert_mem_eq(&back, &u, sizeof u);
    cJSON_free(s);
    cJSON_Delete(o);

    static const struct {
        const char *json;
        bool ok;
        int prompt, completion;
    } rows[] = {
        {"{\"prompt_tokens\":7,\"completion_tokens\":0}", true, 7, 0},
        {"{\"completion_tokens\":4}", true, -1, 4},
        {"{\"prompt_tokens\":7}", false, 7, -1},
        {"{\"prompt_tokens\":-2,\"completion_tokens\":-1}", false, -1, -1},
        {"{\"prompt_tokens\":\"7\",\"completion_tokens\":true}", false, -1, -1},
        {"{\"prompt_tokens\":1e12,\"completion_tokens\":1}", true, -1, 1},
        {"[1,2]", false, -1, -1},
        {"null", false, -1, -1},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        cJSON *j = cJSON_Parse(rows[i].json);
        inferd_usage r = {-1, -1, -1};
        ck_assert_msg(inferd_usage_parse(j, &r) == rows[i].ok, "row %zu ok", i);
        ck_assert_msg(r.prompt_tokens == rows[i].prompt && r.completion_tokens == rows[i].completion,
                      "row %zu: %d %d", i, r.prompt_tokens, r.completion_tokens);
        cJSON_Delete(j);
    }
    ck_assert(!inferd_usage_parse(NULL, &u));
    cJSON *flat = cJSON_CreateObject();
    inferd_usage_add_counts(flat, &u);
    s = cJSON_PrintUnformatted(flat);
    ck_assert_str_eq(s, "{\"prompt_tokens\":5,\"completion_tokens\":3}");
    cJSON_free(s);
    cJSON_Delete(flat);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("common_ds");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_list_scripts);
    tcase_add_test(tc, test_list_random);
    tcase_add_test(tc, test_list_splice_and_safe_iteration);
    tcase_add_test(tc, test_list_check_detects_corruption);
    tcase_add_test(tc, test_buf_ops);
    tcase_add_test(tc, test_buf_printf_bytes_and_growth);
    tcase_add_test(tc, test_deadline_values);
    tcase_add_test(tc, test_deadline_cond_wait);
    tcase_add_test(tc, test_usage_json);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
