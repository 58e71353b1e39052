/*
 * sharding_state.c -- the shard's identity (MongoDB's ShardingState and
 * ShardIdentityType): the document {_id: "shardIdentity", shardName, clusterId,
 * configsvrConnectionString} that _addShard stores in admin.system.version, durably, and
 * that start-up reloads; once known, the shard is "shard-aware" and can reach the config
 * server through its catalog cache. docs/design/sharding-protocol.md "Config server ->
 * shard".
 */
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "bson/bson_iter.h"
#include "db/storage_api.h"
#include "storage/stored_doc.h"
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

int
shard_identity_load(shard_state_t *s, shard_identity_t *out, bool *found, shl_status_t *st)
{
    int ret = 0;
    bson_t doc;

    SHL_ERR(shl_stored_doc_load(s->svc->storage, IDENTITY_NS, IDENTITY_ID, &doc, found, st));
    if (*found) {
        SHL_ERR(shard_identity_parse(&doc, "ShardIdentity", out, st));
    }
done:
    bson_destroy(&doc);
    return ret;
}

/* The identity must survive a crash before the config server records the shard. */
int
shard_identity_store(shard_state_t *s, const shard_identity_t *id, shl_status_t *st)
{
    int ret;
    bson_t doc;

    identity_to_bson(id, &doc);
    ret = shl_stored_doc_store(s->svc->storage, IDENTITY_NS, &doc, st);
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

/*
 * A shard that is not yet aware looks for the shardIdentity each time it is asked: a secondary
 * gets the one _addShard gave its primary through replication (MongoDB's secondaries
 * initialise sharding when they apply it), and a request that arrives right after the entry
 * was applied must see it (one point read; only a shard server that is not aware pays it).
 */
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
    if (!aware) {
        shard_identity_t id;
        bool found = false;
        shl_status_t st = SHL_STATUS_INIT;
        if (shard_identity_load(s, &id, &found, &st) == 0 && found) {
            shard_become_aware(s, &id);
            *out = id;
            aware = true;
        }
    }
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
