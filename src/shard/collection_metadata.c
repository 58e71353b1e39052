/*
 * collection_metadata.c -- placeholder until the catalog cache lands: nothing is known,
 * every versioned request runs unfiltered.
 */
#include "shard/shard_private.h"

int
shard_meta_get(shard_state_t *s, const char *ns, shard_coll_meta_t **out, shl_status_t *st)
{
    (void)s;
    (void)ns;
    (void)st;
    *out = NULL;
    return 0;
}

int
shard_meta_refresh(shard_state_t *s, const char *ns, shard_coll_meta_t **out, shl_status_t *st)
{
    (void)s;
    (void)ns;
    (void)st;
    if (out != NULL) {
        *out = NULL;
    }
    return 0;
}

shard_coll_meta_t *
shard_meta_peek(shard_state_t *s, const char *ns)
{
    (void)s;
    (void)ns;
    return NULL;
}

void
shard_meta_release(shard_coll_meta_t *m)
{
    (void)m;
}

int
shard_check_versions(void *arg, shl_op_ctx_t *op, const char *ns, shl_db_shard_access_t access,
                     shl_db_orphan_filter_t **filter, shl_status_t *st)
{
    (void)arg;
    (void)op;
    (void)ns;
    (void)access;
    (void)st;
    *filter = NULL;
    return 0;
}

void
shard_meta_destroy_all(shard_state_t *s)
{
    (void)s;
}
