/* server/srv_chat.h: chat prompts: the model's own Jinja chat template
 * rendered by jinja2 (srv_jinja.h) exactly as HF transformers'
 * apply_chat_template does, then tokenized so that text which came from a
 * message's content is never read as special tokens.
 *
 * Where the template comes from (srv_chat_load): --chat-template NAME (a
 * built-in template text for the llama-2, llama-3, llama-3.1, chatml and
 * mistral families), --chat-template FILE or an inline template; otherwise
 * the tokenizer's (tokenizer_config.json `chat_template`, a string or the
 * named-list form's "default", or chat_template.jinja). The template sees
 * messages, add_generation_prompt, tools and documents (None when not
 * given), every special token set in tokenizer_config.json (bos_token,
 * eos_token, unk_token, pad_token, ...; unset ones stay undefined) and
 * extra kwargs (a request's chat_template_kwargs). continue_final_message
 * (HF's) cuts the rendering after the final message's content.
 *
 * A request's messages reach the template as vLLM hands them over
 * (srv_chat_adapt_messages, after srv_openai.c normalized them): roles as
 * given, tool-call arguments parsed from their JSON string, and contents as
 * strings (text parts joined by "\n") unless the template loops over
 * contents, in which case as lists of text parts.
 *
 * Special-token injection (issue 11, finding 6): srv_chat_encode renders
 * with the special-token text found in message contents fenced by the
 * noncharacters U+FDD0 / U+FDD1, strips the fences, and tokenizes the
 * prompt with special-token parsing everywhere except in the fenced spans
 * (tok_encode_ex). Clients may not send those two code points. The server
 * option --allow-special-tokens-in-content turns this off for trusted
 * clients.
 *
 * A srv_chat is immutable once built: any thread may render with it.
 */
#ifndef INFERD_SERVER_SRV_CHAT_H
#define INFERD_SERVER_SRV_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "server/srv_errors.h"
#include "tokenizer/tokenizer.h"

/* Built-in template texts, chosen with --chat-template NAME. */
typedef enum {
    SRV_CHAT_NONE = 0,
    SRV_CHAT_LLAMA2,  /* <s>[INST] <<SYS>>\n..\n<</SYS>>\n\n.. [/INST] */
    SRV_CHAT_LLAMA3,  /* <|start_header_id|>role<|end_header_id|>\n\n..<|eot_id|> */
    SRV_CHAT_LLAMA31, /* Llama 3.1+: Llama 3 plus the "Cutting Knowledge Date" system block */
    SRV_CHAT_CHATML,  /* <|im_start|>role\n..<|im_end|>\n */
    SRV_CHAT_MISTRAL, /* <s>[INST] .. [/INST]..</s> (system folded into the first user turn) */
    SRV_CHAT_FAMILY_COUNT
} srv_chat_family;

/* OpenAI's roles. A role reaches the template as its name, unchanged
 * (HF and vLLM pass "developer" and "tool" through as given). */
typedef enum {
    SRV_ROLE_SYSTEM = 0,
    SRV_ROLE_USER,
    SRV_ROLE_ASSISTANT,
    SRV_ROLE_DEVELOPER,
    SRV_ROLE_TOOL,
    SRV_ROLE_COUNT
} srv_chat_role;

/* "system", "user", ... ("user" for an out-of-range value). */
const char *srv_chat_role_name(srv_chat_role r);

/* A message as role + text: /v1/responses input, and the flat view of a
 * chat request's messages (contents joined, a null content as ""). */
typedef struct {
    srv_chat_role role;
    char *content; /* heap, NUL-terminated, valid UTF-8 */
} srv_chat_msg;

/* Bounds on what a client hands the template (checked by the request
 * parsers, srv_openai.c): counts, nesting and size, so that a request
 * cannot make the render or the JSON hand-over to Python arbitrarily
 * expensive or deep. The body size limit bounds the rest. */
#define SRV_CHAT_MAX_MESSAGES 4096     /* messages per request */
#define SRV_CHAT_MAX_PARTS 256         /* content parts per message */
#define SRV_CHAT_MAX_TOOL_CALLS 128    /* tool_calls per assistant message */
#define SRV_CHAT_MAX_ITEMS 256         /* entries of tools / documents */
#define SRV_CHAT_MAX_KWARGS 64         /* members of chat_template_kwargs */
#define SRV_CHAT_MAX_KWARGS_BYTES 65536 /* chat_template_kwargs as compact JSON */
#define SRV_CHAT_MAX_DEPTH 16          /* nesting inside one tool, document, kwarg or arguments value */

/* Parse a --chat-template NAME ("llama-2", "llama-3", "llama-3.1", "chatml",
 * "mistral", and the spellings without '-'); false when unknown. */
bool srv_chat_from_name(const char *name, srv_chat_family *out);
const char *srv_chat_name(srv_chat_family f);
/* "llama-2, llama-3, llama-3.1, chatml, mistral" (for messages). */
const char *srv_chat_names(void);
/* The Jinja text of a built-in family (NULL for NONE). */
const char *srv_chat_builtin_source(srv_chat_family f);
/* The built-in family whose markers a template contains (NONE when none):
 * informational only (logs), rendering always uses the template itself. */
srv_chat_family srv_chat_detect(const char *jinja_template);
/* End-of-turn text of a template beyond the model's EOS: the first of
 * <|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|END_OF_TURN_TOKEN|>
 * that its source contains, or NULL. */
const char *srv_chat_end_marker_of(const char *jinja_template);
/* srv_chat_end_marker_of(srv_chat_builtin_source(f)). */
const char *srv_chat_end_marker(srv_chat_family f);

/* ---- a loaded template ------------------------------------------------------ */

typedef struct srv_chat srv_chat;

/* The server's template for tokenizer tok: family (not NONE) > template_arg
 * (a file path, else inline Jinja) > the tokenizer's own. A template given
 * explicitly that cannot be read or compiled is an error (INVALID_ARG,
 * message set); the model's own template failing to compile, no template
 * at all, or no Jinja engine give OK with a srv_chat whose srv_chat_ready()
 * is false (chat requests then get 400 with the reason, and completions
 * still work). tok must outlive the srv_chat. */
inferd_status srv_chat_load(const tokenizer *tok, srv_chat_family family, const char *template_arg,
                            bool allow_special_in_content, srv_chat **out);
/* A template from its text (tests, tools). specials: a JSON object of
 * special-token variables ({"bos_token": "<s>", ...}) or NULL to take them
 * from tok's tokenizer_config.json (tok may be NULL: render only). false
 * with *err set when it does not compile. */
bool srv_chat_new(const char *name, const char *source, const tokenizer *tok, const cJSON *specials,
                  bool allow_special_in_content, srv_chat **out, srv_error *err);
void srv_chat_free(srv_chat *c);

bool srv_chat_ready(const srv_chat *c);
/* Where the template came from ("built-in llama-3", "FILE", "the model's
 * tokenizer_config.json", ...), or why there is none. */
const char *srv_chat_describe(const srv_chat *c);
/* End-of-turn stop: a special token id (>= 0) or else text (NULL = none). */
int32_t srv_chat_stop_id(const srv_chat *c);
const char *srv_chat_stop_str(const srv_chat *c);

/* Template inputs besides the messages. */
typedef struct {
    bool add_generation_prompt;
    bool continue_final_message; /* cut after the final message's content (HF's; excludes add_generation_prompt) */
    const cJSON *tools;     /* array or NULL (the template sees None) */
    const cJSON *documents; /* array or NULL (None) */
    const cJSON *kwargs;    /* object of extra variables (chat_template_kwargs) or NULL */
    const char *fixed_now;  /* strftime_now() clock, "2026-01-15T12:00:00"; NULL = now */
    bool add_special_tokens; /* srv_chat_encode: also apply the post-processor (BOS); /tokenize's option */
} srv_chat_inputs;

/* Render messages given as JSON (any OpenAI/HF shape: tool_calls, null
 * content, content parts, ...; passed to the template unchanged, as HF's
 * apply_chat_template does). *text is heap, *len bytes. A template
 * exception is a 400 (SRV_ERR_INVALID, param "messages") carrying the
 * template's message; so is continue_final_message with
 * add_generation_prompt, or a final message the rendering does not hold. */
bool srv_chat_render_json(const srv_chat *c, const cJSON *messages, const srv_chat_inputs *in, char **text,
                          size_t *len, srv_error *err);

/* The messages of a request as vLLM hands them to this template (a new
 * tree, the caller's): a template that iterates over contents
 * (srv_jinja_iterates_content) gets every content as a list of
 * {"type": "text", "text"} parts (a string becomes one part, null none);
 * any other gets a string (parts joined with "\n", null as ""). The rest of
 * each message is copied as it is. */
cJSON *srv_chat_adapt_messages(const srv_chat *c, const cJSON *messages);

/* The chat prompt's token ids: messages (a request's, already validated
 * and normalized by srv_openai.c) adapted by srv_chat_adapt_messages,
 * rendered, and tokenized without the post-processor (the template writes
 * BOS) unless in->add_special_tokens. Client text (every string in
 * messages, tools, documents and kwargs) is protected from special-token
 * parsing unless the srv_chat allows it. 400 when such a string holds
 * U+FDD0/U+FDD1 or the template raises. *ids is heap. */
bool srv_chat_encode_json(const srv_chat *c, const cJSON *messages, const srv_chat_inputs *in, int32_t **ids,
                          int *n_ids, srv_error *err);

/* srv_chat_encode_json of role + text messages. */
bool srv_chat_encode(const srv_chat *c, const srv_chat_msg *msgs, int n_msgs, const srv_chat_inputs *in,
                     int32_t **ids, int *n_ids, srv_error *err);

/* Render a built-in family's template (compiled once per process) with the
 * given BOS/EOS texts and add_generation_prompt true. *out is heap. */
bool srv_chat_render(srv_chat_family f, const srv_chat_msg *msgs, int n_msgs, const char *bos, const char *eos,
                     char **out, srv_error *err);

#endif
