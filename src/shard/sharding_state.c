/*
 * sharding_state.c -- the shard's identity (MongoDB's ShardingState and
 * ShardIdentityType): the document {_id: "shardIdentity", shardName, clusterId,
 * configsvrConnectionString} that _addShard stores in admin.system.version, durably, and
 * that start-up reloads; once known, the shard is "shard-aware" and can reach the config
 * server through its catalog cache. docs/design/sharding-protocol.md "Config server ->
 * shard".
 */
#include <string.h>

#include "base/log.h"
#include "bson/bson_iter.h"
#include "db/storage_api.h"
#include "shard/shard_private.h"
#include "sharding/sharding_types.h"

#define IDENTITY_NS "admin.system.version"
#define IDENTITY_ID "shardIdentity"

int
shard_identity_parse(const bson_t *doc, const char *ctx, shard_identity_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool have_name = false, have_cluster = false, have_cs = false;

    memset(out, 0, sizeof(*out));
    if (!bson_iter_init(&it, doc)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "malformed %s document", ctx);
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "shardName") == 0 || strcmp(k, "configsvrConnectionString") == 0) {
            uint32_t len;
            const char *v;
            bool name = k[0] == 's';
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_ERR(shl_idl_wrong_type(&it, ctx, "string", st));
            }
            v = bson_iter_utf8(&it, &len);
            if (len == 0) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "%s.%s cannot be empty", ctx, k);
            }
            if (len >= (name ? sizeof(out->shard_name) : sizeof(out->config_cs))) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "%s.%s is too long", ctx, k);
            }
            if (name) {
                memcpy(out->shard_name, v, len + 1);
                have_name = true;
            } else {
                memcpy(out->config_cs, v, len + 1);
                have_cs = true;
            }
        } else if (strcmp(k, "clusterId") == 0) {
            SHL_ERR(shl_idl_read_oid(&it, ctx, &out->cluster_id, st));
            have_cluster = true;
        }
    }
    if (!have_name) {
        SHL_ERR(shl_idl_missing(ctx, "shardName", st));
    }
    if (!have_cluster) {
        SHL_ERR(shl_idl_missing(ctx, "clusterId", st));
    }
    if (!have_cs) {
        SHL_ERR(shl_idl_missing(ctx, "configsvrConnectionString", st));
    }
done:
    return ret;
}

static void
identity_to_bson(const shard_identity_t *id, bson_t *out)
{
    bson_init(out);
    BSON_APPEND_UTF8(out, "_id", IDENTITY_ID);
    BSON_APPEND_UTF8(out, "shardName", id->shard_name);
    BSON_APPEND_OID(out, "clusterId", &id->cluster_id);
    BSON_APPEND_UTF8(out, "configsvrConnectionString", id->config_cs);
}

static bool
is_identity_doc(const bson_t *doc)
{
    bson_iter_t it;

    return bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_UTF8(&it) &&
           strcmp(bson_iter_utf8(&it, NULL), IDENTITY_ID) == 0;
}

/*
 * Find the identity record in 'txn' (the collection holds a handful of documents, so a
 * scan is enough). *rid is -1 when absent; 'doc' (always initialised) gets a copy.
 */
static int
find_identity(shl_storage_txn_t *txn, const shl_collection_t *coll, int64_t *rid, bson_t *doc,
              shl_status_t *st)
{
    int ret = 0;
    shl_record_cursor_t *c = NULL;

    bson_init(doc);
    *rid = -1;
    SHL_ERR(shl_record_cursor_open(txn, coll, true, &c, st));
    for (;;) {
        bool eof = false;
        int64_t r;
        bson_t view;
        SHL_ERR(shl_record_cursor_next(c, &r, &view, &eof, st));
        if (eof) {
            break;
        }
        if (is_identity_doc(&view)) {
            bson_destroy(doc);
            bson_copy_to(&view, doc);
            *rid = r;
            break;
        }
    }
done:
    shl_record_cursor_close(c);
    return ret;
}

int
shard_identity_load(shard_state_t *s, shard_identity_t *out, bool *found, shl_status_t *st)
{
    int ret = 0;
    shl_coll_handle_t h = {0};
    shl_storage_txn_t *txn = NULL;
    bson_t doc = BSON_INITIALIZER;
    int64_t rid = -1;

    *found = false;
    SHL_ERR(shl_storage_coll_acquire(s->svc->storage, IDENTITY_NS, SHL_LOCK_SHARED, &h, st));
    if (h.coll == NULL) {
        goto done;
    }
    SHL_ERR(shl_storage_txn_begin(s->svc->storage, NULL, &txn, st));
    bson_destroy(&doc);
    SHL_ERR(find_identity(txn, h.coll, &rid, &doc, st));
    if (rid >= 0) {
        SHL_ERR(shard_identity_parse(&doc, "ShardIdentity", out, st));
        *found = true;
    }
done:
    shl_storage_txn_abort(txn);
    shl_storage_coll_release(&h);
    bson_destroy(&doc);
    return ret;
}

typedef struct store_args {
    const shl_collection_t *coll;
    const bson_t *doc;
} store_args_t;

static int
store_txn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    int ret = 0;
    store_args_t *a = arg;
    bson_t old;
    int64_t rid;

    SHL_ERR(find_identity(txn, a->coll, &rid, &old, st));
    if (rid < 0) {
        SHL_ERR(shl_doc_insert(txn, a->coll, a->doc, NULL, NULL, st));
    } else if (!bson_equal(&old, a->doc)) {
        SHL_ERR(shl_doc_update(txn, a->coll, rid, &old, a->doc, NULL, st));
    }
done:
    bson_destroy(&old);
    return ret;
}

int
shard_identity_store(shard_state_t *s, const shard_identity_t *id, shl_status_t *st)
{
    int ret = 0;
    shl_storage_engine_t *eng = s->svc->storage;
    shl_coll_handle_t h = {0};
    bson_t doc;
    store_args_t a;
    uint64_t ts = 0;

    identity_to_bson(id, &doc);
    if (shl_catalog_create_collection(eng, IDENTITY_NS, NULL, NULL, NULL, st) != 0 &&
        st->code != SHL_CODE_NAMESPACE_EXISTS) {
        ret = st->code;
        goto done;
    }
    shl_status_clear(st);
    SHL_ERR(shl_storage_coll_acquire(eng, IDENTITY_NS, SHL_LOCK_SHARED, &h, st));
    if (h.coll == NULL) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "%s was dropped concurrently", IDENTITY_NS);
    }
    a.coll = h.coll;
    a.doc = &doc;
    SHL_ERR(shl_storage_write_retry(eng, store_txn, &a, &ts, st));
    /* The identity must survive a crash before the config server records the shard;
     * wait without the collection lock (docs/design/locking.md). */
    shl_storage_coll_release(&h);
    if (ts != 0) {
        SHL_ERR(shl_storage_wait_durable(eng, ts, st));
    }
done:
    shl_storage_coll_release(&h);
    bson_destroy(&doc);
    return ret;
}

void
shard_become_aware(shard_state_t *s, const shard_identity_t *id)
{
    bool was_aware;

    /* The catalog cache that reaches the config server is created on first use
     * (collection_metadata.c), from the identity's connection string. */
    pthread_mutex_lock(&s->mu);
    was_aware = s->aware;
    s->id = *id;
    s->aware = true;
    pthread_mutex_unlock(&s->mu);
    if (!was_aware) {
        SHL_LOG_INFO(SHARDING, 22727, "Shard identity document set", "shardName",
                     BCON_UTF8(id->shard_name), "configsvrConnectionString",
                     BCON_UTF8(id->config_cs));
    }
}

bool
shard_get_identity(shard_state_t *s, shard_identity_t *out)
{
    bool aware;

    pthread_mutex_lock(&s->mu);
    aware = s->aware;
    if (aware) {
        *out = s->id;
    }
    pthread_mutex_unlock(&s->mu);
    return aware;
}

bool
shard_name_of(void *arg, char *out, size_t n)
{
    shard_identity_t id;
    bool aware = shard_get_identity(arg, &id);
    if (aware) {
        snprintf(out, n, "%s", id.shard_name);
    }
    return aware;
}
