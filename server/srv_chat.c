/* server/srv_chat.c: see srv_chat.h. Template choice, the built-in family
 * templates, and rendering through srv_jinja; tokenizing the rendered
 * prompt is srv_chat_encode.c.
 *
 * The built-in templates are written here in Jinja. They follow the HF
 * templates of their families (Llama-2-chat, Llama-3(-3.1)-Instruct, ChatML,
 * Mistral-Instruct v0.1) for text messages, including where those strip
 * whitespace (`.strip()`, `| trim`), and they raise (a 400) where a
 * conversation cannot be rendered: Llama-2 and Mistral need user/assistant
 * turns alternating from a user turn, an optional system message first, and
 * a last user turn when a generation prompt is asked for; every family needs
 * a user message. A model's own template is never replaced by a built-in
 * one: it is rendered as it is.
 *
 * Variables are passed as HF does (transformers' apply_chat_template):
 * messages, tools and documents (null when absent), add_generation_prompt,
 * the special tokens of tokenizer_config.json that are set (unset ones are
 * not passed, so they are undefined, not None), then extra kwargs, which
 * may override a special token but not the four named inputs.
 *
 * Design choice: the built-ins are Jinja run through the same engine as a
 * model's own template, not C string builders: one rendering path, and a
 * built-in can be diffed against its HF original. The cost is that chat
 * needs the embedded interpreter even for the built-ins.
 * Threads: loading runs on the main thread at start-up; a loaded srv_chat is
 * immutable and rendered concurrently from event-loop threads (srv_jinja
 * serialises the interpreter). Not done here: tokenizing (srv_chat_encode.c)
 * and request parsing (srv_openai.c).
 */
#include "server/srv_chat.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/util.h"
#include "server/srv_chat_int.h"

static const char *const k_names[SRV_CHAT_FAMILY_COUNT] = {
    [SRV_CHAT_NONE] = "none",         [SRV_CHAT_LLAMA2] = "llama-2", [SRV_CHAT_LLAMA3] = "llama-3",
    [SRV_CHAT_LLAMA31] = "llama-3.1", [SRV_CHAT_CHATML] = "chatml",  [SRV_CHAT_MISTRAL] = "mistral",
};

static const char *const k_role_names[SRV_ROLE_COUNT] = {
    [SRV_ROLE_SYSTEM] = "system",       [SRV_ROLE_USER] = "user", [SRV_ROLE_ASSISTANT] = "assistant",
    [SRV_ROLE_DEVELOPER] = "developer", [SRV_ROLE_TOOL] = "tool",
};

/* ---- built-in templates ------------------------------------------------------ */

/* Jinja fragments shared by the built-ins; each raise_exception becomes a
 * 400 naming the rule, the same answer HF's template would give. */
#define NEED_USER                                                                                             \
    "{%- if not (messages | selectattr('role', 'equalto', 'user') | list) -%}\n"                              \
    "{{- raise_exception('messages must contain at least one user message') -}}\n"                           \
    "{%- endif -%}\n"

/* System message split off, then user/assistant alternation enforced. */
#define SPLIT_SYSTEM_ALTERNATE                                                                                \
    "{%- if messages and messages[0]['role'] == 'system' -%}\n"                                               \
    "{%- set system_message = messages[0]['content'] -%}\n"                                                   \
    "{%- set loop_messages = messages[1:] -%}\n"                                                              \
    "{%- else -%}\n"                                                                                          \
    "{%- set system_message = none -%}\n"                                                                     \
    "{%- set loop_messages = messages -%}\n"                                                                  \
    "{%- endif -%}\n"                                                                                         \
    "{%- if not loop_messages -%}\n"                                                                          \
    "{{- raise_exception('messages must contain at least one user message') -}}\n"                           \
    "{%- endif -%}\n"                                                                                         \
    "{%- for message in loop_messages -%}\n"                                                                  \
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"                                     \
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}\n"       \
    "{%- endif -%}\n"                                                                                         \
    "{%- endfor -%}\n"                                                                                        \
    "{%- if add_generation_prompt and loop_messages[-1]['role'] != 'user' -%}\n"                             \
    "{{- raise_exception('the last message must have role user for this chat template') -}}\n"               \
    "{%- endif -%}\n"

/* NOTE: the C-level "\\n" is a Jinja string escape, so the template (not
 * the C compiler) produces the newline; "\n" at line ends only separates
 * Jinja statements, and the '-' whitespace control strips it. */
static const char k_llama2[] =
    SPLIT_SYSTEM_ALTERNATE
    "{%- for message in loop_messages -%}\n"
    "{%- if loop.index0 == 0 and system_message is not none -%}\n"
    "{%- set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] -%}\n"
    "{%- else -%}\n"
    "{%- set content = message['content'] -%}\n"
    "{%- endif -%}\n"
    "{%- if message['role'] == 'user' -%}\n"
    "{{- (bos_token | default('')) + '[INST] ' + content.strip() + ' [/INST]' -}}\n"
    "{%- else -%}\n"
    "{{- ' ' + content.strip() + ' ' + (eos_token | default('')) -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n";

static const char k_mistral[] =
    SPLIT_SYSTEM_ALTERNATE
    "{{- bos_token | default('') -}}\n"
    "{%- for message in loop_messages -%}\n"
    "{%- if message['role'] == 'user' and loop.index0 == 0 and system_message is not none -%}\n"
    "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' -}}\n"
    "{%- elif message['role'] == 'user' -%}\n"
    "{{- '[INST] ' + message['content'] + ' [/INST]' -}}\n"
    "{%- else -%}\n"
    "{{- message['content'] + (eos_token | default('')) -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n";

#define LLAMA3_TURNS(list)                                                                                    \
    "{%- for message in " list " -%}\n"                                                                       \
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + (message['content'] | trim)"  \
    " + '<|eot_id|>' -}}\n"                                                                                   \
    "{%- endfor -%}\n"                                                                                        \
    "{%- if add_generation_prompt -%}\n"                                                                      \
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"                                         \
    "{%- endif -%}\n"

static const char k_llama3[] = NEED_USER "{{- bos_token | default('') -}}\n" LLAMA3_TURNS("messages");

/* Llama 3.1 always writes a system header with the knowledge and today
 * dates, as Meta's template does; date_string may be passed as a kwarg,
 * and the fixed default keeps a render reproducible when it is not. */
static const char k_llama31[] =
    NEED_USER
    "{{- bos_token | default('') -}}\n"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' -}}\n"
    "{{- 'Cutting Knowledge Date: December 2023\\nToday Date: ' + (date_string | default('26 Jul 2024'))"
    " + '\\n\\n' -}}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "{{- messages[0]['content'] | trim -}}\n"
    "{%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "{%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{{- '<|eot_id|>' -}}\n" LLAMA3_TURNS("loop_messages");

static const char k_chatml[] =
    NEED_USER
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "{{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}\n";

static const char *const k_sources[SRV_CHAT_FAMILY_COUNT] = {
    [SRV_CHAT_LLAMA2] = k_llama2, [SRV_CHAT_LLAMA3] = k_llama3,   [SRV_CHAT_LLAMA31] = k_llama31,
    [SRV_CHAT_CHATML] = k_chatml, [SRV_CHAT_MISTRAL] = k_mistral,
};

/* ---- names ------------------------------------------------------------------ */

/* --chat-template NAME: the accepted spellings of each family. */
bool srv_chat_from_name(const char *name, srv_chat_family *out)
{
    static const struct {
        const char *name;
        srv_chat_family f;
    } k_alias[] = {
        {"llama-2", SRV_CHAT_LLAMA2}, {"llama2", SRV_CHAT_LLAMA2},     {"llama-3", SRV_CHAT_LLAMA3},
        {"llama3", SRV_CHAT_LLAMA3},  {"llama-3.1", SRV_CHAT_LLAMA31}, {"llama3.1", SRV_CHAT_LLAMA31},
        {"chatml", SRV_CHAT_CHATML},  {"mistral", SRV_CHAT_MISTRAL},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_alias); i++) {
        if (strcmp(name, k_alias[i].name) == 0) {
            *out = k_alias[i].f;
            return true;
        }
    }
    return false;
}

const char *srv_chat_role_name(srv_chat_role r)
{
    return (int)r >= 0 && r < SRV_ROLE_COUNT ? k_role_names[r] : "user";
}

const char *srv_chat_name(srv_chat_family f)
{
    return (int)f >= 0 && f < SRV_CHAT_FAMILY_COUNT ? k_names[f] : "none";
}

const char *srv_chat_names(void)
{
    return "llama-2, llama-3, llama-3.1, chatml, mistral";
}

const char *srv_chat_builtin_source(srv_chat_family f)
{
    return (int)f > 0 && f < SRV_CHAT_FAMILY_COUNT ? k_sources[f] : NULL;
}

/* A family guessed from a template's marker strings (informational, never
 * used to replace the template). Order matters: a Llama 3.1
 * template contains everything a Llama 3 one does. */
srv_chat_family srv_chat_detect(const char *t)
{
    if (!t)
        return SRV_CHAT_NONE;
    if (strstr(t, "<|start_header_id|>"))
        return strstr(t, "Cutting Knowledge Date") ? SRV_CHAT_LLAMA31 : SRV_CHAT_LLAMA3;
    if (strstr(t, "<|im_start|>"))
        return SRV_CHAT_CHATML;
    if (strstr(t, "[INST]"))
        return strstr(t, "<<SYS>>") ? SRV_CHAT_LLAMA2 : SRV_CHAT_MISTRAL;
    return SRV_CHAT_NONE;
}

/* The end-of-turn marker a template writes after assistant turns, found by
 * text: the known markers of the families we have seen. Templates that end
 * turns with EOS (Llama 2, Mistral) return NULL: EOS already stops. */
const char *srv_chat_end_marker_of(const char *t)
{
    static const char *const k_markers[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                            "<|END_OF_TURN_TOKEN|>"};
    for (size_t i = 0; t && i < INFERD_ARRAY_LEN(k_markers); i++)
        if (strstr(t, k_markers[i]))
            return k_markers[i];
    return NULL;
}

const char *srv_chat_end_marker(srv_chat_family f)
{
    return srv_chat_end_marker_of(srv_chat_builtin_source(f));
}

/* ---- loading ------------------------------------------------------------------ */

/* The special-token variables HF passes: every one tokenizer_config.json
 * sets; without that file, BOS/EOS as the tokenizer knows them. */
static cJSON *specials_of(const tokenizer *tok)
{
    static const char *const k_keys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                         "pad_token", "cls_token", "mask_token"};
    cJSON *o = cJSON_CreateObject();
    if (!tok)
        return o;
    if (tok_has_config(tok)) {
        for (size_t i = 0; i < INFERD_ARRAY_LEN(k_keys); i++) {
            const char *v = tok_config_token(tok, k_keys[i]);
            if (v)
                cJSON_AddStringToObject(o, k_keys[i], v);
        }
        return o;
    }
    int32_t bos = tok_bos_id(tok), eos = tok_eos_id(tok);
    const char *bp = bos >= 0 ? tok_id_to_piece(tok, bos) : NULL;
    const char *ep = eos >= 0 ? tok_id_to_piece(tok, eos) : NULL;
    if (bp && bp[0])
        cJSON_AddStringToObject(o, "bos_token", bp);
    if (ep && ep[0])
        cJSON_AddStringToObject(o, "eos_token", ep);
    return o;
}

/* The marker as a stop token when it is one special token in this
 * vocabulary (exact, cheap), else as a stop string (heap, owned by c). */
static void set_stop(srv_chat *c, const char *source)
{
    const char *marker = srv_chat_end_marker_of(source);
    if (!marker)
        return;
    int32_t id = c->tok ? tok_piece_to_id(c->tok, marker) : -1;
    if (id >= 0 && tok_is_special(c->tok, id))
        c->stop_id = id;
    else
        c->stop_str = inferd_strdup(marker);
}

/* tok is borrowed: the server frees the chat before the tokenizer. */
static srv_chat *chat_alloc(const tokenizer *tok, bool allow_special)
{
    srv_chat *c = inferd_calloc(1, sizeof *c);
    c->tok = tok;
    c->allow_special = allow_special;
    c->stop_id = -1;
    return c;
}

/* Main thread (or under g_builtin.mu). specials is copied when given (so
 * the caller keeps its tree), else derived from tok. "Unavailable" from the
 * compiler means no interpreter, reported as "no chat template" so chat
 * routes answer with the reason instead of the server failing to start. */
bool srv_chat_new(const char *name, const char *source, const tokenizer *tok, const cJSON *specials,
                  bool allow_special_in_content, srv_chat **out, srv_error *err)
{
    *out = NULL;
    srv_jinja_error je;
    srv_jinja *t = NULL;
    if (!srv_jinja_compile(source, &t, &je)) {
        srv_error_set(err, strcmp(je.type, "Unavailable") == 0 ? SRV_ERR_NO_CHAT_TEMPLATE : SRV_ERR_INVALID,
                      NULL, "chat template %s: %s: %s", name, je.type, je.message);
        return false;
    }
    srv_chat *c = chat_alloc(tok, allow_special_in_content);
    c->tmpl = t;
    c->specials = specials ? cJSON_Duplicate(specials, true) : specials_of(tok);
    c->desc = inferd_strdup(name);
    set_stop(c, source);
    *out = c;
    return true;
}

/* A chat that is not ready: chat requests get 400 with `why`. */
static srv_chat *chat_unready(const tokenizer *tok, bool allow_special, const char *why)
{
    srv_chat *c = chat_alloc(tok, allow_special);
    c->specials = cJSON_CreateObject();
    c->desc = inferd_strdup(why);
    return c;
}

/* Main thread, at start-up. Precedence: a built-in family, then
 * --chat-template as a file path when such a file exists, else as inline
 * template text, else the model's own. Always yields a chat object: a
 * model without a usable template still serves completions, and chat
 * requests get a 400 saying why. Only a template the operator named
 * explicitly that fails to compile is a start-up error. The 16 MiB cap on
 * a file stops a mistyped path from being read whole. */
inferd_status srv_chat_load(const tokenizer *tok, srv_chat_family family, const char *template_arg,
                            bool allow_special_in_content, srv_chat **out)
{
    *out = NULL;
    char *file_text = NULL, name[320];
    const char *src;
    bool explicit_arg = true;
    if (family != SRV_CHAT_NONE) {
        src = srv_chat_builtin_source(family);
        snprintf(name, sizeof name, "built-in %s", srv_chat_name(family));
    } else if (template_arg && util_file_exists(template_arg)) {
        size_t len;
        if (util_read_file(template_arg, 16u << 20, &file_text, &len) != INFERD_OK)
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "--chat-template %s: %s", template_arg,
                                    inferd_last_error());
        src = file_text;
        snprintf(name, sizeof name, "%.300s", template_arg);
    } else if (template_arg) {
        src = template_arg;
        snprintf(name, sizeof name, "inline --chat-template");
    } else {
        src = tok_chat_template(tok);
        explicit_arg = false;
        snprintf(name, sizeof name, "the model's chat_template");
    }
    char why[600];
    if (!src) {
        snprintf(why, sizeof why,
                 "this model has no chat template (no chat_template in tokenizer_config.json, no "
                 "chat_template.jinja); start the server with --chat-template NAME|FILE (%s)",
                 srv_chat_names());
        *out = chat_unready(tok, allow_special_in_content, why);
        return INFERD_OK;
    }
    srv_error err;
    inferd_status st = INFERD_OK;
    if (srv_chat_new(name, src, tok, NULL, allow_special_in_content, out, &err)) {
        (*out)->builtin = family != SRV_CHAT_NONE;
    } else {
        if (explicit_arg && err.kind != SRV_ERR_NO_CHAT_TEMPLATE)
            st = inferd_set_error(INFERD_ERR_INVALID_ARG, "--chat-template: %s", err.message);
        else
            *out = chat_unready(tok, allow_special_in_content, err.message);
    }
    inferd_free(file_text);
    return st;
}

void srv_chat_free(srv_chat *c)
{
    if (!c)
        return;
    srv_jinja_free(c->tmpl);
    cJSON_Delete(c->specials);
    inferd_free(c->stop_str);
    inferd_free(c->desc);
    inferd_free(c);
}

bool srv_chat_ready(const srv_chat *c)
{
    return c && c->tmpl;
}

/* Where the template came from (for logs), or why chat is unavailable
 * (for the 400 body). Valid while c lives. */
const char *srv_chat_describe(const srv_chat *c)
{
    return c ? c->desc : "no chat template";
}

int32_t srv_chat_stop_id(const srv_chat *c)
{
    return c ? c->stop_id : -1;
}

const char *srv_chat_stop_str(const srv_chat *c)
{
    return c ? c->stop_str : NULL;
}

/* ---- rendering ------------------------------------------------------------------ */

/* A new tree, the caller's to delete. */
cJSON *srv_chat_msgs_json(const srv_chat_msg *msgs, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", srv_chat_role_name(msgs[i].role));
        cJSON_AddStringToObject(m, "content", msgs[i].content);
        cJSON_AddItemToArray(a, m);
    }
    return a;
}

/* A reference, not a copy: vars_json's tree is printed once and deleted,
 * and deleting a reference leaves the referenced tree alone. */
static void add_ref_or_null(cJSON *o, const char *key, const cJSON *v)
{
    if (v)
        cJSON_AddItemReferenceToObject(o, key, (cJSON *)v);
    else
        cJSON_AddNullToObject(o, key);
}

/* The variables as JSON text (heap). Members reference the caller's trees.
 * NOTE: a kwarg that names a special token adds a second member with the
 * same key; the text is parsed by Python's json.loads on the other side,
 * where the later duplicate wins. The result is from cJSON's allocator
 * (cJSON_free), NULL on allocation failure. */
static char *vars_json(const srv_chat *c, const cJSON *messages, const srv_chat_inputs *in)
{
    static const char *const k_reserved[] = {"messages", "tools", "documents", "add_generation_prompt"};
    cJSON *v = cJSON_CreateObject();
    add_ref_or_null(v, "messages", messages);
    add_ref_or_null(v, "tools", in->tools);
    add_ref_or_null(v, "documents", in->documents);
    cJSON_AddBoolToObject(v, "add_generation_prompt", in->add_generation_prompt);
    const cJSON *it;
    cJSON_ArrayForEach(it, c->specials) cJSON_AddItemReferenceToObject(v, it->string, (cJSON *)it);
    /* later duplicates win in json.loads: kwargs override special tokens */
    const cJSON *kwargs = cJSON_IsObject(in->kwargs) ? in->kwargs : NULL;
    cJSON_ArrayForEach(it, kwargs)
    {
        bool reserved = false;
        for (size_t k = 0; k < INFERD_ARRAY_LEN(k_reserved); k++)
            reserved |= strcmp(it->string, k_reserved[k]) == 0;
        if (!reserved)
            cJSON_AddItemReferenceToObject(v, it->string, (cJSON *)it);
    }
    char *s = cJSON_PrintUnformatted(v);
    cJSON_Delete(v);
    return s;
}

/* Any thread. *text is heap (inferd_free) on success; a template that
 * raises is the client's 400 (its messages broke a rule), not a 500. */
bool srv_chat_render_json(const srv_chat *c, const cJSON *messages, const srv_chat_inputs *in, char **text,
                          size_t *len, srv_error *err)
{
    *text = NULL;
    *len = 0;
    if (!srv_chat_ready(c))
        return srv_error_set(err, SRV_ERR_NO_CHAT_TEMPLATE, "messages", "%s", srv_chat_describe(c));
    if (in->continue_final_message && in->add_generation_prompt)
        return srv_error_set(err, SRV_ERR_INVALID, "continue_final_message",
                             "'continue_final_message' and 'add_generation_prompt' cannot both be true: the "
                             "first continues the final message, the second opens a new assistant turn");
    char *vars = vars_json(c, messages, in);
    if (!vars)
        return srv_error_set(err, SRV_ERR_INTERNAL, NULL, "out of memory building the chat template inputs");
    srv_jinja_error je;
    char *raw = NULL;
    bool ok = srv_jinja_render(c->tmpl, vars, in->fixed_now, in->continue_final_message, &raw, len, &je);
    cJSON_free(vars);
    if (!ok)
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "chat template error (%s): %s", je.type,
                             je.message);
    *text = raw;
    return true;
}

/* A content in the template's shape (a new item): parts for a template
 * that iterates over contents, else one string. Only text parts reach
 * here (the request parser refuses others). */
static cJSON *adapt_content(const cJSON *content, bool parts)
{
    if (parts) {
        if (cJSON_IsArray(content))
            return cJSON_Duplicate(content, true);
        cJSON *a = cJSON_CreateArray();
        if (cJSON_IsString(content)) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "type", "text");
            cJSON_AddStringToObject(p, "text", content->valuestring);
            cJSON_AddItemToArray(a, p);
        }
        return a;
    }
    if (cJSON_IsString(content))
        return cJSON_CreateString(content->valuestring);
    inferd_buf b = {0};
    const cJSON *p;
    int k = 0;
    cJSON_ArrayForEach(p, (cJSON_IsArray(content) ? content : NULL))
    {
        const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "text"));
        if (k++ > 0)
            inferd_buf_append_str(&b, "\n");
        inferd_buf_append_str(&b, t ? t : "");
    }
    char *joined = inferd_buf_steal(&b, NULL);
    cJSON *out = cJSON_CreateString(joined ? joined : "");
    inferd_free(joined);
    return out;
}

/* vLLM's content format, chosen from the template once (srv_jinja). The
 * built-in templates are written for system/user/assistant: "developer",
 * OpenAI's newer name for the system role, reaches them as "system" (a
 * model's own template gets it unchanged, as HF and vLLM pass it). */
cJSON *srv_chat_adapt_messages(const srv_chat *c, const cJSON *messages)
{
    bool parts = c && srv_jinja_iterates_content(c->tmpl);
    cJSON *out = cJSON_Duplicate(messages, true);
    cJSON *m;
    cJSON_ArrayForEach(m, out)
    {
        const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "role"));
        if (c && c->builtin && role && strcmp(role, "developer") == 0)
            cJSON_ReplaceItemInObjectCaseSensitive(m, "role", cJSON_CreateString("system"));
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        cJSON *adapted = adapt_content(content, parts);
        if (content)
            cJSON_ReplaceItemInObjectCaseSensitive(m, "content", adapted);
        else
            cJSON_AddItemToObject(m, "content", adapted);
    }
    return out;
}

/* Built-in family templates for srv_chat_render, compiled on first use.
 * NOTE: never freed: a process-lifetime cache for srv_chat_render; the mutex makes the first compile of
 * each family happen once even when threads race for it. */
static struct {
    pthread_mutex_t mu;
    srv_chat *chat[SRV_CHAT_FAMILY_COUNT];
} g_builtin = {.mu = PTHREAD_MUTEX_INITIALIZER};

static const srv_chat *builtin_chat(srv_chat_family f, srv_error *err)
{
    pthread_mutex_lock(&g_builtin.mu);
    srv_chat *c = g_builtin.chat[f];
    if (!c) {
        char name[64];
        snprintf(name, sizeof name, "built-in %s", srv_chat_name(f));
        cJSON *none = cJSON_CreateObject();
        if (srv_chat_new(name, srv_chat_builtin_source(f), NULL, none, true, &c, err)) {
            c->builtin = true;
            g_builtin.chat[f] = c;
        }
        cJSON_Delete(none);
    }
    pthread_mutex_unlock(&g_builtin.mu);
    return c;
}

/* A built-in family rendered with the given BOS/EOS texts (no tokenizer):
 * used by the unit tests and the chat fuzzer. *out is heap on success. */
bool srv_chat_render(srv_chat_family f, const srv_chat_msg *msgs, int n_msgs, const char *bos, const char *eos,
                     char **out, srv_error *err)
{
    *out = NULL;
    if (!srv_chat_builtin_source(f))
        return srv_error_set(err, SRV_ERR_NO_CHAT_TEMPLATE, NULL,
                             "this model has no chat template; start the server with --chat-template NAME (%s)",
                             srv_chat_names());
    const srv_chat *c = builtin_chat(f, err);
    if (!c)
        return false;
    cJSON *kw = cJSON_CreateObject();
    if (bos && bos[0])
        cJSON_AddStringToObject(kw, "bos_token", bos);
    if (eos && eos[0])
        cJSON_AddStringToObject(kw, "eos_token", eos);
    cJSON *m = srv_chat_msgs_json(msgs, n_msgs);
    srv_chat_inputs in = {.add_generation_prompt = true, .kwargs = kw};
    size_t len;
    bool ok = srv_chat_render_json(c, m, &in, out, &len, err);
    cJSON_Delete(m);
    cJSON_Delete(kw);
    return ok;
}
