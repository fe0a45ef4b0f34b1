/* cli/gen_batch.h: `inferd generate --prompts-file FILE`: many prompts
 * run concurrently through the continuous-batching engine. */
#ifndef INFERD_CLI_GEN_BATCH_H
#define INFERD_CLI_GEN_BATCH_H

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "scheduler/engine.h"

/* Run every prompt of `path` through one engine on m (tok may be NULL: then
 * only prompt_ids lines work and no text is produced).
 *
 * FILE is either JSON lines, one object per line:
 *   {"prompt": "text"} or {"prompt_ids": [1, 2, 3]}, optionally with
 *   max_tokens, min_tokens, temperature, top_p, top_k, min_p, seed,
 *   stop (string or list of strings), stop_token_ids (list), ignore_eos;
 *   unset fields take `defaults`;
 * or plain text, one prompt per line (detected by the first non-blank line
 * not starting with '{'). Blank lines are skipped.
 *
 * stdout: one JSON object per prompt, in input order:
 *   {"index", "text", "token_ids", "finish_reason", "prompt_tokens",
 *    "completion_tokens"} (+ "error" when finish_reason is "error").
 * token_ids include a final stop token (EOS / stop_token_ids) when that is
 * what stopped the request (vLLM semantics); text never does.
 * stderr: aggregate prompt and generation tok/s, preemptions, prefix-cache
 * hits. A bad line gets a one-line error naming the line (nothing runs).
 *
 * Returns the process exit code: 0 ok, 1 runtime failure, 2 bad input. */
int gen_run_prompts_file(model *m, const tokenizer *tok, const engine_opts *eo,
                         const sampling_params *defaults, const char *path);

#endif
