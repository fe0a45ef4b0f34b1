/* cli/gen_batch.h: `inferd generate`: prompts run through the
 * continuous-batching engine. --prompts-file runs many concurrently;
 * --prompt / --prompt-ids run as a batch of one through the same code
 * (parse, submit, collect), only the output format differs. */
#ifndef INFERD_CLI_GEN_BATCH_H
#define INFERD_CLI_GEN_BATCH_H

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "scheduler/engine.h"

typedef enum {
    GEN_OUT_JSON = 0, /* one JSON object per prompt (below); stderr: aggregate summary */
    GEN_OUT_TEXT,     /* the generated text, streamed; stderr: the request's timing line */
    GEN_OUT_IDS,      /* the generated token ids, space-separated; stderr: the timing line */
} gen_out_mode;

/* What to run. Exactly one of prompts_file and prompt_ids. */
typedef struct {
    const sampling_params *defaults; /* every prompt's params; a line's fields override them */
    bool cap_max_tokens;   /* lower defaults->max_tokens to the room each prompt leaves
                              (sched_fit_room) instead of failing; a line's own max_tokens
                              is never lowered */
    gen_out_mode out;
    const char *prompts_file;
    const int32_t *prompt_ids; /* one prompt [n_prompt] */
    int n_prompt;
} gen_job;

/* Run a job through one engine on m (tok may be NULL: then only token-id
 * prompts work, no text is produced and stop strings are refused).
 *
 * A prompts file is either JSON lines, one object per line:
 *   {"prompt": "text"} or {"prompt_ids": [1, 2, 3]}, optionally with any
 *   key of the sampling table (scheduler/engine.h: max_tokens, min_tokens,
 *   temperature, top_p, top_k, min_p, seed, stop (string or list of
 *   strings), stop_token_ids (list), ignore_eos, logprobs); unset fields
 *   take `defaults`;
 * or plain text, one prompt per line (detected by the first non-blank line
 * not starting with '{'). Blank lines are skipped.
 *
 * GEN_OUT_JSON prints one object per prompt, in input order:
 *   {"index", "text", "token_ids", "finish_reason", "prompt_tokens",
 *    "completion_tokens"} (+ "logprobs": [{"id", "logprob", "top": [[id,
 *   logprob], ...]}] when asked, + "error" when finish_reason is "error").
 * token_ids include a final stop token (EOS / stop_token_ids) when that is
 * what stopped the request (vLLM semantics); text never does. A bad line
 * gets a one-line error naming the line (nothing runs).
 *
 * Returns the process exit code: 0 ok, 1 runtime failure, 2 bad input. */
int gen_run(model *m, const tokenizer *tok, const engine_opts *eo, const gen_job *job);

/* gen_run of a prompts file with GEN_OUT_JSON and fixed defaults. */
int gen_run_prompts_file(model *m, const tokenizer *tok, const engine_opts *eo,
                         const sampling_params *defaults, const char *path);

/* Parse and validate one JSON prompts-file line (token-id prompts only)
 * without running it: 0 when gen_run would accept it, 2 with the one-line
 * error printed otherwise. For the request-field tables. */
int gen_check_line(const char *line, int vocab, const sampling_params *defaults);

#endif
