/* kernels/cuda/comm.cu: the CUDA backend's collectives (kern_comm_*) over
 * NCCL, which is loaded at run time so that the build needs no nccl.h and a
 * run without tensor parallelism no libnccl.
 *
 * The first communicator loads the library once (pthread_once): dlopen of
 * $INFERD_NCCL_LIB, else "libnccl.so.2", then dlsym of the few entry points
 * used here, declared below by hand. Before the library is loaded,
 * NCCL_NVLS_ENABLE is set to 0 unless the environment already sets it
 * (NVLink multicast stays off: DESIGN.md, the GPU machine). A load failure is
 * INFERD_ERR_UNAVAILABLE naming the path and dlerror(), returned by every
 * later create too. Creating a communicator is recoverable (status); an NCCL
 * error in a collective is a device fault and aborts through kcuda_fatal
 * with NCCL's error string, like CUDA_CHECK.
 *
 * Collectives are enqueued on the rank's ctx stream, so they order with the
 * forward pass's kernels and can be captured in a CUDA graph. Every rank
 * drives its own communicator from its own thread (NCCL would deadlock one
 * thread that drove several ranks without ncclGroupStart/End).
 */
#include <dlfcn.h>
#include <pthread.h>

#include "kernels/cuda/common.cuh"

/* --- the NCCL ABI used here ------------------------------------------------- */
/* Declared by hand instead of including nccl.h. The values were checked
 * against /usr/local/cuda-13.0/include/nccl.h (NCCL 2.28.9): ncclSuccess = 0,
 * ncclInt8 = 0, ncclFloat16 = 6, ncclFloat32 = 7, ncclBfloat16 = 9, ncclSum =
 * 0, NCCL_UNIQUE_ID_BYTES = 128, ncclComm_t an opaque pointer; they are part
 * of libnccl.so.2's stable ABI. The enums are passed as int, as C passes
 * them. */
typedef struct nccl_comm *nccl_comm_t;
typedef struct {
    char internal[KERN_COMM_ID_BYTES];
} nccl_unique_id;
static_assert(sizeof(nccl_unique_id) == 128, "NCCL_UNIQUE_ID_BYTES");
typedef int nccl_result;
enum { NCCL_SUCCESS = 0 };
enum { NCCL_INT8 = 0, NCCL_FLOAT16 = 6, NCCL_FLOAT32 = 7, NCCL_BFLOAT16 = 9 };
enum { NCCL_SUM = 0 };

typedef struct {
    nccl_result (*get_version)(int *version);
    nccl_result (*get_unique_id)(nccl_unique_id *id);
    nccl_result (*comm_init_rank)(nccl_comm_t *comm, int n_ranks, nccl_unique_id id, int rank);
    nccl_result (*comm_init_all)(nccl_comm_t *comms, int n_dev, const int *devs);
    nccl_result (*comm_destroy)(nccl_comm_t comm);
    nccl_result (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op, nccl_comm_t comm,
                              cudaStream_t stream);
    nccl_result (*all_gather)(const void *send, void *recv, size_t send_count, int dtype, nccl_comm_t comm,
                              cudaStream_t stream);
    nccl_result (*group_start)(void); /* for a caller that drives several ranks from one thread */
    nccl_result (*group_end)(void);
    const char *(*get_error_string)(nccl_result r);
} nccl_api;

static nccl_api g_nccl;
static pthread_once_t g_nccl_once = PTHREAD_ONCE_INIT;
static bool g_nccl_loaded;
static char g_nccl_error[768]; /* why the load failed */

/* An NCCL call on the hot path: an error is a device fault. */
#define NCCL_CHECK(stmt)                                                                             \
    do {                                                                                             \
        nccl_result kn_r_ = (stmt);                                                                  \
        if (__builtin_expect(kn_r_ != NCCL_SUCCESS, 0))                                              \
            kcuda_fatal(#stmt, g_nccl.get_error_string(kn_r_), __func__, __FILE__, __LINE__);       \
    } while (0)

/* dlsym every entry point into g_nccl; false (g_nccl_error set) when one
 * is missing. */
static bool nccl_resolve(void *lib, const char *path)
{
    const struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"ncclGetVersion", (void **)&g_nccl.get_version},
        {"ncclGetUniqueId", (void **)&g_nccl.get_unique_id},
        {"ncclCommInitRank", (void **)&g_nccl.comm_init_rank},
        {"ncclCommInitAll", (void **)&g_nccl.comm_init_all},
        {"ncclCommDestroy", (void **)&g_nccl.comm_destroy},
        {"ncclAllReduce", (void **)&g_nccl.all_reduce},
        {"ncclAllGather", (void **)&g_nccl.all_gather},
        {"ncclGroupStart", (void **)&g_nccl.group_start},
        {"ncclGroupEnd", (void **)&g_nccl.group_end},
        {"ncclGetErrorString", (void **)&g_nccl.get_error_string},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(lib, syms[i].name);
        if (!*syms[i].slot) {
            const char *e = dlerror();
            snprintf(g_nccl_error, sizeof g_nccl_error, "NCCL library %s has no %s: %s", path, syms[i].name,
                     e ? e : "?");
            return false;
        }
    }
    return true;
}

/* Log the library's version code (MAJOR * 10000 + MINOR * 100 + PATCH since
 * NCCL 2.9, MAJOR * 1000 + MINOR * 100 + PATCH before). */
static void nccl_log_version(const char *path)
{
    int v = 0;
    if (g_nccl.get_version(&v) != NCCL_SUCCESS)
        v = 0;
    const int major = v >= 10000 ? v / 10000 : v / 1000, minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
    INFERD_LOG_INFO("nccl: loaded %s, version %d.%d.%d", path, major, minor, v % 100);
}

static void nccl_load_once(void)
{
#ifdef KEMU_H
    /* NCCL drives real devices; the kernel emulator has none. */
    snprintf(g_nccl_error, sizeof g_nccl_error, "NCCL is not available under the kernel emulator");
#else
    const char *env = getenv("INFERD_NCCL_LIB");
    const char *path = env && *env ? env : "libnccl.so.2";
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* 0: keep a value the user set */
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(g_nccl_error, sizeof g_nccl_error,
                 "cannot load NCCL from %s: %s (INFERD_NCCL_LIB names the library)", path, e ? e : "?");
        return;
    }
    if (!nccl_resolve(lib, path)) {
        dlclose(lib);
        return;
    }
    nccl_log_version(path);
    g_nccl_loaded = true; /* the library stays loaded for the process */
#endif
}

/* INFERD_OK once NCCL is loaded, else UNAVAILABLE with the reason. */
static inferd_status nccl_load(void)
{
    pthread_once(&g_nccl_once, nccl_load_once);
    if (!g_nccl_loaded)
        return inferd_set_error(INFERD_ERR_UNAVAILABLE, "%s", g_nccl_error);
    return INFERD_OK;
}

static kern_comm *comm_new(int rank, int size, int device, nccl_comm_t nc)
{
    kern_comm *c = (kern_comm *)inferd_calloc(1, sizeof *c);
    c->backend = KERN_BACKEND_CUDA;
    c->rank = rank;
    c->size = size;
    c->device = device;
    c->impl = nc;
    return c;
}

/* --- communicators ----------------------------------------------------------- */

/* Contract (kern_comm_create_local): ncclCommInitAll over the ctxs' devices
 * (distinct, else INVALID_ARG); NCCL failures are INFERD_ERR_DEVICE. */
inferd_status kcuda_comm_create_local(kern_ctx *const *ctxs, int n, kern_comm **out)
{
    inferd_status st = nccl_load();
    if (st != INFERD_OK)
        return st;
    int *devs = (int *)inferd_malloc((size_t)n * sizeof *devs);
    for (int r = 0; r < n; r++) {
        devs[r] = kcuda_st(ctxs[r])->device;
        for (int q = 0; q < r && st == INFERD_OK; q++)
            if (devs[q] == devs[r])
                st = inferd_set_error(INFERD_ERR_INVALID_ARG, "communicator ranks %d and %d are both on CUDA device %d",
                                      q, r, devs[r]);
    }
    nccl_comm_t *comms = (nccl_comm_t *)inferd_calloc((size_t)n, sizeof *comms);
    nccl_result e = NCCL_SUCCESS;
    if (st == INFERD_OK && (e = g_nccl.comm_init_all(comms, n, devs)) != NCCL_SUCCESS) {
        (void)cudaGetLastError();
        st = inferd_set_error(INFERD_ERR_DEVICE, "ncclCommInitAll over %d devices: %s", n, g_nccl.get_error_string(e));
    }
    for (int r = 0; r < n && st == INFERD_OK; r++)
        out[r] = comm_new(r, n, devs[r], comms[r]);
    inferd_free(comms);
    inferd_free(devs);
    return st;
}

/* Contract (kern_comm_make_id): ncclGetUniqueId, as raw bytes. */
inferd_status kcuda_comm_make_id(unsigned char id[KERN_COMM_ID_BYTES])
{
    inferd_status st = nccl_load();
    if (st != INFERD_OK)
        return st;
    nccl_unique_id u;
    nccl_result e = g_nccl.get_unique_id(&u);
    if (e != NCCL_SUCCESS)
        return inferd_set_error(INFERD_ERR_DEVICE, "ncclGetUniqueId: %s", g_nccl.get_error_string(e));
    memcpy(id, u.internal, KERN_COMM_ID_BYTES);
    return INFERD_OK;
}

/* Contract (kern_comm_create_rank): ncclCommInitRank on the ctx's device;
 * blocks until all n ranks have joined. */
inferd_status kcuda_comm_create_rank(kern_ctx *ctx, const unsigned char id[KERN_COMM_ID_BYTES], int n, int rank,
                                     kern_comm **out)
{
    inferd_status st = nccl_load();
    if (st != INFERD_OK)
        return st;
    const int device = kcuda_st(ctx)->device; /* NCCL binds the rank to the current device */
    nccl_unique_id u;
    memcpy(u.internal, id, KERN_COMM_ID_BYTES);
    nccl_comm_t nc = NULL;
    nccl_result e = g_nccl.comm_init_rank(&nc, n, u, rank);
    if (e != NCCL_SUCCESS) {
        (void)cudaGetLastError();
        return inferd_set_error(INFERD_ERR_DEVICE, "ncclCommInitRank (rank %d of %d, CUDA device %d): %s", rank, n,
                                device, g_nccl.get_error_string(e));
    }
    *out = comm_new(rank, n, device, nc);
    return INFERD_OK;
}

/* Contract (kern_comm_free): ncclCommDestroy on the rank's device.
 * NOTE: the rank's stream must have no collective in flight (kern_sync
 * first); a failure here is logged, not fatal (teardown). */
void kcuda_comm_free(kern_comm *c)
{
    CUDA_CHECK(cudaSetDevice(c->device));
    nccl_result e = g_nccl.comm_destroy((nccl_comm_t)c->impl);
    if (e != NCCL_SUCCESS)
        INFERD_LOG_WARN("ncclCommDestroy (rank %d of %d): %s", c->rank, c->size, g_nccl.get_error_string(e));
    inferd_free(c);
}

/* --- collectives ----------------------------------------------------------- */

static int nccl_dtype(kern_dtype dt)
{
    switch (dt) {
    case KERN_DTYPE_F32: return NCCL_FLOAT32;
    case KERN_DTYPE_F16: return NCCL_FLOAT16;
    case KERN_DTYPE_BF16: return NCCL_BFLOAT16;
    case KERN_DTYPE_FP8_E4M3: break;
    }
    INFERD_CHECK_MSG(false, "all_reduce: unknown dtype");
    return NCCL_FLOAT32;
}

/* The ctx's state, checked to be on the communicator's device. */
static kcuda_state *comm_state(kern_ctx *ctx, const kern_comm *c)
{
    kcuda_state *st = kcuda_st(ctx);
    INFERD_CHECK_MSG(st->device == c->device, "collective on a ctx of another device than its communicator");
    return st;
}

/* Contract (kern_all_reduce_sum): in-place ncclAllReduce(sum) on the ctx's
 * stream; nothing for count 0. */
void kcuda_all_reduce_sum(kern_ctx *ctx, kern_comm *c, void *buf, size_t count, kern_dtype dtype)
{
    kcuda_state *st = comm_state(ctx, c);
    if (count == 0)
        return;
    NCCL_CHECK(g_nccl.all_reduce(buf, buf, count, nccl_dtype(dtype), NCCL_SUM, (nccl_comm_t)c->impl, st->stream));
}

/* Contract (kern_all_gather): ncclAllGather of bytes (int8 elements) on the
 * ctx's stream; nothing for 0 bytes. */
void kcuda_all_gather(kern_ctx *ctx, kern_comm *c, void *dst, const void *src, size_t bytes)
{
    kcuda_state *st = comm_state(ctx, c);
    if (bytes == 0)
        return;
    NCCL_CHECK(g_nccl.all_gather(src, dst, bytes, NCCL_INT8, (nccl_comm_t)c->impl, st->stream));
}
