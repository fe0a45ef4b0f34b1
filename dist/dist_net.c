/* dist/dist_net.c: see dist_net.h.
 *
 * Every socket is non-blocking from its creation (SOCK_NONBLOCK), including
 * the one handed to connect(): a blocking connect to a host that drops SYNs
 * would wait the kernel's minutes, not our deadline. Resolution runs without
 * AI_ADDRCONFIG: with it, "localhost" fails on a machine whose only
 * interface is the loopback.
 */
#include "dist/dist_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

inferd_status dist_net_resolve(const char *host, int port, bool passive, struct addrinfo **out)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)};
    char serv[16];
    snprintf(serv, sizeof serv, "%d", port);
    int rc = getaddrinfo(host, serv, &hints, out);
    if (rc != 0) {
        *out = NULL;
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s' does not resolve (%s)", host,
                                rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    }
    return INFERD_OK;
}

/* The port a bound socket got. */
static int bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
        return -1;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

inferd_status dist_net_listen(const char *host, int port, int backlog, int *fd_out, int *port_out)
{
    struct addrinfo *ai;
    inferd_status st = dist_net_resolve(host, port, true, &ai);
    if (st != INFERD_OK)
        return st;
    int err = 0;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        /* a restarted master must not wait out TIME_WAIT of its last run */
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, backlog) == 0) {
            *fd_out = fd;
            *port_out = bound_port(fd);
            freeaddrinfo(ai);
            return INFERD_OK;
        }
        err = errno;
        dist_net_close(fd);
    }
    freeaddrinfo(ai);
    return inferd_set_error(INFERD_ERR_IO, "cannot listen on %s port %d: %s", host, port, strerror(err));
}

int dist_net_accept(int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0 || errno != EINTR)
            return fd;
    }
}

inferd_status dist_net_wait(int fd, short events, inferd_deadline d)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int rc = poll(&p, 1, inferd_deadline_remaining_ms(d));
        if (rc > 0)
            return INFERD_OK; /* ready, or an error / hang-up the next call reports */
        if (rc < 0 && errno != EINTR)
            return inferd_set_error(INFERD_ERR_IO, "poll: %s", strerror(errno));
        if (rc == 0 && inferd_deadline_expired(d))
            return inferd_set_error(INFERD_ERR_TIMEOUT, "deadline passed");
    }
}

/* Connect fd to one address within d: OK, UNAVAILABLE (refused,
 * unreachable: retry later) or TIMEOUT. */
static inferd_status connect_one(int fd, const struct addrinfo *a, inferd_deadline d)
{
    int rc;
    do
        rc = connect(fd, a->ai_addr, a->ai_addrlen);
    while (rc != 0 && errno == EINTR);
    if (rc != 0 && errno != EINPROGRESS)
        return inferd_set_error(INFERD_ERR_UNAVAILABLE, "connect: %s", strerror(errno));
    if (rc != 0) {
        inferd_status st = dist_net_wait(fd, POLLOUT, d);
        if (st != INFERD_OK)
            return st == INFERD_ERR_TIMEOUT ? inferd_set_error(st, "connect: deadline passed") : st;
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
            err = errno;
        if (err != 0)
            return inferd_set_error(INFERD_ERR_UNAVAILABLE, "connect: %s", strerror(err));
    }
    return INFERD_OK;
}

inferd_status dist_net_connect(const char *host, int port, inferd_deadline d, int *fd_out)
{
    struct addrinfo *ai;
    inferd_status st = dist_net_resolve(host, port, false, &ai);
    if (st != INFERD_OK)
        return st;
    st = inferd_set_error(INFERD_ERR_UNAVAILABLE, "no address");
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            st = inferd_set_error(INFERD_ERR_UNAVAILABLE, "socket: %s", strerror(errno));
            continue;
        }
        st = connect_one(fd, a, d);
        if (st == INFERD_OK) {
            dist_net_nodelay(fd); /* hello and reply are single small messages */
            *fd_out = fd;
            break;
        }
        dist_net_close(fd);
        if (st == INFERD_ERR_TIMEOUT)
            break;
    }
    freeaddrinfo(ai);
    return st;
}

/* Read exactly n bytes; *got = bytes read, *eof = the peer closed (rather
 * than an error or the deadline ending the read). */
static inferd_status read_loop(int fd, void *buf, size_t n, inferd_deadline d, size_t *got, bool *eof)
{
    size_t k = 0;
    inferd_status st = INFERD_OK;
    *eof = false;
    while (k < n) {
        ssize_t r = recv(fd, (char *)buf + k, n - k, 0);
        if (r > 0) {
            k += (size_t)r;
        } else if (r == 0) {
            *eof = true;
            st = inferd_set_error(INFERD_ERR_IO, "connection closed after %zu of %zu bytes", k, n);
            break;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if ((st = dist_net_wait(fd, POLLIN, d)) != INFERD_OK)
                break;
        } else if (errno != EINTR) {
            st = inferd_set_error(INFERD_ERR_IO, "recv: %s", strerror(errno));
            break;
        }
    }
    *got = k;
    return st;
}

inferd_status dist_net_read_full(int fd, void *buf, size_t n, inferd_deadline d, size_t *got)
{
    size_t k;
    bool eof;
    inferd_status st = read_loop(fd, buf, n, d, &k, &eof);
    if (got)
        *got = k;
    return st;
}

inferd_status dist_net_read_next(int fd, void *buf, size_t n, inferd_deadline d)
{
    size_t k;
    bool eof;
    inferd_status st = read_loop(fd, buf, n, d, &k, &eof);
    if (st != INFERD_OK && eof && k == 0)
        return inferd_set_error(INFERD_ERR_UNAVAILABLE, "connection closed by the peer");
    return st;
}

inferd_status dist_net_write_full(int fd, const void *buf, size_t n, inferd_deadline d)
{
    size_t k = 0;
    while (k < n) {
        ssize_t w = send(fd, (const char *)buf + k, n - k, MSG_NOSIGNAL);
        if (w > 0) {
            k += (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            inferd_status st = dist_net_wait(fd, POLLOUT, d);
            if (st != INFERD_OK)
                return st;
        } else if (w < 0 && errno != EINTR) {
            return inferd_set_error(INFERD_ERR_IO, "send: %s", strerror(errno));
        }
    }
    return INFERD_OK;
}

bool dist_net_peer_gone(int fd)
{
    char b;
    ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void dist_net_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

const char *dist_net_peer_str(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
            port = ntohs(s6->sin6_port);
        } else if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
            port = ntohs(s4->sin_port);
        }
    }
    snprintf(buf, len, "%s:%d", host, port);
    return buf;
}

void dist_net_sleep_ms(int ms, inferd_deadline d)
{
    int left = inferd_deadline_remaining_ms(d);
    if (left >= 0 && left < ms)
        ms = left;
    /* poll with no descriptors is a sleep; an EINTR just ends it early,
     * which every caller (a retry loop checking its deadline) tolerates */
    if (ms > 0)
        poll(NULL, 0, ms);
}

void dist_net_close(int fd)
{
    if (fd < 0)
        return;
    int saved = errno;
    close(fd); /* NOTE: never retried on EINTR: on Linux the fd is gone either way */
    errno = saved;
}

void dist_net_close_reset(int fd)
{
    if (fd < 0)
        return;
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    dist_net_close(fd);
}

inferd_status dist_net_with_context(inferd_status st, const char *fmt, ...)
{
    char why[1024], prefix[512];
    snprintf(why, sizeof why, "%s", inferd_last_error());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    return inferd_set_error(st, "%s: %s", prefix, why);
}
