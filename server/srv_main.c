/* server/srv_main.c: srv_run: start-up, the main thread's signal/stats
 * loop, and graceful shutdown of one server, from a filled srv_opts (the
 * command line is cli/cli_serve.c's business).
 *
 * Signal handling stays here rather than in cli/: graceful shutdown is the
 * server's behaviour (drain, abort, close), and it works only if SIGINT and
 * SIGTERM are blocked before the HTTP and engine threads are created so that
 * they inherit the mask and the main thread alone takes them with
 * sigtimedwait; that ordering is part of starting the server.
 *
 * Start-up order: the HTTP server comes up first (so /health answers 503
 * while the model loads), then tokenizer, model and engine; `ready` flips
 * last. SIGINT/SIGTERM are blocked in every thread and taken synchronously
 * by the main thread with sigtimedwait, which also paces the stats line.
 *
 * Shutdown: close new connections as they are accepted, answer new requests on open ones
 * with 503; wait up to --shutdown-timeout for in-flight requests to finish;
 * then abort the rest (they get a 503 body / an error event) and wait a
 * little for those replies to go out; close every connection; stop the
 * engine; free everything; exit 0. A second signal skips the grace period.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "server/srv_http.h"
#include "server/srv_jinja.h"
#include "server/srv_http_guard.h"
#include "server/srv_log.h"
#include "server/srv_server.h"

/* After the abort, how long the aborted requests get to send their 503
 * body or error event before their connections are closed regardless. */
#define ABORT_WAIT_S 3.0

/* Room for thousands of connections: raise the soft fd limit to the hard one.
 * Capped at 2^20: some systems report an "unlimited" hard limit, and
 * libraries that size tables by the limit would then allocate absurdly.
 * Failure is not fatal: the server runs with fewer connections. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max > (1u << 20) ? (1u << 20) : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* Chat template (srv_chat.h): a built-in, --chat-template FILE or inline,
 * or the model's own; rendered by the embedded jinja2, started here once.
 * False when a template given with --chat-template cannot be used; a model
 * template that cannot be used only disables chat (400 naming why). */
static bool setup_chat(srv_server *s)
{
    if (srv_jinja_init() != INFERD_OK)
        INFERD_LOG_WARN("chat templates disabled: %s", inferd_last_error());
    if (srv_chat_load(s->tok, s->opts.chat_family, s->opts.chat_template, s->opts.allow_special_in_content,
                      &s->chat) != INFERD_OK)
        return false;
    if (!srv_chat_ready(s->chat))
        INFERD_LOG_WARN("chat requests will get 400: %s", srv_chat_describe(s->chat));
    else
        INFERD_LOG_INFO("chat template: %s, rendered by %s%s", srv_chat_describe(s->chat), srv_jinja_version(),
                        s->opts.allow_special_in_content ? "; special-token text in message contents is parsed"
                                                         : "");
    return true;
}

/* The sampling defaults of the model's generation_config.json (vLLM's
 * --generation-config auto; "vllm" loads none), checked by the sampling
 * rows and logged once. An out-of-range value fails the start-up, naming
 * the field, rather than every request later. */
static bool setup_gen_defaults(srv_server *s)
{
    srv_opts *o = &s->opts;
    bool has_max = false;
    char desc[256];
    sampling_params_default(&o->gen_defaults);
    if (srv_gen_defaults_apply(&model_get_config(s->m)->gen, 0, &o->gen_defaults, &has_max, desc, sizeof desc) !=
        INFERD_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", inferd_last_error()); /* not formatted from the buffer it rewrites */
        inferd_set_error(INFERD_ERR_INVALID_ARG, "%s (--generation-config vllm ignores the file)", msg);
        return false;
    }
    o->gen_max_tokens = has_max ? o->gen_defaults.max_tokens : 0;
    INFERD_LOG_INFO("sampling defaults from generation_config.json (--generation-config %s): %s",
                    o->model.generation_config ? o->model.generation_config : "auto", desc);
    return true;
}

/* Main thread, with the HTTP server already answering 503. Each piece is
 * stored in s as soon as it exists so free_server can release a partial
 * load. The vocabulary the API accepts is the smaller of the model's and
 * the tokenizer's: model embeddings are often padded past the tokenizer,
 * and ids in the padding have no text. NOTE: the HTTP threads touch
 * s->eng, s->tok and s->chat only once srv_run has set `ready` after this
 * returns; that atomic store is what publishes them. */
static bool load(srv_server *s)
{
    srv_opts *o = &s->opts;
    const char *tok_dir = o->model.tokenizer_dir ? o->model.tokenizer_dir : o->model.model_dir;
    if (tok_load(tok_dir, &s->tok) != INFERD_OK || !setup_chat(s))
        return false;
    if (model_load(&o->model, &s->m) != INFERD_OK || !setup_gen_defaults(s))
        return false;
    engine_opts_from_model(&o->engine, &o->model);
    if (engine_create(&o->engine, s->m, s->tok, &s->eng) != INFERD_OK)
        return false;
    if (engine_start(s->eng) != INFERD_OK)
        return false;
    s->max_model_len = model_max_model_len(s->m);
    int mv = model_get_config(s->m)->vocab_size, tv = tok_vocab_size(s->tok);
    s->vocab_size = mv < tv ? mv : tv;
    s->created = util_unix_s();
    return true;
}

/* Wait for a signal or timeout_s; returns the signal or 0.
 * NOTE: sigtimedwait returns -1 on timeout (EAGAIN) and on EINTR from an
 * unblocked signal; both read as "no signal". */
static int wait_signal(const sigset_t *set, double timeout_s)
{
    struct timespec ts = {(time_t)timeout_s, (long)((timeout_s - (double)(time_t)timeout_s) * 1e9)};
    int sig = sigtimedwait(set, NULL, &ts);
    return sig > 0 ? sig : 0;
}

/* Main thread until SIGINT/SIGTERM. A signal that arrived during the model
 * load stays pending (the mask blocks it) and ends this loop at its first
 * wait. The 250 ms wake-up only paces the stats line. */
static int serve_loop(srv_server *s, const sigset_t *set)
{
    engine_stats prev, cur;
    engine_get_stats(s->eng, &prev);
    double t_prev = util_now_s();
    for (;;) {
        int sig = wait_signal(set, 0.25);
        if (sig)
            return sig;
        double now = util_now_s();
        if (s->opts.stats_interval_s > 0 && now - t_prev >= s->opts.stats_interval_s) {
            engine_get_stats(s->eng, &cur);
            srv_log_stats(&prev, &cur, now - t_prev, srv_http_open_requests(s->http));
            prev = cur;
            t_prev = now;
        }
    }
}

/* Wait until no generation is in flight; false on timeout or a signal.
 * Polls `active` every 50 ms (a drain takes seconds; a condition variable
 * would couple the HTTP threads to shutdown for no gain) while still taking
 * signals, so a second Ctrl-C cuts the grace period short. */
static bool wait_drained(srv_server *s, const sigset_t *set, double timeout_s)
{
    inferd_deadline dl = inferd_deadline_in_s(INFERD_MAX(timeout_s, 0.0));
    while (atomic_load(&s->active) > 0) {
        double left = inferd_deadline_remaining_s(dl);
        if (left <= 0)
            return false;
        if (wait_signal(set, left < 0.05 ? left : 0.05)) {
            INFERD_LOG_WARN("second signal: aborting in-flight requests now");
            return false;
        }
    }
    return true;
}

/* The drain sequence of the file comment. Once draining is set, new
 * connections are closed as they are accepted (srv_http_life.c) and new
 * requests on open ones get 503. */
static void shutdown_server(srv_server *s, int sig, const sigset_t *set)
{
    INFERD_LOG_INFO("received %s: no new requests; waiting up to %.1f s for %d in-flight request(s)",
             sig == SIGINT ? "SIGINT" : "SIGTERM", s->opts.shutdown_timeout_s, atomic_load(&s->active));
    atomic_store(&s->draining, true);
    if (!wait_drained(s, set, s->opts.shutdown_timeout_s)) {
        INFERD_LOG_WARN("aborting %d in-flight request(s)", atomic_load(&s->active));
        atomic_store(&s->aborting, true);
        srv_http_abort_all(s->http);
        wait_drained(s, set, ABORT_WAIT_S);
    }
    srv_http_stop(s->http);
}

/* Tolerates a partial start (every pointer may be NULL). Order: engine
 * (its thread calls notify into the HTTP slots), then HTTP, then what both
 * used: model, tokenizer, chat. */
static void free_server(srv_server *s)
{
    if (s->eng) {
        engine_stop(s->eng);
        engine_free(s->eng);
    }
    srv_http_free(s->http); /* after the engine thread: it may still hold notify pointers */
    model_free(s->m);
    tok_free(s->tok);
    srv_metrics_free(s->metrics);
    srv_chat_free(s->chat);
    srv_opts_free(&s->opts);
    inferd_free(s);
}

/* The server's whole life on the calling (main) thread; returns the exit
 * status: 0 after a clean shutdown, 1 when start-up failed, 2 for invalid
 * options. Takes ownership of o's strings in every case (o is left
 * zeroed). NOTE: the signal mask must be set before srv_http_start and
 * engine_start create threads, which inherit it. SIGPIPE is ignored
 * process-wide: a client that hangs up mid-write must cost an EPIPE, not
 * the process. */
int srv_run(srv_opts *o)
{
    if (srv_opts_validate(o) != INFERD_OK) {
        INFERD_LOG_ERROR("%s", inferd_last_error());
        srv_opts_free(o);
        return 2;
    }
    /* a missing model directory (or a hub id) is said before anything
     * starts; a start-up failure (1) like any model that does not load */
    if (model_dir_check(o->model.model_dir) != INFERD_OK) {
        INFERD_LOG_ERROR("%s", inferd_last_error());
        srv_opts_free(o);
        return 1;
    }
    if (srv_guard_resolve_key(o) != INFERD_OK) { /* --api-key-file / INFERD_API_KEY */
        INFERD_LOG_ERROR("%s", inferd_last_error());
        srv_opts_free(o);
        return 2;
    }
    srv_server *s = inferd_calloc(1, sizeof *s);
    s->opts = *o; /* takes over the strings */
    memset(o, 0, sizeof *o);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();
    s->metrics = srv_metrics_new();
    if (srv_http_start(s) != INFERD_OK) {
        INFERD_LOG_ERROR("%s", inferd_last_error());
        free_server(s);
        return 1;
    }
    INFERD_LOG_INFO("listening on http://%s:%d; loading %s", s->opts.host, srv_http_port(s->http),
             s->opts.model.model_dir);
    if (!load(s)) {
        INFERD_LOG_ERROR("loading the model failed: %s", inferd_last_error());
        srv_http_stop(s->http);
        free_server(s);
        return 1;
    }
    atomic_store(&s->ready, true);
    INFERD_LOG_INFO("ready: model '%s' (max_model_len %d, vocab %d, chat template %s) on http://%s:%d",
             s->opts.served_model_name, s->max_model_len, s->vocab_size, srv_chat_ready(s->chat) ? "on" : "off",
             s->opts.host, srv_http_port(s->http));
    int sig = serve_loop(s, &set);
    shutdown_server(s, sig, &set);
    free_server(s);
    INFERD_LOG_INFO("shut down cleanly");
    return 0;
}
