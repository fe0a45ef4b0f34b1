/* server/srv_chat.h: chat templates, written in C per model family.
 *
 * There is no Jinja engine: the family is detected from the marker strings of
 * tokenizer_config.json's `chat_template` (or forced with --chat-template
 * NAME), and each family's format is reproduced here byte for byte for the
 * message shapes the API accepts (system / user / assistant text).
 */
#ifndef INFERD_SERVER_SRV_CHAT_H
#define INFERD_SERVER_SRV_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "server/srv_errors.h"

typedef enum {
    SRV_CHAT_NONE = 0,
    SRV_CHAT_LLAMA2,  /* <s>[INST] <<SYS>>\n..\n<</SYS>>\n\n.. [/INST] */
    SRV_CHAT_LLAMA3,  /* <|start_header_id|>role<|end_header_id|>\n\n..<|eot_id|> */
    SRV_CHAT_LLAMA31, /* Llama 3.1+: Llama 3 plus the "Cutting Knowledge Date" system block */
    SRV_CHAT_CHATML,  /* <|im_start|>role\n..<|im_end|>\n */
    SRV_CHAT_MISTRAL, /* <s>[INST] .. [/INST]..</s> (system folded into the first user turn) */
    SRV_CHAT_FAMILY_COUNT
} srv_chat_family;

typedef enum { SRV_ROLE_SYSTEM = 0, SRV_ROLE_USER, SRV_ROLE_ASSISTANT } srv_chat_role;

typedef struct {
    srv_chat_role role;
    char *content; /* heap, NUL-terminated, valid UTF-8 */
} srv_chat_msg;

/* The family whose markers a Jinja chat_template contains; NONE for NULL or
 * an unrecognized template. */
srv_chat_family srv_chat_detect(const char *jinja_template);

/* Parse a --chat-template NAME ("llama-2", "llama-3", "llama-3.1", "chatml",
 * "mistral", and the spellings without '-'); false when unknown. */
bool srv_chat_from_name(const char *name, srv_chat_family *out);
const char *srv_chat_name(srv_chat_family f);
/* "llama-2, llama-3, llama-3.1, chatml, mistral" (for messages). */
const char *srv_chat_names(void);

/* Render messages plus the assistant generation prompt. bos/eos are the
 * tokenizer's BOS/EOS token texts ("" when none). Returns false and fills
 * *err (400) when the conversation does not fit the family (roles out of
 * order, no user turn). *out is heap (inferd_free). */
bool srv_chat_render(srv_chat_family f, const srv_chat_msg *msgs, int n_msgs, const char *bos,
                     const char *eos, char **out, srv_error *err);

/* Text that ends an assistant turn in this family beyond the model's EOS
 * ("<|eot_id|>", "<|im_end|>"), or NULL. */
const char *srv_chat_end_marker(srv_chat_family f);

#endif
