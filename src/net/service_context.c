/*
 * service_context.c -- the per-process context (see service_context.h).
 */
#include "net/service_context.h"

#include <string.h>

#include "base/clock.h"
#include "net/cluster_time.h"

void
shl_service_ctx_init(shl_service_ctx_t *svc, shl_role_t role)
{
    memset(svc, 0, sizeof(*svc));
    svc->role = role;
    svc->start_wall_ms = shl_clock_wall_ms();
    svc->start_mono_us = shl_clock_mono_us();
    pthread_mutex_init(&svc->ops_mu, NULL);
    pthread_mutex_init(&svc->topology.mu, NULL);
    pthread_cond_init(&svc->topology.changed, NULL);
    bson_oid_init(&svc->topology.process_id, NULL);
}

void
shl_service_ctx_cleanup(shl_service_ctx_t *svc)
{
    if (svc->cmdline_argv != NULL) {
        bson_destroy(svc->cmdline_argv);
    }
    if (svc->cmdline_parsed != NULL) {
        bson_destroy(svc->cmdline_parsed);
    }
    svc->cmdline_argv = NULL;
    svc->cmdline_parsed = NULL;
    /* The roles' shutdown joined their key loaders; nothing signs or checks any more. */
    shl_cluster_time_destroy(svc->cluster_time);
    svc->cluster_time = NULL;
    /* ops_mu stays: a connection thread that outlived the shutdown bound may still
     * unregister its operation on the way out. */
}

bool
shl_service_is_data_node(const shl_service_ctx_t *svc)
{
    return svc->role != SHL_ROLE_ROUTER;
}
