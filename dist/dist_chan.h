/* dist/dist_chan.h: the control channel of a multi-node run.
 *
 * After the rendezvous (dist_rendezvous.h) node 0 holds one TCP connection
 * to every other node; this module keeps them open as a star: node 0 (the
 * driver) broadcasts messages to the peers and gathers fixed-size records
 * from them, e.g. each decode step's command and the peers' replies. It
 * carries bytes and knows nothing of what they mean.
 *
 * Node 0:  dist_rdzv_listen -> (make the blob) -> dist_chan_serve -> bcast / gather ... -> dist_chan_close
 * Others:  dist_chan_join -> recv / gather ... -> dist_chan_close
 * Every node must make the same sequence of calls (a bcast on node 0 with
 * a recv on each peer, a gather on every node); the channel frames the
 * bytes but cannot tell two programs that disagree apart, except by a
 * gather record size (FORMAT).
 *
 * Wire format, after the rendezvous reply and blob on the same connection:
 * every message is one frame, an 8-byte little-endian length then that
 * many payload bytes; bcast sends one frame to each peer, gather one frame
 * from each peer. A length above DIST_CHAN_MAX_MSG is a corrupt stream.
 *
 * Waiting: the rendezvous is bounded by --dist-timeout, as dist_rdzv_serve
 * and dist_rdzv_join are. After it no call has a deadline: a peer waits for
 * its next message as long as the driver is idle (hours), blocked in poll()
 * without a timeout, never spinning. A peer that hangs without closing its
 * connection therefore blocks node 0's next bcast or gather; a peer that
 * dies (its connection closed or reset) fails it at once with IO.
 * The sockets are non-blocking with TCP_NODELAY (a small message goes out
 * at once); writes use MSG_NOSIGNAL, so a dead peer never raises SIGPIPE.
 *
 * Failure: a call that fails with IO or FORMAT leaves the channel failed:
 * the byte stream may be cut mid-frame, so every later call but close
 * returns IO ("failed earlier: <why>"), and close resets the connections
 * (TCP RST), so the other side sees IO rather than the clean end (node 0's
 * clean close is what tells the peers the run is over: UNAVAILABLE).
 * INVALID_ARG (misuse) and TOO_LONG (see dist_chan_recv) leave it usable.
 *
 * Threads: one thread at a time per channel (the calls keep no lock);
 * distinct channels are independent. The error message is per thread.
 */
#ifndef INFERD_DIST_CHAN_H
#define INFERD_DIST_CHAN_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "dist/dist_rendezvous.h"

#define DIST_CHAN_FRAME_HEADER 8              /* little-endian uint64 payload length */
#define DIST_CHAN_MAX_MSG ((uint64_t)1 << 36) /* 64 GiB: far above any real message */

typedef struct dist_chan dist_chan;

/* Node 0: what dist_rdzv_serve does (accept nnodes-1 peers, check their
 * hellos, send each the blob, all bounded by the listener's deadline), but
 * every peer's connection stays open and becomes the channel. l is consumed
 * (closed and freed) in every case, failure included. nnodes == 1: a
 * channel with no peers (every call below is then trivial). Errors are
 * dist_rdzv_serve's; *out = NULL on a failure. */
inferd_status dist_chan_serve(dist_rdzv_listener *l, const void *blob, size_t len, dist_chan **out);

/* Nodes 1..nnodes-1: what dist_rdzv_join does (buf[cap] receives the blob,
 * *len its size; its errors), keeping the connection to node 0 as the
 * channel. *out = NULL on a failure. */
inferd_status dist_chan_join(const dist_rdzv_opts *o, void *buf, size_t cap, size_t *len, dist_chan **out);

/* --nnodes and --node-rank of the channel's node (c not NULL). */
int dist_chan_nnodes(const dist_chan *c);
int dist_chan_node_rank(const dist_chan *c);

/* Node 0: send msg[0..len) (len may be 0, msg then may be NULL) to every
 * peer as one message, in node order, each whole before the next. Returns
 * once every peer's copy is handed to the kernel, not when it is read.
 * IO naming the first node that has closed or reset its connection (the
 * peers before it were sent the message, the ones after were not; the
 * channel is failed). INVALID_ARG on a peer's channel or when len exceeds
 * DIST_CHAN_MAX_MSG. No-op with one node. */
inferd_status dist_chan_bcast(dist_chan *c, const void *msg, size_t len);

/* Nodes 1..: receive node 0's next message into buf[0..cap); *len = its
 * size. Waits without a deadline.
 * UNAVAILABLE: node 0 closed the channel cleanly between messages, the
 *   peer's normal end (*len = 0);
 * IO: the connection was reset or closed mid-message (the channel fails);
 * FORMAT: a length above DIST_CHAN_MAX_MSG (the channel fails);
 * TOO_LONG: the message is longer than cap. It is then read and dropped
 *   (buf is not written; *len = its size, so the caller can say how large),
 *   the stream stays framed and the next recv returns the next message.
 * INVALID_ARG on node 0, or with cap > 0 and no buf. */
inferd_status dist_chan_recv(dist_chan *c, void *buf, size_t cap, size_t *len);

/* Every node: a record of len bytes from every node, in node order, to
 * node 0. On node 0, all[k * len .. (k+1) * len) = node k's mine[0..len)
 * (node 0's own at k = 0); on nodes 1.. mine is sent and `all` is not
 * written (may be NULL). len is the same on every node, 0 included (then a
 * pure barrier for node 0). On node 0: FORMAT naming the node whose record
 * has another size, IO naming a node that closed or reset its connection
 * (both fail the channel). On a peer: IO when node 0 is gone. Waits without
 * a deadline. With one node it copies mine into all. */
inferd_status dist_chan_gather(dist_chan *c, const void *mine, size_t len, void *all);

/* Close the connections and free c (NULL is fine). Node 0 closing a
 * channel that has not failed makes every peer's recv return UNAVAILABLE
 * once it has read the messages before; a failed channel is reset instead
 * (the other side sees IO, and bytes still in this side's send buffer are
 * dropped: nothing is certain of a failed channel). */
void dist_chan_close(dist_chan *c);

#endif
