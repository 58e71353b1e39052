/*
 * configsvr_coll_balancing.c -- _configsvrConfigureCollectionBalancing, what the router's
 * configureCollectionBalancing sends (MongoDB 5.3+; docs/design/balancer.md "Per-collection
 * settings"): a collection's own chunk size (config.collections maxChunkSizeBytes, which
 * the balancer and the shards' auto-split use before config.settings chunksize) and its
 * enableAutoMerge flag. Defragmentation is not built: defragmentCollection: true is refused.
 */
#include <string.h>

#include "base/log.h"
#include "bson/bson_iter.h"
#include "net/command_args.h"
#include "config/balancer_private.h"
#include "config/config_private.h"

/* MongoDB's bounds of a chunk size in MB (config.settings chunksize takes the same). */
#define MAX_CHUNK_SIZE_MB 1024

static int
cmd_configure_coll_balancing(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *ns = NULL;
    int64_t chunk_mb = 0;
    bool has_chunk = false, defrag = false, has_defrag = false, merge = false, has_merge = false;
    bool found = false;
    shl_collection_type_t coll;
    bson_t set = BSON_INITIALIZER, unset = BSON_INITIALIZER, update = BSON_INITIALIZER;
    bson_t details = BSON_INITIALIZER;
    bson_iter_t it;

    (void)reply;
    memset(&coll, 0, sizeof(coll));
    SHL_ERR(cfg_cmd_string(cmd, &ns, st));
    SHL_ERR(shl_cmd_get_int64(cmd, "chunkSize", &chunk_mb, &has_chunk, st));
    if (bson_iter_init_find(&it, cmd, "defragmentCollection")) {
        SHL_ERR(shl_cmd_get_bool(cmd, "defragmentCollection", &defrag, st));
        has_defrag = true;
    }
    if (bson_iter_init_find(&it, cmd, "enableAutoMerger")) {
        SHL_ERR(shl_cmd_get_bool(cmd, "enableAutoMerger", &merge, st));
        has_merge = true;
    }
    if (has_chunk && (chunk_mb < 0 || chunk_mb > MAX_CHUNK_SIZE_MB)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "chunkSize must be between 0 and %d MB, got %lld",
                 MAX_CHUNK_SIZE_MB, (long long)chunk_mb);
    }
    if (has_defrag && defrag) {
        SHL_FAIL(st, SHL_CODE_COMMAND_NOT_SUPPORTED,
                 "defragmentCollection is not supported: Shale has no chunk defragmentation yet "
                 "(mergeChunks merges contiguous chunks of one shard by hand)");
    }
    cfg_lock_ns(ns);
    ret = cfg_get_collection(ns, &coll, &found, st);
    if (ret == 0 && !found) {
        ret = shl_status_set(st, SHL_CODE_NAMESPACE_NOT_SHARDED, "%s is not sharded", ns);
    }
    if (ret == 0) {
        if (has_chunk && chunk_mb > 0) {
            BSON_APPEND_INT64(&set, "maxChunkSizeBytes", chunk_mb * 1024 * 1024);
        } else if (has_chunk) {
            /* 0: back to the cluster's chunksize. */
            BSON_APPEND_INT32(&unset, "maxChunkSizeBytes", 1);
        }
        if (has_merge) {
            BSON_APPEND_BOOL(&set, "enableAutoMerge", merge);
        }
        if (has_defrag) {
            BSON_APPEND_INT32(&unset, "defragmentCollection", 1);
        }
        if (!bson_empty(&set)) {
            BSON_APPEND_DOCUMENT(&update, "$set", &set);
        }
        if (!bson_empty(&unset)) {
            BSON_APPEND_DOCUMENT(&update, "$unset", &unset);
        }
        if (!bson_empty(&update)) {
            bson_t *q = BCON_NEW("_id", BCON_UTF8(ns));
            ret = cfg_update("collections", q, &update, false, false, NULL, st);
            bson_destroy(q);
        }
    }
    cfg_unlock_ns(ns);
    SHL_ERR(ret);
    bson_copy_to_excluding_noinit(cmd, &details, "configureCollectionBalancing",
                                  "_configsvrConfigureCollectionBalancing", "writeConcern",
                                  "lsid", "$db", "$clusterTime", "$configTime", "$topologyTime",
                                  NULL);
    cfg_changelog(op, "configureCollectionBalancing", ns, &details);
    SHL_LOG_INFO(SHARDING, 4201620, "Configured collection balancing", "namespace",
                 BCON_UTF8(ns), "chunkSizeMB", BCON_INT64(has_chunk ? chunk_mb : -1));
done:
    shl_collection_type_cleanup(&coll);
    bson_destroy(&set);
    bson_destroy(&unset);
    bson_destroy(&update);
    bson_destroy(&details);
    return ret;
}

static const shl_command_t configure_coll_balancing_cmd = {
    .name = "_configsvrConfigureCollectionBalancing",
    .run = cmd_configure_coll_balancing,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "a collection's chunk size and auto-merge setting (config server)",
};

void
cfg_register_coll_balancing_commands(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &configure_coll_balancing_cmd);
}
