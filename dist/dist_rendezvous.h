/* dist/dist_rendezvous.h: the multi-host rendezvous of tensor parallelism.
 *
 * Before the processes of a multi-node run can create their NCCL
 * communicator they must agree on one opaque blob (the NCCL unique id, 128
 * bytes, made by node 0). This module hands such a blob from node 0 (the
 * master) to nodes 1..nnodes-1 over one TCP connection each, with the flags
 * torchrun and vLLM use: --nnodes, --node-rank, --master-addr,
 * --master-port. It knows nothing of NCCL or CUDA: the caller passes bytes.
 *
 * Node 0:  dist_rdzv_listen -> (make the blob) -> dist_rdzv_serve -> dist_rdzv_close
 * Others:  dist_rdzv_join (connects, retrying until the deadline: the master
 *          may start later than its peers)
 * With nnodes == 1 nothing touches the network: listen opens no socket and
 * serve returns at once. dist_chan.h runs this same rendezvous and keeps
 * the connections open afterwards as the run's control channel.
 *
 * Wire format (all fields little-endian uint32):
 *   hello, joiner -> master: magic, version, nnodes, node_rank       (16 bytes)
 *   reply, master -> joiner: magic, version, code, length            (16 bytes)
 *                            then `length` bytes: the blob when code is
 *                            DIST_RDZV_OK (<= DIST_RDZV_MAX_BLOB), else the
 *                            refusal reason as text (<= DIST_RDZV_MAX_REASON)
 * The master checks every hello: a peer that speaks the protocol but
 * disagrees with the master (version, nnodes, a rank out of range or already
 * taken) is a misconfigured job, so the master refuses it with a reason,
 * tells the peers already joined that the rendezvous is aborted, and fails
 * at once. A connection that is not the protocol at all (wrong magic, closed
 * or silent before a whole hello) is refused or dropped and the master keeps
 * waiting: a port scanner or health probe must not take a job down. Its
 * trace is in the master's timeout message if the real nodes never come.
 *
 * Every read, write, connect and wait is bounded by one deadline,
 * timeout_s from dist_rdzv_listen (master) or dist_rdzv_join (joiner).
 * NOTE: host-name resolution (getaddrinfo) cannot be bounded and may take
 * the resolver's own timeout on top of it.
 * Messages name the flags as the command line spells them. The library logs
 * only at debug level.
 */
#ifndef INFERD_DIST_RENDEZVOUS_H
#define INFERD_DIST_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

#include "common/opt.h"
#include "common/status.h"

#define DIST_RDZV_MAGIC 0x7a647269u /* "irdz" read as a little-endian uint32 */
#define DIST_RDZV_VERSION 1u
#define DIST_RDZV_HEADER_SIZE 16 /* hello and reply alike */
#define DIST_RDZV_MAX_BLOB 4096  /* payload bound, both sides */
#define DIST_RDZV_MAX_REASON 255 /* refusal text bound, both sides */
#define DIST_RDZV_MAX_NODES 1024 /* --nnodes bound: one socket per peer on the master */

/* The reply's code: why the master refused a hello (or OK). */
typedef enum {
    DIST_RDZV_OK = 0,
    DIST_RDZV_BAD_MAGIC,   /* not this protocol */
    DIST_RDZV_BAD_VERSION, /* another protocol version */
    DIST_RDZV_BAD_NNODES,  /* --nnodes differs from the master's */
    DIST_RDZV_BAD_RANK,    /* --node-rank not in [1, nnodes-1] */
    DIST_RDZV_RANK_TAKEN,  /* another live peer already joined with this --node-rank */
    DIST_RDZV_ABORTED,     /* the master gave up (another peer's error, its deadline) */
} dist_rdzv_code;

/* Rendezvous options. Every field has one row in the option table
 * (dist_rdzv_opts_rows): flag / config-key name, range, default, help. */
typedef struct {
    const char *master_addr; /* node 0's numeric IPv4/IPv6 address or host name; the master binds it */
    int master_port;         /* 1..65535 (dist_rdzv_listen alone also takes 0: any free port) */
    int nnodes;              /* >= 1 */
    int node_rank;           /* 0..nnodes-1; 0 is the master */
    double timeout_s;        /* whole rendezvous deadline, > 0 */
} dist_rdzv_opts;

/* The table's defaults (one node, port 29500 as torchrun, 600 s, no
 * master address: none is needed for one node). Allocates nothing. */
void dist_rdzv_opts_default(dist_rdzv_opts *o);
/* The option rows (offsets into dist_rdzv_opts); *n = count. A
 * master_addr filled through them is owned: free with opt_free(rows, n, o). */
const opt_row *dist_rdzv_opts_rows(size_t *n);
/* Check o as the command line will: every number against its row,
 * node_rank < nnodes, and with nnodes > 1 a non-empty master_addr that
 * resolves. INVALID_ARG naming the flag ("--node-rank 2 out of range
 * [0, 1] for --nnodes 2"). With nnodes == 1 the address is not looked at. */
inferd_status dist_rdzv_opts_validate(const dist_rdzv_opts *o);

/* Node 0's listening socket and deadline. */
typedef struct dist_rdzv_listener dist_rdzv_listener;

/* Node 0: validate o (node_rank must be 0; master_port may be 0), start the
 * deadline and listen on master_addr:master_port (nothing when nnodes == 1).
 * Listening before the blob exists lets early peers connect meanwhile. */
inferd_status dist_rdzv_listen(const dist_rdzv_opts *o, dist_rdzv_listener **out);
/* The port listened on (the real one when asked for 0); 0 when nnodes == 1. */
int dist_rdzv_port(const dist_rdzv_listener *l);
/* Accept nnodes-1 peers, check each hello, then send every one of them
 * blob[0..len) (len <= DIST_RDZV_MAX_BLOB). Once per listener. Fails with
 * INVALID_ARG on a misconfigured peer (which is sent the reason), TIMEOUT
 * when the deadline passes first (naming the ranks still missing), IO when a
 * peer cannot be sent the blob. Peers already joined are told of a failure. */
inferd_status dist_rdzv_serve(dist_rdzv_listener *l, const void *blob, size_t len);
/* Close the socket and free l (NULL is fine). */
void dist_rdzv_close(dist_rdzv_listener *l);

/* Nodes 1..nnodes-1: connect to the master (retrying until the deadline),
 * send the hello and receive the blob into buf[0..cap); *len = its size.
 * INVALID_ARG when the master refused this node (its reason in the
 * message), UNAVAILABLE when it aborted, TOO_LONG when the blob exceeds cap
 * (nothing written past cap), FORMAT on a reply that is not the protocol,
 * TIMEOUT when no blob came by the deadline. */
inferd_status dist_rdzv_join(const dist_rdzv_opts *o, void *buf, size_t cap, size_t *len);

#endif
