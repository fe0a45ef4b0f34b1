/* dist/dist_net.h: the TCP plumbing under the rendezvous (internal to dist/).
 *
 * Non-blocking sockets whose every wait is a poll() bounded by an
 * inferd_deadline, so no peer can hold a caller past its deadline. Reads
 * and writes loop over partial transfers and EINTR; writes use MSG_NOSIGNAL
 * so a peer that hangs up cannot raise SIGPIPE in a library. Each failure
 * sets the thread's error message; callers add what they were doing
 * (dist_net_with_context). A deadline made by inferd_deadline_never() waits
 * in poll() without a timeout: blocked, never spinning.
 */
#ifndef INFERD_DIST_NET_H
#define INFERD_DIST_NET_H

#include <stdbool.h>
#include <stddef.h>

#include "common/status.h"
#include "common/util.h"

struct addrinfo;

/* Resolve host:port for TCP (passive: addresses to bind). *out is freed
 * with freeaddrinfo. INVALID_ARG naming host and the resolver's reason. */
inferd_status dist_net_resolve(const char *host, int port, bool passive, struct addrinfo **out);

/* A non-blocking listening socket on host:port (port 0: any free port),
 * the first resolved address that binds. *port_out = the bound port. */
inferd_status dist_net_listen(const char *host, int port, int backlog, int *fd_out, int *port_out);

/* One non-blocking accept: the new socket (non-blocking, close-on-exec),
 * or -1 when none is pending or the accept failed (the caller polls again). */
int dist_net_accept(int lfd);

/* One connection attempt to host:port, each resolved address in turn, each
 * bounded by d. UNAVAILABLE when every address refused or was unreachable
 * (worth retrying), TIMEOUT when d passed, INVALID_ARG when host does not
 * resolve (also worth retrying: a name may appear when its node starts). */
inferd_status dist_net_connect(const char *host, int port, inferd_deadline d, int *fd_out);

/* Wait until fd is ready for events (POLLIN / POLLOUT); TIMEOUT at d. */
inferd_status dist_net_wait(int fd, short events, inferd_deadline d);

/* Read exactly n bytes. IO when the peer closes first (*got = bytes read,
 * may be NULL), TIMEOUT at d. */
inferd_status dist_net_read_full(int fd, void *buf, size_t n, inferd_deadline d, size_t *got);

/* dist_net_read_full of the first bytes of a message: UNAVAILABLE when the
 * peer closed cleanly before sending any of them (the end of its stream),
 * IO when it closed part-way or the connection was reset. */
inferd_status dist_net_read_next(int fd, void *buf, size_t n, inferd_deadline d);

/* Write exactly n bytes; IO when the peer is gone, TIMEOUT at d. */
inferd_status dist_net_write_full(int fd, const void *buf, size_t n, inferd_deadline d);

/* True when the peer on fd has hung up (EOF or an error pending); never
 * waits and consumes nothing. */
bool dist_net_peer_gone(int fd);

/* Send small writes at once (TCP_NODELAY): a lone small message must not
 * wait for the ACK of the one before. Best effort. */
void dist_net_nodelay(int fd);

/* "addr:port" of fd's peer into buf ("?" when unknown); returns buf. */
const char *dist_net_peer_str(int fd, char *buf, size_t len);

/* Sleep ms milliseconds, never past d. */
void dist_net_sleep_ms(int ms, inferd_deadline d);

/* close() that keeps errno (fd < 0 is ignored). */
void dist_net_close(int fd);

/* Close with a TCP reset instead of the orderly FIN (SO_LINGER 0), so the
 * peer's next read fails (IO) rather than seeing a clean end. */
void dist_net_close_reset(int fd);

/* Re-set the thread's error as "<prefix>: <current message>" with status
 * st, the prefix a printf format; returns st. */
inferd_status dist_net_with_context(inferd_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
