/* bench/bench_dataset.h: prompts for `inferd bench serve`: random token
 * prompts of exact lengths, ShareGPT conversations, or a JSONL file; plus the
 * request arrival schedule (Poisson or gamma-bursty, as vLLM's).
 */
#ifndef INFERD_BENCH_BENCH_DATASET_H
#define INFERD_BENCH_BENCH_DATASET_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    char *text;       /* prompt text; NULL when the prompt is ids */
    int32_t *ids;     /* [n_ids] prompt token ids; NULL when text */
    int n_ids;
    int prompt_len;   /* tokens the prompt was built with (estimate when !exact) */
    bool exact;       /* the server must count exactly prompt_len tokens */
    int output_len;   /* max_tokens to ask for */
} bench_prompt;

typedef enum { BENCH_DATA_RANDOM = 0, BENCH_DATA_SHAREGPT, BENCH_DATA_JSONL } bench_data_kind;

typedef struct {
    bench_data_kind kind;
    const char *path;       /* sharegpt / jsonl file */
    int num_prompts;
    int input_len;          /* random */
    int output_len;         /* random */
    double range_ratio;     /* random: lengths uniform in [L*(1-r), L*(1+r)] */
    int fixed_output_len;   /* sharegpt/jsonl: > 0 overrides the data's length */
    uint64_t seed;
    bool text_only;         /* prompts must be text (chat endpoint); else random
                             * prompts are sent as token ids (/v1/completions) */
    const tokenizer *tok;   /* NULL: no tokenizer (lengths are estimates) */
} bench_dataset_opts;

/* Parse "random" | "sharegpt" | "jsonl"; false when unknown. */
bool bench_data_kind_parse(const char *s, bench_data_kind *out);

/* Build o->num_prompts prompts (*out heap, bench_dataset_free). Random
 * prompts use ids that are not special tokens and decode to valid UTF-8 on
 * their own; as ids they are exact, as text they are re-encoded and adjusted
 * until the tokenizer counts the requested length (within 10 tries). Without
 * a tokenizer ids come from [3, 259) (byte tokens in Llama-style vocabs) and
 * text prompts are common English words, about one token each. ShareGPT
 * keeps conversations whose first two turns pass vLLM's filters (prompt and
 * completion >= 4 tokens, prompt <= 1024, sum <= 2048) after a seeded
 * shuffle; a short file is cycled. JSONL lines are objects with "prompt"
 * (string or id array; ids need a tokenizer when text_only) and optional
 * "output_len" or "max_tokens" (default 256); a short file is cycled. */
inferd_status bench_dataset_build(const bench_dataset_opts *o, bench_prompt **out, int *n_out);
void bench_dataset_free(bench_prompt *p, int n);

/* Arrival offsets out[n] (seconds, out[0] = 0): gaps are gamma distributed
 * with shape `burstiness` and mean 1/rate (burstiness 1 = Poisson process).
 * rate = inf (or <= 0) puts every arrival at 0. */
void bench_arrivals(int n, double rate, double burstiness, uint64_t seed, double *out);

/* One gamma(shape, scale=1) draw from the counter-based stream (seed, *ctr);
 * advances *ctr. Exposed for tests. */
double bench_gamma(double shape, uint64_t seed, uint64_t *ctr);

#endif
