/* server/srv_chat.c: see srv_chat.h.
 *
 * Each render function mirrors the reference Jinja template of its family
 * (HF tokenizer_config.json of Llama-2-chat, Llama-3(-3.1)-Instruct,
 * ChatML models, Mistral-Instruct v0.1) for text-only messages, including
 * where those templates strip whitespace (`content.strip()`, `| trim`).
 * Families that require user/assistant alternation reject other orders with a
 * 400 naming the problem, as the templates' raise_exception() does; we also
 * reject a conversation that does not end on a user turn there, since the
 * template would then ask the model to continue after EOS.
 */
#include "server/srv_chat.h"

#include <string.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/util.h"
#include "server/srv_util.h"

static const char *const k_names[SRV_CHAT_FAMILY_COUNT] = {
    [SRV_CHAT_NONE] = "none",         [SRV_CHAT_LLAMA2] = "llama-2", [SRV_CHAT_LLAMA3] = "llama-3",
    [SRV_CHAT_LLAMA31] = "llama-3.1", [SRV_CHAT_CHATML] = "chatml",  [SRV_CHAT_MISTRAL] = "mistral",
};

static const char *const k_role_names[] = {"system", "user", "assistant"};

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

const char *srv_chat_name(srv_chat_family f)
{
    return (int)f >= 0 && f < SRV_CHAT_FAMILY_COUNT ? k_names[f] : "none";
}

const char *srv_chat_names(void)
{
    return "llama-2, llama-3, llama-3.1, chatml, mistral";
}

const char *srv_chat_end_marker(srv_chat_family f)
{
    switch (f) {
    case SRV_CHAT_LLAMA3:
    case SRV_CHAT_LLAMA31: return "<|eot_id|>";
    case SRV_CHAT_CHATML: return "<|im_end|>";
    default: return NULL;
    }
}

/* Append s stripped of leading/trailing whitespace (Python str.strip). */
static void put_stripped(inferd_buf *b, const char *s)
{
    size_t a, n;
    srv_strip(s, strlen(s), &a, &n);
    inferd_buf_append(b, s + a, n);
}

/* Check user/assistant alternation starting with user and ending on user;
 * `first` is the index of the first non-system message. */
static bool check_alternation(const srv_chat_msg *m, int n, int first, srv_error *err)
{
    if (first >= n)
        return srv_error_set(err, SRV_ERR_INVALID, "messages",
                             "messages must contain at least one user message");
    for (int i = first; i < n; i++) {
        if (m[i].role == SRV_ROLE_SYSTEM)
            return srv_error_set(
                err, SRV_ERR_INVALID, "messages",
                "messages[%d]: a system message is only allowed first for this chat template", i);
        bool want_user = (i - first) % 2 == 0;
        if ((m[i].role == SRV_ROLE_USER) != want_user)
            return srv_error_set(
                err, SRV_ERR_INVALID, "messages",
                "Conversation roles must alternate user/assistant/user/assistant/... (messages[%d])", i);
    }
    if (m[n - 1].role != SRV_ROLE_USER)
        return srv_error_set(err, SRV_ERR_INVALID, "messages",
                             "the last message must have role 'user' for this chat template");
    return true;
}

static bool render_llama2(const srv_chat_msg *m, int n, const char *bos, const char *eos, inferd_buf *b,
                          srv_error *err)
{
    int first = n > 0 && m[0].role == SRV_ROLE_SYSTEM ? 1 : 0;
    if (!check_alternation(m, n, first, err))
        return false;
    for (int i = first; i < n; i++) {
        inferd_buf content = {0};
        if (i == first && first == 1) {
            inferd_buf_append_str(&content, "<<SYS>>\n");
            inferd_buf_append_str(&content, m[0].content);
            inferd_buf_append_str(&content, "\n<</SYS>>\n\n");
        }
        inferd_buf_append_str(&content, m[i].content);
        if (m[i].role == SRV_ROLE_USER) {
            inferd_buf_append_str(b, bos);
            inferd_buf_append_str(b, "[INST] ");
            put_stripped(b, content.data);
            inferd_buf_append_str(b, " [/INST]");
        } else {
            inferd_buf_append_str(b, " ");
            put_stripped(b, content.data);
            inferd_buf_append_str(b, " ");
            inferd_buf_append_str(b, eos);
        }
        inferd_buf_free(&content);
    }
    return true;
}

static bool render_mistral(const srv_chat_msg *m, int n, const char *bos, const char *eos, inferd_buf *b,
                           srv_error *err)
{
    int first = n > 0 && m[0].role == SRV_ROLE_SYSTEM ? 1 : 0;
    if (!check_alternation(m, n, first, err))
        return false;
    inferd_buf_append_str(b, bos);
    for (int i = first; i < n; i++) {
        if (m[i].role == SRV_ROLE_USER) {
            inferd_buf_append_str(b, "[INST] ");
            if (i == first && first == 1) {
                inferd_buf_append_str(b, m[0].content);
                inferd_buf_append_str(b, "\n\n");
            }
            inferd_buf_append_str(b, m[i].content);
            inferd_buf_append_str(b, " [/INST]");
        } else {
            inferd_buf_append_str(b, m[i].content);
            inferd_buf_append_str(b, eos);
        }
    }
    return true;
}

static bool has_user(const srv_chat_msg *m, int n, srv_error *err)
{
    for (int i = 0; i < n; i++)
        if (m[i].role == SRV_ROLE_USER)
            return true;
    return srv_error_set(err, SRV_ERR_INVALID, "messages", "messages must contain at least one user message");
}

static void llama3_turn(inferd_buf *b, const char *role, const char *content)
{
    inferd_buf_append_str(b, "<|start_header_id|>");
    inferd_buf_append_str(b, role);
    inferd_buf_append_str(b, "<|end_header_id|>\n\n");
    put_stripped(b, content);
    inferd_buf_append_str(b, "<|eot_id|>");
}

static bool render_llama3(const srv_chat_msg *m, int n, const char *bos, bool v31, inferd_buf *b, srv_error *err)
{
    if (!has_user(m, n, err))
        return false;
    inferd_buf_append_str(b, bos);
    int start = 0;
    if (v31) {
        inferd_buf_append_str(b, "<|start_header_id|>system<|end_header_id|>\n\n"
                        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
        if (n > 0 && m[0].role == SRV_ROLE_SYSTEM) {
            put_stripped(b, m[0].content);
            start = 1;
        }
        inferd_buf_append_str(b, "<|eot_id|>");
    }
    for (int i = start; i < n; i++)
        llama3_turn(b, k_role_names[m[i].role], m[i].content);
    inferd_buf_append_str(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return true;
}

static bool render_chatml(const srv_chat_msg *m, int n, inferd_buf *b, srv_error *err)
{
    if (!has_user(m, n, err))
        return false;
    for (int i = 0; i < n; i++) {
        inferd_buf_append_str(b, "<|im_start|>");
        inferd_buf_append_str(b, k_role_names[m[i].role]);
        inferd_buf_append_str(b, "\n");
        inferd_buf_append_str(b, m[i].content);
        inferd_buf_append_str(b, "<|im_end|>\n");
    }
    inferd_buf_append_str(b, "<|im_start|>assistant\n");
    return true;
}

bool srv_chat_render(srv_chat_family f, const srv_chat_msg *msgs, int n_msgs, const char *bos,
                     const char *eos, char **out, srv_error *err)
{
    inferd_buf b = {0};
    bool ok;
    bos = bos ? bos : "";
    eos = eos ? eos : "";
    switch (f) {
    case SRV_CHAT_LLAMA2: ok = render_llama2(msgs, n_msgs, bos, eos, &b, err); break;
    case SRV_CHAT_MISTRAL: ok = render_mistral(msgs, n_msgs, bos, eos, &b, err); break;
    case SRV_CHAT_LLAMA3: ok = render_llama3(msgs, n_msgs, bos, false, &b, err); break;
    case SRV_CHAT_LLAMA31: ok = render_llama3(msgs, n_msgs, bos, true, &b, err); break;
    case SRV_CHAT_CHATML: ok = render_chatml(msgs, n_msgs, &b, err); break;
    default:
        ok = srv_error_set(err, SRV_ERR_NO_CHAT_TEMPLATE, NULL,
                           "this model has no chat template; start the server with --chat-template NAME (%s)",
                           srv_chat_names());
        break;
    }
    if (!ok) {
        inferd_buf_free(&b);
        return false;
    }
    *out = inferd_buf_steal(&b, NULL);
    return true;
}
