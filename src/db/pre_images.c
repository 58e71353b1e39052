/*
 * pre_images.c -- the life of change streams' pre-images in config.system.preimages
 * (storage/write.h SHL_PREIMAGES_NS; written with the update or delete they belong to):
 * MongoDB's cluster parameter changeStreamOptions {preAndPostImages: {expireAfterSeconds}}
 * (setClusterParameter / getClusterParameter, kept in config.clusterParameters) and the
 * remover that deletes expired ones. docs/design/change_streams.md "Pre-images".
 */
#include "db/db_private.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/storage_api.h"
#include "net/service.h"
#include "session/sessions_collection.h"

#define PARAMS_COLL "clusterParameters"
#define CS_OPTIONS "changeStreamOptions"

/* Run 'cmd' on this node as an internal client; a write's first error becomes the status. */
static int
local_cmd(db_node_t *node, const char *db, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shl_service_run_command(node->svc, NULL, cmd, db, reply);
    return shl_sessions_write_status(reply, st);
}

/*
 * The stored changeStreamOptions document into 'out' (initialised here): found or not, it
 * has MongoDB's shape {_id, clusterParameterTime, preAndPostImages: {expireAfterSeconds}}
 * ("off": pre-images live as long as the oplog entry they belong to).
 */
static int
read_options(db_node_t *node, bson_t *out, shl_status_t *st)
{
    bson_t *cmd = BCON_NEW("find", BCON_UTF8(PARAMS_COLL), "filter", "{", "_id",
                           BCON_UTF8(CS_OPTIONS), "}", "limit", BCON_INT32(1));
    bson_t reply = BSON_INITIALIZER, doc;
    bson_iter_t it;
    int ret = 0;

    bson_init(out);
    bson_destroy(&reply);
    SHL_ERR(local_cmd(node, "config", cmd, &reply, st));
    if (bson_iter_init_find(&it, &reply, "cursor") && bson_iter_recurse(&it, &it) &&
        bson_iter_find(&it, "firstBatch") && bson_iter_recurse(&it, &it) && shl_iter_next(&it) &&
        BSON_ITER_HOLDS_DOCUMENT(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&doc, data, len);
        bson_concat(out, &doc);
    } else {
        BCON_APPEND(out, "_id", BCON_UTF8(CS_OPTIONS), "clusterParameterTime",
                    BCON_TIMESTAMP(0, 0), "preAndPostImages", "{", "expireAfterSeconds",
                    BCON_UTF8("off"), "}");
    }
done:
    bson_destroy(cmd);
    bson_destroy(&reply);
    return ret;
}

/* expireAfterSeconds of 'opts' (read_options), 0 when "off". */
static int64_t
expire_after_secs(const bson_t *opts)
{
    bson_iter_t it;
    if (bson_iter_init(&it, opts) &&
        bson_iter_find_descendant(&it, "preAndPostImages.expireAfterSeconds", &it) &&
        BSON_ITER_HOLDS_NUMBER(&it)) {
        return bson_iter_as_int64(&it);
    }
    return 0;
}

/* {changeStreamOptions: {preAndPostImages: {expireAfterSeconds: N | "off"}}}: the new value
 * into 'out' (initialised here), checked as MongoDB's IDL checks it. */
static int
parse_options(const bson_iter_t *value, bson_t *out, shl_status_t *st)
{
    bson_iter_t it, pi;
    bool have_pi = false;
    int ret = 0;

    bson_init(out);
    if (!BSON_ITER_HOLDS_DOCUMENT(value)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "'changeStreamOptions' must be an object");
    }
    bson_iter_recurse(value, &it);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "preAndPostImages") != 0) {
            SHL_FAIL(st, 40415, "BSON field 'changeStreamOptions.%s' is an unknown field.", k);
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field 'changeStreamOptions.preAndPostImages' is the wrong type "
                     "'%s', expected type 'object'",
                     shl_bson_type_name(bson_iter_type(&it)));
        }
        have_pi = true;
        bson_iter_recurse(&it, &pi);
        while (shl_iter_next(&pi)) {
            if (strcmp(shl_iter_key(&pi), "expireAfterSeconds") != 0) {
                SHL_FAIL(st, 40415,
                         "BSON field 'changeStreamOptions.preAndPostImages.%s' is an unknown "
                         "field.",
                         shl_iter_key(&pi));
            }
            if (BSON_ITER_HOLDS_UTF8(&pi) && strcmp(bson_iter_utf8(&pi, NULL), "off") == 0) {
                BCON_APPEND(out, "preAndPostImages", "{", "expireAfterSeconds", BCON_UTF8("off"),
                            "}");
            } else if (BSON_ITER_HOLDS_NUMBER(&pi) && bson_iter_as_int64(&pi) > 0) {
                BCON_APPEND(out, "preAndPostImages", "{", "expireAfterSeconds",
                            BCON_INT64(bson_iter_as_int64(&pi)), "}");
            } else {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "Invalid value for 'expireAfterSeconds': it must be a positive number "
                         "of seconds or \"off\"");
            }
        }
    }
    if (!have_pi || bson_empty(out)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "Should specify a value for 'preAndPostImages.expireAfterSeconds'");
    }
done:
    return ret;
}

static int
cmd_set_cluster_parameter(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    db_node_t *node = op->svc->role_state;
    bson_t val = BSON_INITIALIZER, upd = BSON_INITIALIZER, set, w = BSON_INITIALIZER;
    bson_iter_t it, p;
    int ret = 0;

    (void)reply;
    if (strcmp(op->db, "admin") != 0) {
        SHL_FAIL(st, SHL_CODE_UNAUTHORIZED,
                 "setClusterParameter may only be run against the admin database.");
    }
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "setClusterParameter takes an object");
    }
    bson_iter_recurse(&it, &p);
    if (!shl_iter_next(&p)) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "Cluster parameter value must be an object");
    }
    if (strcmp(shl_iter_key(&p), CS_OPTIONS) != 0) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "Unknown Cluster Parameter %s", shl_iter_key(&p));
    }
    bson_destroy(&val);
    SHL_ERR(parse_options(&p, &val, st));
    /* The parameter's time is the node's clock now: later sets have larger times. */
    BSON_APPEND_DOCUMENT_BEGIN(&upd, "$set", &set);
    bson_concat(&set, &val);
    bson_append_document_end(&upd, &set);
    BCON_APPEND(&upd, "$currentDate", "{", "clusterParameterTime", "{", "$type",
                BCON_UTF8("timestamp"), "}", "}");
    BCON_APPEND(&w, "update", BCON_UTF8(PARAMS_COLL), "updates", "[", "{", "q", "{", "_id",
                BCON_UTF8(CS_OPTIONS), "}", "u", BCON_DOCUMENT(&upd), "upsert", BCON_BOOL(true),
                "}", "]");
    {
        bson_t r = BSON_INITIALIZER;
        ret = local_cmd(node, "config", &w, &r, st);
        bson_destroy(&r);
        SHL_ERR(ret);
    }
done:
    bson_destroy(&val);
    bson_destroy(&upd);
    bson_destroy(&w);
    return ret;
}

static int
cmd_get_cluster_parameter(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    db_node_t *node = op->svc->role_state;
    bson_t opts = BSON_INITIALIZER, arr;
    bson_iter_t it;
    bool want = false;
    int ret = 0;

    if (strcmp(op->db, "admin") != 0) {
        SHL_FAIL(st, SHL_CODE_UNAUTHORIZED,
                 "getClusterParameter may only be run against the admin database.");
    }
    bson_iter_init(&it, cmd);
    shl_iter_next(&it);
    if (BSON_ITER_HOLDS_UTF8(&it)) {
        const char *name = bson_iter_utf8(&it, NULL);
        want = strcmp(name, "*") == 0 || strcmp(name, CS_OPTIONS) == 0;
        if (!want) {
            SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "Unknown Cluster Parameter %s", name);
        }
    } else if (BSON_ITER_HOLDS_ARRAY(&it)) {
        bson_iter_t a;
        bson_iter_recurse(&it, &a);
        while (shl_iter_next(&a)) {
            if (!BSON_ITER_HOLDS_UTF8(&a) || strcmp(bson_iter_utf8(&a, NULL), CS_OPTIONS) != 0) {
                SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "Unknown Cluster Parameter");
            }
            want = true;
        }
    } else {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "getClusterParameter takes a parameter name, an array of them or \"*\"");
    }
    bson_destroy(&opts);
    SHL_ERR(read_options(node, &opts, st));
    BSON_APPEND_ARRAY_BEGIN(reply, "clusterParameters", &arr);
    if (want) {
        BSON_APPEND_DOCUMENT(&arr, "0", &opts);
    }
    bson_append_array_end(reply, &arr);
done:
    bson_destroy(&opts);
    return ret;
}

/* One removal pass on a primary: pre-images older than the oldest oplog entry (their event
 * is gone) or, with expireAfterSeconds, written before now - expireAfterSeconds. Deleted with
 * oplog entries, so a replica set's secondaries delete the same records. */
static int
remove_expired(db_node_t *node, int64_t *deleted, shl_status_t *st)
{
    bson_t opts = BSON_INITIALIZER, filter = BSON_INITIALIZER, or;
    uint64_t oldest = 0;
    int64_t expire;
    int ret = 0;

    *deleted = 0;
    bson_destroy(&opts);
    SHL_ERR(read_options(node, &opts, st));
    expire = expire_after_secs(&opts);
    SHL_ERR(db_oplog_oldest(node->eng, &oldest, st));
    BSON_APPEND_ARRAY_BEGIN(&filter, "$or", &or);
    BCON_APPEND(&or, "0", "{", "_id.ts", "{", "$lt",
                BCON_TIMESTAMP(SHL_TS_SECS(oldest), SHL_TS_INC(oldest)), "}", "}");
    if (expire > 0) {
        BCON_APPEND(&or, "1", "{", "operationTime", "{", "$lt",
                    BCON_DATE_TIME(shl_clock_wall_ms() - expire * 1000), "}", "}");
    }
    bson_append_array_end(&filter, &or);
    SHL_ERR(db_delete_matching(node, SHL_PREIMAGES_NS, &filter, NULL, deleted, st));
done:
    bson_destroy(&opts);
    bson_destroy(&filter);
    return ret;
}

/* One pass of the remover (db_node_every's body). */
static void
remover_pass(db_node_t *node)
{
    int64_t deleted = 0;
    shl_status_t st = SHL_STATUS_INIT;

    /* As the TTL monitor: only a primary deletes; secondaries apply its deletes. */
    if (shl_db_repl_is_primary(node->svc) && remove_expired(node, &deleted, &st) != 0) {
        SHL_LOG_WARNING(STORAGE, 2100010, "pre-image removal failed", "error",
                        BCON_UTF8(st.reason));
    }
}

void *
db_pre_image_remover_main(void *arg)
{
    shl_log_set_thread_ctx("ChangeStreamExpiredPreImagesRemover");
    db_node_every(arg, SHL_OPT_expiredChangeStreamPreImageRemovalJobSleepSecs, remover_pass);
    return NULL;
}

static const shl_command_t pre_image_commands[] = {
    {"setClusterParameter",
     {NULL},
     cmd_set_cluster_parameter,
     SHL_CMD_NEEDS_PRIMARY | SHL_CMD_ADMIN_ONLY,
     "set a cluster parameter (changeStreamOptions)"},
    {"getClusterParameter",
     {NULL},
     cmd_get_cluster_parameter,
     SHL_CMD_ADMIN_ONLY,
     "read cluster parameters (changeStreamOptions)"},
};

void
db_register_pre_image_commands(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(pre_image_commands) / sizeof(pre_image_commands[0]); i++) {
        shl_command_registry_add(reg, &pre_image_commands[i]);
    }
}
