/* server/srv_jinja.h: HuggingFace chat templates rendered by the reference
 * Jinja engine: Python's jinja2 (Debian's python3-jinja2), embedded through
 * libpython's C API.
 *
 * The environment is the one HF transformers builds for apply_chat_template
 * (utils/chat_template_utils.py): ImmutableSandboxedEnvironment with
 * trim_blocks and lstrip_blocks, the loopcontrols extension, a
 * {% generation %} block that renders its body, the globals raise_exception()
 * and strftime_now(), and a tojson filter that is plain json.dumps
 * (ensure_ascii=False, no HTML escaping). Templates come from the model
 * (tokenizer_config.json), so they are trusted code; the sandbox still keeps
 * them from reaching the interpreter.
 *
 * Threads: the interpreter is started once per process; a thread holds the
 * GIL only inside srv_jinja_compile / srv_jinja_render / srv_jinja_free, so
 * renders from many HTTP threads run one at a time and nothing else waits on
 * Python. Built with INFERD_JINJA off, every call fails with UNSUPPORTED and
 * srv_jinja_available() is false.
 */
#ifndef INFERD_SERVER_SRV_JINJA_H
#define INFERD_SERVER_SRV_JINJA_H

#include <stdbool.h>
#include <stddef.h>

#include "common/status.h"

typedef struct srv_jinja srv_jinja; /* one compiled template */

/* Why a compile or render failed: the Python exception's class name
 * ("TemplateError" from raise_exception, "TemplateSyntaxError",
 * "UndefinedError", "TypeError", ...) and its text. */
typedef struct {
    char type[64];
    char message[448];
} srv_jinja_error;

/* Start the interpreter and build the environment (idempotent, thread-safe;
 * called by srv_run at start-up, and lazily by the other calls). Returns
 * UNSUPPORTED (built without INFERD_JINJA) or UNAVAILABLE (the interpreter
 * or jinja2 failed to load) with the reason in inferd_last_error(). */
inferd_status srv_jinja_init(void);
/* Whether templates can be compiled (init succeeded). */
bool srv_jinja_available(void);
/* "jinja2 3.1.2 (Python 3.11.2)", or why it is unavailable. */
const char *srv_jinja_version(void);

/* Compile source (UTF-8) once. On failure returns false with *e filled
 * (a TemplateSyntaxError names the line). */
bool srv_jinja_compile(const char *source, srv_jinja **out, srv_jinja_error *e);
void srv_jinja_free(srv_jinja *t);

/* Render with the variables of vars_json, a JSON object whose members
 * become the template's variables (messages, add_generation_prompt, tools,
 * documents, bos_token, ..., extra kwargs), exactly as HF passes them.
 * fixed_now ("2026-01-15T12:00:00") fixes strftime_now()'s clock (tests);
 * NULL = the local time. continue_final: HF's continue_final_message: the
 * rendering is cut right after the final message's content (its last text
 * part when it is a list), keeping that content's trailing whitespace only
 * when the template kept it verbatim; a ValueError when the content is not
 * in the rendering. The cut runs in Python so that strip() and the search
 * use Python's Unicode rules, as HF's. *out is heap (inferd_free), UTF-8,
 * *out_len bytes (no NUL inside unless the template wrote one). On failure
 * (the template raised) returns false with *e filled. */
bool srv_jinja_render(const srv_jinja *t, const char *vars_json, const char *fixed_now, bool continue_final,
                      char **out, size_t *out_len, srv_jinja_error *e);

/* Whether the template loops over a message's content ({% for x in
 * message['content'] %} or .content): such templates expect OpenAI's list
 * of parts, the others a string. vLLM's "auto" content format makes the
 * same choice from the template's syntax tree; decided once at compile. */
bool srv_jinja_iterates_content(const srv_jinja *t);

#endif
