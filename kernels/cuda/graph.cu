/* kernels/cuda/graph.cu: CUDA graph capture and replay on the ctx's stream,
 * and page-locked host memory for the inputs copied before a replay.
 *
 * A graph is captured with cudaStreamCaptureModeThreadLocal: only this
 * thread's unsafe calls (allocation, synchronous copies) break the capture,
 * so another thread driving another ctx is unaffected. Every op of the
 * backend enqueues on st->stream with its arguments by value (cuBLASLt gets
 * the ctx's one workspace explicitly), which is what makes a forward pass
 * capturable; the caller makes sure cuBLASLt plans are cached before the
 * capture (gemm.cu asks the heuristic on a plan miss, a host call that must
 * not run for the first time inside a capture). A failed capture is ended
 * and discarded so the stream is usable again, and reported as a status:
 * the model then runs that batch size eagerly.
 *
 * The host emulator of the kernel tests (tests/kernels/cuda/emu, KEMU_H)
 * has no graphs or pinned memory: there these entries report
 * INFERD_ERR_UNSUPPORTED and fall back to plain memory.
 */
#include "kernels/cuda/common.cuh"

/* Test hook of attention.cu: splits of the last decode plan. */
extern "C" int kcuda_attn_last_splits;

int kcuda_attn_planned_splits(void)
{
    return kcuda_attn_last_splits;
}

#ifndef KEMU_H

struct kern_graph {
    cudaGraphExec_t exec;
    int device;
};

/* Contract (kern_graph_begin): start capturing the ctx's stream; every op
 * enqueued by this thread until kern_graph_end is recorded, not run. */
inferd_status kcuda_graph_begin(kern_ctx *ctx)
{
    kcuda_state *st = kcuda_st(ctx);
    cudaError_t e = cudaStreamBeginCapture(st->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return inferd_set_error(INFERD_ERR_DEVICE, "cudaStreamBeginCapture: %s", cudaGetErrorString(e));
    }
    return INFERD_OK;
}

/* Contract (kern_graph_end): end the capture, instantiate and upload the
 * graph; *out NULL and a status on failure (the capture is discarded). */
inferd_status kcuda_graph_end(kern_ctx *ctx, kern_graph **out)
{
    kcuda_state *st = kcuda_st(ctx);
    *out = NULL;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(st->stream, &graph);
    if (e != cudaSuccess || !graph) {
        (void)cudaGetLastError();
        if (graph)
            cudaGraphDestroy(graph);
        return inferd_set_error(INFERD_ERR_DEVICE, "stream capture failed: %s", cudaGetErrorString(e));
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return inferd_set_error(INFERD_ERR_DEVICE, "cudaGraphInstantiate: %s", cudaGetErrorString(e));
    }
    /* upload now, so the first replay does not pay for it */
    CUDA_CHECK(cudaGraphUpload(exec, st->stream));
    kern_graph *g = (kern_graph *)inferd_calloc(1, sizeof *g);
    g->exec = exec;
    g->device = st->device;
    *out = g;
    return INFERD_OK;
}

/* Contract (kern_graph_launch): one replay, ordered on the ctx's stream. */
void kcuda_graph_launch(kern_ctx *ctx, kern_graph *g)
{
    kcuda_state *st = kcuda_st(ctx);
    INFERD_CHECK(g->device == st->device);
    CUDA_CHECK(cudaGraphLaunch(g->exec, st->stream));
}

void kcuda_graph_free(kern_ctx *ctx, kern_graph *g)
{
    kcuda_state *st = kcuda_st(ctx);
    CUDA_CHECK(cudaStreamSynchronize(st->stream));
    CUDA_CHECK(cudaGraphExecDestroy(g->exec));
    inferd_free(g);
}

/* Contract (kern_host_alloc): page-locked host memory, NULL on failure. */
void *kcuda_host_alloc(kern_ctx *ctx, size_t bytes)
{
    kcuda_st(ctx);
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 256) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

void kcuda_host_free(kern_ctx *ctx, void *p)
{
    kcuda_st(ctx);
    CUDA_CHECK(cudaFreeHost(p));
}

#else /* KEMU_H: the host emulator */

inferd_status kcuda_graph_begin(kern_ctx *ctx)
{
    (void)ctx;
    return inferd_set_error(INFERD_ERR_UNSUPPORTED, "no graphs in the kernel emulator");
}

inferd_status kcuda_graph_end(kern_ctx *ctx, kern_graph **out)
{
    (void)ctx;
    *out = NULL;
    return inferd_set_error(INFERD_ERR_UNSUPPORTED, "no graphs in the kernel emulator");
}

void kcuda_graph_launch(kern_ctx *ctx, kern_graph *g)
{
    (void)ctx;
    (void)g;
    INFERD_CHECK_MSG(false, "no graphs in the kernel emulator");
}

void kcuda_graph_free(kern_ctx *ctx, kern_graph *g)
{
    (void)ctx;
    (void)g;
}

void *kcuda_host_alloc(kern_ctx *ctx, size_t bytes)
{
    return kcuda_alloc(ctx, bytes);
}

void kcuda_host_free(kern_ctx *ctx, void *p)
{
    kcuda_free(ctx, p);
}

#endif
