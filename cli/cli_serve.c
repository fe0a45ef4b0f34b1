/* cli/cli_serve.c: `inferd serve`: flags and the --config JSON file into an
 * srv_opts through the option tables (model, engine, server, and the CLI's
 * glue rows), then srv_run (server/srv_main.c) runs the server.
 *
 * Precedence is built by order of application: defaults, then the config
 * file, then the command line (left to right, last wins). A flag and a
 * config key for the same row go through the same row (common/opt), so they
 * accept and reject the same values. Config files are strict: an unknown
 * key or a value of the wrong type is an error naming the key, so a typo
 * does not silently fall back to a default.
 *
 * Not done here: any server logic. This file ends at a validated srv_opts
 * (server/ includes no CLI header); srv_run owns everything after. The
 * parse entry point is exported (cli_serve.h) so the option-table tests can
 * drive it without starting a server.
 */
#include "cli/cli_serve.h"

#include <string.h>

#include "common/alloc.h"
#include "common/util.h"
#include "cli/cli.h"

/* Largest config file read. */
/* 16 MiB is far above any real config; the bound only keeps a mistaken
 * --config /dev/zero or a huge file from being read whole into memory. */
#define CONFIG_MAX_BYTES (16 << 20)

/* Model, engine and glue rows (cli_shared_groups), then the server's. */
#define SERVE_GROUPS (CLI_SHARED_GROUPS + 1)

/* NOTE: the groups point into *o and *glue; they are rebuilt for each use
 * and never outlive the structs. */
static void serve_groups(srv_opts *o, cli_glue_opts *glue, opt_group g[SERVE_GROUPS])
{
    cli_shared_groups(&o->model, &o->engine, glue, g);
    g[CLI_SHARED_GROUPS].rows = srv_opts_rows(&g[CLI_SHARED_GROUPS].n);
    g[CLI_SHARED_GROUPS].base = o;
}

/* --help: the four tables, printed from the rows themselves. */
void cli_serve_usage(FILE *f)
{
    size_t n;
    const opt_row *t = srv_opts_rows(&n);
    fprintf(f, "usage: inferd serve DIR [options]   (or --model DIR)\n\n"
               "OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/models,\n"
               "/tokenize, /detokenize, /health, /metrics. DIR is a local Hugging Face model directory\n"
               "(config.json, *.safetensors, tokenizer.json); a hub id is not downloaded.\n"
               "Options (also as JSON keys in --config):\n\n");
    fprintf(f, "  %-32s %s\n", "--config FILE", "JSON object of options (keys as below); flags override it");
    cli_shared_usage(f);
    opt_usage(f, t, n);
    fprintf(f, "  %-32s %s\n", "--help", "this text");
}

/* Strict: opt_apply_json refuses unknown keys and wrong types, naming the
 * key. o may be partly updated when it fails (keys before the bad one are
 * applied); callers treat any failure as fatal, so that is harmless. */
bool cli_serve_apply_json(srv_opts *o, cli_glue_opts *glue, const char *json, const char *name)
{
    cli_glue_opts scratch;
    if (!glue) {
        cli_glue_default(&scratch);
        glue = &scratch;
    }
    cJSON *root = cJSON_Parse(json);
    if (!root) {
        inferd_set_error(INFERD_ERR_FORMAT, "%s: not valid JSON", name);
        return false;
    }
    opt_group g[SERVE_GROUPS];
    serve_groups(o, glue, g);
    bool ok = opt_apply_json(g, SERVE_GROUPS, root, name);
    cJSON_Delete(root);
    return ok;
}

/* Read and apply one config file; false with the error set (I/O, size,
 * JSON or option error). */
static bool load_config(srv_opts *o, cli_glue_opts *glue, const char *path)
{
    char *text;
    size_t len;
    if (!*path) {
        inferd_set_error(INFERD_ERR_INVALID_ARG, "--config needs a file name");
        return false;
    }
    if (util_read_file(path, CONFIG_MAX_BYTES, &text, &len) != INFERD_OK)
        return false;
    bool ok = cli_serve_apply_json(o, glue, text, path);
    inferd_free(text);
    return ok;
}

/* The --config argument ("" when it has no value: load_config refuses
 * it), or NULL; *help when --help / -h is present. A pre-scan, because the
 * file must be applied before the flags whatever their position on the line
 * (flags override the file). With several --config the last one is used. */
static const char *find_config(int argc, char **argv, bool *help)
{
    const char *config = NULL;
    *help = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            *help = true;
        else if (strcmp(argv[i], "--config") == 0)
            config = i + 1 < argc ? argv[++i] : ""; /* "" is refused as a missing file name */
        else if (strncmp(argv[i], "--config=", 9) == 0)
            config = argv[i] + 9;
    }
    return config;
}

/* The positional model (`inferd serve DIR`, vLLM's `vllm serve MODEL`):
 * stored through the model row, so it is the same field as --model and
 * the --config key "model", and overrides the config file like any flag.
 * Giving it both ways is refused unless both name the same directory. */
static bool set_positional_model(srv_opts *o, const char *dir, const char *flag_model)
{
    if (flag_model && strcmp(flag_model, dir) != 0) {
        inferd_set_error(INFERD_ERR_INVALID_ARG, "the model is given twice ('%s' and --model %s): give it once",
                         dir, flag_model);
        return false;
    }
    size_t n;
    const opt_row *rows = model_opts_rows(&n);
    const opt_row *row = opt_find(rows, n, "model", 5);
    return row && opt_set(row, &o->model, dir);
}

/* Apply the flags (the --config one was read before them). Every argument
 * is a row's flag, except one positional argument: the model directory. */
static bool parse_flags(srv_opts *o, cli_glue_opts *glue, int argc, char **argv)
{
    opt_group g[SERVE_GROUPS];
    serve_groups(o, glue, g);
    const char *positional = NULL;
    char *flag_model = NULL; /* --model's last value, to compare with the positional one */
    bool ok = true;
    for (int i = 1; i < argc && ok; i++) {
        const char *a = argv[i];
            /* already applied by load_config; skip the flag and its value */
        if (strcmp(a, "--config") == 0) {
            i++;
            continue;
        }
        if (strncmp(a, "--config=", 9) == 0)
            continue;
        const opt_row *matched = NULL;
        int r = opt_parse_arg(g, SERVE_GROUPS, argc, argv, &i, &matched);
        if (r > 0 && matched && strcmp(matched->name, "model") == 0) {
            inferd_free(flag_model);
            flag_model = inferd_strdup(o->model.model_dir);
        }
        if (r < 0) {
            ok = false;
        } else if (r == 0 && strncmp(a, "-", 1) != 0 && !positional && *a) {
            positional = a;
        } else if (r == 0) {
            if (strncmp(a, "--", 2) != 0)
                inferd_set_error(INFERD_ERR_INVALID_ARG, "unexpected argument '%s'%s", a,
                                 positional ? " (the model directory was already given)" : "");
            else
                inferd_set_error(INFERD_ERR_INVALID_ARG, "unknown option '--%.*s'", (int)strcspn(a + 2, "="), a + 2);
            ok = false;
        }
    }
    if (ok && positional)
        ok = set_positional_model(o, positional, flag_model);
    inferd_free(flag_model);
    return ok;
}

/* --help wins over everything else, even over a bad --config, so help is
 * always reachable. srv_opts_validate runs last: cross-field rules see the
 * final values whatever their source. */
int cli_serve_parse(srv_opts *o, cli_glue_opts *glue, int argc, char **argv, FILE *out)
{
    cli_glue_opts scratch;
    if (!glue) {
        cli_glue_default(&scratch);
        glue = &scratch;
    }
    bool help;
    const char *config = find_config(argc, argv, &help);
    if (help) {
        cli_serve_usage(out);
        return 1;
    }
    if (config && !load_config(o, glue, config))
        return 2;
    if (!parse_flags(o, glue, argc, argv))
        return 2;
    return srv_opts_validate(o) == INFERD_OK ? 0 : 2;
}

/* `inferd serve`: parse, apply the log level, run until shutdown. srv_run
 * takes over o's strings (and zeroes o); on a parse failure they are freed
 * here. */
int cli_serve(int argc, char **argv)
{
    srv_opts o;
    srv_opts_default(&o);
    cli_glue_opts glue;
    cli_glue_default(&glue);
    int rc = cli_serve_parse(&o, &glue, argc, argv, stdout);
    if (rc != 0) {
        if (rc == 2)
            fprintf(stderr, "inferd serve: %s\n(see inferd serve --help)\n", inferd_last_error());
        srv_opts_free(&o);
        return rc == 1 ? 0 : 2;
    }
    cli_glue_apply(&glue);
    if ((rc = cli_follow_node(&o.model)) >= 0) { /* --node-rank > 0: node 0 serves */
        srv_opts_free(&o);
        return rc;
    }
    return srv_run(&o); /* takes over o */
}
