/* dist/dist_rdzv_internal.h: what the rendezvous files share inside dist/. */
#ifndef INFERD_DIST_RDZV_INTERNAL_H
#define INFERD_DIST_RDZV_INTERNAL_H

#include "common/status.h"
#include "dist/dist_rendezvous.h"

/* Every check of dist_rdzv_opts_validate but the address lookup (listen
 * and join resolve it themselves). min_port is 1 for the command line and
 * 0 for a master that asks for any port (the tests). */
inferd_status dist_rdzv_check_numbers(const dist_rdzv_opts *o, int min_port);

/* The listener's --nnodes (0 for NULL). */
int dist_rdzv_nnodes(const dist_rdzv_listener *l);

/* dist_rdzv_serve that keeps the connections (the control channel,
 * dist_chan.h): on OK node k's connection is handed to the caller as
 * keep[k - 1] (keep has nnodes-1 slots), open and non-blocking; on a failure
 * none is (any already served are reset). keep == NULL: dist_rdzv_serve. */
inferd_status dist_rdzv_serve_keep(dist_rdzv_listener *l, const void *blob, size_t len, int *keep);

/* dist_rdzv_join that keeps the connection: on OK *keep = the connection
 * to node 0, open and non-blocking, owned by the caller; on a failure it is
 * closed. keep == NULL: dist_rdzv_join. */
inferd_status dist_rdzv_join_keep(const dist_rdzv_opts *o, void *buf, size_t cap, size_t *len, int *keep);

#endif
