/* kvcache/kv_layout.h: sizing of the paged KV storage. The storage itself is
 * allocated by the model on its kernel backend; this module only does the
 * arithmetic so the model, the scheduler and the server reason about
 * capacity with one set of formulas (the null block 0 that kv_pool reserves
 * included: a pool of n blocks holds n - 1 blocks of tokens). */
#ifndef INFERD_KVCACHE_LAYOUT_H
#define INFERD_KVCACHE_LAYOUT_H

#include <stdint.h>

/* Blocks kv_pool reserves (block 0, the null block). */
#define KV_NULL_BLOCKS 1

/* Bytes of one block over all layers, K and V:
 * 2 * n_layers * n_kv_heads * block_size * head_dim * elem_size. */
int64_t kv_bytes_per_block(int n_layers, int n_kv_heads, int head_dim, int block_size, int elem_size);

/* Blocks of a pool, the null block included, that holds n_seqs sequences
 * of max_len tokens each at the same time:
 * n_seqs * ceil(max_len / block_size) + KV_NULL_BLOCKS. */
int64_t kv_blocks_for_seqs(int n_seqs, int max_len, int block_size);

/* The longest sequence a pool of n_blocks blocks (null block included) holds
 * alone: (n_blocks - KV_NULL_BLOCKS) * block_size; 0 when no block is left. */
int64_t kv_max_len_for_blocks(int64_t n_blocks, int block_size);

/* Slot of the token at `pos` of a sequence whose block table is `table`. */
static inline int64_t kv_slot(const int32_t *table, int pos, int block_size)
{
    return (int64_t)table[pos / block_size] * block_size + pos % block_size;
}

#endif
