/*
 * cluster_routing.c -- see cluster_routing.h: routing lookups, targeting, versions, sending,
 * and the stale-version retry loop every routed command shares.
 */
#include "bson/bson_iter.h"
#include "router/cluster_routing.h"

#include <string.h>

#include "base/log.h"
#include "base/str.h"
#include "bson/bson_compare.h"
#include "bson/bson_util.h"
#include "net/fiber.h"
#include "net/rs_monitor.h"
#include "sharding/chunk_version.h"
#include "sharding/shard_key.h"
#include "router/txn_router.h"

shl_router_t *
shl_router_get(const shl_op_ctx_t *op)
{
    return (shl_router_t *)op->svc->role_state;
}

/* ---- routing ---- */

int
shl_router_create_database(shl_router_t *r, const char *db, shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, wc;
    int ret = 0;

    BSON_APPEND_UTF8(&cmd, "_configsvrCreateDatabase", db);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&cmd, &wc);
    bson_destroy(&reply);
    ret = shl_client_run(r->pool, shl_shard_registry_config_host(r->registry), "admin", &cmd,
                         SHL_CONFIG_CMD_TIMEOUT_MS, &reply, st);
    shl_catalog_cache_invalidate_database(r->cache, db);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

int
shl_router_routing_init(shl_router_t *r, const char *ns, bool create_db, shl_router_routing_t *out,
                        shl_status_t *st)
{
    shl_ns_t parsed;
    int ret = 0;

    memset(out, 0, sizeof(*out));
    SHL_ERR(shl_ns_parse(&parsed, ns, st));
    shl_str_copy(out->ns, sizeof(out->ns), ns);
    ret = shl_catalog_cache_get_database(r->cache, parsed.db, &out->db, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND && create_db) {
        SHL_ERR(shl_router_create_database(r, parsed.db, st));
        ret = shl_catalog_cache_get_database(r->cache, parsed.db, &out->db, st);
    }
    SHL_ERR(ret);
    SHL_ERR(shl_catalog_cache_get_collection(r->cache, ns, &out->rt, st));
done:
    return ret;
}

void
shl_router_routing_cleanup(shl_router_routing_t *rr)
{
    if (rr->rt != NULL) {
        shl_routing_table_release(rr->rt);
        rr->rt = NULL;
    }
}

/* ---- targeting ---- */

void
shl_router_shards_cleanup(shl_router_shards_t *s)
{
    bson_free((void *)s->names);
    if (s->owned != NULL) {
        bson_strfreev(s->owned);
    }
    memset(s, 0, sizeof(*s));
}

/* Add 'name' (borrowed) to the set if absent; the set has room for 'cap' names. */
static void
set_add(shl_router_shards_t *s, const char *name)
{
    size_t i = 0;
    while (i < s->n && strcmp(s->names[i], name) < 0) {
        i++;
    }
    if (i < s->n && strcmp(s->names[i], name) == 0) {
        return;
    }
    memmove(&s->names[i + 1], &s->names[i], (s->n - i) * sizeof(char *));
    s->names[i] = name;
    s->n++;
}

/* Record a targeting error (the first one) in 'out'. */
static void
target_fail(shl_router_shards_t *out, const shl_status_t *st)
{
    if (out->code == 0) {
        out->code = st->code;
        out->status = *st;
    }
}

/* The routing's time as a chunk-history lookup argument: NULL for "now". */
static const shl_ts_t *
rr_at(const shl_router_routing_t *rr, shl_ts_t *buf)
{
    if (rr->at == 0) {
        return NULL;
    }
    *buf = shl_ts_from_u64(rr->at);
    return buf;
}

static void
target_all(const shl_routing_table_t *rt, const shl_ts_t *at, shl_router_shards_t *out)
{
    size_t ns = shl_routing_table_nshard_names(rt);

    if (at != NULL) {
        /* Every shard that owned a chunk at that time. */
        const char **found = bson_malloc0((ns + 1) * sizeof(char *));
        size_t n = 0;
        bson_t min, max;
        shl_status_t st = SHL_STATUS_INIT;
        shl_shard_key_global_min(shl_routing_table_key_pattern(rt), &min);
        shl_shard_key_global_max(shl_routing_table_key_pattern(rt), &max);
        if (shl_routing_table_shards_for_range(rt, &min, &max, true, at, found, &n, &st) == 0) {
            for (size_t i = 0; i < n; i++) {
                set_add(out, found[i]);
            }
        } else {
            target_fail(out, &st);
        }
        bson_destroy(&min);
        bson_destroy(&max);
        bson_free(found);
        return;
    }
    for (size_t i = 0; i < ns; i++) {
        const char *name = shl_routing_table_shard_name(rt, i);
        shl_chunk_version_t v = shl_routing_table_shard_version(rt, name);
        if (v.major != 0 || v.minor != 0) {
            set_add(out, name);
        }
    }
}

/* Add the owners of [min, max] (inclusive) -- now, or at *at -- to 'out'. */
static void
target_range(const shl_routing_table_t *rt, const shl_ts_t *at, const bson_t *min,
             const bson_t *max, shl_router_shards_t *out)
{
    size_t cap = shl_routing_table_nshard_names(rt), n = 0;
    const char **found = bson_malloc0((cap + 1) * sizeof(char *));
    shl_status_t st = SHL_STATUS_INIT;

    if (shl_routing_table_shards_for_range(rt, min, max, true, at, found, &n, &st) == 0) {
        for (size_t i = 0; i < n; i++) {
            set_add(out, found[i]);
        }
    } else if (st.code == SHL_CODE_STALE_CHUNK_HISTORY) {
        target_fail(out, &st);
    } else {
        target_all(rt, at, out);
    }
    bson_free(found);
}

/* A key {f0: v, f1..: MinKey or MaxKey}. */
static void
make_bound(const shl_shard_key_pattern_t *p, const bson_value_t *v, bool min, bson_t *out)
{
    bson_init(out);
    for (size_t i = 0; i < p->nfields; i++) {
        if (i == 0 && v != NULL) {
            bson_append_value(out, p->paths[i], -1, v);
        } else if (min) {
            bson_append_minkey(out, p->paths[i], -1);
        } else {
            bson_append_maxkey(out, p->paths[i], -1);
        }
    }
}

/*
 * Target one conjunction 'filter' (no $or at its top level). Returns false when it could
 * not narrow the shards (the caller then targets all).
 */
static bool
target_conjunction(const shl_routing_table_t *rt, const shl_ts_t *at, const bson_t *filter,
                   shl_router_shards_t *out)
{
    const shl_shard_key_pattern_t *p = shl_routing_table_key_pattern(rt);
    bson_t key;
    bson_iter_t it, ops;
    bool narrowed = false;
    const char *shard;
    shl_status_t st = SHL_STATUS_INIT;

    if (shl_shard_key_extract_from_query(p, filter, &key)) {
        if (shl_routing_table_shard_for_key(rt, &key, at, &shard, &st) == 0) {
            set_add(out, shard);
            narrowed = true;
        } else if (st.code == SHL_CODE_STALE_CHUNK_HISTORY) {
            target_fail(out, &st);
            narrowed = true;
        }
        bson_destroy(&key);
        return narrowed;
    }
    bson_destroy(&key);
    if (p->hashed == 0 || !bson_iter_init_find(&it, filter, p->paths[0])) {
        return false;
    }
    if (p->hashed >= 0 && BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &ops) &&
        bson_iter_find(&ops, "$in") && BSON_ITER_HOLDS_ARRAY(&ops)) {
        return false; /* TODO(6): $in over a key with a later hashed field */
    }
    if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &ops) && shl_iter_next(&ops) &&
        shl_iter_key(&ops)[0] == '$') {
        const bson_value_t *lo = NULL, *hi = NULL;
        bson_value_t lo_v, hi_v;
        bson_t min, max;
        bson_iter_recurse(&it, &ops);
        while (shl_iter_next(&ops)) {
            const char *op = shl_iter_key(&ops);
            if (strcmp(op, "$gt") == 0 || strcmp(op, "$gte") == 0) {
                lo_v = *bson_iter_value(&ops);
                lo = &lo_v;
            } else if (strcmp(op, "$lt") == 0 || strcmp(op, "$lte") == 0) {
                hi_v = *bson_iter_value(&ops);
                hi = &hi_v;
            } else if (strcmp(op, "$eq") == 0) {
                lo_v = hi_v = *bson_iter_value(&ops);
                lo = &lo_v;
                hi = &hi_v;
            } else if (strcmp(op, "$in") == 0 && BSON_ITER_HOLDS_ARRAY(&ops)) {
                bson_iter_t vals;
                bson_iter_recurse(&ops, &vals);
                while (shl_iter_next(&vals)) {
                    if (BSON_ITER_HOLDS_ARRAY(&vals) || BSON_ITER_HOLDS_REGEX(&vals)) {
                        return false;
                    }
                    make_bound(p, bson_iter_value(&vals), true, &min);
                    make_bound(p, bson_iter_value(&vals), false, &max);
                    target_range(rt, at, &min, &max, out);
                    bson_destroy(&min);
                    bson_destroy(&max);
                }
                return true;
            }
        }
        if (lo == NULL && hi == NULL) {
            return false;
        }
        /* Arrays and regexes match more than their own bracket; keep it simple. */
        if ((lo != NULL &&
             (lo->value_type == BSON_TYPE_ARRAY || lo->value_type == BSON_TYPE_REGEX)) ||
            (hi != NULL &&
             (hi->value_type == BSON_TYPE_ARRAY || hi->value_type == BSON_TYPE_REGEX))) {
            return false;
        }
        make_bound(p, lo, true, &min);
        make_bound(p, hi, false, &max);
        target_range(rt, at, &min, &max, out);
        bson_destroy(&min);
        bson_destroy(&max);
        return true;
    }
    return false;
}

bool
shl_router_collation_nonsimple(const bson_t *holder)
{
    bson_iter_t it, loc;
    if (holder == NULL || !bson_iter_init_find(&it, holder, "collation") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &loc)) {
        return false;
    }
    if (!bson_iter_find(&loc, "locale")) {
        return false; /* {} (simple) or invalid: the shards answer the error */
    }
    return !(BSON_ITER_HOLDS_UTF8(&loc) && strcmp(bson_iter_utf8(&loc, NULL), "simple") == 0);
}

/* Whether 'v' is or holds a string: values a non-simple collation makes equal to others. */
static bool
holds_string(const bson_value_t *v)
{
    bson_iter_t it;
    if (v->value_type == BSON_TYPE_UTF8 || v->value_type == BSON_TYPE_SYMBOL ||
        v->value_type == BSON_TYPE_REGEX) {
        return true;
    }
    if (v->value_type != BSON_TYPE_DOCUMENT && v->value_type != BSON_TYPE_ARRAY) {
        return false;
    }
    if (!bson_iter_init_from_data(&it, v->value.v_doc.data, v->value.v_doc.data_len)) {
        return false;
    }
    while (shl_iter_next(&it)) {
        if (holds_string(bson_iter_value(&it))) {
            return true;
        }
    }
    return false;
}

bool
shl_router_pinned_filter(const bson_t *filter, bson_t *pin)
{
    bson_iter_t it, el;
    const uint8_t *data;
    uint32_t len;
    if (!bson_iter_init_find(&it, filter, "$and") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &el) || !bson_iter_find(&el, "1") ||
        !BSON_ITER_HOLDS_DOCUMENT(&el)) {
        return false;
    }
    bson_iter_document(&el, &len, &data);
    return bson_init_static(pin, data, len);
}

int
shl_router_cmd_collator(const bson_t *cmd, shl_collator_t **out, shl_status_t *st)
{
    bson_iter_t it;
    *out = NULL;
    if (!bson_iter_init_find(&it, cmd, "collation")) {
        return 0;
    }
    return shl_collator_from_iter(&it, "collation", out, st);
}

bool
shl_router_collation_strips(const bson_t *holder, const shl_router_routing_t *rr)
{
    if (holder != NULL && bson_has_field(holder, "collation")) {
        return shl_router_collation_nonsimple(holder);
    }
    return rr != NULL && rr->rt != NULL && shl_routing_table_default_collator(rr->rt) != NULL;
}

int
shl_router_effective_collator(shl_router_t *r, const char *ns, const bson_t *cmd,
                              shl_collator_t **out, shl_status_t *st)
{
    int ret = 0;
    shl_router_routing_t rr;
    *out = NULL;
    if (bson_has_field(cmd, "collation")) {
        return shl_router_cmd_collator(cmd, out, st);
    }
    memset(&rr, 0, sizeof(rr));
    if (shl_router_routing_init(r, ns, false, &rr, st) == 0) {
        if (rr.rt != NULL) {
            *out = shl_collator_ref(
                (shl_collator_t *)(uintptr_t)shl_routing_table_default_collator(rr.rt));
        }
        shl_router_routing_cleanup(&rr);
    } else {
        shl_status_clear(st); /* no routing: the merge has nothing to order */
    }
    return ret;
}

void
shl_router_targeting_filter(const bson_t *holder, const shl_router_routing_t *rr,
                            const bson_t *filter, bson_t *out)
{
    bson_iter_t it;
    bool strip = shl_router_collation_strips(holder, rr);
    bson_init(out);
    if (filter == NULL || !bson_iter_init(&it, filter)) {
        return;
    }
    while (shl_iter_next(&it)) {
        /* A predicate on a string under a non-simple collation matches shard key values in
         * other chunks ("a" and "A"): it cannot target, as in mongos. */
        if (!strip || !holds_string(bson_iter_value(&it))) {
            bson_append_iter(out, shl_iter_key(&it), -1, &it);
        }
    }
}

void
shl_router_target_filter(const shl_router_routing_t *rr, const bson_t *filter,
                         shl_router_shards_t *out)
{
    bson_iter_t it, branches;
    bool all = false;
    shl_ts_t at_buf;
    const shl_ts_t *at = rr_at(rr, &at_buf);

    memset(out, 0, sizeof(*out));
    if (rr->rt == NULL) {
        out->names = bson_malloc0(2 * sizeof(char *));
        out->names[0] = rr->db.primary;
        out->n = 1;
        return;
    }
    out->names = bson_malloc0((shl_routing_table_nshard_names(rr->rt) + 1) * sizeof(char *));
    if (filter == NULL) {
        all = true;
    } else if (shl_bson_iter_find_key(&it, filter, "$or") && BSON_ITER_HOLDS_ARRAY(&it) &&
               bson_count_keys(filter) == 1 && bson_iter_recurse(&it, &branches)) {
        while (!all && shl_iter_next(&branches)) {
            const uint8_t *data;
            uint32_t len;
            bson_t branch;
            if (!BSON_ITER_HOLDS_DOCUMENT(&branches)) {
                all = true;
                break;
            }
            bson_iter_document(&branches, &len, &data);
            if (!bson_init_static(&branch, data, len) ||
                !target_conjunction(rr->rt, at, &branch, out)) {
                all = true;
            }
        }
    } else {
        all = !target_conjunction(rr->rt, at, filter, out);
    }
    if (all) {
        out->n = 0;
        target_all(rr->rt, at, out);
    }
}

uint64_t
shl_router_snapshot_time(const shl_op_ctx_t *op)
{
    bson_iter_t it;
    bool snapshot = false;
    uint64_t at = 0;

    if (!op->has_read_concern || !bson_iter_init(&it, &op->read_concern)) {
        return 0;
    }
    while (shl_iter_next(&it)) {
        if (strcmp(shl_iter_key(&it), "level") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            snapshot = strcmp(bson_iter_utf8(&it, NULL), "snapshot") == 0;
        } else if (strcmp(shl_iter_key(&it), "atClusterTime") == 0 &&
                   BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            at = shl_bson_iter_timestamp_u64(&it);
        }
    }
    return snapshot ? at : 0;
}

int
shl_router_target_doc(const shl_router_routing_t *rr, const bson_t *doc, const char **shard,
                      shl_status_t *st)
{
    bson_t key = BSON_INITIALIZER;
    int ret = 0;

    *shard = rr->db.primary;
    if (rr->rt == NULL) {
        goto done;
    }
    bson_destroy(&key);
    SHL_ERR(shl_shard_key_extract_from_doc(shl_routing_table_key_pattern(rr->rt), doc, &key, st));
    {
        shl_ts_t at_buf;
        SHL_ERR(shl_routing_table_shard_for_key(rr->rt, &key, rr_at(rr, &at_buf), shard, st));
    }
done:
    bson_destroy(&key);
    return ret;
}

/* ---- building and sending ---- */

void
shl_router_append_versions(const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    if (rr->rt != NULL) {
        shl_shard_version_t sv;
        shl_chunk_version_t v = shl_routing_table_shard_version(rr->rt, shard);
        if (v.major == 0 && v.minor == 0) {
            /* A shard that owns no chunk is addressed with the collection's generation. */
            v = shl_routing_table_collection_version(rr->rt);
            v.major = v.minor = 0;
        }
        sv = shl_shard_version_make(&v);
        shl_shard_version_append(cmd, "shardVersion", &sv);
    } else if (strcmp(rr->db.primary, "config") == 0) {
        /* admin and config: the config server's own collections, unversioned (as MongoDB). */
    } else {
        shl_shard_version_t sv = shl_shard_version_unsharded();
        shl_shard_version_append(cmd, "shardVersion", &sv);
        if (!shl_database_version_is_fixed(&rr->db.version)) {
            shl_database_version_append(cmd, "databaseVersion", &rr->db.version);
        }
    }
}

bool
shl_router_generic_passes(const char *field)
{
    static const char *const pass[] = {
        "writeConcern", "readConcern", "maxTimeMS", "comment", "lsid", "txnNumber", "autocommit",
        "startTransaction", "allowDiskUse",
        /* a shard replica set's members accept reads the preference allows (issue 18) */
        "$readPreference", NULL};
    bool found = false;

    for (size_t i = 0; !found && pass[i] != NULL; i++) {
        found = pass[i][0] == field[0] && strcmp(field, pass[i]) == 0;
    }
    return found;
}

void
shl_router_append_generic(const bson_t *user_cmd, bson_t *cmd)
{
    bson_iter_t it;

    if (!bson_iter_init(&it, user_cmd)) {
        return;
    }
    while (shl_iter_next(&it)) {
        if (shl_router_generic_passes(shl_iter_key(&it))) {
            bson_append_iter(cmd, NULL, 0, &it);
        }
    }
}

void
shl_router_result_move(shl_fanout_result_t *dst, shl_fanout_result_t *src)
{
    dst->code = src->code;
    dst->status = src->status;
    dst->micros = src->micros;
    dst->interrupted = src->interrupted;
    memcpy(dst->host, src->host, sizeof(dst->host));
    if (!bson_steal(&dst->reply, &src->reply)) {
        bson_copy_to(&src->reply, &dst->reply);
        bson_destroy(&src->reply);
    }
}

void
shl_router_requests_cleanup(shl_router_request_t *reqs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bson_destroy(&reqs[i].cmd);
    }
}

void
shl_router_deadline_results(shl_op_ctx_t *op, shl_fanout_result_t *results, size_t n)
{
    if (op == NULL || op->deadline_us == 0 || shl_op_remaining_ms(op) > 0) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (results[i].code == SHL_CODE_NETWORK_TIMEOUT) {
            results[i].code = shl_status_set(&results[i].status, SHL_CODE_MAX_TIME_MS_EXPIRED,
                                             "operation exceeded time limit");
        }
    }
}

/* Requests this many or fewer keep their host names on the stack. */
#define SMALL_SEND 4

/* How long the router waits for the shards to acknowledge _killOperations. */
#define KILL_REMOTE_TIMEOUT_MS 1000

/* A routed call's wait ends when its operation is killed (killOp, shutdown) or times out. */
static int
op_interrupted(void *arg, shl_status_t *st)
{
    return shl_op_check_interrupt(arg, st);
}

/*
 * The operation was interrupted while the requests marked 'interrupted' in res[0..n) were in
 * flight: ask their hosts to kill what runs there under the operation's key, as mongos does
 * (_killOperations with the clientOperationKey its requests carried). Best effort: the
 * replies are not read beyond the wait, and a host that does not answer keeps running the
 * request until it notices otherwise.
 */
static void
kill_remote_ops(shl_router_t *r, shl_op_ctx_t *op, const shl_fanout_req_t *freqs,
                const shl_fanout_result_t *res, size_t n)
{
    shl_fanout_req_t *kreqs;
    shl_fanout_result_t *kres;
    bson_t cmd, keys;
    size_t nk = 0;

    if (!op->has_remote_key) {
        return; /* its requests carried no key: nothing names them on the shards */
    }
    for (size_t i = 0; i < n; i++) {
        nk += res[i].interrupted ? 1 : 0;
    }
    bson_init(&cmd);
    BSON_APPEND_INT32(&cmd, "_killOperations", 1);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "operationKeys", &keys);
    bson_append_binary(&keys, "0", 1, BSON_SUBTYPE_UUID, op->remote_key, SHL_OP_KEY_LEN);
    bson_append_array_end(&cmd, &keys);
    kreqs = bson_malloc(nk * sizeof(*kreqs));
    kres = bson_malloc(nk * sizeof(*kres));
    nk = 0;
    for (size_t i = 0; i < n; i++) {
        if (res[i].interrupted) {
            kreqs[nk].host = freqs[i].host;
            kreqs[nk].db = "admin";
            kreqs[nk].op_key = NULL;
            kreqs[nk++].cmd = &cmd;
        }
    }
    SHL_LOG_INFO(SHARDING, 4625501, "Operation interrupted; killing its remote operations", "opId",
                 BCON_INT32(op->opid), "nRemotes", BCON_INT64((int64_t)nk));
    shl_client_fanout(r->pool, kreqs, nk, KILL_REMOTE_TIMEOUT_MS, kres);
    shl_fanout_results_cleanup(kres, nk);
    bson_free(kres);
    bson_free(kreqs);
    bson_destroy(&cmd);
}

/* How many times a request goes again to a shard replica set's new primary. */
#define RETARGET_ATTEMPTS 3

/* A transaction's decision: commitTransaction, abortTransaction, coordinateCommitTransaction. */
static bool
is_decision(const char *name)
{
    return strcmp(name, "commitTransaction") == 0 || strcmp(name, "abortTransaction") == 0 ||
           strcmp(name, "coordinateCommitTransaction") == 0;
}

/*
 * Whether a request that failed with 'code' on a member of a replica set may go again to the
 * member the replica set monitor now names: one refused because that member is not primary
 * (it did not run) may; one that met a network, shutdown or state-change error only if it is
 * safe to run twice (a retryable write, txnNumber outside a transaction, a read, or a
 * transaction's decision, which mongos sends with its idempotent retry policy: the new
 * primary holds the prepared participant, or resumes the coordinator, and a repeated decision
 * answers the same). Never a statement of a transaction (its participant state lives on the
 * old primary).
 */
static bool
retarget_safe(const bson_t *cmd, int code)
{
    static const char *const reads[] = {"find",        "count",           "distinct",
                                        "listIndexes", "listCollections", NULL};
    bson_iter_t it;
    const char *name;

    name = bson_iter_init(&it, cmd) && bson_iter_next(&it) ? bson_iter_key(&it) : "";
    if (code == SHL_CODE_NETWORK_TIMEOUT ||
        (bson_iter_init_find(&it, cmd, "autocommit") && !is_decision(name))) {
        return false;
    }
    if (code == SHL_CODE_NOT_WRITABLE_PRIMARY || code == SHL_CODE_NOT_PRIMARY_NO_SECONDARY_OK ||
        code == SHL_CODE_NOT_PRIMARY_OR_SECONDARY) {
        return true;
    }
    if (!shl_code_in_category(code, SHL_CAT_NETWORK_ERROR | SHL_CAT_NOT_PRIMARY_ERROR |
                                        SHL_CAT_SHUTDOWN_ERROR)) {
        return false;
    }
    if (bson_iter_init_find(&it, cmd, "txnNumber")) {
        return true;
    }
    for (size_t i = 0; reads[i] != NULL; i++) {
        if (strcmp(name, reads[i]) == 0) {
            return true;
        }
    }
    return false;
}

/*
 * A shard's primary changed under a request (issue 18: shards as replica sets): send the
 * requests freqs[k] (whose results are results[map[k]]) that failed in a way retarget_safe
 * allows again, each to its set's current primary -- the client asks the replica set monitor,
 * which waits for an election -- up to RETARGET_ATTEMPTS times.
 */
static void
retarget_failed(shl_router_t *r, shl_op_ctx_t *op, const shl_fanout_req_t *freqs, const size_t *map,
                size_t nf, shl_fanout_result_t *results, const shl_client_interrupt_t *intr)
{
    shl_fanout_req_t *again = NULL;
    shl_fanout_result_t *fres = NULL;
    size_t *idx = NULL;

    for (int attempt = 0; attempt < RETARGET_ATTEMPTS; attempt++) {
        size_t m = 0;
        int64_t remaining = shl_op_remaining_ms(op);

        for (size_t k = 0; k < nf; k++) {
            const shl_fanout_result_t *res = &results[map[k]];
            if (res->code != 0 && !res->interrupted && shl_rs_monitor_is_set(freqs[k].host) &&
                retarget_safe(freqs[k].cmd, res->code)) {
                if (again == NULL) {
                    again = bson_malloc(nf * sizeof(*again));
                    fres = bson_malloc(nf * sizeof(*fres));
                    idx = bson_malloc(nf * sizeof(*idx));
                }
                again[m] = freqs[k];
                idx[m++] = map[k];
            }
        }
        if (m == 0 || remaining == 0) {
            break;
        }
        SHL_LOG_INFO(SHARDING, 4625502, "retargeting requests after a shard replica set error",
                     "attempt", BCON_INT32(attempt + 1), "host", BCON_UTF8(again[0].host), "code",
                     BCON_INT32(results[idx[0]].code));
        shl_client_fanout_interruptible(r->pool, again, m, remaining < 0 ? 0 : remaining, intr,
                                        fres);
        for (size_t j = 0; j < m; j++) {
            bson_destroy(&results[idx[j]].reply);
            shl_router_result_move(&results[idx[j]], &fres[j]);
        }
    }
    bson_free(again);
    bson_free(fres);
    bson_free(idx);
}

/*
 * Whether a call of 'n' requests for 'op' may park its request while it waits (fiber.h; the
 * shared executor serves other connections meanwhile): a client's find, insert, update or
 * delete sent to one shard outside a transaction, the hot path of issue 22, on which no lock
 * is held across the call. Everything else keeps its worker while it waits.
 */
static bool
may_park(const shl_op_ctx_t *op, size_t n)
{
    static const char *const hot[] = {"find", "insert", "update", "delete", NULL};
    bool hot_cmd = false;

    if (n != 1 || op->txn != NULL || op->conn == NULL || op->cmd_name == NULL) {
        return false;
    }
    for (size_t i = 0; hot[i] != NULL && !hot_cmd; i++) {
        hot_cmd = strcmp(op->cmd_name, hot[i]) == 0;
    }
    return hot_cmd;
}

/*
 * Send reqs[which[k]] for k < n (which == NULL: reqs[k]) and collect their replies into
 * results[k] (and hosts[k] when 'hosts' is not NULL).
 */
static void
send_some_raw(shl_router_t *r, shl_op_ctx_t *op, const char *db, const shl_router_request_t *reqs,
              const size_t *which, size_t n, shl_fanout_result_t *results,
              char (*hosts_out)[SHL_CLIENT_HOST_MAX])
{
    shl_fanout_req_t freqs_small[SMALL_SEND];
    char hosts_small[SMALL_SEND][SHL_CLIENT_HOST_MAX];
    size_t map_small[SMALL_SEND];
    bool small = n <= SMALL_SEND;
    shl_fanout_req_t *freqs = small ? freqs_small : bson_malloc((n + 1) * sizeof(*freqs));
    char(*hosts)[SHL_CLIENT_HOST_MAX] =
        hosts_out != NULL ? hosts_out
                          : (small ? hosts_small : bson_malloc((n + 1) * sizeof(*hosts)));
    size_t *map = small ? map_small : bson_malloc((n + 1) * sizeof(size_t));
    shl_fanout_result_t *fres = NULL;
    size_t nf = 0;
    int64_t remaining = shl_op_remaining_ms(op);
    int64_t timeout = remaining < 0 ? 0 : (remaining == 0 ? 1 : remaining);
    shl_client_interrupt_t intr = {op_interrupted, op};
    /* A client that may not bypass user write blocking: the shards are told so (MongoDB's
     * mayBypassWriteBlocking metadata); the rare case pays for a copy of each request. */
    bson_t *marked =
        shl_op_may_bypass_write_blocking(op) ? NULL : bson_malloc((n + 1) * sizeof(bson_t));

    for (size_t i = 0; i < n; i++) {
        const shl_router_request_t *req = &reqs[which != NULL ? which[i] : i];
        results[i].code = 0;
        shl_status_clear(&results[i].status);
        bson_init(&results[i].reply);
        results[i].micros = 0;
        results[i].interrupted = false;
        hosts[i][0] = '\0';
        if (r->send_hook != NULL) {
            continue;
        }
        if (strcmp(req->shard, "config") == 0) {
            /* admin and config live on the config server (the catalog cache's primary). */
            shl_str_copy(hosts[i], sizeof(hosts[i]), shl_shard_registry_config_host(r->registry));
        } else if (shl_shard_registry_host_for(r->registry, req->shard, hosts[i], sizeof(hosts[i]),
                                               &results[i].status) != 0) {
            results[i].code = results[i].status.code;
            hosts[i][0] = '\0';
            continue;
        }
        freqs[nf].host = hosts[i];
        freqs[nf].db = db;
        freqs[nf].cmd = &req->cmd;
        if (marked != NULL) {
            bson_init(&marked[nf]);
            bson_copy_to_excluding_noinit(&req->cmd, &marked[nf], "mayBypassWriteBlocking", NULL);
            BSON_APPEND_BOOL(&marked[nf], "mayBypassWriteBlocking", false);
            freqs[nf].cmd = &marked[nf];
        }
        freqs[nf].op_key = op->has_remote_key ? op->remote_key : NULL;
        map[nf++] = i;
    }
    if (r->send_hook != NULL) {
        if (which == NULL) {
            r->send_hook(r->send_hook_arg, db, reqs, n, results, hosts);
        } else {
            /* The hook sees one request at a time, in order: a bson_t cannot be copied. */
            for (size_t i = 0; i < n; i++) {
                r->send_hook(r->send_hook_arg, db, &reqs[which[i]], 1, &results[i], &hosts[i]);
            }
        }
    } else if (nf == n) {
        /* Every shard resolved (the usual case): the replies land in place. */
        bool parked = shl_fiber_park_allow(may_park(op, nf));
        size_t cut = shl_client_fanout_interruptible(r->pool, freqs, nf, timeout, &intr, results);
        shl_fiber_park_allow(parked);
        if (cut > 0) {
            kill_remote_ops(r, op, freqs, results, nf);
        }
    } else if (nf > 0) {
        fres = bson_malloc(nf * sizeof(*fres));
        if (shl_client_fanout_interruptible(r->pool, freqs, nf, timeout, &intr, fres) > 0) {
            kill_remote_ops(r, op, freqs, fres, nf);
        }
        for (size_t k = 0; k < nf; k++) {
            shl_fanout_result_t *dst = &results[map[k]];
            bson_destroy(&dst->reply);
            shl_router_result_move(dst, &fres[k]);
        }
    }
    bson_free(fres);
    if (r->send_hook == NULL && nf > 0) {
        retarget_failed(r, op, freqs, map, nf, results, &intr);
    }
    for (size_t k = 0; marked != NULL && k < nf; k++) {
        bson_destroy(&marked[k]);
    }
    bson_free(marked);
    shl_router_deadline_results(op, results, n);
    if (!small) {
        bson_free(map);
        bson_free(freqs);
    }
    if (hosts != hosts_out && hosts != hosts_small) {
        bson_free(hosts);
    }
}

/*
 * send_some_raw for an operation; a statement of a transaction (op->txn) sends each request
 * with the transaction's fields for its participant and reports every result to the
 * transaction (txn_router.h).
 */
static void
send_some(shl_router_t *r, shl_op_ctx_t *op, const char *db, const shl_router_request_t *reqs,
          const size_t *which, size_t n, shl_fanout_result_t *results,
          char (*hosts)[SHL_CLIENT_HOST_MAX])
{
    router_txn_t *t = op->txn;
    shl_router_request_t *treqs;
    bool refused = false;

    if (t == NULL) {
        send_some_raw(r, op, db, reqs, which, n, results, hosts);
        return;
    }
    treqs = bson_malloc((n + 1) * sizeof(*treqs));
    for (size_t i = 0; i < n; i++) {
        const shl_router_request_t *src = &reqs[which != NULL ? which[i] : i];
        treqs[i].shard = src->shard;
        bson_init(&treqs[i].cmd);
        router_txn_attach(t, src->shard, &src->cmd, &treqs[i].cmd);
    }
    for (size_t i = 0; i < n; i++) {
        refused = router_txn_retry_refused(t, &results[i]);
        if (refused && hosts != NULL) {
            hosts[i][0] = '\0';
        }
    }
    if (!refused) {
        send_some_raw(r, op, db, treqs, NULL, n, results, hosts);
        for (size_t i = 0; i < n; i++) {
            router_txn_observe(r, op, t, treqs[i].shard, &treqs[i].cmd, &results[i]);
        }
    }
    shl_router_requests_cleanup(treqs, n);
    bson_free(treqs);
}

void
shl_router_send_ex(shl_router_t *r, shl_op_ctx_t *op, const char *db,
                   const shl_router_request_t *reqs, size_t n, shl_fanout_result_t *results,
                   char (*hosts)[SHL_CLIENT_HOST_MAX])
{
    send_some(r, op, db, reqs, NULL, n, results, hosts);
}

void
shl_router_send(shl_router_t *r, shl_op_ctx_t *op, const char *db, const shl_router_request_t *reqs,
                size_t n, shl_fanout_result_t *results)
{
    send_some(r, op, db, reqs, NULL, n, results, NULL);
}

bool
shl_router_result_retriable(const shl_fanout_result_t *res)
{
    bson_iter_t it, f;

    if (res->code != 0) {
        return !res->interrupted && shl_code_in_category(res->code, SHL_CAT_RETRIABLE_ERROR);
    }
    /* MongoDB's sender checks the reply's write concern status too: the statements ran, and a
     * retry is answered from the shard's statement history. */
    if (bson_iter_init_find(&it, &res->reply, "writeConcernError") &&
        BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &f) && bson_iter_find(&f, "code") &&
        BSON_ITER_HOLDS_NUMBER(&f)) {
        return shl_code_in_category((int)bson_iter_as_int64(&f), SHL_CAT_RETRIABLE_ERROR);
    }
    return false;
}

void
shl_router_send_retrying(shl_router_t *r, shl_op_ctx_t *op, const char *db,
                         const shl_router_request_t *reqs, size_t n, bool idempotent,
                         shl_fanout_result_t *results, char (*hosts)[SHL_CLIENT_HOST_MAX])
{
    size_t *which = NULL, nw;
    shl_fanout_result_t *again = NULL;
    char(*again_hosts)[SHL_CLIENT_HOST_MAX] = NULL;
    shl_status_t st = SHL_STATUS_INIT;

    send_some(r, op, db, reqs, NULL, n, results, hosts);
    if (!idempotent) {
        return;
    }
    /* Each round repeats only the requests that failed again, so every request gets at most
     * SHL_ROUTER_MAX_FAILED_HOST_RETRIES more tries, as with MongoDB's per-remote count. */
    for (int attempt = 1; attempt <= SHL_ROUTER_MAX_FAILED_HOST_RETRIES; attempt++) {
        nw = 0;
        for (size_t i = 0; i < n; i++) {
            if (shl_router_result_retriable(&results[i])) {
                if (which == NULL) {
                    which = bson_malloc((n + 1) * sizeof(*which));
                    again = bson_malloc((n + 1) * sizeof(*again));
                    again_hosts = bson_malloc((n + 1) * sizeof(*again_hosts));
                }
                which[nw++] = i;
            }
        }
        if (nw == 0 || shl_op_check_interrupt(op, &st) != 0) {
            break;
        }
        for (size_t k = 0; k < nw; k++) {
            const shl_fanout_result_t *res = &results[which[k]];
            SHL_LOG_DEBUG(1, SHARDING, 4615637,
                          "Command to remote shard failed with retryable error and will be "
                          "retried",
                          "shardId", BCON_UTF8(reqs[which[k]].shard), "attempt",
                          BCON_INT32(attempt), "error",
                          BCON_UTF8(res->code != 0 ? res->status.reason : "writeConcernError"));
        }
        send_some(r, op, db, reqs, which, nw, again, again_hosts);
        for (size_t k = 0; k < nw; k++) {
            shl_fanout_results_cleanup(&results[which[k]], 1);
            shl_router_result_move(&results[which[k]], &again[k]);
            if (hosts != NULL) {
                shl_str_copy(hosts[which[k]], sizeof(hosts[0]), again_hosts[k]);
            }
        }
    }
    bson_free(which);
    bson_free(again);
    bson_free(again_hosts);
}

bool
shl_router_is_stale(shl_router_t *r, const char *ns, const shl_status_t *st)
{
    bool stale = true;

    /* What went stale is what the error names: a request also carries versions for other
     * namespaces than its own (an aggregate's SHL_INVOLVED_VERSIONS_FIELD), and a shard
     * answers for the one that failed its check. 'ns' only when the error names nothing. */
    switch (st->code) {
    case SHL_CODE_STALE_CONFIG: {
        shl_stale_config_info_t info;
        shl_status_t ignored = SHL_STATUS_INIT;
        bson_t extra;
        if (shl_status_extra_get(st, &extra) &&
            shl_stale_config_info_parse(&extra, &info, &ignored) == 0) {
            shl_catalog_cache_on_stale_shard(r->cache, info.ns[0] != '\0' ? info.ns : ns,
                                             info.has_wanted ? &info.wanted.placement : NULL);
        } else {
            shl_catalog_cache_on_stale_shard(r->cache, ns, NULL);
        }
        break;
    }
    case SHL_CODE_STALE_EPOCH:
        shl_catalog_cache_invalidate_collection(r->cache, ns);
        break;
    case SHL_CODE_STALE_DB_VERSION: {
        shl_ns_t parsed;
        shl_stale_db_info_t info;
        shl_status_t ignored = SHL_STATUS_INIT;
        bson_t extra;
        if (shl_status_extra_get(st, &extra) &&
            shl_stale_db_info_parse(&extra, &info, &ignored) == 0 && info.db[0] != '\0') {
            shl_catalog_cache_invalidate_database(r->cache, info.db);
        } else if (shl_ns_parse(&parsed, ns, &ignored) == 0) {
            shl_catalog_cache_invalidate_database(r->cache, parsed.db);
        }
        break;
    }
    case SHL_CODE_SHARD_NOT_FOUND:
        /* A removed shard: the registry reloads, and the routing table that still names the
         * shard (its chunks moved away while draining) refreshes, as mongos retries. */
        shl_shard_registry_invalidate(r->registry);
        if (strchr(ns, '.') != NULL) {
            shl_catalog_cache_on_stale_shard(r->cache, ns, NULL);
        }
        break;
    default:
        stale = false;
        break;
    }
    return stale;
}

void
shl_router_scatter_results_free(shl_router_shard_result_t *results, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        shl_fanout_results_cleanup(&results[i].res, 1);
    }
    bson_free(results);
}

int
shl_router_send_to_all(shl_router_t *r, shl_op_ctx_t *op, const char *db, bool with_config,
                       shl_router_build_fn build, void *arg, shl_router_shard_result_t **results,
                       size_t *nresults, shl_status_t *st)
{
    char **names = NULL;
    size_t n = with_config ? 1 : 0, first = n;
    shl_router_request_t *reqs = NULL;
    shl_fanout_result_t *fres = NULL;
    int ret = 0;

    *results = NULL;
    *nresults = 0;
    SHL_ERR(shl_shard_registry_list(r->registry, &names, st));
    while (names[n - first] != NULL) {
        n++;
    }
    reqs = bson_malloc0((n + 1) * sizeof(*reqs));
    fres = bson_malloc0((n + 1) * sizeof(*fres));
    for (size_t i = 0; i < n; i++) {
        reqs[i].shard = i < first ? "config" : names[i - first];
        bson_init(&reqs[i].cmd);
        build(arg, NULL, reqs[i].shard, &reqs[i].cmd);
    }
    shl_router_send(r, op, db, reqs, n, fres);
    *results = bson_malloc0((n + 1) * sizeof(**results));
    for (size_t i = 0; i < n; i++) {
        shl_str_copy((*results)[i].shard, sizeof((*results)[i].shard), reqs[i].shard);
        shl_router_result_move(&(*results)[i].res, &fres[i]);
    }
    *nresults = n;
done:
    if (reqs != NULL) {
        shl_router_requests_cleanup(reqs, n);
        bson_free(reqs);
    }
    bson_free(fres);
    if (names != NULL) {
        bson_strfreev(names);
    }
    return ret;
}

/* The command whose "collation" a routed read runs under: the request's, or the command an
 * explain wraps. */
static const bson_t *
collation_holder(const shl_op_ctx_t *op, bson_t *inner)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;
    if (op->body == NULL || !bson_iter_init(&it, op->body) || !shl_iter_next(&it) ||
        strcmp(shl_iter_key(&it), "explain") != 0 || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return op->body;
    }
    bson_iter_document(&it, &len, &data);
    return bson_init_static(inner, data, len) ? inner : op->body;
}

int
shl_router_dispatch(shl_router_t *r, shl_op_ctx_t *op, const char *ns,
                    const shl_router_dispatch_t *d, shl_router_routing_t *rr_out,
                    shl_router_shard_result_t **results, size_t *nresults, shl_status_t *st)
{
    shl_router_routing_t rr;
    shl_router_shards_t targets = {0};
    shl_router_request_t *reqs = NULL;
    shl_fanout_result_t *fres = NULL;
    shl_ns_t parsed;
    bson_t inner; /* view of an explained command */
    int ret = 0;

    *results = NULL;
    *nresults = 0;
    memset(&rr, 0, sizeof(rr));
    if (rr_out != NULL) {
        memset(rr_out, 0, sizeof(*rr_out));
    }
    SHL_ERR(shl_ns_parse(&parsed, ns, st));
    for (int attempt = 1;; attempt++) {
        bool stale = false;
        SHL_ERR(shl_op_check_interrupt(op, st));
        SHL_ERR(shl_router_routing_init(r, ns, d->create_db, &rr, st));
        /* A snapshot transaction's later statements target as of its atClusterTime too. */
        rr.at =
            op->txn != NULL ? router_txn_at_cluster_time(op->txn) : shl_router_snapshot_time(op);
        if (d->prepare != NULL) {
            SHL_ERR(d->prepare(d->prepare_arg, &rr, st));
        }
        if (d->target != NULL) {
            d->target(d->target_arg, &rr, &targets);
        } else if (d->filter != NULL &&
                   shl_router_collation_strips(collation_holder(op, &inner), &rr)) {
            bson_t tf;
            shl_router_targeting_filter(collation_holder(op, &inner), &rr, d->filter, &tf);
            shl_router_target_filter(&rr, &tf, &targets);
            bson_destroy(&tf);
        } else {
            shl_router_target_filter(&rr, d->filter, &targets);
        }
        if (targets.code != 0) {
            *st = targets.status;
            SHL_ERR(targets.code);
        }
        reqs = bson_malloc0((targets.n + 1) * sizeof(*reqs));
        fres = bson_malloc((targets.n + 1) * sizeof(*fres)); /* shl_router_send fills it */
        /* As mongos's establishCursors: the requests carry a key (shl_router_send adds it)
         * that lets a kill of this operation reach their parts on the shards. */
        (void)shl_op_remote_key(op);
        for (size_t i = 0; i < targets.n; i++) {
            reqs[i].shard = targets.names[i];
            bson_init(&reqs[i].cmd);
            d->build(d->build_arg, &rr, targets.names[i], &reqs[i].cmd);
            if (d->versions == SHL_ROUTER_VERSIONS_FULL) {
                shl_router_append_versions(&rr, targets.names[i], &reqs[i].cmd);
            } else if (!shl_database_version_is_fixed(&rr.db.version)) {
                shl_database_version_append(&reqs[i].cmd, "databaseVersion", &rr.db.version);
            }
        }
        shl_router_send(r, op, parsed.db, reqs, targets.n, fres);
        for (size_t i = 0; i < targets.n; i++) {
            if (fres[i].code != 0 &&
                (shl_router_is_stale(r, ns, &fres[i].status) ||
                 (op->txn != NULL && router_txn_take_snapshot_retry(op->txn)))) {
                stale = true;
                *st = fres[i].status;
                ret = fres[i].code;
            }
        }
        if (!stale || attempt >= SHL_ROUTER_MAX_STALE_RETRIES) {
            if (stale) {
                goto done; /* the last stale error */
            }
            ret = 0;
            *results = bson_malloc((targets.n + 1) * sizeof(**results)); /* filled below */
            for (size_t i = 0; i < targets.n; i++) {
                shl_str_copy((*results)[i].shard, sizeof((*results)[i].shard), targets.names[i]);
                shl_router_result_move(&(*results)[i].res, &fres[i]);
            }
            *nresults = targets.n;
            bson_free(fres);
            fres = NULL;
            goto done;
        }
        SHL_LOG_DEBUG(1, SHARDING, 4620010, "retrying after a stale routing error", "ns",
                      BCON_UTF8(ns), "attempt", BCON_INT32(attempt), "error",
                      BCON_UTF8(st->reason));
        shl_fanout_results_cleanup(fres, targets.n);
        bson_free(fres);
        fres = NULL;
        shl_router_requests_cleanup(reqs, targets.n);
        bson_free(reqs);
        reqs = NULL;
        shl_router_shards_cleanup(&targets);
        shl_router_routing_cleanup(&rr);
    }
done:
    if (fres != NULL) {
        shl_fanout_results_cleanup(fres, targets.n);
        bson_free(fres);
    }
    if (reqs != NULL) {
        shl_router_requests_cleanup(reqs, targets.n);
        bson_free(reqs);
    }
    shl_router_shards_cleanup(&targets);
    if (rr_out != NULL && ret == 0) {
        *rr_out = rr;
    } else {
        shl_router_routing_cleanup(&rr);
    }
    return ret;
}

int
shl_router_scatter(shl_router_t *r, shl_op_ctx_t *op, const char *ns, const bson_t *filter,
                   shl_router_build_fn build, void *arg, shl_router_routing_t *rr_out,
                   shl_router_shard_result_t **results, size_t *nresults, shl_status_t *st)
{
    shl_router_dispatch_t d = {
        .filter = filter, .build = build, .build_arg = arg, .versions = SHL_ROUTER_VERSIONS_FULL};

    return shl_router_dispatch(r, op, ns, &d, rr_out, results, nresults, st);
}

/* ---- config server ---- */

void
shl_router_copy_reply_fields(const bson_t *from, bson_t *to)
{
    static const char *const skip[] = {
        "ok",          "errmsg",        "code",        "codeName", "$clusterTime", "operationTime",
        "$configTime", "$topologyTime", "errorLabels", NULL};
    bson_iter_t it;

    if (!bson_iter_init(&it, from)) {
        return;
    }
    while (shl_iter_next(&it)) {
        bool keep = true;
        for (size_t i = 0; skip[i] != NULL; i++) {
            if (strcmp(shl_iter_key(&it), skip[i]) == 0) {
                keep = false;
                break;
            }
        }
        if (keep) {
            bson_append_iter(to, NULL, 0, &it);
        }
    }
}

int
shl_router_forward_to_config(shl_router_t *r, shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply,
                             shl_status_t *st)
{
    bson_t res = BSON_INITIALIZER;
    int64_t remaining = shl_op_remaining_ms(op);
    int ret = 0;

    bson_destroy(&res);
    /* A sharding admin command or DDL runs as long as it takes (a migration waiting for
     * orphans, a large clone), as mongos waits for it: only the user's maxTimeMS bounds it. */
    ret = shl_client_run(r->pool, shl_shard_registry_config_host(r->registry), "admin", cmd,
                         remaining < 0 ? 0 : (remaining == 0 ? 1 : remaining), &res, st);
    if (ret == 0) {
        shl_router_copy_reply_fields(&res, reply);
    }
    bson_destroy(&res);
    return ret;
}
