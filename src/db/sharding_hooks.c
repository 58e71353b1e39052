/*
 * sharding_hooks.c -- the db side of the shard seam (sharding_hooks.h): stores the hooks
 * the shard module installs in the node and calls them for every collection command.
 */
#include "db/sharding_hooks.h"
#include "db/txn_participant.h"

#include <string.h>

#include "base/namespace.h"
#include "bson/bson_iter.h"
#include "bson/bson_path.h"
#include "bson/bson_util.h"
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

int
shl_db_check_shard_key_update(const shl_op_ctx_t *op, const shl_db_orphan_filter_t *f, bool multi,
                              const bson_t *pre, const bson_t *post, shl_status_t *st)
{
    int ret = 0;

    if (f == NULL || f->same_key(f, pre, post)) {
        goto done;
    }
    if (!f->owns(f, pre)) {
        goto done; /* an orphan is not the user's document: the write skips it anyway */
    }
    if (!f->same_key(f, post, post)) { /* only an array on a key path compares unequal */
        SHL_FAIL(st, SHL_CODE_NOT_SINGLE_VALUE_FIELD,
                 "After applying the update, the shard key was found to be an array or array "
                 "descendant.");
    }
    if (multi) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "Multi-update operations are not allowed when updating the shard key field.");
    }
    if (!op->has_txn_number) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "Must run update to shard key field in a multi-statement transaction or with "
                 "retryWrites: true.");
    }
    if (!f->owns(f, post)) {
        /* MongoDB's WouldChangeOwningShardInfo: the router moves the document in a
         * transaction from these images (however large: a status keeps a large extra on
         * the thread that builds the reply). */
        bson_t info = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(&info, "preImage", pre);
        BSON_APPEND_DOCUMENT(&info, "postImage", post);
        BSON_APPEND_BOOL(&info, "shouldUpsert", false);
        shl_status_set(st, SHL_CODE_WOULD_CHANGE_OWNING_SHARD,
                       "This update would cause the doc to change owning shards");
        shl_status_set_extra(st, &info);
        bson_destroy(&info);
        ret = st->code;
        goto done;
    }
done:
    return ret;
}

int
shl_db_check_upsert_owned(const shl_op_ctx_t *op, const shl_db_orphan_filter_t *f,
                          const bson_t *doc, shl_status_t *st)
{
    int ret = 0;

    if (f != NULL && !f->owns(f, doc)) {
        bson_t info = BSON_INITIALIZER, empty = BSON_INITIALIZER;
        if (!op->has_txn_number) {
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                     "Must run update to shard key field in a multi-statement transaction or "
                     "with retryWrites: true.");
        }
        /* MongoDB's WouldChangeOwningShardInfo with shouldUpsert: the router inserts the new
         * document on its owner in a transaction. */
        BSON_APPEND_DOCUMENT(&info, "preImage", &empty);
        BSON_APPEND_DOCUMENT(&info, "postImage", doc);
        BSON_APPEND_BOOL(&info, "shouldUpsert", true);
        shl_status_set(st, SHL_CODE_WOULD_CHANGE_OWNING_SHARD,
                       "This update would cause the doc to change owning shards");
        shl_status_set_extra(st, &info);
        bson_destroy(&info);
        ret = st->code;
    }
done:
    return ret;
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
    *filter = NULL;
    if ((access == SHL_DB_SHARD_WRITE || access == SHL_DB_SHARD_DDL) &&
        db_uwb_check(op, ns, st) != 0) {
        return st->code;
    }
    return db_sharding_check_versions(op, ns, access, filter, st);
}

int
shl_db_txn_wait_writers(shl_op_ctx_t *op, const char *ns,
                        bool (*in_range)(void *arg, const bson_t *doc), void *arg,
                        int64_t unprepared_max_ms, shl_status_t *st)
{
    db_node_t *node = db_node(op);
    db_txn_range_t range = {in_range, arg};

    return node == NULL ? 0
                        : db_txn_wait_writers(node->txns, op, ns, in_range != NULL ? &range : NULL,
                                              unprepared_max_ms, st);
}

int
db_sharding_check_versions(shl_op_ctx_t *op, const char *ns, shl_db_shard_access_t access,
                           shl_db_orphan_filter_t **filter, shl_status_t *st)
{
    db_node_t *node = db_node(op);

    *filter = NULL;
    if ((access == SHL_DB_SHARD_WRITE || access == SHL_DB_SHARD_DDL) && node != NULL) {
        /* A collection another transaction created is its own until it ends. */
        int ret = db_txn_wait_created(op, ns, st);
        if (ret != 0) {
            return ret;
        }
    }
    if (op->txn != NULL) {
        /* Noted before the version check lets a write in, so a migration that enters its
         * critical section after the check finds the transaction. */
        int ret = db_txn_note_access(
            op, ns, access != SHL_DB_SHARD_READ && access != SHL_DB_SHARD_CATALOG, st);
        if (ret != 0) {
            return ret;
        }
    }
    /* An unversioned read still goes to the hook: the load policy counts it (bal16c). */
    if (node == NULL || node->sharding.check == NULL ||
        (!op->has_shard_version && !op->has_database_version && access != SHL_DB_SHARD_READ)) {
        return 0;
    }
    return node->sharding.check(node->sharding.arg, op, ns, access, filter, st);
}

int
shl_db_sharding_check_involved(shl_op_ctx_t *op, const bson_t *cmd, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    bson_iter_t it, arr, entry;
    const char *f = SHL_INVOLVED_VERSIONS_FIELD;

    if (!bson_iter_init_find(&it, cmd, f)) {
        goto done;
    }
    if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &arr)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '%s' is the wrong type '%s', expected type 'array'", f,
                 shl_bson_type_name(bson_iter_type(&it)));
    }
    while (bson_iter_next(&arr)) {
        bson_iter_t sv, dbv;
        bool has_sv = false, has_dbv = false;
        const char *ns = NULL;
        shl_ns_t parsed;
        memset(&sv, 0, sizeof(sv));
        memset(&dbv, 0, sizeof(dbv));
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bson_iter_recurse(&arr, &entry)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "%s entries must be objects", f);
        }
        while (bson_iter_next(&entry)) {
            const char *k = bson_iter_key(&entry);
            if (strcmp(k, "ns") == 0 && BSON_ITER_HOLDS_UTF8(&entry)) {
                ns = bson_iter_utf8(&entry, NULL);
            } else if (strcmp(k, "shardVersion") == 0) {
                sv = entry;
                has_sv = true;
            } else if (strcmp(k, "databaseVersion") == 0) {
                dbv = entry;
                has_dbv = true;
            } else {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s: unknown or malformed field '%s'", f, k);
            }
        }
        if (ns == NULL || !has_sv) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s entries need 'ns' and 'shardVersion'", f);
        }
        SHL_ERR(shl_ns_parse(&parsed, ns, st));
        if (node != NULL && node->sharding.check_involved != NULL) {
            SHL_ERR(node->sharding.check_involved(node->sharding.arg, op, ns, &sv,
                                                  has_dbv ? &dbv : NULL, st));
        }
    }
done:
    return ret;
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

/* ---------------------------------------------------------------- op observer */

/* The images observed by the write unit running on this thread, reported at commit. */
typedef struct observed {
    char *ns;
    bson_t *pre, *post;
} observed_t;

static __thread observed_t *tl_obs;
static __thread size_t tl_n, tl_cap;
static __thread bool tl_in_unit;

static void
observed_reset(void)
{
    for (size_t i = 0; i < tl_n; i++) {
        bson_free(tl_obs[i].ns);
        if (tl_obs[i].pre != NULL) {
            bson_destroy(tl_obs[i].pre);
        }
        if (tl_obs[i].post != NULL) {
            bson_destroy(tl_obs[i].post);
        }
    }
    tl_n = 0;
}

bool
shl_db_shard_name(const shl_op_ctx_t *op, char *out, size_t n)
{
    const db_node_t *node = op != NULL ? op->svc->role_state : NULL;
    return node != NULL && node->sharding.shard_name != NULL &&
           node->sharding.shard_name(node->sharding.arg, out, n);
}

int64_t
shl_db_orphan_count(const shl_op_ctx_t *op, const uint8_t uuid[16])
{
    const db_node_t *node = op != NULL ? op->svc->role_state : NULL;
    int64_t n = 0;

    if (node != NULL && node->sharding.orphan_count != NULL) {
        n = node->sharding.orphan_count(node->sharding.arg, uuid);
    }
    return n;
}

void
shl_db_sharding_observe_write(const shl_op_ctx_t *op, const char *ns, const bson_t *pre,
                              const bson_t *post)
{
    const db_node_t *node = op != NULL ? op->svc->role_state : NULL;

    if (node == NULL || node->sharding.on_write == NULL ||
        (node->sharding.observing != NULL && !node->sharding.observing(node->sharding.arg, ns))) {
        return;
    }
    if (!tl_in_unit) {
        node->sharding.on_write(node->sharding.arg, ns, pre, post);
        return;
    }
    if (tl_n == tl_cap) {
        tl_cap = tl_cap == 0 ? 16 : tl_cap * 2;
        tl_obs = bson_realloc(tl_obs, tl_cap * sizeof(*tl_obs));
    }
    tl_obs[tl_n].ns = bson_strdup(ns);
    tl_obs[tl_n].pre = pre != NULL ? bson_copy(pre) : NULL;
    tl_obs[tl_n].post = post != NULL ? bson_copy(post) : NULL;
    tl_n++;
}

typedef struct unit_trampoline {
    shl_storage_txn_fn fn;
    void *arg;
} unit_trampoline_t;

/* Each attempt starts with nothing observed: only the committed one reports. */
static int
unit_attempt(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    unit_trampoline_t *t = arg;

    observed_reset();
    return t->fn(txn, t->arg, st);
}

int
db_write_retry(shl_op_ctx_t *op, shl_storage_engine_t *eng, shl_storage_txn_fn fn, void *arg,
               uint64_t *last_ts, shl_status_t *st)
{
    const db_node_t *node = op != NULL ? op->svc->role_state : NULL;
    unit_trampoline_t t = {fn, arg};
    shl_storage_txn_t *in_txn = op != NULL ? db_txn_storage(op) : NULL;
    int ret;

    if (in_txn != NULL) {
        /* A statement of a multi-document transaction writes in the transaction's storage
         * transaction, once: a write conflict fails the statement (and aborts the
         * transaction) instead of being retried. */
        if (last_ts != NULL) {
            *last_ts = 0;
        }
        /* What the shard observes of the writes is reported when the transaction commits. */
        tl_in_unit = true;
        ret = fn(in_txn, arg, st);
        tl_in_unit = false;
        if (ret == 0) {
            for (size_t i = 0; i < tl_n; i++) {
                db_txn_note_write(op, tl_obs[i].ns, tl_obs[i].pre, tl_obs[i].post);
            }
        }
        observed_reset();
        bson_free(tl_obs);
        tl_obs = NULL;
        tl_cap = 0;
        return ret;
    }
    if (node == NULL || node->sharding.on_write == NULL || tl_in_unit) {
        /* (A unit inside a unit reports with the outer one.) */
        return shl_storage_write_retry(eng, fn, arg, last_ts, st);
    }
    tl_in_unit = true;
    ret = shl_storage_write_retry(eng, unit_attempt, &t, last_ts, st);
    tl_in_unit = false;
    if (ret == 0) {
        for (size_t i = 0; i < tl_n; i++) {
            node->sharding.on_write(node->sharding.arg, tl_obs[i].ns, tl_obs[i].pre,
                                    tl_obs[i].post);
        }
    }
    observed_reset();
    /* The array dies with the unit: a thread-local one kept for the next unit would be lost
     * when the connection's thread ends (one leak per connection that wrote during a
     * migration). It only exists while a migration captures writes, so this costs little. */
    bson_free(tl_obs);
    tl_obs = NULL;
    tl_cap = 0;
    return ret;
}

bool
shl_db_shard_key(const shl_op_ctx_t *op, const char *ns, bson_t *out)
{
    db_node_t *node = db_node(op);

    if (node != NULL && node->sharding.shard_key != NULL) {
        return node->sharding.shard_key(node->sharding.arg, ns, out);
    }
    bson_init(out);
    return false;
}

bool
shl_db_document_key(const shl_op_ctx_t *op, const char *ns, const bson_t *doc, bson_t *out)
{
    bson_t pattern;
    bson_iter_t it, v;
    bool sharded, has_id = false;

    bson_init(out);
    sharded = shl_db_shard_key(op, ns, &pattern);
    if (sharded && bson_iter_init(&it, &pattern)) {
        while (shl_iter_next(&it)) {
            const char *f = shl_iter_key(&it);
            has_id = has_id || strcmp(f, "_id") == 0;
            if (shl_bson_path_get(doc, f, &v)) {
                bson_append_iter(out, f, -1, &v);
            }
        }
    }
    if (!has_id && bson_iter_init_find(&it, doc, "_id")) {
        bson_append_iter(out, "_id", 3, &it);
    }
    bson_destroy(&pattern);
    return sharded;
}

const shl_write_opts_t *
shl_db_delete_opts(const shl_op_ctx_t *op, const char *ns, const bson_t *doc,
                   const shl_write_opts_t *base, shl_write_opts_t *wo, bson_t *key)
{
    if (!shl_db_document_key(op, ns, doc, key)) {
        return base;
    }
    if (base == NULL) {
        memset(wo, 0, sizeof(*wo));
    } else if (base != wo) {
        *wo = *base;
    }
    wo->document_key = key;
    return wo;
}
