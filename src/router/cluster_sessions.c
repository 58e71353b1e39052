/*
 * cluster_sessions.c -- the router's logical session cache (seeds/001 "The logical session
 * cache"): persisted into the cluster's sharded config.system.sessions through the catalog
 * cache (sharding/sessions_collection_sharded.h); its cursors are the router cursors; a kill
 * command kills this router's cursors and operations of the sessions, then sends the patterns
 * to every shard as killAllSessionsByPattern, as mongos's killSessionsRemote does.
 */
#include <string.h>

#include "base/log.h"
#include "router/cluster_cursor_manager.h"
#include "router/router_private.h"
#include "router/txn_router.h"
#include "session/logical_session_cache.h"
#include "sharding/sessions_collection_sharded.h"

static shl_catalog_cache_t *
router_cache(void *arg)
{
    shl_router_t *r = arg;

    return r->cache;
}

static void
cursor_sessions(void *arg, void (*fn)(void *fn_arg, const shl_lsid_t *lsid), void *fn_arg)
{
    shl_router_t *r = arg;

    shl_router_cursor_manager_sessions(r->cursors, fn, fn_arg);
}

static int
kill_cursors(void *arg, const shl_kill_matcher_t *m)
{
    shl_router_t *r = arg;

    /* The router's transaction state of the sessions ends too (the shards' part through
     * kill_remote). */
    (void)router_txn_catalog_kill(r->txns, shl_kill_matcher_match, (void *)(uintptr_t)m);
    return shl_router_cursor_manager_kill_sessions(r->cursors, shl_kill_matcher_match,
                                                   (void *)(uintptr_t)m);
}

static void
build_kill(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    const shl_kill_matcher_t *m = arg;
    bson_t arr;

    (void)rr;
    (void)shard;
    BSON_APPEND_ARRAY_BEGIN(cmd, "killAllSessionsByPattern", &arr);
    shl_kill_matcher_append(m, &arr);
    bson_append_array_end(cmd, &arr);
}

/* Every shard kills the sessions too; a shard that fails fails the command, as mongos's. */
static int
kill_remote(void *arg, shl_op_ctx_t *op, const shl_kill_matcher_t *m, shl_status_t *st)
{
    shl_router_t *r = arg;
    shl_router_shard_result_t *res = NULL;
    size_t n = 0;
    int ret = 0;
    bson_t failed = BSON_INITIALIZER;
    uint32_t nfailed = 0;

    SHL_ERR(shl_router_send_to_all(r, op, "admin", false, build_kill, (void *)(uintptr_t)m, &res,
                                   &n, st));
    for (size_t i = 0; i < n; i++) {
        if (res[i].res.code != 0) {
            char key[16];
            const char *k;
            bson_uint32_to_string(nfailed++, &k, key, sizeof(key));
            BSON_APPEND_UTF8(&failed, k, res[i].shard);
        }
    }
    if (nfailed > 0) {
        SHL_LOG_ERROR(COMMAND, 8963000, "Failed to kill sessions on some hosts", "failedHosts",
                      BCON_ARRAY(&failed));
        SHL_FAIL(st, SHL_CODE_HOST_UNREACHABLE, "Failed to kill sessions on some hosts");
    }
done:
    if (res != NULL) {
        shl_router_scatter_results_free(res, n);
    }
    bson_destroy(&failed);
    return ret;
}

int
router_sessions_init(shl_router_t *r, shl_service_ctx_t *svc, shl_status_t *st)
{
    shl_lsc_role_t role = {0};
    shl_sessions_coll_t coll;
    shl_lsc_t *lsc;

    role.cursor_sessions = cursor_sessions;
    role.kill_cursors = kill_cursors;
    role.kill_remote = kill_remote;
    role.arg = r;
    lsc = shl_lsc_new(svc, &role);
    r->sessions = shl_sessions_sharded_new(router_cache, r, NULL);
    shl_sessions_sharded_coll(r->sessions, &coll);
    shl_lsc_set_collection(lsc, &coll);
    return shl_lsc_start(lsc, st);
}

void
router_sessions_shutdown(shl_router_t *r, shl_service_ctx_t *svc)
{
    shl_lsc_destroy(svc->lsc);
    shl_sessions_sharded_destroy(r->sessions);
    r->sessions = NULL;
}
