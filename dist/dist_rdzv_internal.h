/* dist/dist_rdzv_internal.h: what the rendezvous files share inside dist/. */
#ifndef INFERD_DIST_RDZV_INTERNAL_H
#define INFERD_DIST_RDZV_INTERNAL_H

#include "common/status.h"
#include "dist/dist_rendezvous.h"

/* Every check of dist_rdzv_opts_validate but the address lookup (listen
 * and join resolve it themselves). min_port is 1 for the command line and
 * 0 for a master that asks for any port (the tests). */
inferd_status dist_rdzv_check_numbers(const dist_rdzv_opts *o, int min_port);

#endif
