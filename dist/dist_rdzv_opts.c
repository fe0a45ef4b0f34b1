/* dist/dist_rdzv_opts.c: the rendezvous option table and its validation.
 *
 * The rows are the one place the limits are written; the command line, the
 * --config keys, --help and dist_rdzv_opts_validate read them. Validation
 * is hand-written rather than opt_validate because it must name the flags
 * the way the command line spells them (--node-rank, not node_rank: a
 * multi-node job is started from a launch script, and that is what its
 * author greps for) and check what no single row knows: node_rank <
 * nnodes, and that the master's address resolves.
 *
 * Ranges, and why:
 *   nnodes [1, 1024]: the master holds one socket per peer.
 *   node-rank [0, 1023]: and below nnodes.
 *   master-port [1, 65535]: port 0 ("any") only makes sense to a master
 *       whose peers learn the port some other way (the tests).
 *   dist-timeout [0.001, 86400] s: the whole rendezvous, from listen or join.
 */
#include <math.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "dist/dist_net.h"
#include "dist/dist_rdzv_internal.h"
#include "dist/dist_rendezvous.h"

#define OFF(f) offsetof(dist_rdzv_opts, f)

static const opt_row k_rows[] = {
    {.name = "nnodes", .kind = OPT_INT, .off = OFF(nnodes), .min = 1, .max = DIST_RDZV_MAX_NODES, .def = 1,
     .help = "hosts taking part in tensor parallelism"},
    {.name = "node-rank", .kind = OPT_INT, .off = OFF(node_rank), .min = 0, .max = DIST_RDZV_MAX_NODES - 1,
     .def = 0, .help = "this host's rank (0 = the master)"},
    /* no def_str: one node needs no address, so the default allocates nothing */
    {.name = "master-addr", .kind = OPT_STR, .off = OFF(master_addr), .meta = "HOST",
     .help = "node 0's address, which node 0 binds and the others dial (required with --nnodes > 1)"},
    {.name = "master-port", .kind = OPT_INT, .off = OFF(master_port), .min = 1, .max = 65535, .def = 29500,
     .help = "node 0's rendezvous port"},
    {.name = "dist-timeout", .kind = OPT_DOUBLE, .off = OFF(timeout_s), .min = 0.001, .max = 86400,
     .def = 600, .meta = "SECONDS", .help = "deadline of the multi-node rendezvous"},
};
#undef OFF

enum { ROW_NNODES, ROW_NODE_RANK, ROW_MASTER_ADDR, ROW_MASTER_PORT, ROW_TIMEOUT };

const opt_row *dist_rdzv_opts_rows(size_t *n)
{
    *n = INFERD_ARRAY_LEN(k_rows);
    return k_rows;
}

void dist_rdzv_opts_default(dist_rdzv_opts *o)
{
    memset(o, 0, sizeof *o);
    opt_defaults(k_rows, INFERD_ARRAY_LEN(k_rows), o);
}

/* v inside [lo, the row's max], else INVALID_ARG "--name v out of range
 * [lo, max]" (NaN fails both comparisons, so it is out of range too). */
static inferd_status check_row(int row, double v, double lo)
{
    double hi = k_rows[row].max;
    if (v >= lo && v <= hi)
        return INFERD_OK;
    char range[80], num[32];
    opt_row r = k_rows[row];
    r.min = lo;
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(num, sizeof num, "%.0f", v); /* an int field: 70000, not 7e+04 */
    else
        snprintf(num, sizeof num, "%g", v);
    return inferd_set_error(INFERD_ERR_INVALID_ARG, "--%s %s out of range %s", r.name, num,
                            opt_range_str(&r, range, sizeof range));
}

inferd_status dist_rdzv_check_numbers(const dist_rdzv_opts *o, int min_port)
{
    inferd_status st = check_row(ROW_NNODES, o->nnodes, k_rows[ROW_NNODES].min);
    if (st == INFERD_OK)
        st = check_row(ROW_NODE_RANK, o->node_rank, k_rows[ROW_NODE_RANK].min);
    if (st == INFERD_OK)
        st = check_row(ROW_MASTER_PORT, o->master_port, min_port);
    if (st == INFERD_OK)
        st = check_row(ROW_TIMEOUT, o->timeout_s, k_rows[ROW_TIMEOUT].min);
    if (st != INFERD_OK)
        return st;
    if (o->node_rank >= o->nnodes)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "--node-rank %d out of range [0, %d] for --nnodes %d", o->node_rank,
                                o->nnodes - 1, o->nnodes);
    if (o->nnodes > 1 && !o->master_addr)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "--master-addr is required with --nnodes %d",
                                o->nnodes);
    if (o->nnodes > 1 && !o->master_addr[0])
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "--master-addr is empty");
    return INFERD_OK;
}

inferd_status dist_rdzv_opts_validate(const dist_rdzv_opts *o)
{
    inferd_status st = dist_rdzv_check_numbers(o, 1);
    if (st != INFERD_OK || o->nnodes == 1)
        return st;
    struct addrinfo *ai;
    if (dist_net_resolve(o->master_addr, o->master_port, false, &ai) != INFERD_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", inferd_last_error());
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "--master-addr %s", why);
    }
    freeaddrinfo(ai);
    return INFERD_OK;
}
