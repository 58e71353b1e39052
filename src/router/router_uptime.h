/*
 * router_uptime.h -- the router's config.mongos entry, refreshed every 30 s by a thread
 * (sh.status()'s "most recently active mongoses").
 */
#ifndef SHL_ROUTER_ROUTER_UPTIME_H
#define SHL_ROUTER_ROUTER_UPTIME_H

#include "router/cluster_routing.h"

typedef struct shl_router_uptime shl_router_uptime_t;

/* shl_router_uptime_start -- start reporting 'me' ("host:port"); 'r' must outlive it. */
shl_router_uptime_t *shl_router_uptime_start(shl_router_t *r, const char *me);

/* shl_router_uptime_stop -- stop and join the thread (waits for a report in flight). */
void shl_router_uptime_stop(shl_router_uptime_t *u);

#endif
