/* kvcache/kv_layout.c: see kv_layout.h. */
#include "kvcache/kv_layout.h"

int64_t kv_bytes_per_block(int n_layers, int n_kv_heads, int head_dim, int block_size, int elem_size)
{
    return (int64_t)2 * n_layers * n_kv_heads * block_size * head_dim * elem_size;
}
