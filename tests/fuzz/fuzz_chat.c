/* tests/fuzz/fuzz_chat.c: the chat template renderer (server/srv_chat.h).
 *
 * Input layout:
 *   byte 0     template family (mod SRV_CHAT_FAMILY_COUNT, NONE included)
 *   byte 1     bos/eos texts: bit 0 "" or "<s>"/"<|begin_of_text|>",
 *              bit 1 "" or "</s>"/"<|eot_id|>"
 *   the rest   messages separated by 0x1E; each message is one role byte
 *              (mod 3: system, user, assistant) and its content, cut at the
 *              first NUL and with ill-formed UTF-8 replaced by '?' (the
 *              request parser only hands valid UTF-8 to the renderer)
 * The rest is also given, as text, to srv_chat_detect (chat_template
 * detection from tokenizer_config.json) and srv_chat_from_name. A render
 * must succeed or fail with a 400 whose body renders; its output must be
 * valid UTF-8 and hold every message's content (modulo the templates'
 * whitespace strip), and a family's end marker must be known.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "fuzz_util.h"
#include "server/srv_chat.h"
#include "server/srv_errors.h"

#define MAX_MSGS 64

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

/* The content, less any leading/trailing bytes that could be (part of)
 * whitespace to Python's str.strip (controls, space, any non-ASCII), is
 * inside out. */
static bool strippable(unsigned char c)
{
    return c <= 0x20 || c >= 0x7F;
}

static bool holds(const char *out, const char *content)
{
    const char *b = content, *e = content + strlen(content);
    while (b < e && strippable((unsigned char)*b))
        b++;
    while (e > b && strippable((unsigned char)e[-1]))
        e--;
    return e == b || memmem(out, strlen(out), b, (size_t)(e - b)) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    srv_chat_family fam = (srv_chat_family)(data[0] % SRV_CHAT_FAMILY_COUNT);
    unsigned flags = data[1];
    data += 2;
    size -= 2;

    char *text = fuzz_cstr(data, size);
    srv_chat_family det = srv_chat_detect(text);
    FUZZ_ASSERT((int)det >= 0 && det < SRV_CHAT_FAMILY_COUNT, "detect %d", (int)det);
    srv_chat_family named;
    if (size < 64 && srv_chat_from_name(text, &named))
        FUZZ_ASSERT((int)named > 0 && named < SRV_CHAT_FAMILY_COUNT, "from_name %d", (int)named);
    (void)srv_chat_name(fam);
    (void)srv_chat_end_marker(fam);

    srv_chat_msg msgs[MAX_MSGS];
    int n = 0;
    size_t i = 0;
    while (i < size && n < MAX_MSGS) {
        const uint8_t *end = memchr(data + i, 0x1E, size - i);
        size_t len = end ? (size_t)(end - (data + i)) : size - i;
        if (len > 0) {
            msgs[n].role = (srv_chat_role)(data[i] % 3);
            char *c = fuzz_cstr(data + i + 1, len - 1);
            size_t cl = strlen(c);
            fuzz_utf8_sanitize(c, cl);
            msgs[n].content = c;
            n++;
        }
        i += len + 1;
    }
    bool l3 = fam == SRV_CHAT_LLAMA3 || fam == SRV_CHAT_LLAMA31;
    const char *bos = (flags & 1) ? (l3 ? "<|begin_of_text|>" : "<s>") : "";
    const char *eos = (flags & 2) ? (l3 ? "<|eot_id|>" : "</s>") : "";

    char *out = NULL;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (srv_chat_render(fam, msgs, n, bos, eos, &out, &e)) {
        FUZZ_ASSERT(fam != SRV_CHAT_NONE, "rendered with no template");
        FUZZ_ASSERT(out != NULL, "render: NULL output");
        FUZZ_ASSERT(fuzz_utf8_valid(out, strlen(out)), "render: invalid UTF-8");
        for (int m = 0; m < n; m++)
            FUZZ_ASSERT(holds(out, msgs[m].content), "render %s: message %d content missing", srv_chat_name(fam), m);
        inferd_free(out);
    } else {
        FUZZ_ASSERT(e.kind != SRV_ERR_NONE && e.message[0], "rejected without an error");
        int status = 0;
        char *body = srv_error_render(&e, &status);
        FUZZ_ASSERT(body && status == 400, "error status %d", status);
        inferd_free(body);
    }
    for (int m = 0; m < n; m++)
        free(msgs[m].content);
    free(text);
    return 0;
}
