/* tokenizer/tok_util.c: small building blocks of the tokenizer: string
 * lists (over common/buf.h), UTF-8 decoding/encoding, lossy UTF-8 repair
 * (matching Rust's String::from_utf8_lossy, which the HF decoders use),
 * Unicode White_Space, the GPT-2 byte-level alphabet, and a PCRE2 wrapper.
 *
 * Regexes are compiled with PCRE2_UTF | PCRE2_UCP so \s, \p{L}, \p{N} follow
 * Unicode like the Oniguruma engine HF uses; JIT is used when available and a
 * JIT stack overflow falls back to the interpreter for that one match.
 *
 * Everything here is either pure or initialised once (the byte-level
 * tables, under pthread_once), so it is safe from any thread. The UTF-8
 * decoder assumes valid input (validated once at tok_encode); the lossy
 * repair is the only function here that accepts arbitrary bytes.
 */
#include <pthread.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "tokenizer/tok_internal.h"

/* Empties l but keeps its memory for reuse (the point of tok_list). */
void tok_list_clear(tok_list *l)
{
    l->buf.len = 0;
    if (l->buf.data)
        l->buf.data[0] = '\0';
    l->n = 0;
}

/* Releases the memory; l is left empty and reusable. */
void tok_list_free(tok_list *l)
{
    inferd_buf_free(&l->buf);
    inferd_free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

/* Opens a piece at the current end of l->buf; the caller appends its bytes
 * to l->buf directly and calls tok_list_end. Pieces are recorded by
 * offset, never by pointer, because the buffer moves when it grows. */
void tok_list_begin(tok_list *l, int32_t added, int64_t orig)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = inferd_realloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    inferd_buf_reserve(&l->buf, 0);
    l->v[l->n] = (tok_piece){.off = l->buf.len, .len = 0, .added = added, .orig = orig};
}

void tok_list_end(tok_list *l)
{
    l->v[l->n].len = l->buf.len - l->v[l->n].off;
    l->n++;
}

/* NOTE: s must not point into l->buf: the append may move the buffer
 * before the copy. */
void tok_list_push(tok_list *l, const char *s, size_t n, int32_t added, int64_t orig)
{
    tok_list_begin(l, added, orig);
    inferd_buf_append(&l->buf, s, n);
    tok_list_end(l);
}

/* No validation: the lead byte gives the length (a sequence cut by the end
 * of s is read as one byte), continuation bits are taken as they come. */
uint32_t tok_utf8_decode(const char *s, size_t n, int *adv)
{
    const unsigned char *u = (const unsigned char *)s;
    int len = tok_utf8_len(u[0]);
    if ((size_t)len > n)
        len = 1;
    uint32_t cp;
    switch (len) {
    case 1: cp = u[0]; break;
    case 2: cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F); break;
    case 3: cp = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F); break;
    default:
        cp = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) | ((uint32_t)(u[2] & 0x3F) << 6) |
             (u[3] & 0x3F);
        break;
    }
    *adv = len;
    return cp;
}

/* cp must be a scalar value (<= 0x10FFFF, no surrogates); not checked,
 * callers pass code points from tables or from decoded valid text. */
int tok_utf8_encode(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The Unicode White_Space property, the set Rust's char::is_whitespace
 * tests (HF's Strip and Metaspace use it), spelled out: 25 code points. */
bool tok_is_whitespace(uint32_t cp)
{
    if (cp <= 0x20)
        return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

/* Valid range of the second byte after lead byte c (UTF-8 table 3-7). */
static void utf8_second_range(unsigned char c, unsigned char *lo, unsigned char *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (c == 0xE0)
        *lo = 0xA0;
    else if (c == 0xED)
        *hi = 0x9F;
    else if (c == 0xF0)
        *lo = 0x90;
    else if (c == 0xF4)
        *hi = 0x8F;
}

/* "Maximal subpart" replacement: an invalid lead byte, or a valid lead
 * followed by a broken sequence, becomes one U+FFFD covering the longest
 * prefix that could have begun a valid character, exactly as Rust does
 * (that rule decides how many U+FFFD a broken sequence turns into). */
void tok_utf8_lossy(inferd_buf *b, const unsigned char *s, size_t n)
{
    static const char k_fffd[] = "\xEF\xBF\xBD";
    size_t i = 0;
    inferd_buf_reserve(b, n);
    while (i < n) {
        unsigned char c = s[i];
        int width = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3
                                                             : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (width == 1) {
            inferd_buf_append_char(b, (char)c);
            i++;
            continue;
        }
        size_t good = 1; /* bytes of a valid prefix consumed so far */
        if (width > 1) {
            unsigned char lo, hi;
            utf8_second_range(c, &lo, &hi);
            if (i + 1 < n && s[i + 1] >= lo && s[i + 1] <= hi) {
                good = 2;
                while ((int)good < width && i + good < n && (s[i + good] & 0xC0) == 0x80)
                    good++;
            }
        }
        if (width > 1 && (int)good == width) {
            inferd_buf_append(b, s + i, good);
        } else {
            inferd_buf_append(b, k_fffd, 3);
        }
        i += good;
    }
}

/* byte -> code point of the GPT-2 byte-level alphabet, built once.
 * GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves,
 * the other 68 to 256 + k in byte order, so every byte has a visible,
 * non-space character. Code points stay below 324 (256 + 68), which sizes
 * the inverse table. */
static uint16_t g_byte_cp[256];
static char g_byte_utf8[256][2];
static int8_t g_byte_utf8_len[256];
static int16_t g_cp_byte[324];

static pthread_once_t g_bytelevel_once = PTHREAD_ONCE_INIT;

static void bytelevel_build(void)
{
    int extra = 0;
    for (int b = 0; b < 324; b++)
        g_cp_byte[b] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        g_byte_cp[b] = (uint16_t)(printable ? b : 256 + extra++);
        g_byte_utf8_len[b] = (int8_t)tok_utf8_encode(g_byte_cp[b], g_byte_utf8[b]);
        g_cp_byte[g_byte_cp[b]] = (int16_t)b;
    }
}

/* Called on every access; after the first it costs one pthread_once
 * check, cheaper than a load-time hook every entry point would need. */
static void bytelevel_init(void)
{
    pthread_once(&g_bytelevel_once, bytelevel_build);
}

const char *tok_bytelevel_char(uint8_t byte, int *len)
{
    bytelevel_init();
    *len = g_byte_utf8_len[byte];
    return g_byte_utf8[byte];
}

int tok_bytelevel_byte(uint32_t cp)
{
    bytelevel_init();
    return cp < 324 ? g_cp_byte[cp] : -1;
}

/* Load time. A pattern PCRE2 rejects is a FORMAT error naming `what` and
 * the offset. JIT failure is not an error (some platforms lack it): the
 * interpreter gives the same matches, only slower. */
inferd_status tok_regex_compile(tok_regex *re, const char *pattern, size_t len, const char *what)
{
    int err = 0;
    PCRE2_SIZE err_off = 0;
    re->jit = false;
    re->code = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP, &err, &err_off, NULL);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: bad regex at offset %zu: %s", what, (size_t)err_off,
                                (const char *)msg);
    }
    if (pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0)
        re->jit = true;
    return INFERD_OK;
}

void tok_regex_free(tok_regex *re)
{
    if (re->code)
        pcre2_code_free(re->code);
    re->code = NULL;
}

/* md must have room for one pair (the whole match); callers allocate it
 * per call, so the compiled code is shared read-only between threads.
 * NOTE: s must be valid UTF-8 (NO_UTF_CHECK skips PCRE2's check, which is
 * O(n) per call and would make a scan quadratic). */
int tok_regex_find(const tok_regex *re, pcre2_match_data *md, const char *s, size_t n, size_t start,
                   size_t *ms, size_t *me)
{
    int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        inferd_set_error(INFERD_ERR_INTERNAL, "tokenizer regex match failed: %s", (const char *)msg);
        return -1;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}
