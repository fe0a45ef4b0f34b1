/* scheduler/engine_opts.c: the engine option table and the validation
 * engine_create runs with it.
 *
 * The engine's own rows are enable-prefix-caching, async-scheduling and
 * max-queued-requests.
 * Its step limits (max_num_seqs, max_num_batched_tokens, max_model_len) are
 * rows of the model table (model/model_opts.c), because the model sizes its
 * buffers from them at load; here they are checked against those very rows,
 * so the command line, model_load and engine_create share one set of
 * bounds; their defaults come from those rows too.
 *
 * Trade-off: engine_opts keeps its own copies of the three step limits
 * (the engine clamps them to the loaded model, which may have been built
 * with smaller ones), so they are copied from model_opts by
 * engine_opts_from_model rather than shared; the k_model_limits map below
 * is the one place that ties each copy to its row.
 */
#include <stddef.h>
#include <string.h>

#include "common/util.h"
#include "scheduler/engine.h"

#define OFF(f) offsetof(engine_opts, f)

/* max-queued-requests: 1 << 24 is a sanity cap, not a tuned value; it keeps
 * engine_submit's pending + waiting count far from int overflow. */
static const opt_row k_rows[] = {
    {.name = "enable-prefix-caching", .kind = OPT_BOOL, .off = OFF(enable_prefix_caching), .def = 1,
     .help = "reuse the KV blocks of shared prompt prefixes"},
    {.name = "async-scheduling", .kind = OPT_BOOL, .off = OFF(async_scheduling), .def = 1,
     .help = "plan and launch each step while the one before runs (the GPU does not wait for the host)"},
    {.name = "max-queued-requests", .kind = OPT_INT, .off = OFF(max_queued_requests), .min = 1, .max = 1 << 24,
     .def = 1024, .help = "waiting requests beyond which new ones are refused (HTTP 429)"},
};
#undef OFF

/* The model rows that bound engine_opts' step limits, by engine_opts field. */
static const struct {
    const char *row;
    size_t off;
} k_model_limits[] = {
    {"max-num-seqs", offsetof(engine_opts, max_num_seqs)},
    {"max-num-batched-tokens", offsetof(engine_opts, max_num_batched_tokens)},
    {"max-model-len", offsetof(engine_opts, max_model_len)},
};

/* Every field at its row's default, the step limits at the model rows'.
 * NOTE: r is not checked for NULL: the three names must match rows of
 * model/model_opts.c exactly; renaming one there crashes here at the first
 * engine_opts_default (every test that builds an engine calls it). */
void engine_opts_default(engine_opts *o)
{
    memset(o, 0, sizeof *o);
    opt_defaults(k_rows, INFERD_ARRAY_LEN(k_rows), o);
    size_t nm;
    const opt_row *mrows = model_opts_rows(&nm);
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_model_limits); i++) {
        const opt_row *r = opt_find(mrows, nm, k_model_limits[i].row, strlen(k_model_limits[i].row));
        *(int *)((char *)o + k_model_limits[i].off) = (int)r->def;
    }
}

const opt_row *engine_opts_rows(size_t *n)
{
    *n = INFERD_ARRAY_LEN(k_rows);
    return k_rows;
}

/* Copy the step limits that were parsed into the model options (the CLI
 * and --config fill model_opts once); the other engine fields are kept. */
void engine_opts_from_model(engine_opts *eo, const model_opts *mo)
{
    eo->max_num_seqs = mo->max_num_seqs;
    eo->max_num_batched_tokens = mo->max_num_batched_tokens;
    eo->max_model_len = mo->max_model_len;
}

/* The check engine_create runs first: the engine rows, then each step limit
 * against its model row. opt_validate/opt_check_value set the error message
 * (naming the field and its range), so the caller only forwards the
 * status. Pure function, any thread. */
inferd_status engine_opts_validate(const engine_opts *o)
{
    if (!opt_validate(k_rows, INFERD_ARRAY_LEN(k_rows), o, "engine options"))
        return INFERD_ERR_INVALID_ARG;
    size_t nm;
    const opt_row *mrows = model_opts_rows(&nm);
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_model_limits); i++) {
        const opt_row *r = opt_find(mrows, nm, k_model_limits[i].row, strlen(k_model_limits[i].row));
        int v = *(const int *)((const char *)o + k_model_limits[i].off);
        if (!opt_check_value(r, v, "engine options"))
            return INFERD_ERR_INVALID_ARG;
    }
    return INFERD_OK;
}
