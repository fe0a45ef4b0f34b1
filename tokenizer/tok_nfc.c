/* tokenizer/tok_nfc.c: NFC / NFD normalization for the tokenizer's normalizers.
 *
 * Delegates to GNU libunistring's u8_normalize (Debian libunistring-dev), the
 * maintained Unicode implementation every Debian system already carries; the
 * input was validated as UTF-8 before it gets here. */
#include "tokenizer/tok_nfc.h"

#include <stdlib.h>
#include <uninorm.h>

#include "common/check.h"

/* NOTE: u8_normalize returns malloc'd memory (not ours), hence free(), not
 * inferd_free. A NULL result for valid input can only be out of memory,
 * which aborts like every allocation failure in inferd. The Unicode
 * version is libunistring's, which may differ from the one HF's Rust
 * crate was built with for newly assigned characters. */
void tok_unicode_normalize(const char *s, size_t n, bool compose, inferd_buf *out)
{
    size_t len = 0;
    uint8_t *r = u8_normalize(compose ? UNINORM_NFC : UNINORM_NFD, (const uint8_t *)s, n, NULL, &len);
    INFERD_CHECK_MSG(r != NULL || n == 0, "u8_normalize failed on validated UTF-8");
    if (r) {
        inferd_buf_append(out, r, len);
        free(r);
    }
}
