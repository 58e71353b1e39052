/*
 * sharding_hooks.c -- the db side of the shard seam (sharding_hooks.h): stores the hooks
 * the shard module installs in the node and calls them for every collection command.
 */
#include "db/sharding_hooks.h"

#include "db/db_private.h"

shl_db_orphan_filter_t *
shl_db_orphan_filter_ref(shl_db_orphan_filter_t *f)
{
    if (f != NULL) {
        atomic_fetch_add(&f->refs, 1);
    }
    return f;
}

void
shl_db_orphan_filter_release(shl_db_orphan_filter_t *f)
{
    if (f != NULL && atomic_fetch_sub(&f->refs, 1) == 1) {
        f->destroy(f);
    }
}

bool
shl_db_orphan_filter_owns(const shl_db_orphan_filter_t *f, const bson_t *doc)
{
    return f == NULL || f->owns(f, doc);
}

void
shl_db_sharding_hooks_install(shl_service_ctx_t *svc, const shl_db_sharding_hooks_t *hooks)
{
    db_node_t *node = svc->role_state;

    SHL_INVARIANT(node != NULL);
    node->sharding = *hooks;
}

void *
shl_db_sharding_hooks_arg(const shl_service_ctx_t *svc)
{
    const db_node_t *node = svc->role_state;

    return node == NULL ? NULL : node->sharding.arg;
}

int
shl_db_sharding_check(shl_op_ctx_t *op, const char *ns, shl_db_shard_access_t access,
                      shl_db_orphan_filter_t **filter, shl_status_t *st)
{
    db_node_t *node = db_node(op);

    *filter = NULL;
    if (node == NULL || node->sharding.check == NULL ||
        (!op->has_shard_version && !op->has_database_version)) {
        return 0;
    }
    return node->sharding.check(node->sharding.arg, op, ns, access, filter, st);
}

int
db_sharding_check_no_filter(shl_op_ctx_t *op, const char *ns, shl_db_shard_access_t access,
                            shl_status_t *st)
{
    shl_db_orphan_filter_t *f = NULL;
    int ret = shl_db_sharding_check(op, ns, access, &f, st);

    shl_db_orphan_filter_release(f);
    return ret;
}

void
shl_db_sharding_observe_write(const shl_op_ctx_t *op, const char *ns, const bson_t *pre,
                              const bson_t *post)
{
    const db_node_t *node = op != NULL ? op->svc->role_state : NULL;

    if (node != NULL && node->sharding.on_write != NULL) {
        node->sharding.on_write(node->sharding.arg, ns, pre, post);
    }
}
