/* tests/fuzz/fuzz_safetensors.c: the .safetensors header parser
 * (model/safetensors.h st_open_file) on arbitrary files.
 *
 * The input is the whole file: 8-byte little-endian header length, JSON
 * header, data region. It is written to one memfd that st_open_file opens
 * through /proc/self/fd (mmap included, as for a real file). On success the
 * harness checks the documented contract: every tensor's bytes lie inside
 * the file's data region, n_bytes == product(shape) x element size, names
 * are found by st_find, st_expect accepts each tensor's own shape; and it
 * reads every byte of every tensor (a range past the mapping faults).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "fuzz_util.h"
#include "model/safetensors.h"

static int g_fd = -1;
static char g_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    g_fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
    if (g_fd < 0) {
        perror("memfd_create");
        abort();
    }
    snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ftruncate(g_fd, 0) != 0 || (size && pwrite(g_fd, data, size, 0) != (ssize_t)size))
        abort();
    st_set *s = NULL;
    if (st_open_file(g_path, &s) != INFERD_OK) {
        FUZZ_ASSERT(s == NULL, "failed open left *out set");
        return 0;
    }
    /* Accepted: the header length and the data region are in the file. */
    FUZZ_ASSERT(size >= 8, "accepted a %zu-byte file", size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | data[i];
    FUZZ_ASSERT(hlen <= size - 8, "header length %llu beyond a %zu-byte file", (unsigned long long)hlen, size);
    uint64_t data_len = size - 8 - hlen;

    int n = st_count(s);
    uint64_t total = 0;
    unsigned sum = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = st_at(s, i);
        FUZZ_ASSERT(t && t->name, "st_at(%d) NULL", i);
        FUZZ_ASSERT(t->n_dims >= 0 && t->n_dims <= ST_MAX_DIMS, "n_dims %d", t->n_dims);
        uint64_t elems = 1;
        for (int d = 0; d < t->n_dims; d++) {
            FUZZ_ASSERT(t->shape[d] >= 0, "negative dim");
            elems *= (uint64_t)t->shape[d];
        }
        size_t es = kern_dtype_size(t->dtype);
        FUZZ_ASSERT(es == 2 || es == 4, "dtype size %zu", es);
        FUZZ_ASSERT(elems * es == t->n_bytes, "'%s': %zu bytes for %llu elements", t->name, t->n_bytes,
                    (unsigned long long)elems);
        total += t->n_bytes;
        FUZZ_ASSERT(total <= data_len, "tensors hold %llu bytes, data region %llu", (unsigned long long)total,
                    (unsigned long long)data_len);
        const uint8_t *p = t->data;
        for (size_t b = 0; b < t->n_bytes; b++)
            sum += p[b];
        if (i > 0)
            FUZZ_ASSERT(strcmp(st_at(s, i - 1)->name, t->name) < 0, "names not sorted/unique");
        FUZZ_ASSERT(st_find(s, t->name) == t, "st_find('%s') misses", t->name);
        const st_tensor *o = NULL;
        FUZZ_ASSERT(st_expect(s, t->name, t->n_dims, t->shape, &o) == INFERD_OK && o == t, "st_expect('%s')",
                    t->name);
    }
    /* Keep the reads. */
    __asm__ volatile("" : : "r"(sum));
    st_close(s);
    return 0;
}
