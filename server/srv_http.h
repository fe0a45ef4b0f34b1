/* server/srv_http.h: the HTTP front end (libmicrohttpd).
 *
 * A small pool of event-loop threads (MHD internal polling, epoll where
 * available) serves every connection; no thread per connection. Requests
 * that wait on the engine are suspended and resumed by the engine's notify
 * callback, so thousands of idle or streaming connections cost memory, not
 * threads. A watchdog notices clients that hang up while their request is
 * suspended (MHD cannot see that) and cancels them.
 */
#ifndef INFERD_SERVER_SRV_HTTP_H
#define INFERD_SERVER_SRV_HTTP_H

#include "common/status.h"
#include "server/srv_server.h"

/* Bind host:port from s->opts and start serving (API answers 503 until
 * s->ready). Sets s->http. */
inferd_status srv_http_start(srv_server *s);

/* Port actually bound (useful with --port 0). */
int srv_http_port(const srv_http *h);

/* Open HTTP requests (all routes). */
int srv_http_open_requests(const srv_http *h);

/* Abort every in-flight generation (s->aborting must be set first); each
 * finishes with an error body / error event. */
void srv_http_abort_all(srv_http *h);

/* Close every connection (their engine streams are released) and stop the
 * HTTP threads. Late engine notifications stay safe until srv_http_free. */
void srv_http_stop(srv_http *h);

/* Free (stops first if needed). Call after the engine thread has stopped,
 * since the engine may still hold notify pointers into this object. */
void srv_http_free(srv_http *h);

#endif
