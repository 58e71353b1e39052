/*
 * catalog_client.c -- the config server's one way into config.*: the node's ordinary
 * insert/update/delete/find commands run in-process on database "config" with
 * writeConcern majority, so the catalog is written exactly as a client write would be
 * (oplog, indexes, durability). Typed readers on top (catalog_types.h), remote calls to
 * shards through the client pool, the changelog, and the per-namespace commit locks.
 */
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "config/config_private.h"
#include "net/stmt_batch.h"
#include "net/server.h"
#include "net/service.h"
#include "storage/storage.h"

static cfg_state_t g_cfg; /* the process's config server role; see config_private.h */

cfg_state_t *
cfg_get(void)
{
    return &g_cfg;
}

/* ---------------------------------------------------------------- ns locks */

typedef struct cfg_ns_lock {
    struct cfg_ns_lock *next;
    pthread_mutex_t mu;
    char name[];
} cfg_ns_lock_t;

static pthread_mutex_t *
ns_mutex(const char *name)
{
    cfg_ns_lock_t *l;

    pthread_mutex_lock(&g_cfg.locks_mu);
    for (l = g_cfg.locks; l != NULL; l = l->next) {
        if (strcmp(l->name, name) == 0) {
            break;
        }
    }
    if (l == NULL) {
        size_t n = strlen(name) + 1;
        l = bson_malloc0(sizeof(*l) + n);
        memcpy(l->name, name, n);
        pthread_mutex_init(&l->mu, NULL);
        l->next = g_cfg.locks;
        g_cfg.locks = l;
    }
    pthread_mutex_unlock(&g_cfg.locks_mu);
    return &l->mu;
}

/*
 * The user DDL gate (docs/design/user_write_blocking.md): every DDL on a user namespace holds
 * it shared while it holds its namespace lock; setUserWriteBlockMode holds it exclusively
 * while it changes the mode on every shard, so the DDL running before drains first and none
 * starts meanwhile (MongoDB's phase 1). Taken before the namespace mutex. Reader-preferring
 * (glibc's default), so a DDL that locks a second namespace never waits on a waiting writer.
 */
static pthread_rwlock_t g_user_ddl_gate = PTHREAD_RWLOCK_INITIALIZER;

static bool
is_user_ns(const char *name)
{
    size_t n = strcspn(name, ".");
    return !((n == 5 && strncmp(name, "admin", 5) == 0) ||
             (n == 6 && strncmp(name, "config", 6) == 0) ||
             (n == 5 && strncmp(name, "local", 5) == 0));
}

void
cfg_lock_ns(const char *name)
{
    if (is_user_ns(name)) {
        pthread_rwlock_rdlock(&g_user_ddl_gate);
    }
    pthread_mutex_lock(ns_mutex(name));
}

void
cfg_unlock_ns(const char *name)
{
    pthread_mutex_unlock(ns_mutex(name));
    if (is_user_ns(name)) {
        pthread_rwlock_unlock(&g_user_ddl_gate);
    }
}

void
cfg_user_ddl_drain_begin(void)
{
    pthread_rwlock_wrlock(&g_user_ddl_gate);
}

void
cfg_user_ddl_drain_end(void)
{
    pthread_rwlock_unlock(&g_user_ddl_gate);
}

/* ---------------------------------------------------------------- local commands */

void
cfg_docs_cleanup(cfg_docs_t *d)
{
    for (size_t i = 0; i < d->n; i++) {
        bson_destroy(d->docs[i]);
    }
    bson_free(d->docs);
    d->docs = NULL;
    d->n = 0;
}

static void
append_batch(const bson_t *reply, const char *which, cfg_docs_t *out, int64_t *cursor_id)
{
    bson_iter_t it, cur, batch;
    size_t cap = out->n;

    *cursor_id = 0;
    if (!bson_iter_init_find(&it, reply, "cursor") || !bson_iter_recurse(&it, &cur)) {
        return;
    }
    while (shl_iter_next(&cur)) {
        if (strcmp(shl_iter_key(&cur), "id") == 0) {
            *cursor_id = bson_iter_as_int64(&cur);
        } else if (strcmp(shl_iter_key(&cur), which) == 0 && bson_iter_recurse(&cur, &batch)) {
            while (shl_iter_next(&batch)) {
                const uint8_t *data;
                uint32_t len;
                bson_t view;
                if (!BSON_ITER_HOLDS_DOCUMENT(&batch)) {
                    continue;
                }
                bson_iter_document(&batch, &len, &data);
                if (!bson_init_static(&view, data, len)) {
                    continue;
                }
                if (out->n == cap) {
                    cap = cap == 0 ? 16 : cap * 2;
                    out->docs = bson_realloc(out->docs, cap * sizeof(*out->docs));
                }
                out->docs[out->n++] = bson_copy(&view);
            }
        }
    }
}

int
cfg_find(const char *coll, const bson_t *filter, const bson_t *sort, cfg_docs_t *out,
         shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    int64_t cursor_id = 0;

    memset(out, 0, sizeof(*out));
    BSON_APPEND_UTF8(&cmd, "find", coll);
    if (filter != NULL) {
        BSON_APPEND_DOCUMENT(&cmd, "filter", filter);
    }
    if (sort != NULL) {
        BSON_APPEND_DOCUMENT(&cmd, "sort", sort);
    }
    BSON_APPEND_INT32(&cmd, "batchSize", 100000);
    bson_destroy(&reply);
    SHL_ERR(shl_remote_run_self(&g_cfg.remote, "config", &cmd, NULL, &reply, st));
    append_batch(&reply, "firstBatch", out, &cursor_id);
    while (cursor_id != 0) {
        bson_reinit(&cmd);
        BSON_APPEND_INT64(&cmd, "getMore", cursor_id);
        BSON_APPEND_UTF8(&cmd, "collection", coll);
        bson_destroy(&reply);
        SHL_ERR(shl_remote_run_self(&g_cfg.remote, "config", &cmd, NULL, &reply, st));
        append_batch(&reply, "nextBatch", out, &cursor_id);
    }
done:
    if (ret != 0) {
        cfg_docs_cleanup(out);
    }
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

int
cfg_find_one(const char *coll, const bson_t *filter, bson_t *out, bool *found, shl_status_t *st)
{
    int ret = 0;
    cfg_docs_t d;

    bson_init(out);
    *found = false;
    SHL_ERR(cfg_find(coll, filter, NULL, &d, st));
    if (d.n > 0) {
        bson_destroy(out);
        bson_copy_to(d.docs[0], out);
        *found = true;
    }
    cfg_docs_cleanup(&d);
done:
    return ret;
}

static void
append_majority(bson_t *cmd)
{
    bson_t wc;
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(cmd, &wc);
}

/* Insert the statements of 'b' into config.coll (majority), then empty it. */
static int
flush_inserts(const char *coll, shl_stmt_batch_t *b, shl_status_t *st)
{
    int ret;
    bson_t cmd = BSON_INITIALIZER, reply;

    BSON_APPEND_UTF8(&cmd, "insert", coll);
    shl_stmt_batch_append_to(b, &cmd, "documents");
    append_majority(&cmd);
    ret = shl_remote_run_self(&g_cfg.remote, "config", &cmd, NULL, &reply, st);
    shl_stmt_batch_clear(b);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

int
cfg_insert(const char *coll, const bson_t *const *docs, size_t n, shl_status_t *st)
{
    int ret = 0;
    shl_stmt_batch_t b;

    shl_stmt_batch_init(&b);
    for (size_t i = 0; i < n; i++) {
        if (!shl_stmt_batch_has_room(&b, docs[i]->len)) {
            SHL_ERR(flush_inserts(coll, &b, st));
        }
        shl_stmt_batch_append(&b, docs[i]);
    }
    if (b.n > 0) {
        SHL_ERR(flush_inserts(coll, &b, st));
    }
done:
    shl_stmt_batch_cleanup(&b);
    return ret;
}

int
cfg_update(const char *coll, const bson_t *q, const bson_t *u, bool upsert, bool multi,
           int64_t *matched, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply, arr, stmt;
    bson_iter_t it;

    BSON_APPEND_UTF8(&cmd, "update", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &stmt);
    BSON_APPEND_DOCUMENT(&stmt, "q", q);
    BSON_APPEND_DOCUMENT(&stmt, "u", u);
    BSON_APPEND_BOOL(&stmt, "upsert", upsert);
    BSON_APPEND_BOOL(&stmt, "multi", multi);
    bson_append_document_end(&arr, &stmt);
    bson_append_array_end(&cmd, &arr);
    append_majority(&cmd);
    SHL_ERR(shl_remote_run_self(&g_cfg.remote, "config", &cmd, NULL, &reply, st));
    if (matched != NULL) {
        *matched = bson_iter_init_find(&it, &reply, "n") ? bson_iter_as_int64(&it) : 0;
    }
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

int
cfg_delete(const char *coll, const bson_t *q, bool multi, int64_t *deleted, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply, arr, stmt;
    bson_iter_t it;

    BSON_APPEND_UTF8(&cmd, "delete", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "deletes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &stmt);
    BSON_APPEND_DOCUMENT(&stmt, "q", q);
    BSON_APPEND_INT32(&stmt, "limit", multi ? 0 : 1);
    bson_append_document_end(&arr, &stmt);
    bson_append_array_end(&cmd, &arr);
    append_majority(&cmd);
    SHL_ERR(shl_remote_run_self(&g_cfg.remote, "config", &cmd, NULL, &reply, st));
    if (deleted != NULL) {
        *deleted = bson_iter_init_find(&it, &reply, "n") ? bson_iter_as_int64(&it) : 0;
    }
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* ---------------------------------------------------------------- typed reads */

void
cfg_shards_free(shl_shard_type_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        shl_shard_type_cleanup(&s[i]);
    }
    bson_free(s);
}

int
cfg_get_shards(shl_shard_type_t **out, size_t *n, shl_status_t *st)
{
    int ret = 0;
    cfg_docs_t d = {0};
    bson_t *sort = BCON_NEW("_id", BCON_INT32(1));
    size_t k = 0;

    *out = NULL;
    *n = 0;
    SHL_ERR(cfg_find("shards", NULL, sort, &d, st));
    *out = bson_malloc0((d.n + 1) * sizeof(**out));
    for (k = 0; k < d.n; k++) {
        SHL_ERR(shl_shard_type_parse(d.docs[k], &(*out)[k], st));
    }
    *n = d.n;
done:
    if (ret != 0 && *out != NULL) {
        cfg_shards_free(*out, k);
        *out = NULL;
    }
    cfg_docs_cleanup(&d);
    bson_destroy(sort);
    return ret;
}

int
cfg_get_shard(const char *name, shl_shard_type_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_t *q = BCON_NEW("_id", BCON_UTF8(name));
    bson_t doc;
    bool found = false;

    memset(out, 0, sizeof(*out));
    SHL_ERR(cfg_find_one("shards", q, &doc, &found, st));
    if (!found) {
        bson_destroy(&doc);
        SHL_FAIL(st, SHL_CODE_SHARD_NOT_FOUND, "Shard %s does not exist", name);
    }
    ret = shl_shard_type_parse(&doc, out, st);
    bson_destroy(&doc);
done:
    bson_destroy(q);
    return ret;
}

int
cfg_get_database(const char *db, shl_database_type_t *out, bool *found, shl_status_t *st)
{
    int ret = 0;
    bson_t *q = BCON_NEW("_id", BCON_UTF8(db));
    bson_t doc;

    memset(out, 0, sizeof(*out));
    SHL_ERR(cfg_find_one("databases", q, &doc, found, st));
    if (*found) {
        ret = shl_database_type_parse(&doc, out, st);
    }
    bson_destroy(&doc);
done:
    bson_destroy(q);
    return ret;
}

int
cfg_get_collection(const char *ns, shl_collection_type_t *out, bool *found, shl_status_t *st)
{
    int ret = 0;
    bson_t *q = BCON_NEW("_id", BCON_UTF8(ns));
    bson_t doc;

    memset(out, 0, sizeof(*out));
    SHL_ERR(cfg_find_one("collections", q, &doc, found, st));
    if (*found) {
        ret = shl_collection_type_parse(&doc, out, st);
    }
    bson_destroy(&doc);
done:
    bson_destroy(q);
    return ret;
}

int
cfg_load_routing_table(const char *ns, shl_collection_type_t *coll_out, shl_routing_table_t **out,
                       shl_status_t *st)
{
    int ret = 0;
    shl_collection_type_t coll;
    bool found = false;
    cfg_docs_t d = {0};
    bson_t *q = NULL, *sort = NULL;
    shl_chunk_type_t *chunks = NULL;
    size_t k = 0;
    shl_chunk_version_t gen;
    shl_routing_table_info_t info;

    *out = NULL;
    memset(&coll, 0, sizeof(coll));
    SHL_ERR(cfg_get_collection(ns, &coll, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_SHARDED, "%s is not sharded", ns);
    }
    q = bson_new();
    shl_uuid_append(q, "uuid", &coll.uuid);
    sort = BCON_NEW("min", BCON_INT32(1));
    SHL_ERR(cfg_find("chunks", q, sort, &d, st));
    gen = shl_collection_type_generation(&coll);
    chunks = bson_malloc0((d.n + 1) * sizeof(*chunks));
    for (k = 0; k < d.n; k++) {
        SHL_ERR(shl_chunk_type_parse_config(d.docs[k], &gen, &chunks[k], st));
    }
    shl_routing_table_info_from_collection(&coll, &info);
    SHL_ERR(shl_routing_table_new(&info, chunks, d.n, out, st));
done:
    if (chunks != NULL) {
        for (size_t i = 0; i < k; i++) {
            shl_chunk_type_cleanup(&chunks[i]);
        }
        bson_free(chunks);
    }
    cfg_docs_cleanup(&d);
    if (q != NULL) {
        bson_destroy(q);
    }
    if (sort != NULL) {
        bson_destroy(sort);
    }
    if (coll_out != NULL && ret == 0) {
        *coll_out = coll;
    } else {
        shl_collection_type_cleanup(&coll);
    }
    return ret;
}

/* ---------------------------------------------------------------- shards */

const shl_remote_options_t cfg_remote_opts = {.timeout_ms = CFG_REMOTE_TIMEOUT_MS};

/* The shard's time: metadata written after this (a new chunk's validAfter) is later than
 * every write the shard had made, so snapshot reads before it never target chunks that did
 * not exist yet (docs/design/snapshot_reads.md). */
static void
advance_to_shard_time(cfg_state_t *cfg, const bson_t *reply)
{
    bson_iter_t it, sub;

    if (bson_iter_init_find(&it, reply, "$clusterTime") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &sub) && bson_iter_find(&sub, "clusterTime") &&
        BSON_ITER_HOLDS_TIMESTAMP(&sub)) {
        shl_storage_clock_advance(cfg->svc->storage, shl_bson_iter_timestamp_u64(&sub));
    }
}

/* The transport (remote.h): shard ids become their hosts (config.shards), "config" is
 * self, then the real transport sends. */
static void
cfg_send(void *arg, const shl_remote_request_t *reqs, size_t n, int64_t timeout_ms,
         shl_remote_result_t *results)
{
    cfg_state_t *cfg = arg;
    shl_remote_real_t real = {.svc = cfg->svc, .pool = cfg->pool};
    shl_remote_t r;
    shl_remote_request_t *to = bson_malloc0(sizeof *to * (n ? n : 1));
    shl_remote_result_t *res = bson_malloc0(sizeof *res * (n ? n : 1));
    size_t *index = bson_malloc0(sizeof *index * (n ? n : 1));
    size_t m = 0;

    for (size_t i = 0; i < n; i++) {
        to[m] = reqs[i];
        if (reqs[i].target.kind == SHL_REMOTE_CONFIG) {
            to[m].target = shl_remote_target_self();
        } else if (reqs[i].target.kind == SHL_REMOTE_SHARD) {
            shl_shard_type_t sh;
            char host[SHL_CLIENT_HOST_MAX];
            if ((results[i].code = cfg_get_shard(reqs[i].target.name, &sh,
                                                 &results[i].status)) != 0) {
                continue;
            }
            cfg_target_of(sh.host, host, sizeof(host));
            shl_shard_type_cleanup(&sh);
            to[m].target = shl_remote_target_host(host);
        }
        shl_status_clear(&res[m].status);
        bson_init(&res[m].reply);
        index[m++] = i;
    }
    shl_remote_init_real(&r, &real);
    r.send(r.arg, to, m, timeout_ms, res);
    for (size_t k = 0; k < m; k++) {
        shl_remote_result_t *out = &results[index[k]];

        out->code = res[k].code;
        out->status = res[k].status;
        bson_destroy(&out->reply);
        bson_steal(&out->reply, &res[k].reply);
        if (reqs[index[k]].target.kind == SHL_REMOTE_SHARD) {
            advance_to_shard_time(cfg, &out->reply);
        }
    }
    bson_free(index);
    bson_free(res);
    bson_free(to);
}

void
cfg_remote_init(cfg_state_t *cfg)
{
    cfg->remote.send = cfg_send;
    cfg->remote.arg = cfg;
}

/* Send {<cmd_name>: target} to each shard; failures are logged only. */
static void
notify_shards(const char *cmd_name, const char *ns, const char *const *shards, size_t n)
{
    bson_t *cmd = BCON_NEW(cmd_name, BCON_UTF8(ns));

    for (size_t i = 0; i < n; i++) {
        shl_status_t st = SHL_STATUS_INIT;
        bson_t reply;
        if (shl_remote_run_shard(&g_cfg.remote, shards[i], "admin", cmd, &cfg_remote_opts, &reply, &st) != 0) {
            SHL_LOG_WARNING(SHARDING, 4200101, "could not tell a shard to refresh its metadata",
                            "command", BCON_UTF8(cmd_name), "ns", BCON_UTF8(ns), "shard",
                            BCON_UTF8(shards[i]), "error", BCON_UTF8(st.reason));
        }
        bson_destroy(&reply);
    }
    bson_destroy(cmd);
}

void
cfg_flush_shards(const char *ns, const char *const *shards, size_t n)
{
    notify_shards("_flushRoutingTableCacheUpdates", ns, shards, n);
}

static void
notify_all_shards(const char *cmd_name, const char *target)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_shard_type_t *shards = NULL;
    size_t n = 0;
    const char **names;

    if (cfg_get_shards(&shards, &n, &st) != 0) {
        return;
    }
    names = bson_malloc0((n + 1) * sizeof(*names));
    for (size_t i = 0; i < n; i++) {
        names[i] = shards[i].name;
    }
    notify_shards(cmd_name, target, names, n);
    bson_free(names);
    cfg_shards_free(shards, n);
}

void
cfg_flush_all_shards(const char *ns)
{
    notify_all_shards("_flushRoutingTableCacheUpdates", ns);
}

void
cfg_flush_database_all_shards(const char *db)
{
    notify_all_shards("_flushDatabaseCacheUpdates", db);
}

/* ---------------------------------------------------------------- time, changelog */

shl_ts_t
cfg_fresh_ts(void)
{
    shl_storage_engine_t *eng = g_cfg.svc->storage;
    uint64_t now = shl_storage_clock_now(eng);
    uint64_t wall = SHL_TS_MAKE(shl_clock_wall_ms() / 1000, 0);
    uint64_t ts = (now > wall ? now : wall) + 1;

    /* Later writes get timestamps after this one. */
    shl_storage_clock_advance(eng, ts);
    return shl_ts_from_u64(ts);
}

void
cfg_changelog(shl_op_ctx_t *op, const char *what, const char *ns, const bson_t *details)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t doc = BSON_INITIALIZER, empty = BSON_INITIALIZER;
    const bson_t *docs[1] = {&doc};
    bson_oid_t oid;
    char id[400];
    int64_t now = shl_clock_wall_ms();

    bson_oid_init(&oid, NULL);
    /* MongoDB's changelog _id: "<server>-<date>-<oid>". */
    {
        char oidstr[25];
        bson_oid_to_string(&oid, oidstr);
        snprintf(id, sizeof(id), "%s-%lld-%s", g_cfg.svc->me, (long long)now, oidstr);
    }
    BSON_APPEND_UTF8(&doc, "_id", id);
    BSON_APPEND_UTF8(&doc, "server", g_cfg.svc->me);
    BSON_APPEND_UTF8(&doc, "shard", "config");
    BSON_APPEND_UTF8(&doc, "clientAddr", (op != NULL && op->conn != NULL) ? op->conn->remote : "");
    BSON_APPEND_DATE_TIME(&doc, "time", now);
    BSON_APPEND_UTF8(&doc, "what", what);
    BSON_APPEND_UTF8(&doc, "ns", ns);
    BSON_APPEND_DOCUMENT(&doc, "details", details != NULL ? details : &empty);
    if (cfg_insert("changelog", docs, 1, &st) != 0) {
        SHL_LOG_WARNING(SHARDING, 4200102, "could not write config.changelog", "what",
                        BCON_UTF8(what), "error", BCON_UTF8(st.reason));
    }
    bson_destroy(&doc);
    bson_destroy(&empty);
}

/* ---------------------------------------------------------------- command helpers */

int
cfg_cmd_string(const bson_t *cmd, const char **out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "empty command");
    }
    if (!BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_ERR(shl_idl_wrong_type(&it, shl_iter_key(&it), "string", st));
    }
    *out = bson_iter_utf8(&it, NULL);
done:
    return ret;
}

int
cfg_doc_field(const bson_t *cmd, const char *field, bson_t *view, bool *has, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    *has = false;
    if (!bson_iter_init_find(&it, cmd, field)) {
        goto done;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '%s' is the wrong type, expected type 'object'", field);
    }
    bson_iter_document(&it, &len, &data);
    if (!bson_init_static(view, data, len)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "invalid BSON in '%s'", field);
    }
    *has = true;
done:
    return ret;
}

/* ---- atomic batches (applyOps) ---- */

void
cfg_batch_init(cfg_batch_t *b)
{
    bson_init(&b->ops);
    b->n = 0;
}

void
cfg_batch_cleanup(cfg_batch_t *b)
{
    bson_destroy(&b->ops);
    b->n = 0;
}

static void
batch_op(cfg_batch_t *b, const char *op, const char *coll, const bson_t *o, const bson_t *o2)
{
    char key[16], ns[SHL_NS_MAX + 1];
    const char *k;
    bson_t entry;

    bson_uint32_to_string(b->n++, &k, key, sizeof(key));
    snprintf(ns, sizeof(ns), "config.%s", coll);
    BSON_APPEND_DOCUMENT_BEGIN(&b->ops, k, &entry);
    BSON_APPEND_UTF8(&entry, "op", op);
    BSON_APPEND_UTF8(&entry, "ns", ns);
    BSON_APPEND_DOCUMENT(&entry, "o", o);
    if (o2 != NULL) {
        BSON_APPEND_DOCUMENT(&entry, "o2", o2);
        BSON_APPEND_BOOL(&entry, "b", true);
    }
    bson_append_document_end(&b->ops, &entry);
}

void
cfg_batch_upsert(cfg_batch_t *b, const char *coll, const bson_t *doc)
{
    bson_iter_t it;
    bson_t o2 = BSON_INITIALIZER;

    SHL_INVARIANT(bson_iter_init_find(&it, doc, "_id"));
    bson_append_value(&o2, "_id", 3, bson_iter_value(&it));
    batch_op(b, "u", coll, doc, &o2);
    bson_destroy(&o2);
}

void
cfg_batch_delete(cfg_batch_t *b, const char *coll, const bson_value_t *id)
{
    bson_t o = BSON_INITIALIZER;

    bson_append_value(&o, "_id", 3, id);
    batch_op(b, "d", coll, &o, NULL);
    bson_destroy(&o);
}

int
cfg_batch_commit(cfg_batch_t *b, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply;

    BSON_APPEND_ARRAY(&cmd, "applyOps", &b->ops);
    append_majority(&cmd);
    ret = shl_remote_run_self(&g_cfg.remote, "admin", &cmd, NULL, &reply, st);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}
