/*
 * shardsvr_commands.c -- the commands a shard answers for the config server and for
 * operators (docs/design/sharding-protocol.md "Config server -> shard"): _addShard (store
 * the shardIdentity and become shard-aware), _flushRoutingTableCacheUpdates (refresh the
 * filtering metadata of a namespace), _flushDatabaseCacheUpdates (forget a database's
 * entry and its collections' metadata) and getShardVersion.
 */
#include <string.h>

#include "base/namespace.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/command_args.h"
#include "shard/shard_private.h"

static int
not_initialized(shl_status_t *st)
{
    return shl_status_set(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED,
                          "Cannot accept sharding commands if sharding state has not been "
                          "initialized with a shardIdentity document");
}

/* ---------------------------------------------------------------- _addShard */

static const char *const add_shard_fields[] = {"shardIdentity", NULL};

static int
shardsvr_add_shard(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    bson_t idoc;
    bool found = false, locked = false;
    shard_identity_t id, cur;

    (void)reply;
    SHL_INVARIANT(s != NULL);
    SHL_ERR(shl_cmd_check_fields(cmd, add_shard_fields, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "shardIdentity", &idoc, &found, st));
    if (!found) {
        SHL_ERR(shl_idl_missing("_addShard", "shardIdentity", st));
    }
    SHL_ERR(shard_identity_parse(&idoc, "ShardIdentity", &id, st));

    pthread_mutex_lock(&s->identity_mu);
    locked = true;
    if (shard_get_identity(s, &cur)) {
        char have[25], want[25];
        if (strcmp(cur.shard_name, id.shard_name) != 0) {
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                     "This shard is already part of a cluster as shard '%s'; it cannot be added "
                     "again as shard '%s'",
                     cur.shard_name, id.shard_name);
        }
        if (!bson_oid_equal(&cur.cluster_id, &id.cluster_id)) {
            bson_oid_to_string(&cur.cluster_id, have);
            bson_oid_to_string(&id.cluster_id, want);
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                     "This shard already belongs to cluster %s; it cannot join cluster %s", have,
                     want);
        }
        /* Same shard of the same cluster: idempotent (the config server retries); a
         * changed config server connection string replaces the stored one. */
        if (strcmp(cur.config_cs, id.config_cs) == 0) {
            goto done;
        }
    }
    SHL_ERR(shard_identity_store(s, &id, st));
    shard_become_aware(s, &id);
done:
    if (locked) {
        pthread_mutex_unlock(&s->identity_mu);
    }
    return ret;
}

/* ---------------------------------------------------------------- _flushRoutingTableCacheUpdates
 */

static const char *const flush_fields[] = {"syncFromConfig", NULL};

static int
shardsvr_flush_routing(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    bson_iter_t it;
    shl_ns_t ns;
    shard_identity_t id;

    (void)reply;
    SHL_ERR(shl_cmd_check_fields(cmd, flush_fields, st));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '_flushRoutingTableCacheUpdates._flushRoutingTableCacheUpdates' "
                 "is the wrong type, expected type 'string'");
    }
    SHL_ERR(shl_ns_parse(&ns, bson_iter_utf8(&it, NULL), st));
    if (!shard_get_identity(s, &id)) {
        SHL_ERR(not_initialized(st));
    }
    SHL_ERR(shard_meta_refresh(s, bson_iter_utf8(&it, NULL), NULL, st));
done:
    return ret;
}

/* ---------------------------------------------------------------- _flushDatabaseCacheUpdates */

static int
shardsvr_flush_database(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    bson_iter_t it;
    shard_identity_t id;

    (void)reply;
    SHL_ERR(shl_cmd_check_fields(cmd, flush_fields, st));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '_flushDatabaseCacheUpdates._flushDatabaseCacheUpdates' is the "
                 "wrong type, expected type 'string'");
    }
    SHL_ERR(shl_ns_check_db(bson_iter_utf8(&it, NULL), st));
    if (!shard_get_identity(s, &id)) {
        SHL_ERR(not_initialized(st));
    }
    SHL_ERR(shard_db_refresh(s, bson_iter_utf8(&it, NULL), st));
done:
    return ret;
}

/* ---------------------------------------------------------------- getShardVersion */

static const char *const gsv_fields[] = {"fullMetadata", NULL};

static void
append_full_metadata(const shard_coll_meta_t *m, bson_t *reply)
{
    bson_t md, chunks, pair;
    char key[16];
    size_t k = 0;

    BSON_APPEND_DOCUMENT_BEGIN(reply, "metadata", &md);
    if (m->rt != NULL) {
        shl_chunk_version_t cv = m->coll_version;
        shl_ts_append(&md, "collVersion", (shl_ts_t){cv.major, cv.minor});
        BSON_APPEND_OID(&md, "collVersionEpoch", &cv.epoch);
        shl_ts_append(&md, "collVersionTimestamp", cv.timestamp);
        shl_ts_append(&md, "shardVersion",
                      (shl_ts_t){m->shard_version.major, m->shard_version.minor});
        BSON_APPEND_OID(&md, "shardVersionEpoch", &m->shard_version.epoch);
        shl_ts_append(&md, "shardVersionTimestamp", m->shard_version.timestamp);
        BSON_APPEND_DOCUMENT(&md, "keyPattern", &shl_routing_table_key_pattern(m->rt)->pattern);
        BSON_APPEND_ARRAY_BEGIN(&md, "chunks", &chunks);
        for (size_t i = 0; i < shl_routing_table_nchunks(m->rt); i++) {
            bson_t min, max;
            if (strcmp(shl_routing_table_chunk_shard(m->rt, i), m->shard_name) != 0) {
                continue;
            }
            shl_routing_table_chunk_bounds(m->rt, i, &min, &max);
            snprintf(key, sizeof(key), "%zu", k++);
            BSON_APPEND_ARRAY_BEGIN(&chunks, key, &pair);
            BSON_APPEND_DOCUMENT(&pair, "0", &min);
            BSON_APPEND_DOCUMENT(&pair, "1", &max);
            bson_append_array_end(&chunks, &pair);
        }
        bson_append_array_end(&md, &chunks);
    }
    bson_append_document_end(reply, &md);
}

static int
cmd_get_shard_version(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    bson_iter_t it;
    shl_ns_t ns;
    shard_identity_t id;
    shard_coll_meta_t *m = NULL;
    bool full = false;

    SHL_ERR(shl_cmd_check_fields(cmd, gsv_fields, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "fullMetadata", &full, st));
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'getShardVersion.getShardVersion' is the wrong type, expected "
                 "type 'string'");
    }
    SHL_ERR(shl_ns_parse(&ns, bson_iter_utf8(&it, NULL), st));
    if (!shard_get_identity(s, &id)) {
        SHL_ERR(not_initialized(st));
    }
    BSON_APPEND_UTF8(reply, "configServer", id.config_cs);
    BSON_APPEND_BOOL(reply, "inShardedMode", false);
    m = shard_meta_peek(s, bson_iter_utf8(&it, NULL));
    if (m == NULL) {
        BSON_APPEND_UTF8(reply, "global", "UNKNOWN");
        if (full) {
            bson_t empty;
            BSON_APPEND_DOCUMENT_BEGIN(reply, "metadata", &empty);
            bson_append_document_end(reply, &empty);
        }
    } else {
        shl_ts_append(reply, "global", (shl_ts_t){m->shard_version.major, m->shard_version.minor});
        if (full) {
            append_full_metadata(m, reply);
        }
    }
done:
    shard_meta_release(m);
    return ret;
}

static const shl_command_t shard_commands[] = {
    {.name = "_addShard",
     .run = shardsvr_add_shard,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
     .help = "internal: make this node a shard of a cluster (stores the shardIdentity)"},
    {.name = "_flushRoutingTableCacheUpdates",
     .aliases = {"_flushRoutingTableCacheUpdatesWithWriteConcern"},
     .run = shardsvr_flush_routing,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     .help = "internal: refresh the filtering metadata of a namespace from the config server"},
    {.name = "_flushDatabaseCacheUpdates",
     .aliases = {"_flushDatabaseCacheUpdatesWithWriteConcern"},
     .run = shardsvr_flush_database,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
     .help = "internal: refresh a database's cached entry and its collections' metadata"},
    {.name = "getShardVersion",
     .run = cmd_get_shard_version,
     .flags = SHL_CMD_ADMIN_ONLY,
     .help = "the shard's version of a namespace"},
};

void
shard_commands_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(shard_commands) / sizeof(shard_commands[0]); i++) {
        shl_command_registry_add(reg, &shard_commands[i]);
    }
}
