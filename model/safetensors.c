/* model/safetensors.c: validated, read-only mmap access to .safetensors files.
 *
 * File layout: an 8-byte little-endian header length N, N bytes of JSON
 * ({name: {dtype, shape, data_offsets: [begin, end]}, optional
 * "__metadata__"}, possibly padded with trailing spaces), then the data
 * region; offsets are relative to the start of the data region.
 *
 * Nothing in a file is trusted: the header length, the JSON, every dtype,
 * shape and offset pair are checked against the file size before any tensor
 * pointer is handed out, with overflow-checked arithmetic; the byte ranges of
 * all tensors must not overlap; tensor data must be aligned to its element
 * size (the reference writer guarantees this by padding the header to 8 bytes
 * and sorting tensors by dtype), so consumers may read it through typed
 * pointers. Every error names the file and, where there is one, the tensor.
 *
 * A set is either one file or the shards of model.safetensors.index.json;
 * each shard is opened and mapped once. Lookups are binary searches over
 * tensors sorted by name.
 */
#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"

#define ST_MAX_HEADER ((uint64_t)100 << 20)
#define ST_MAX_INDEX_BYTES ((size_t)100 << 20)
/* Integers above 2^53 do not survive cJSON's double parsing exactly. */
#define ST_MAX_JSON_INT 9007199254740992.0

typedef struct {
    char *path;
    const uint8_t *map;  /* [map_len] read-only mapping of the whole file */
    size_t map_len;
    st_tensor *tensors;  /* [n] sorted by name */
    int n;
} st_shard;

struct st_set {
    char *where;               /* file or directory, for messages */
    st_shard *shards;          /* [n_shards] */
    int n_shards;
    const st_tensor **sorted;  /* [n] every tensor of the set, sorted by name */
    int n;
};

static void st_shard_free(st_shard *sh)
{
    for (int i = 0; i < sh->n; i++)
        inferd_free((void *)sh->tensors[i].name);
    inferd_free(sh->tensors);
    if (sh->map)
        munmap((void *)sh->map, sh->map_len);
    inferd_free(sh->path);
    memset(sh, 0, sizeof *sh);
}

/* dtype string -> kern_dtype. Known-but-unsupported safetensors dtypes give
 * UNSUPPORTED, unknown strings FORMAT. */
static inferd_status st_parse_dtype(const char *path, const char *name, const char *s, kern_dtype *dt,
                                    size_t *elem)
{
    static const char *const other[] = {"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64",
                                        "F64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2",
                                        "C64"};
    if (strcmp(s, "F32") == 0) {
        *dt = KERN_DTYPE_F32;
        *elem = 4;
        return INFERD_OK;
    }
    if (strcmp(s, "F16") == 0 || strcmp(s, "BF16") == 0) {
        *dt = s[0] == 'F' ? KERN_DTYPE_F16 : KERN_DTYPE_BF16;
        *elem = 2;
        return INFERD_OK;
    }
    for (size_t i = 0; i < INFERD_ARRAY_LEN(other); i++) {
        if (strcmp(s, other[i]) == 0)
            return inferd_set_error(INFERD_ERR_UNSUPPORTED,
                                    "%s: tensor '%s': dtype %s is not supported (F32, F16, BF16)", path, name, s);
    }
    return inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.32s'", path, name, s);
}

/* A non-negative integral JSON number (<= 2^53) into *out. */
static bool st_json_u64(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || d > ST_MAX_JSON_INT || d != floor(d))
        return false;
    *out = (uint64_t)d;
    return true;
}

/* Validate one header entry `item` into t (data pointer set from `data`, the
 * start of the data region of `data_len` bytes). */
static inferd_status st_parse_entry(const char *path, const cJSON *item, const uint8_t *data, uint64_t data_len,
                                    st_tensor *t)
{
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", path, name);
    const cJSON *jdt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *jshape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *joff = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(jdt))
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s': missing or non-string 'dtype'", path, name);
    if (!cJSON_IsArray(jshape))
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s': missing or non-list 'shape'", path, name);
    if (!cJSON_IsArray(joff) || cJSON_GetArraySize(joff) != 2)
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s': 'data_offsets' must be a list [begin, end]",
                                path, name);
    size_t elem = 0;
    inferd_status st = st_parse_dtype(path, name, jdt->valuestring, &t->dtype, &elem);
    if (st != INFERD_OK)
        return st;

    int n_dims = cJSON_GetArraySize(jshape);
    if (n_dims > ST_MAX_DIMS)
        return inferd_set_error(INFERD_ERR_UNSUPPORTED, "%s: tensor '%s': %d dims (at most %d)", path, name, n_dims,
                                ST_MAX_DIMS);
    uint64_t n_bytes = elem;
    for (int d = 0; d < n_dims; d++) {
        uint64_t dim;
        if (!st_json_u64(cJSON_GetArrayItem(jshape, d), &dim))
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer",
                                    path, name, d);
        if (!util_mul_u64(n_bytes, dim, &n_bytes))
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s': shape product overflows", path, name);
        t->shape[d] = (int64_t)dim;
    }
    t->n_dims = n_dims;

    uint64_t begin, end;
    if (!st_json_u64(cJSON_GetArrayItem(joff, 0), &begin) || !st_json_u64(cJSON_GetArrayItem(joff, 1), &end))
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s': data_offsets must be non-negative integers",
                                path, name);
    if (end < begin)
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s': data_offsets end %llu < begin %llu", path, name,
                                (unsigned long long)end, (unsigned long long)begin);
    if (end > data_len)
        return inferd_set_error(INFERD_ERR_FORMAT,
                                "%s: tensor '%s': data_offsets [%llu, %llu] beyond the data region (%llu bytes)",
                                path, name, (unsigned long long)begin, (unsigned long long)end,
                                (unsigned long long)data_len);
    if (end - begin != n_bytes)
        return inferd_set_error(INFERD_ERR_FORMAT,
                                "%s: tensor '%s': %llu bytes in data_offsets but shape x dtype needs %llu", path, name,
                                (unsigned long long)(end - begin), (unsigned long long)n_bytes);
    t->data = data + begin;
    if (n_bytes > 0 && ((uintptr_t)t->data) % elem != 0)
        return inferd_set_error(INFERD_ERR_UNSUPPORTED,
                                "%s: tensor '%s': data not aligned to its %zu-byte element size", path, name, elem);
    t->n_bytes = (size_t)n_bytes;
    return INFERD_OK;
}

static int st_cmp_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int st_cmp_begin(const void *a, const void *b)
{
    const uint8_t *x = (*(const st_tensor *const *)a)->data, *y = (*(const st_tensor *const *)b)->data;
    return x < y ? -1 : x > y;
}

/* Sort sh->tensors by name; reject duplicate names and overlapping ranges. */
static inferd_status st_check_layout(st_shard *sh)
{
    qsort(sh->tensors, (size_t)sh->n, sizeof *sh->tensors, st_cmp_name);
    for (int i = 1; i < sh->n; i++) {
        if (strcmp(sh->tensors[i - 1].name, sh->tensors[i].name) == 0)
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", sh->path,
                                    sh->tensors[i].name);
    }
    const st_tensor **by_begin = inferd_malloc(sizeof *by_begin * (size_t)(sh->n > 0 ? sh->n : 1));
    for (int i = 0; i < sh->n; i++)
        by_begin[i] = &sh->tensors[i];
    qsort(by_begin, (size_t)sh->n, sizeof *by_begin, st_cmp_begin);
    inferd_status st = INFERD_OK;
    for (int i = 1; i < sh->n && st == INFERD_OK; i++) {
        const st_tensor *p = by_begin[i - 1], *q = by_begin[i];
        if ((const uint8_t *)p->data + p->n_bytes > (const uint8_t *)q->data)
            st = inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s' overlaps tensor '%s' in the data region",
                                  sh->path, q->name, p->name);
    }
    inferd_free(by_begin);
    return st;
}

/* Parse and validate the JSON header text [hdr, hdr + n) of sh. */
static inferd_status st_parse_header(st_shard *sh, const char *hdr, uint64_t n, const uint8_t *data,
                                     uint64_t data_len)
{
    /* JSON allows no control characters but whitespace; rejecting them up
     * front also keeps NUL bytes out of tensor names. */
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)hdr[i];
        if (c < 0x20 && c != ' ' && c != '\t' && c != '\n' && c != '\r')
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: header is not valid JSON (control byte at %llu)",
                                    sh->path, (unsigned long long)i);
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)n, &end, false);
    if (!root)
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: header is not valid JSON", sh->path);
    for (const char *p = end; p && p < hdr + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: junk after the header JSON", sh->path);
        }
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: header is not a JSON object", sh->path);
    }
    int total = cJSON_GetArraySize(root);
    sh->tensors = inferd_calloc((size_t)(total > 0 ? total : 1), sizeof *sh->tensors);
    inferd_status st = INFERD_OK;
    for (const cJSON *it = root->child; it && st == INFERD_OK; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(it))
                st = inferd_set_error(INFERD_ERR_FORMAT, "%s: '__metadata__' is not a JSON object", sh->path);
            continue;
        }
        st_tensor *t = &sh->tensors[sh->n];
        st = st_parse_entry(sh->path, it, data, data_len, t);
        if (st == INFERD_OK) {
            t->name = inferd_strdup(it->string);
            t->file = sh->path;
            sh->n++;
        }
    }
    cJSON_Delete(root);
    return st == INFERD_OK ? st_check_layout(sh) : st;
}

/* Map `path` read-only into sh->map. */
static inferd_status st_map_file(st_shard *sh)
{
    int fd = open(sh->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return inferd_set_error(e == ENOENT ? INFERD_ERR_NOT_FOUND : INFERD_ERR_IO, "%s: cannot open: %s", sh->path,
                                strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return inferd_set_error(INFERD_ERR_IO, "%s: not a regular file", sh->path);
    }
    if (sb.st_size < 8) {
        close(fd);
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: truncated: %lld bytes, no room for the 8-byte header length",
                                sh->path, (long long)sb.st_size);
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return inferd_set_error(INFERD_ERR_IO, "%s: mmap failed: %s", sh->path, strerror(e));
    sh->map = m;
    sh->map_len = (size_t)sb.st_size;
    return INFERD_OK;
}

/* Open, map and validate one file into sh (freed on error). */
static inferd_status st_shard_open(const char *path, st_shard *sh)
{
    memset(sh, 0, sizeof *sh);
    sh->path = inferd_strdup(path);
    inferd_status st = st_map_file(sh);
    if (st != INFERD_OK) {
        st_shard_free(sh);
        return st;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | sh->map[i];
    uint64_t room = (uint64_t)sh->map_len - 8;
    if (n < 2 || n > ST_MAX_HEADER || n > room) {
        st = inferd_set_error(INFERD_ERR_FORMAT,
                              "%s: header length %llu is invalid (file has %llu bytes after the length, limit %llu)",
                              path, (unsigned long long)n, (unsigned long long)room,
                              (unsigned long long)ST_MAX_HEADER);
        st_shard_free(sh);
        return st;
    }
    /* A NUL-terminated copy: the parser never reads past the mapping. */
    char *hdr = inferd_malloc((size_t)n + 1);
    memcpy(hdr, sh->map + 8, (size_t)n);
    hdr[n] = '\0';
    st = st_parse_header(sh, hdr, n, sh->map + 8 + n, room - n);
    inferd_free(hdr);
    if (st != INFERD_OK)
        st_shard_free(sh);
    return st;
}

static int st_cmp_ptr_name(const void *a, const void *b)
{
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

static st_set *st_set_new(const char *where, int n_shards)
{
    st_set *s = inferd_calloc(1, sizeof *s);
    s->where = inferd_strdup(where);
    s->shards = inferd_calloc((size_t)n_shards, sizeof *s->shards);
    return s;
}

inferd_status st_open_file(const char *path, st_set **out)
{
    if (!path || !out)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "st_open_file: NULL argument");
    st_set *s = st_set_new(path, 1);
    inferd_status st = st_shard_open(path, &s->shards[0]);
    if (st != INFERD_OK) {
        st_close(s);
        return st;
    }
    s->n_shards = 1;
    s->n = s->shards[0].n;
    s->sorted = inferd_malloc(sizeof *s->sorted * (size_t)(s->n > 0 ? s->n : 1));
    for (int i = 0; i < s->n; i++)
        s->sorted[i] = &s->shards[0].tensors[i];
    *out = s;
    return INFERD_OK;
}

/* One weight_map entry of a sharded index. */
typedef struct {
    const char *tensor;
    const char *shard;
    int shard_idx;
} st_index_entry;

static int st_cmp_entry_shard(const void *a, const void *b)
{
    return strcmp(((const st_index_entry *)a)->shard, ((const st_index_entry *)b)->shard);
}

/* Read weight_map of the index at `path` into entries[] (pointing into root). */
static inferd_status st_read_index(const char *path, cJSON **root_out, st_index_entry **out, int *n_out)
{
    char *text = NULL;
    inferd_status st = util_read_file(path, ST_MAX_INDEX_BYTES, &text, NULL);
    if (st != INFERD_OK)
        return st;
    cJSON *root = cJSON_Parse(text);
    inferd_free(text);
    const cJSON *wm = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    int n = cJSON_IsObject(wm) ? cJSON_GetArraySize(wm) : 0;
    if (n == 0) {
        cJSON_Delete(root);
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: %s", path,
                                !root ? "invalid JSON" : "missing or empty 'weight_map' object");
    }
    st_index_entry *e = inferd_calloc((size_t)n, sizeof *e);
    int i = 0;
    for (const cJSON *it = wm->child; it; it = it->next, i++) {
        const char *f = cJSON_IsString(it) ? it->valuestring : NULL;
        /* Shards must be plain file names inside the model directory. */
        if (!f || !*f || strchr(f, '/') || strcmp(f, ".") == 0 || strcmp(f, "..") == 0) {
            inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s': shard must be a plain file name", path,
                             it->string);
            inferd_free(e);
            cJSON_Delete(root);
            return INFERD_ERR_FORMAT;
        }
        e[i].tensor = it->string;
        e[i].shard = f;
    }
    *root_out = root;
    *out = e;
    *n_out = n;
    return INFERD_OK;
}

/* Open each distinct shard of e[] once (e sorted by shard) into s. */
static inferd_status st_open_shards(const char *dir, const char *index, st_index_entry *e, int n, st_set *s)
{
    for (int i = 0; i < n; i++) {
        if (i > 0 && strcmp(e[i].shard, e[i - 1].shard) == 0) {
            e[i].shard_idx = e[i - 1].shard_idx;
            continue;
        }
        char *p = util_path_join(dir, e[i].shard);
        inferd_status st = st_shard_open(p, &s->shards[s->n_shards]);
        inferd_free(p);
        if (st != INFERD_OK) {
            if (st == INFERD_ERR_NOT_FOUND)
                st = inferd_set_error(st, "%s: shard '%s' (holding tensor '%s') not found", index, e[i].shard,
                                      e[i].tensor);
            return st;
        }
        e[i].shard_idx = s->n_shards++;
    }
    return INFERD_OK;
}

/* Resolve every index entry to its tensor in its shard into s->sorted. */
static inferd_status st_resolve_index(const char *index, const st_index_entry *e, int n, st_set *s)
{
    s->sorted = inferd_malloc(sizeof *s->sorted * (size_t)n);
    for (int i = 0; i < n; i++) {
        const st_shard *sh = &s->shards[e[i].shard_idx];
        st_tensor key = {.name = e[i].tensor};
        const st_tensor *t = bsearch(&key, sh->tensors, (size_t)sh->n, sizeof *sh->tensors, st_cmp_name);
        if (!t)
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s' is not in its shard %s", index, e[i].tensor,
                                    sh->path);
        s->sorted[s->n++] = t;
    }
    qsort(s->sorted, (size_t)s->n, sizeof *s->sorted, st_cmp_ptr_name);
    for (int i = 1; i < s->n; i++) {
        if (strcmp(s->sorted[i - 1]->name, s->sorted[i]->name) == 0)
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s' listed twice", index, s->sorted[i]->name);
    }
    return INFERD_OK;
}

/* A sharded set from `index` (a model.safetensors.index.json in dir). */
static inferd_status st_open_index(const char *dir, const char *index, st_set **out)
{
    cJSON *root = NULL;
    st_index_entry *e = NULL;
    int n = 0;
    inferd_status st = st_read_index(index, &root, &e, &n);
    if (st != INFERD_OK)
        return st;
    qsort(e, (size_t)n, sizeof *e, st_cmp_entry_shard);
    int n_distinct = 0;
    for (int i = 0; i < n; i++)
        n_distinct += (i == 0 || strcmp(e[i].shard, e[i - 1].shard) != 0);
    st_set *s = st_set_new(dir, n_distinct);
    st = st_open_shards(dir, index, e, n, s);
    if (st == INFERD_OK)
        st = st_resolve_index(index, e, n, s);
    inferd_free(e);
    cJSON_Delete(root);
    if (st != INFERD_OK) {
        st_close(s);
        return st;
    }
    INFERD_LOG_DEBUG("safetensors: %s: %d tensors in %d shards", dir, s->n, s->n_shards);
    *out = s;
    return INFERD_OK;
}

inferd_status st_open_dir(const char *dir, st_set **out)
{
    if (!dir || !out)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "st_open_dir: NULL argument");
    /* Like transformers: a single model.safetensors wins over an index. */
    char *single = util_path_join(dir, "model.safetensors");
    char *index = util_path_join(dir, "model.safetensors.index.json");
    inferd_status st;
    if (util_file_exists(single))
        st = st_open_file(single, out);
    else if (util_file_exists(index))
        st = st_open_index(dir, index, out);
    else
        st = inferd_set_error(INFERD_ERR_NOT_FOUND, "%s: no model.safetensors or model.safetensors.index.json", dir);
    inferd_free(single);
    inferd_free(index);
    return st;
}

void st_close(st_set *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_shards; i++)
        st_shard_free(&s->shards[i]);
    inferd_free(s->shards);
    inferd_free(s->sorted);
    inferd_free(s->where);
    inferd_free(s);
}

const st_tensor *st_find(const st_set *s, const char *name)
{
    if (!s || !name || s->n == 0)
        return NULL;
    st_tensor key = {.name = name};
    const st_tensor *kp = &key;
    const st_tensor *const *hit = bsearch(&kp, s->sorted, (size_t)s->n, sizeof *s->sorted, st_cmp_ptr_name);
    return hit ? *hit : NULL;
}

int st_count(const st_set *s)
{
    return s ? s->n : 0;
}

const st_tensor *st_at(const st_set *s, int i)
{
    return (s && i >= 0 && i < s->n) ? s->sorted[i] : NULL;
}

/* "[a, b, c]" into buf. */
static const char *st_shape_str(char *buf, size_t n, int n_dims, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < n_dims && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
    return buf;
}

inferd_status st_expect(const st_set *s, const char *name, int n_dims, const int64_t *shape,
                        const st_tensor **out)
{
    const st_tensor *t = st_find(s, name);
    if (!t)
        return inferd_set_error(INFERD_ERR_NOT_FOUND, "%s: tensor '%s' not found", s ? s->where : "?", name);
    bool ok = t->n_dims == n_dims;
    for (int d = 0; ok && d < n_dims; d++)
        ok = t->shape[d] == shape[d];
    if (!ok) {
        char want[256], got[256];
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: tensor '%s': expected shape %s, got %s", t->file, name,
                                st_shape_str(want, sizeof want, n_dims, shape),
                                st_shape_str(got, sizeof got, t->n_dims, t->shape));
    }
    if (out)
        *out = t;
    return INFERD_OK;
}
