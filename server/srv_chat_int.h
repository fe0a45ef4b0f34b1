/* server/srv_chat_int.h: the srv_chat object, shared by srv_chat.c
 * (loading, rendering) and srv_chat_encode.c (tokenizing with message
 * contents protected). Internal to those two files.
 */
#ifndef INFERD_SERVER_SRV_CHAT_INT_H
#define INFERD_SERVER_SRV_CHAT_INT_H

#include "server/srv_chat.h"
#include "server/srv_jinja.h"

struct srv_chat {
    srv_jinja *tmpl;      /* NULL: no usable template (desc says why) */
    const tokenizer *tok; /* borrowed; NULL for render-only templates */
    cJSON *specials;      /* object: bos_token, eos_token, ... as HF passes them */
    bool allow_special;   /* --allow-special-tokens-in-content */
    bool builtin;         /* one of the built-in family templates (they know system/user/assistant) */
    int32_t stop_id;      /* end-of-turn special token, -1 none */
    char *stop_str;       /* end-of-turn text when not one special token, NULL none */
    char *desc;           /* where the template came from, or why there is none */
};

/* JSON messages [{"role", "content"}] of msgs (a new tree). */
cJSON *srv_chat_msgs_json(const srv_chat_msg *msgs, int n);

#endif
