/* model/safetensors.h: read-only, validated access to *.safetensors files.
 *
 * A st_file set is one model directory: either model.safetensors or the shards
 * listed by model.safetensors.index.json, each mmapped. Every header is
 * validated against the file size before any tensor is touched: header length,
 * JSON, dtype, shape, offsets in range and non-overlapping, byte size ==
 * product(shape) * dtype size with overflow-checked arithmetic. Errors name
 * the file and the tensor.
 *
 * Tensor data is aligned to its element size (files that would not be are
 * rejected; the reference writer always aligns), so `data` may be read
 * through a typed pointer. Names are unique; st_at() iterates in name order.
 * A sharded set holds exactly the tensors named by the index's weight_map.
 */
#ifndef INFERD_MODEL_SAFETENSORS_H
#define INFERD_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/kernels.h"

#define ST_MAX_DIMS 8

typedef struct {
    const char *name;
    kern_dtype dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];
    const void *data;     /* inside the mmap */
    size_t n_bytes;
    const char *file;     /* path of the file holding it */
} st_tensor;

typedef struct st_set st_set;

/* Open a model directory (single file or sharded index). */
inferd_status st_open_dir(const char *dir, st_set **out);
/* Open a single .safetensors file. */
inferd_status st_open_file(const char *path, st_set **out);
void st_close(st_set *s);

/* NULL when absent. */
const st_tensor *st_find(const st_set *s, const char *name);
int st_count(const st_set *s);
const st_tensor *st_at(const st_set *s, int i);

/* Find `name` and check it has exactly the given shape (n_dims dims).
 * Errors: INFERD_ERR_NOT_FOUND naming the tensor, INFERD_ERR_FORMAT naming
 * the tensor, the expected and the actual shape. */
inferd_status st_expect(const st_set *s, const char *name, int n_dims, const int64_t *shape,
                        const st_tensor **out);

#endif
