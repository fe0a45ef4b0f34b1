/* kvcache/kv_layout.h: sizing of the paged KV storage. The storage itself is
 * allocated by the model on its kernel backend; this module only does the
 * arithmetic so the scheduler and the server can reason about capacity. */
#ifndef INFERD_KVCACHE_LAYOUT_H
#define INFERD_KVCACHE_LAYOUT_H

#include <stdint.h>

/* Bytes of one block over all layers, K and V:
 * 2 * n_layers * n_kv_heads * block_size * head_dim * elem_size. */
int64_t kv_bytes_per_block(int n_layers, int n_kv_heads, int head_dim, int block_size, int elem_size);

/* Slot of the token at `pos` of a sequence whose block table is `table`. */
static inline int64_t kv_slot(const int32_t *table, int pos, int block_size)
{
    return (int64_t)table[pos / block_size] * block_size + pos % block_size;
}

#endif
