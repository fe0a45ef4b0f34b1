/* model/model_tp_net.c: what a multi-node tensor-parallel group sends over
 * its control channel (dist/dist_chan.h): the steps node 0 is given, and,
 * on the CPU backend, the collectives themselves.
 *
 * A step message is a fixed header of little-endian uint32s (magic, kind,
 * n_tokens, n_seqs, n_logits, block-table width, n_extra, 0) and then the
 * batch's arrays in one order: slot mapping (int64, first, so it stays
 * 8-byte aligned), tokens, positions, query_start_loc, seq_lens, block
 * tables, logits indices, extra rows (int32). Decoding checks that the
 * counts are non-negative and that the message is exactly as long as they
 * say, then points the batch into the message; the follower checks the
 * values with model_check_batch before running it, as node 0 did.
 *
 * The CPU collectives across nodes (one rank a node) go through node 0:
 * every node sends its buffer (dist_chan_gather), node 0 adds them in rank
 * order in fp32 -- the arithmetic of the in-process CPU communicator, so a
 * split into processes gives the bits of the same split into threads --
 * and sends the result back (dist_chan_bcast). Slow (two trips of the
 * whole buffer through one host) but exact; GPUs use NCCL.
 */
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "dist/dist_chan.h"
#include "model/model_internal.h"

#define MSG_MAGIC 0x70746e69u /* "intp" */
#define MSG_HEADER_WORDS 8

/* Bytes of the arrays of a batch with these counts. */
static size_t arrays_bytes(int64_t n_tok, int64_t n_seq, int64_t n_log, int64_t width, int64_t n_extra)
{
    return (size_t)n_tok * 8 + (size_t)(2 * n_tok + (n_seq + 1) + n_seq + n_seq * width + n_log + n_extra) * 4;
}

size_t model_tp_msg_cap(const model *m)
{
    return MSG_HEADER_WORDS * 4 +
           arrays_bytes(m->T, m->S, m->R, m->max_blocks_per_seq, m->T);
}

static char *put(char *p, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(p, src, bytes);
    return p + bytes;
}

size_t model_tp_msg_encode(const model_batch *b, int kind, void *msg, size_t cap)
{
    const int n_extra = b->n_extra > 0 ? b->n_extra : 0;
    const size_t need = MSG_HEADER_WORDS * 4 + arrays_bytes(b->n_tokens, b->n_seqs, b->n_logits,
                                                            b->max_blocks_per_seq, n_extra);
    INFERD_CHECK_MSG(need <= cap, "tensor parallel: a step exceeds the message buffer");
    const uint32_t h[MSG_HEADER_WORDS] = {MSG_MAGIC,
                                          (uint32_t)kind,
                                          (uint32_t)b->n_tokens,
                                          (uint32_t)b->n_seqs,
                                          (uint32_t)b->n_logits,
                                          (uint32_t)b->max_blocks_per_seq,
                                          (uint32_t)n_extra,
                                          0};
    const size_t nt = (size_t)b->n_tokens, ns = (size_t)b->n_seqs;
    char *p = put(msg, h, sizeof h);
    p = put(p, b->slot_mapping, nt * 8);
    p = put(p, b->tokens, nt * 4);
    p = put(p, b->positions, nt * 4);
    p = put(p, b->query_start_loc, (ns + 1) * 4);
    p = put(p, b->seq_lens, ns * 4);
    p = put(p, b->block_tables, ns * (size_t)b->max_blocks_per_seq * 4);
    p = put(p, b->logits_indices, (size_t)b->n_logits * 4);
    p = put(p, b->extra_rows, (size_t)n_extra * 4);
    return (size_t)(p - (char *)msg);
}

/* *field = p, then p past n elements of size es. */
static const char *take(const char *p, const void **field, size_t n, size_t es)
{
    *field = p;
    return p + n * es;
}

inferd_status model_tp_msg_decode(const void *msg, size_t len, model_batch *b, int *kind)
{
    uint32_t h[MSG_HEADER_WORDS];
    if (len < sizeof h)
        return inferd_set_error(INFERD_ERR_FORMAT, "a step message of %zu bytes (less than its header)", len);
    memcpy(h, msg, sizeof h);
    const int64_t nt = (int32_t)h[2], ns = (int32_t)h[3], nl = (int32_t)h[4], w = (int32_t)h[5], ne = (int32_t)h[6];
    if (h[0] != MSG_MAGIC || (h[1] != MODEL_TP_MSG_STEP && h[1] != MODEL_TP_MSG_FORWARD))
        return inferd_set_error(INFERD_ERR_FORMAT, "a step message with magic %08x kind %u", h[0], h[1]);
    if (nt < 1 || ns < 1 || nl < 0 || w < 1 || ne < 0 || nt > (1 << 24) || ns > (1 << 24) || w > (1 << 24))
        return inferd_set_error(INFERD_ERR_FORMAT, "a step message with counts %lld/%lld/%lld/%lld/%lld",
                                (long long)nt, (long long)ns, (long long)nl, (long long)w, (long long)ne);
    if (len != sizeof h + arrays_bytes(nt, ns, nl, w, ne))
        return inferd_set_error(INFERD_ERR_FORMAT, "a step message of %zu bytes, its header says %zu", len,
                                sizeof h + arrays_bytes(nt, ns, nl, w, ne));
    memset(b, 0, sizeof *b);
    b->n_tokens = (int)nt;
    b->n_seqs = (int)ns;
    b->n_logits = (int)nl;
    b->max_blocks_per_seq = (int)w;
    b->n_extra = (int)ne;
    const char *p = (const char *)msg + sizeof h;
    p = take(p, (const void **)&b->slot_mapping, (size_t)nt, 8);
    p = take(p, (const void **)&b->tokens, (size_t)nt, 4);
    p = take(p, (const void **)&b->positions, (size_t)nt, 4);
    p = take(p, (const void **)&b->query_start_loc, (size_t)ns + 1, 4);
    p = take(p, (const void **)&b->seq_lens, (size_t)ns, 4);
    p = take(p, (const void **)&b->block_tables, (size_t)(ns * w), 4);
    p = take(p, (const void **)&b->logits_indices, (size_t)nl, 4);
    take(p, (const void **)&b->extra_rows, (size_t)ne, 4);
    if (ne == 0)
        b->extra_rows = NULL;
    *kind = (int)h[1];
    return INFERD_OK;
}

/* --- the CPU collectives across nodes ----------------------------------------- */

/* One star exchange: node 0 gets every node's src[bytes] in all (node
 * order), makes the result with combine, and every node gets the result
 * (res_bytes) in dst. A failed exchange is fatal: the other ranks would
 * wait forever. */
static void star(dist_chan *c, const void *src, size_t bytes, void *dst, size_t res_bytes,
                 void (*combine)(const char *all, int n, size_t bytes, void *dst))
{
    const int n = dist_chan_nnodes(c);
    const bool root = dist_chan_node_rank(c) == 0;
    char *all = root ? inferd_malloc(bytes * (size_t)n + 1) : NULL;
    inferd_status st = dist_chan_gather(c, src, bytes, all);
    if (st == INFERD_OK && root) {
        combine(all, n, bytes, dst);
        st = dist_chan_bcast(c, dst, res_bytes);
    } else if (st == INFERD_OK) {
        size_t len = 0;
        st = dist_chan_recv(c, dst, res_bytes, &len);
        if (st == INFERD_OK && len != res_bytes)
            st = inferd_set_error(INFERD_ERR_FORMAT, "a collective's result of %zu bytes, not %zu", len, res_bytes);
    }
    inferd_free(all);
    INFERD_CHECK_MSG(st == INFERD_OK, "tensor parallel: a collective across nodes failed");
}

/* dst[count] = sum over nodes of all[k][count] (fp32), node 0 first. */
static void combine_sum(const char *all, int n, size_t bytes, void *dst)
{
    const size_t count = bytes / sizeof(float);
    float *out = dst;
    memcpy(out, all, bytes);
    for (int k = 1; k < n; k++) {
        const float *x = (const float *)(all + (size_t)k * bytes);
        for (size_t i = 0; i < count; i++)
            out[i] += x[i];
    }
}

static void combine_concat(const char *all, int n, size_t bytes, void *dst)
{
    memcpy(dst, all, bytes * (size_t)n);
}

static void star_all_reduce(void *user, void *buf, size_t count, kern_dtype dtype)
{
    INFERD_CHECK_MSG(dtype == KERN_DTYPE_F32, "tensor parallel across nodes: cpu activations are F32");
    star(user, buf, count * sizeof(float), buf, count * sizeof(float), combine_sum);
}

static void star_all_gather(void *user, void *dst, const void *src, size_t bytes)
{
    star(user, src, bytes, dst, bytes * (size_t)dist_chan_nnodes(user), combine_concat);
}

kern_comm_hooks model_tp_star_hooks(void *chan)
{
    return (kern_comm_hooks){.all_reduce_sum = star_all_reduce, .all_gather = star_all_gather, .user = chan};
}
