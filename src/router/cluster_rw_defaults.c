/*
 * cluster_rw_defaults.c -- getDefaultRWConcern / setDefaultRWConcern through the router: the
 * cluster-wide defaults live on the config server in config.settings
 * {_id: "ReadWriteConcernDefaults", defaultReadConcern, defaultWriteConcern, updateOpTime,
 * updateWallClockTime}, as MongoDB keeps them; without a document the implicit defaults are
 * answered ({level: "local"}, {w: "majority", wtimeout: 0}, sources "implicit").
 * The router keeps them in a cache (router_private.h "cluster-wide default read and write
 * concerns") and applies them, as mongos does, to the requests that carry no read or write
 * concern of their own; without a stored write concern it forwards the implicit default
 * {w: "majority"} (provenance "implicitDefault") itself, so a shard never runs a routed
 * write at {w: 1}. Shards do not apply them to requests sent to them directly: a
 * mongod reads the defaults from its own config.settings, which a shard never holds.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/command_args.h"
#include "router/cluster_routing.h"
#include "router/router_commands.h"
#include "router/router_private.h"

#define RWC_DOC_ID "ReadWriteConcernDefaults"

/* A failed first load is retried by requests no more often than this. */
#define RWC_RETRY_US (1000 * 1000)

/* Bound on the periodic refresh's read from the config server. */
#define RWC_REFRESH_TIMEOUT_MS 10000

struct shl_router_rwc {
    pthread_mutex_t mu;
    bson_t *rc;  /* {level, provenance: "customDefault"}, or NULL when unset; guarded by mu */
    bson_t *wc;  /* {w, j?, wtimeout, provenance: "customDefault"}, or NULL; guarded by mu */
    bson_t *doc; /* the stored document as last read (empty: none); guarded by mu */
    atomic_bool loaded;           /* read from the config server at least once */
    atomic_bool has_custom;       /* rc or wc is set: requests may need rewriting */
    atomic_llong next_try_us;     /* first load failed: not before then again */
    atomic_llong local_update_ms; /* wall time of the last install (localUpdateWallClockTime) */
};

/* Whether 'doc' holds a non-empty document at 'key' (into *out, a view into 'doc'). */
static bool
sub_doc(const bson_t *doc, const char *key, bson_t *out)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    if (!bson_iter_init_find(&it, doc, key) || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return false;
    }
    bson_iter_document(&it, &len, &data);
    return bson_init_static(out, data, len) && !bson_empty(out);
}

struct shl_router_rwc *
router_rwc_new(void)
{
    struct shl_router_rwc *c = bson_malloc0(sizeof(*c));

    pthread_mutex_init(&c->mu, NULL);
    c->doc = bson_new();
    return c;
}

void
router_rwc_destroy(struct shl_router_rwc *c)
{
    if (c == NULL) {
        return;
    }
    if (c->rc != NULL) {
        bson_destroy(c->rc);
    }
    if (c->wc != NULL) {
        bson_destroy(c->wc);
    }
    bson_destroy(c->doc);
    pthread_mutex_destroy(&c->mu);
    bson_free(c);
}

/* A stored default as applied to a request: its fields and provenance "customDefault". */
static bson_t *
applied_concern(const bson_t *doc, const char *key)
{
    bson_t sub, *out;

    if (!sub_doc(doc, key, &sub)) {
        return NULL;
    }
    out = bson_new();
    bson_copy_to_excluding_noinit(&sub, out, "provenance", NULL);
    BSON_APPEND_UTF8(out, "provenance", "customDefault");
    return out;
}

/* Make 'doc' (the stored document, possibly empty) the cached defaults. */
static void
rwc_install(struct shl_router_rwc *c, const bson_t *doc)
{
    bson_t *rc = applied_concern(doc, "defaultReadConcern");
    bson_t *wc = applied_concern(doc, "defaultWriteConcern");
    bson_t *copy = bson_copy(doc);
    bson_t *t;

    pthread_mutex_lock(&c->mu);
    t = c->rc, c->rc = rc, rc = t;
    t = c->wc, c->wc = wc, wc = t;
    t = c->doc, c->doc = copy, copy = t;
    atomic_store(&c->has_custom, c->rc != NULL || c->wc != NULL);
    atomic_store(&c->local_update_ms, shl_clock_wall_ms());
    atomic_store(&c->loaded, true);
    pthread_mutex_unlock(&c->mu);
    if (rc != NULL) {
        bson_destroy(rc);
    }
    if (wc != NULL) {
        bson_destroy(wc);
    }
    bson_destroy(copy);
}

/* The stored defaults document into *doc (empty when there is none), within timeout_ms. */
static int
fetch_defaults(shl_router_t *r, int64_t timeout_ms, bson_t *doc, shl_status_t *st)
{
    bson_t find = BSON_INITIALIZER, filter, res = BSON_INITIALIZER;
    bson_iter_t it, d;
    int ret = 0;

    BSON_APPEND_UTF8(&find, "find", "settings");
    BSON_APPEND_DOCUMENT_BEGIN(&find, "filter", &filter);
    BSON_APPEND_UTF8(&filter, "_id", RWC_DOC_ID);
    bson_append_document_end(&find, &filter);
    BSON_APPEND_INT32(&find, "limit", 1);
    BSON_APPEND_BOOL(&find, "singleBatch", true);
    bson_destroy(&res);
    SHL_ERR(shl_remote_run_config(&r->remote, "config", &find,
                                  &(shl_remote_options_t){.timeout_ms = timeout_ms}, &res, st));
    if (bson_iter_init(&it, &res) && bson_iter_find_descendant(&it, "cursor.firstBatch.0", &d) &&
        BSON_ITER_HOLDS_DOCUMENT(&d)) {
        const uint8_t *data;
        uint32_t len;
        bson_t view;
        bson_iter_document(&d, &len, &data);
        if (bson_init_static(&view, data, len)) {
            bson_concat(doc, &view);
        }
    }
done:
    bson_destroy(&find);
    bson_destroy(&res);
    return ret;
}

/* The stored defaults for a command (bounded by its deadline), installed in the cache. */
static int
load_defaults(shl_op_ctx_t *op, bson_t *doc, shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    int64_t remaining = shl_op_remaining_ms(op);
    int ret = 0;

    SHL_ERR(fetch_defaults(
        r, remaining < 0 ? SHL_CONFIG_CMD_TIMEOUT_MS : (remaining == 0 ? 1 : remaining), doc, st));
    rwc_install(r->rwc, doc);
done:
    return ret;
}

void
router_rwc_refresh(shl_router_t *r)
{
    bson_t doc = BSON_INITIALIZER;
    shl_status_t st = SHL_STATUS_INIT;

    if (fetch_defaults(r, RWC_REFRESH_TIMEOUT_MS, &doc, &st) == 0) {
        rwc_install(r->rwc, &doc);
    } else {
        atomic_store(&r->rwc->next_try_us, shl_clock_mono_us() + RWC_RETRY_US);
        SHL_LOG_DEBUG(1, SHARDING, 4620040, "cannot refresh the default read/write concerns",
                      "error", BCON_UTF8(st.reason));
    }
    bson_destroy(&doc);
}

/* The commands a default read concern applies to (those that take one, getMore aside). */
static bool
takes_read_concern(const char *name)
{
    return strcmp(name, "find") == 0 || strcmp(name, "aggregate") == 0 ||
           strcmp(name, "count") == 0 || strcmp(name, "distinct") == 0;
}

/* The implicit default write concern a router forwards when no cluster-wide one is set:
 * every shard and the config server are replica sets without arbiters, so {w: "majority"}. */
static void
append_implicit_wc(bson_t *body)
{
    bson_t wc;

    BSON_APPEND_DOCUMENT_BEGIN(body, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    BSON_APPEND_INT32(&wc, "wtimeout", 0);
    BSON_APPEND_UTF8(&wc, "provenance", "implicitDefault");
    bson_append_document_end(body, &wc);
}

/* A copy of 'body' to add concerns to: without its writeConcern ({}) when 'drop_wc'. */
static bson_t *
body_without_wc(const bson_t *body, bool drop_wc)
{
    bson_t *out;

    if (drop_wc) {
        out = bson_new();
        bson_copy_to_excluding_noinit(body, out, "writeConcern", NULL);
    } else {
        out = bson_copy(body);
    }
    return out;
}

bson_t *
router_rwc_apply(shl_router_t *r, shl_op_ctx_t *op, const shl_command_t *cmd)
{
    struct shl_router_rwc *c = r->rwc;
    /* {} is no write concern: the default applies (MongoDB). */
    bool no_wc = !op->has_write_concern || bson_empty(&op->write_concern);
    bool want_wc, want_rc, custom;
    bson_t *body = NULL;

    if (!atomic_load_explicit(&c->loaded, memory_order_acquire) &&
        shl_clock_mono_us() >= atomic_load(&c->next_try_us)) {
        router_rwc_refresh(r); /* the first request before the periodic thread's first read */
    }
    want_wc = (cmd->flags & SHL_CMD_WRITE) != 0 && no_wc;
    want_rc = !op->has_read_concern && takes_read_concern(cmd->name);
    if (op->has_autocommit) {
        /* In a transaction the default read concern is its first statement's, the default
         * write concern its commit's or abort's (docs/design/transactions.md "Router"). */
        want_wc = no_wc && (strcmp(cmd->name, "commitTransaction") == 0 ||
                            strcmp(cmd->name, "abortTransaction") == 0);
        want_rc = !op->has_read_concern && op->start_transaction;
    }
    custom = atomic_load_explicit(&c->has_custom, memory_order_acquire);
    if (!custom) {
        /* No cluster-wide default: reads run as sent (the shard's implicit "local"), a write
         * gets the implicit default, resolved here (as mongos) so that no shard falls back
         * to {w: 1}. */
        want_rc = false;
    }
    if (want_wc || want_rc) {
        body = body_without_wc(op->body, want_wc);
        if (!custom) {
            append_implicit_wc(body);
        } else {
            pthread_mutex_lock(&c->mu);
            if (want_wc && c->wc != NULL) {
                BSON_APPEND_DOCUMENT(body, "writeConcern", c->wc);
            } else if (want_wc) {
                append_implicit_wc(body);
            }
            if (want_rc && c->rc != NULL) {
                BSON_APPEND_DOCUMENT(body, "readConcern", c->rc);
            }
            pthread_mutex_unlock(&c->mu);
        }
    }
    return body;
}

/* getDefaultRWConcern's reply from the stored document 'doc' (may be empty), as this
 * router's cache holds it since 'local_ms' (localUpdateWallClockTime). */
static void
append_defaults(const bson_t *doc, int64_t local_ms, bson_t *reply)
{
    bson_t rc, wc, sub;
    bson_iter_t it;
    bool has_rc = sub_doc(doc, "defaultReadConcern", &rc);
    bool has_wc = sub_doc(doc, "defaultWriteConcern", &wc);

    if (has_rc) {
        BSON_APPEND_DOCUMENT(reply, "defaultReadConcern", &rc);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(reply, "defaultReadConcern", &sub);
        BSON_APPEND_UTF8(&sub, "level", "local");
        bson_append_document_end(reply, &sub);
    }
    if (has_wc) {
        BSON_APPEND_DOCUMENT(reply, "defaultWriteConcern", &wc);
    } else {
        /* Every shard and the config server are replica sets without arbiters: majority. */
        BSON_APPEND_DOCUMENT_BEGIN(reply, "defaultWriteConcern", &sub);
        BSON_APPEND_UTF8(&sub, "w", "majority");
        BSON_APPEND_INT32(&sub, "wtimeout", 0);
        bson_append_document_end(reply, &sub);
    }
    if (bson_iter_init_find(&it, doc, "updateOpTime")) {
        bson_append_iter(reply, NULL, 0, &it);
    }
    if (bson_iter_init_find(&it, doc, "updateWallClockTime")) {
        bson_append_iter(reply, NULL, 0, &it);
    }
    BSON_APPEND_UTF8(reply, "defaultWriteConcernSource", has_wc ? "global" : "implicit");
    BSON_APPEND_UTF8(reply, "defaultReadConcernSource", has_rc ? "global" : "implicit");
    BSON_APPEND_DATE_TIME(reply, "localUpdateWallClockTime", local_ms);
}

static int
cmd_get_default_rw_concern(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    static const char *const fields[] = {"inMemory", NULL};
    shl_router_t *r = shl_router_get(op);
    bson_t doc = BSON_INITIALIZER;
    bool in_memory = false;
    int ret = 0;

    SHL_ERR(shl_cmd_check_fields(cmd, fields, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "inMemory", &in_memory, st));
    if (in_memory && atomic_load(&r->rwc->loaded)) {
        /* What this router applies now: its cache. */
        pthread_mutex_lock(&r->rwc->mu);
        bson_concat(&doc, r->rwc->doc);
        pthread_mutex_unlock(&r->rwc->mu);
    } else {
        SHL_ERR(load_defaults(op, &doc, st));
    }
    append_defaults(&doc, atomic_load(&r->rwc->local_update_ms), reply);
    if (in_memory) {
        BSON_APPEND_BOOL(reply, "inMemory", true);
    }
done:
    bson_destroy(&doc);
    return ret;
}

/* A default read concern: {level} of local, available or majority, nothing else. */
static int
check_read_concern(const bson_t *rc, bson_t *out, shl_status_t *st)
{
    bson_iter_t it;
    int ret = 0;

    bson_iter_init(&it, rc);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "level") == 0) {
            const char *level;
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'ReadConcern.level' is the wrong type '%s', expected type "
                         "'string'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            level = bson_iter_utf8(&it, NULL);
            if (strcmp(level, "snapshot") == 0 || strcmp(level, "linearizable") == 0) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "level: '%s' is not suitable for the default read concern", level);
            }
            if (strcmp(level, "local") != 0 && strcmp(level, "available") != 0 &&
                strcmp(level, "majority") != 0) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "BSON field 'ReadConcern.level' has an invalid value '%s'", level);
            }
            BSON_APPEND_UTF8(out, "level", level);
        } else if (strcmp(k, "afterOpTime") == 0 || strcmp(k, "afterClusterTime") == 0 ||
                   strcmp(k, "atClusterTime") == 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "'%s' is not suitable for the default read concern",
                     k);
        } else if (strcmp(k, "provenance") == 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "'provenance' must be unset in default read concern");
        } else {
            SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                     "BSON field 'ReadConcern.%s' is an unknown field.", k);
        }
    }
done:
    return ret;
}

/* A default write concern: acknowledged, with a 'w'; stored as {w, j?, wtimeout}. */
static int
check_write_concern(const bson_t *wc, bson_t *out, shl_status_t *st)
{
    bson_iter_t w, it;
    int64_t wtimeout = 0;
    int ret = 0;

    if (bson_iter_init_find(&it, wc, "provenance")) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "'provenance' must be unset in default write concern");
    }
    if (!bson_iter_init_find(&w, wc, "w")) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "The global default write concern must specify 'w' (a number or a mode)");
    }
    if (BSON_ITER_HOLDS_NUMBER(&w)) {
        if (bson_iter_as_int64(&w) < 1) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "Unacknowledged write concern is not suitable for the default write "
                     "concern");
        }
        BSON_APPEND_INT32(out, "w", (int32_t)bson_iter_as_int64(&w));
    } else if (BSON_ITER_HOLDS_UTF8(&w)) {
        BSON_APPEND_UTF8(out, "w", bson_iter_utf8(&w, NULL));
    } else {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "w has to be a number or string; found: %s",
                 shl_bson_type_name(shl_iter_type(&w)));
    }
    if (bson_iter_init_find(&it, wc, "j")) {
        BSON_APPEND_BOOL(out, "j", bson_iter_as_bool(&it));
    }
    if (bson_iter_init_find(&it, wc, "wtimeout") && BSON_ITER_HOLDS_NUMBER(&it)) {
        wtimeout = bson_iter_as_int64(&it);
    }
    BSON_APPEND_INT32(out, "wtimeout", (int32_t)wtimeout);
done:
    return ret;
}

/* Replace the defaults document on the config server (upsert, w: majority). */
static int
store_defaults(shl_op_ctx_t *op, const bson_t *doc, shl_status_t *st)
{
    return router_write_setting(op, RWC_DOC_ID, doc, st);
}

/*
 * setDefaultRWConcern as MongoDB's config server runs it: at least one of defaultReadConcern
 * / defaultWriteConcern; a given one replaces the stored one ({} unsets the read concern,
 * but a write concern once set cannot be unset: IllegalOperation), the other is kept;
 * updateOpTime is the cluster time, updateWallClockTime now. Replies like
 * getDefaultRWConcern with the new defaults.
 */
static int
cmd_set_default_rw_concern(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    static const char *const fields[] = {"defaultReadConcern", "defaultWriteConcern", NULL};
    shl_router_t *r = shl_router_get(op);
    bson_t cur = BSON_INITIALIZER, next = BSON_INITIALIZER, rc, wc, sub, cur_sub;
    bool has_rc = false, has_wc = false;
    uint64_t now_ts = shl_vector_clock_get(&r->clock, SHL_VC_CLUSTER_TIME);
    int ret = 0;

    SHL_ERR(shl_cmd_check_fields(cmd, fields, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "defaultReadConcern", &rc, &has_rc, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "defaultWriteConcern", &wc, &has_wc, st));
    if (!has_rc && !has_wc) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "At least one of the \"defaultReadConcern\" or \"defaultWriteConcern\" fields "
                 "must be present");
    }
    SHL_ERR(load_defaults(op, &cur, st));
    BSON_APPEND_UTF8(&next, "_id", RWC_DOC_ID);
    if (has_rc && !bson_empty(&rc)) {
        BSON_APPEND_DOCUMENT_BEGIN(&next, "defaultReadConcern", &sub);
        ret = check_read_concern(&rc, &sub, st);
        bson_append_document_end(&next, &sub);
        SHL_ERR(ret);
    } else if (!has_rc && sub_doc(&cur, "defaultReadConcern", &cur_sub)) {
        BSON_APPEND_DOCUMENT(&next, "defaultReadConcern", &cur_sub);
    }
    if (has_wc && !bson_empty(&wc)) {
        BSON_APPEND_DOCUMENT_BEGIN(&next, "defaultWriteConcern", &sub);
        ret = check_write_concern(&wc, &sub, st);
        bson_append_document_end(&next, &sub);
        SHL_ERR(ret);
    } else if (sub_doc(&cur, "defaultWriteConcern", &cur_sub)) {
        if (has_wc) {
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                     "The global default write concern cannot be unset once it is set.");
        }
        BSON_APPEND_DOCUMENT(&next, "defaultWriteConcern", &cur_sub);
    }
    if (now_ts == 0) {
        now_ts = ((uint64_t)(shl_clock_wall_ms() / 1000)) << 32;
    }
    shl_bson_append_timestamp_u64(&next, "updateOpTime", now_ts);
    BSON_APPEND_DATE_TIME(&next, "updateWallClockTime", shl_clock_wall_ms());
    SHL_ERR(store_defaults(op, &next, st));
    /* This router applies the new defaults from the next request on, as mongos does. */
    rwc_install(r->rwc, &next);
    append_defaults(&next, atomic_load(&r->rwc->local_update_ms), reply);
done:
    bson_destroy(&cur);
    bson_destroy(&next);
    return ret;
}

static const shl_command_t k_rw_defaults_commands[] = {
    {"getDefaultRWConcern",
     {NULL},
     cmd_get_default_rw_concern,
     SHL_CMD_ADMIN_ONLY,
     "the cluster-wide default read and write concern"},
    {"setDefaultRWConcern",
     {NULL},
     cmd_set_default_rw_concern,
     SHL_CMD_ADMIN_ONLY,
     "set the cluster-wide default read and/or write concern (config.settings)"},
};

void
shl_cluster_rw_defaults_commands_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(k_rw_defaults_commands) / sizeof(k_rw_defaults_commands[0]);
         i++) {
        shl_command_registry_add(reg, &k_rw_defaults_commands[i]);
    }
}
