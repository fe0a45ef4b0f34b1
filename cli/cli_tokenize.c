/* cli/cli_tokenize.c: `inferd tokenize` and `inferd detokenize`.
 *
 *   inferd tokenize (--model DIR | --tokenizer DIR) [--no-special] [--] TEXT
 *   inferd detokenize (--model DIR | --tokenizer DIR) [--keep-special] 1,2,3
 *
 * tokenize prints the ids as a JSON array on one line with HF semantics:
 * special-token text in TEXT is parsed into special ids and BOS is added
 * when the post-processor says so; --no-special treats special-token text
 * as plain text. detokenize prints the text, skipping special tokens unless
 * --keep-special. Both read DIR/tokenizer.json (+ tokenizer_config.json), so
 * a directory with only the tokenizer files works. Exit codes: 0 ok, 2 usage
 * error (one line on stderr), 1 runtime failure (bad file, id outside the
 * vocab, invalid UTF-8).
 *
 * These commands load only the tokenizer, never the model, so they work on
 * a machine without the weights or a GPU (tests/cli/test_tok_cli.c runs
 * them as a user would).
 */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"
#include "tokenizer/tokenizer.h"
#include "cli/cli.h"

typedef struct {
    const char *dir;
    const char *arg;   /* TEXT or the id list */
    bool flag;         /* --no-special / --keep-special */
    bool help;
} tok_cli_args;

/* --help texts; printed to stdout (exit 0). Usage errors print one line to
 * stderr instead of the whole text. */
static void usage_tokenize(FILE *f)
{
    fprintf(f, "usage: inferd tokenize (--model DIR | --tokenizer DIR) [--no-special] [--] TEXT\n"
               "\n"
               "Print the token ids of TEXT as a JSON array on one line (HF tokenizers semantics:\n"
               "special-token text is parsed, BOS is added when the tokenizer's post-processor adds it).\n"
               "\n"
               "  --model DIR       model directory (reads DIR/tokenizer.json + tokenizer_config.json)\n"
               "  --tokenizer DIR   directory holding only the tokenizer files\n"
               "  --no-special      treat special-token text in TEXT as plain text\n"
               "  --                end of options (TEXT may start with a dash)\n");
}

static void usage_detokenize(FILE *f)
{
    fprintf(f, "usage: inferd detokenize (--model DIR | --tokenizer DIR) [--keep-special] IDS\n"
               "\n"
               "Print the text of comma-separated token ids (e.g. 1,15043,3186).\n"
               "\n"
               "  --model DIR       model directory (reads DIR/tokenizer.json + tokenizer_config.json)\n"
               "  --tokenizer DIR   directory holding only the tokenizer files\n"
               "  --keep-special    print special tokens (skipped by default)\n");
}

/* Parse argv; returns 0 ok, 2 usage error (message printed).
 * Shared by both commands: flag_name is the one command-specific switch.
 * Options and the positional argument may come in any order; after "--"
 * everything is positional, so a TEXT starting with '-' can be given. A
 * lone "-" is positional as well. --help returns at once with a->help set
 * (the caller prints it), before the required arguments are checked.
 * Strings in *a point into argv. */
/* Parse argv; returns 0 ok, 2 usage error (message printed). */
static int parse_args(const char *cmd, const char *flag_name, int argc, char **argv, tok_cli_args *a)
{
    memset(a, 0, sizeof *a);
    bool opts = true;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (opts && (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0)) {
            a->help = true;
            return 0;
        }
        if (opts && strcmp(s, "--") == 0) {
            opts = false;
        } else if (opts && (strcmp(s, "--model") == 0 || strcmp(s, "--tokenizer") == 0)) {
            if (i + 1 >= argc) {
                fprintf(stderr, "inferd %s: %s needs a directory\n", cmd, s);
                return 2;
            }
            a->dir = argv[++i];
        } else if (opts && (strncmp(s, "--model=", 8) == 0 || strncmp(s, "--tokenizer=", 12) == 0)) {
            a->dir = strchr(s, '=') + 1;
        } else if (opts && strcmp(s, flag_name) == 0) {
            a->flag = true;
        } else if (opts && s[0] == '-' && s[1] != '\0') {
            fprintf(stderr, "inferd %s: unknown option '%s' (see --help)\n", cmd, s);
            return 2;
        } else if (a->arg) {
            fprintf(stderr, "inferd %s: more than one %s argument (quote the text)\n", cmd,
                    strcmp(cmd, "tokenize") == 0 ? "TEXT" : "IDS");
            return 2;
        } else {
            a->arg = s;
        }
    }
    if (!a->dir) {
        fprintf(stderr, "inferd %s: --model DIR or --tokenizer DIR is required (see --help)\n", cmd);
        return 2;
    }
    if (!a->arg) {
        fprintf(stderr, "inferd %s: missing %s (see --help)\n", cmd, strcmp(cmd, "tokenize") == 0 ? "TEXT" : "IDS");
        return 2;
    }
    return 0;
}

/* The tokenizer of dir, or NULL with the error printed (the caller exits
 * 1: a bad file is a runtime failure, not a usage error). */
static tokenizer *load_or_report(const char *cmd, const char *dir)
{
    tokenizer *t = NULL;
    if (tok_load(dir, &t) != INFERD_OK) {
        fprintf(stderr, "inferd %s: %s\n", cmd, inferd_last_error());
        return NULL;
    }
    return t;
}

/* The text is encoded as given (no trailing newline added or removed);
 * add_special is always on, parse_special unless --no-special. */
int cli_tokenize(int argc, char **argv)
{
    tok_cli_args a;
    int rc = parse_args("tokenize", "--no-special", argc, argv, &a);
    if (rc != 0)
        return rc;
    if (a.help) {
        usage_tokenize(stdout);
        return 0;
    }
    tokenizer *t = load_or_report("tokenize", a.dir);
    if (!t)
        return 1;
    int32_t *ids = NULL;
    int n = 0;
    if (tok_encode(t, a.arg, strlen(a.arg), true, !a.flag, &ids, &n) != INFERD_OK) {
        fprintf(stderr, "inferd tokenize: %s\n", inferd_last_error());
        tok_free(t);
        return 1;
    }
    putchar('[');
    for (int i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", (int)ids[i]);
    printf("]\n");
    inferd_free(ids);
    tok_free(t);
    return 0;
}

/* The id list is parsed before the tokenizer is loaded, so a malformed list
 * is a cheap usage error (2); ids outside the vocabulary are found by
 * tok_decode (1). The text is printed raw with one newline appended. */
int cli_detokenize(int argc, char **argv)
{
    tok_cli_args a;
    int rc = parse_args("detokenize", "--keep-special", argc, argv, &a);
    if (rc != 0)
        return rc;
    if (a.help) {
        usage_detokenize(stdout);
        return 0;
    }
    int32_t *ids = NULL;
    int n = 0;
    if (util_parse_int_list(a.arg, &ids, &n) != INFERD_OK) {
        fprintf(stderr, "inferd detokenize: bad id list '%s': expected comma-separated integers like 1,2,3\n",
                a.arg);
        return 2;
    }
    tokenizer *t = load_or_report("detokenize", a.dir);
    if (!t) {
        inferd_free(ids);
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    rc = 0;
    if (tok_decode(t, ids, n, !a.flag, &text, &len) != INFERD_OK) {
        fprintf(stderr, "inferd detokenize: %s\n", inferd_last_error());
        rc = 1;
    } else {
        fwrite(text, 1, len, stdout);
        putchar('\n');
        inferd_free(text);
    }
    inferd_free(ids);
    tok_free(t);
    return rc;
}
