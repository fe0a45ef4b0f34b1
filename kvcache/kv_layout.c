/* kvcache/kv_layout.c: see kv_layout.h. */
#include "kvcache/kv_layout.h"

int64_t kv_bytes_per_block(int n_layers, int n_kv_heads, int head_dim, int block_size, int elem_size)
{
    return (int64_t)2 * n_layers * n_kv_heads * block_size * head_dim * elem_size;
}

int64_t kv_blocks_for_seqs(int n_seqs, int max_len, int block_size)
{
    int64_t per_seq = ((int64_t)max_len + block_size - 1) / block_size;
    return (int64_t)n_seqs * per_seq + KV_NULL_BLOCKS;
}

int64_t kv_max_len_for_blocks(int64_t n_blocks, int block_size)
{
    return n_blocks > KV_NULL_BLOCKS ? (n_blocks - KV_NULL_BLOCKS) * block_size : 0;
}
