/*
 * configsvr_ddl.c -- database and collection metadata (docs/design/sharding-protocol.md):
 * _configsvrCreateDatabase (primary = the shard with the least data), _configsvrShard-
 * Collection (key validation, the shard-key index, initial chunks: one for range keys,
 * presplit for hashed keys on empty collections; the commit of the primary shard's
 * createCollection coordinator, shard/ddl_create_coordinator.c) and
 * _configsvrRefineCollectionShardKey. (Drops are the primary shard's coordinators', which
 * commit with configsvr_drop.c's commands.) Each commit holds the namespace's
 * lock, is logged in config.changelog and is followed by _flushRoutingTableCacheUpdates.
 */
#include <string.h>
#include <strings.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/namespace.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "config/config_private.h"
#include "session/sessions_collection.h"
#include "sharding/shard_key.h"

/* MongoDB's cap: 8192 initial chunks per shard. */
#define MAX_INITIAL_CHUNKS_PER_SHARD 8192

/* ---------------------------------------------------------------- helpers */

/* The shards a new database or collection may be placed on (not draining). */
static int
active_shards(shl_shard_type_t **out, size_t *n, shl_status_t *st)
{
    int ret = 0;
    size_t k = 0;

    SHL_ERR(cfg_get_shards(out, n, st));
    for (size_t i = 0; i < *n; i++) {
        if ((*out)[i].draining) {
            shl_shard_type_cleanup(&(*out)[i]);
        } else {
            (*out)[k++] = (*out)[i];
        }
    }
    *n = k;
done:
    return ret;
}

/* A shard's total data size (listDatabases totalSize). */
static int
shard_total_size(const char *shard, int64_t *size, shl_status_t *st)
{
    int ret = 0;
    bson_t *cmd = BCON_NEW("listDatabases", BCON_INT32(1));
    bson_t reply;
    bson_iter_t it;

    *size = 0;
    SHL_ERR(shl_remote_run_shard(&cfg_get()->remote, shard, "admin", cmd, &cfg_remote_opts, &reply, st));
    if (bson_iter_init_find(&it, &reply, "totalSize")) {
        *size = bson_iter_as_int64(&it);
    }
done:
    bson_destroy(cmd);
    bson_destroy(&reply);
    return ret;
}

/* The documents of a cursor reply's firstBatch (borrowed views copied into *out). */
static void
first_batch(const bson_t *reply, cfg_docs_t *out)
{
    bson_iter_t it, cur, batch;
    size_t cap = 0;

    memset(out, 0, sizeof(*out));
    if (!bson_iter_init_find(&it, reply, "cursor") || !bson_iter_recurse(&it, &cur) ||
        !bson_iter_find(&cur, "firstBatch") || !bson_iter_recurse(&cur, &batch)) {
        return;
    }
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
            cap = cap == 0 ? 8 : cap * 2;
            out->docs = bson_realloc(out->docs, cap * sizeof(*out->docs));
        }
        out->docs[out->n++] = bson_copy(&view);
    }
}

/* See config_private.h. */
int
cfg_shard_collection_info(const char *shard, const shl_ns_t *ns, bool *exists, shl_uuid_t *uuid,
                          bool *is_view, bson_t *options, shl_status_t *st)
{
    int ret = 0;
    bson_t *cmd =
        BCON_NEW("listCollections", BCON_INT32(1), "filter", "{", "name", BCON_UTF8(ns->coll), "}");
    bson_t reply;
    cfg_docs_t d = {0};
    bson_iter_t it;

    *exists = false;
    *is_view = false;
    if (options != NULL) {
        bson_reinit(options);
    }
    SHL_ERR(shl_remote_run_shard(&cfg_get()->remote, shard, ns->db, cmd, &cfg_remote_opts, &reply, st));
    first_batch(&reply, &d);
    if (d.n > 0) {
        *exists = true;
        if (options != NULL && bson_iter_init_find(&it, d.docs[0], "options") &&
            BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_t view;
            const uint8_t *data;
            uint32_t len;
            bson_iter_document(&it, &len, &data);
            bson_init_static(&view, data, len);
            bson_concat(options, &view);
        }
        if (bson_iter_init_find(&it, d.docs[0], "type") && BSON_ITER_HOLDS_UTF8(&it) &&
            strcmp(bson_iter_utf8(&it, NULL), "view") == 0) {
            *is_view = true;
        }
        if (bson_iter_init_find(&it, d.docs[0], "info") && bson_iter_recurse(&it, &it) &&
            bson_iter_find(&it, "uuid")) {
            SHL_ERR(shl_idl_read_uuid(&it, "listCollections.info", uuid, st));
        }
    }
done:
    cfg_docs_cleanup(&d);
    bson_destroy(cmd);
    bson_destroy(&reply);
    return ret;
}

static int
shard_count(const char *shard, const shl_ns_t *ns, int64_t *n, shl_status_t *st)
{
    int ret = 0;
    bson_t *cmd = BCON_NEW("count", BCON_UTF8(ns->coll));
    bson_t reply;
    bson_iter_t it;

    *n = 0;
    SHL_ERR(shl_remote_run_shard(&cfg_get()->remote, shard, ns->db, cmd, &cfg_remote_opts, &reply, st));
    if (bson_iter_init_find(&it, &reply, "n")) {
        *n = bson_iter_as_int64(&it);
    }
done:
    bson_destroy(cmd);
    bson_destroy(&reply);
    return ret;
}

/* Whether the collection on 'shard' has an index usable for 'key' (*unique: it is unique). */
static int
shard_has_key_index(const char *shard, const shl_ns_t *ns, const bson_t *key, bool *has,
                    bool *unique, shl_status_t *st)
{
    int ret = 0;
    bson_t *cmd = BCON_NEW("listIndexes", BCON_UTF8(ns->coll));
    bson_t reply = BSON_INITIALIZER;
    cfg_docs_t d = {0};
    bson_iter_t it;
    shl_shard_key_pattern_t p;
    bool p_ok = false;

    *has = false;
    *unique = false;
    SHL_ERR(shl_shard_key_pattern_init(&p, key, st));
    p_ok = true;
    if (shl_remote_run_shard(&cfg_get()->remote, shard, ns->db, cmd, &cfg_remote_opts, &reply, st) != 0) {
        if (st->code != SHL_CODE_NAMESPACE_NOT_FOUND) {
            ret = st->code;
        }
        shl_status_clear(st);
        goto done;
    }
    first_batch(&reply, &d);
    /* Uniqueness across shards holds only for unique indexes prefixed by the shard key
     * (or by _id): MongoDB refuses to shard under any other. */
    for (size_t i = 0; i < d.n; i++) {
        bson_iter_t k;
        bson_t ikey;
        uint32_t len;
        const uint8_t *data;
        if (bson_iter_init_find(&it, d.docs[i], "unique") && bson_iter_as_bool(&it) &&
            bson_iter_init_find(&k, d.docs[i], "key") && BSON_ITER_HOLDS_DOCUMENT(&k)) {
            bson_iter_document(&k, &len, &data);
            if (bson_init_static(&ikey, data, len) &&
                !shl_shard_key_is_unique_index_compatible(&p, &ikey)) {
                char *a = shl_bson_to_string(&ikey), *b = shl_bson_to_string(key);
                ret = shl_status_set(st, SHL_CODE_INVALID_OPTIONS,
                                     "can't shard collection '%s' with unique index on %s and "
                                     "proposed shard key %s. Uniqueness can't be maintained "
                                     "unless shard key is a prefix",
                                     ns->full, a, b);
                bson_free(a);
                bson_free(b);
                goto done;
            }
        }
    }
    for (size_t i = 0; i < d.n; i++) {
        if (cfg_index_backs_key(key, d.docs[i])) {
            *has = true;
            /* The _id index is unique without saying so in its spec. */
            if ((bson_iter_init_find(&it, d.docs[i], "unique") && bson_iter_as_bool(&it)) ||
                (bson_iter_init_find(&it, d.docs[i], "name") && BSON_ITER_HOLDS_UTF8(&it) &&
                 strcmp(bson_iter_utf8(&it, NULL), "_id_") == 0)) {
                *unique = true;
            }
        }
    }
done:
    if (p_ok) {
        shl_shard_key_pattern_cleanup(&p);
    }
    cfg_docs_cleanup(&d);
    bson_destroy(cmd);
    bson_destroy(&reply);
    return ret;
}

/* Whether 'key' is {_id: 1}: the _id index every collection has backs it. */
static bool
key_is_id(const bson_t *key)
{
    bson_iter_t it;
    return bson_iter_init(&it, key) && shl_iter_next(&it) &&
           strcmp(shl_iter_key(&it), "_id") == 0 && BSON_ITER_HOLDS_NUMBER(&it) &&
           bson_iter_as_double(&it) == 1.0 && !shl_iter_next(&it);
}

/*
 * The shard key's index on 'shard' for a collection that may not exist yet (creating it).
 * For {_id: 1} that is the _id index: only the collection is created (an existing one is
 * fine), as a second index on {_id: 1} would conflict with _id_.
 */
static int
shard_create_index(const char *shard, const shl_ns_t *ns, const bson_t *key, bool unique,
                   shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, arr, spec, reply;
    char name[256];

    if (key_is_id(key)) {
        BSON_APPEND_UTF8(&cmd, "create", ns->coll);
        ret = shl_remote_run_shard(&cfg_get()->remote, shard, ns->db, &cmd, &cfg_remote_opts, &reply, st);
        if (ret == SHL_CODE_NAMESPACE_EXISTS) {
            shl_status_clear(st);
            ret = 0;
        }
        goto done;
    }
    cfg_index_name(key, name, sizeof(name));
    BSON_APPEND_UTF8(&cmd, "createIndexes", ns->coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &spec);
    BSON_APPEND_DOCUMENT(&spec, "key", key);
    BSON_APPEND_UTF8(&spec, "name", name);
    if (unique) {
        BSON_APPEND_BOOL(&spec, "unique", true);
    }
    {
        /* The shard key index orders values by bytes, whatever the collection's default
         * collation (docs/design/collation.md). */
        bson_t simple;
        BSON_APPEND_DOCUMENT_BEGIN(&spec, "collation", &simple);
        BSON_APPEND_UTF8(&simple, "locale", "simple");
        bson_append_document_end(&spec, &simple);
    }
    bson_append_document_end(&arr, &spec);
    bson_append_array_end(&cmd, &arr);
    ret = shl_remote_run_shard(&cfg_get()->remote, shard, ns->db, &cmd, &cfg_remote_opts, &reply, st);
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* _shardsvrCreateCollectionParticipant: the collection with UUID 'uuid', the primary's
 * options (so a validator holds on every shard) and the key's index on a shard that receives
 * chunks. */
static int
shard_create_participant(const char *shard, const shl_ns_t *ns, const shl_uuid_t *uuid,
                         const bson_t *options, const bson_t *key, bool unique, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, arr, spec, reply;
    char name[256];

    cfg_index_name(key, name, sizeof(name));
    BSON_APPEND_UTF8(&cmd, "_shardsvrCreateCollectionParticipant", ns->coll);
    shl_uuid_append(&cmd, "collectionUUID", uuid);
    BSON_APPEND_DOCUMENT(&cmd, "options", options);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &spec);
    BSON_APPEND_INT32(&spec, "v", 2);
    BSON_APPEND_DOCUMENT(&spec, "key", key);
    BSON_APPEND_UTF8(&spec, "name", name);
    if (unique) {
        BSON_APPEND_BOOL(&spec, "unique", true);
    }
    {
        /* The shard key index orders values by bytes, whatever the collection's default
         * collation (docs/design/collation.md). */
        bson_t simple;
        BSON_APPEND_DOCUMENT_BEGIN(&spec, "collation", &simple);
        BSON_APPEND_UTF8(&simple, "locale", "simple");
        bson_append_document_end(&spec, &simple);
    }
    bson_append_document_end(&arr, &spec);
    bson_append_array_end(&cmd, &arr);
    ret = shl_remote_run_shard(&cfg_get()->remote, shard, ns->db, &cmd, &cfg_remote_opts, &reply, st);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* ---------------------------------------------------------------- createDatabase */

static bool
is_internal_db_ci(const char *db)
{
    return strcasecmp(db, "admin") == 0 || strcasecmp(db, "local") == 0 ||
           strcasecmp(db, "config") == 0;
}

int
cfg_create_database(shl_op_ctx_t *op, const char *db, const char *primary, shl_database_type_t *out,
                    shl_status_t *st)
{
    int ret = 0;
    cfg_docs_t d = {0};
    bson_t *q = NULL;
    shl_shard_type_t *shards = NULL;
    size_t nshards = 0;
    char lockname[SHL_DB_NAME_MAX + 8];
    bool locked = false;
    bson_t doc = BSON_INITIALIZER, details = BSON_INITIALIZER;
    const bson_t *docs[1] = {&doc};
    shl_database_type_t t;

    memset(out, 0, sizeof(*out));
    if (strcmp(db, "config") == 0) {
        out->name = bson_strdup("config");
        out->primary = bson_strdup("config");
        out->version = shl_database_version_fixed();
        goto done;
    }
    if (is_internal_db_ci(db)) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Cannot manually create database '%s'", db);
    }
    if (db[0] == '\0' || shl_ns_check_db(db, st) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid db name specified: %s", db);
    }
    snprintf(lockname, sizeof(lockname), "db:%s", db);
    cfg_lock_ns(lockname);
    locked = true;

    /* Existing entries, compared case-insensitively as MongoDB does (database names cannot
     * hold a backslash, so \Q...\E quotes them). */
    {
        char re[SHL_DB_NAME_MAX + 16];
        snprintf(re, sizeof(re), "^\\Q%s\\E$", db);
        q = BCON_NEW("_id", "{", "$regex", BCON_UTF8(re), "$options", BCON_UTF8("i"), "}");
    }
    SHL_ERR(cfg_find("databases", q, NULL, &d, st));
    for (size_t i = 0; i < d.n; i++) {
        bson_iter_t it;
        const char *name;
        if (!bson_iter_init_find(&it, d.docs[i], "_id") || !BSON_ITER_HOLDS_UTF8(&it)) {
            continue;
        }
        name = bson_iter_utf8(&it, NULL);
        if (strcmp(name, db) == 0) {
            SHL_ERR(shl_database_type_parse(d.docs[i], out, st));
            if (primary != NULL && strcmp(primary, out->primary) != 0) {
                SHL_FAIL(st, SHL_CODE_NAMESPACE_EXISTS,
                         "database %s already exists with a different primary shard %s", db,
                         out->primary);
            }
            goto done;
        }
        if (strcasecmp(name, db) == 0) {
            SHL_FAIL(st, SHL_CODE_DATABASE_DIFFER_CASE,
                     "can't have 2 databases that just differ on case  have: %s want to add: %s",
                     name, db);
        }
    }

    SHL_ERR(active_shards(&shards, &nshards, st));
    if (primary != NULL) {
        bool known = false;
        for (size_t i = 0; i < nshards; i++) {
            known = known || strcmp(shards[i].name, primary) == 0;
        }
        if (!known) {
            SHL_FAIL(st, SHL_CODE_SHARD_NOT_FOUND, "Shard %s does not exist", primary);
        }
    } else {
        int64_t best = INT64_MAX;
        if (nshards == 0) {
            SHL_FAIL(st, SHL_CODE_SHARD_NOT_FOUND,
                     "Database %s could not be created :: caused by :: No shards found", db);
        }
        for (size_t i = 0; i < nshards; i++) {
            int64_t size = 0;
            SHL_ERR(shard_total_size(shards[i].name, &size, st));
            if (size < best) {
                best = size;
                primary = shards[i].name;
            }
        }
    }
    memset(&t, 0, sizeof(t));
    t.name = (char *)(uintptr_t)db;
    t.primary = (char *)(uintptr_t)primary;
    t.version = shl_database_version_new(cfg_fresh_ts());
    bson_destroy(&doc);
    shl_database_type_to_bson(&t, &doc);
    SHL_ERR(cfg_insert("databases", docs, 1, st));
    out->name = bson_strdup(db);
    out->primary = bson_strdup(primary);
    out->version = t.version;
    BSON_APPEND_UTF8(&details, "primary", primary);
    cfg_changelog(op, "createDatabase", db, &details);
    SHL_LOG_INFO(SHARDING, 4200120, "created database", "db", BCON_UTF8(db), "primary",
                 BCON_UTF8(primary));
done:
    if (locked) {
        cfg_unlock_ns(lockname);
    }
    if (ret != 0) {
        shl_database_type_cleanup(out);
        memset(out, 0, sizeof(*out));
    }
    if (shards != NULL) {
        cfg_shards_free(shards, nshards);
    }
    cfg_docs_cleanup(&d);
    if (q != NULL) {
        bson_destroy(q);
    }
    bson_destroy(&doc);
    bson_destroy(&details);
    return ret;
}

static int
optional_string(const bson_t *cmd, const char *ctx, const char *field, const char **out,
                shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    *out = NULL;
    if (bson_iter_init_find(&it, cmd, field)) {
        if (!BSON_ITER_HOLDS_UTF8(&it)) {
            SHL_ERR(shl_idl_wrong_type(&it, ctx, "string", st));
        }
        *out = bson_iter_utf8(&it, NULL);
    }
done:
    return ret;
}

static int
cmd_create_database(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *db = NULL, *primary = NULL;
    shl_database_type_t t;

    memset(&t, 0, sizeof(t));
    SHL_ERR(cfg_cmd_string(cmd, &db, st));
    SHL_ERR(optional_string(cmd, "_configsvrCreateDatabase", "primaryShard", &primary, st));
    SHL_ERR(cfg_create_database(op, db, primary, &t, st));
    shl_database_version_append(reply, "databaseVersion", &t.version);
done:
    shl_database_type_cleanup(&t);
    return ret;
}

/* ---------------------------------------------------------------- shardCollection */

/* Refuse namespaces MongoDB refuses to shard. */
static int
check_shardable_ns(const char *ns_str, shl_ns_t *ns, shl_status_t *st)
{
    int ret = 0;

    SHL_ERR(shl_ns_parse(ns, ns_str, st));
    if (strcmp(ns->full, SHL_SESSIONS_NS) == 0) {
        goto done; /* the one sharded collection of config (configsvr_sessions.c) */
    }
    if (strcmp(ns->db, "config") == 0 || strcmp(ns->db, "admin") == 0 ||
        strcmp(ns->db, "local") == 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "can't shard %s database", ns->db);
    }
    if (shl_ns_is_system(ns)) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "can't shard system namespaces");
    }
done:
    return ret;
}

/* A chunk in caller's storage: [min, max) on 'shard' at 'version', history from 'ts'. */
static void
make_chunk(shl_chunk_type_t *c, const shl_uuid_t *uuid, const bson_t *min, const bson_t *max,
           const char *shard, shl_chunk_version_t version, shl_ts_t ts)
{
    shl_chunk_history_t h = {ts, (char *)(uintptr_t)shard};

    memset(c, 0, sizeof(*c));
    c->has_id = true;
    bson_oid_init(&c->id, NULL);
    c->has_uuid = true;
    c->uuid = *uuid;
    c->min = bson_copy(min);
    c->max = bson_copy(max);
    c->shard = bson_strdup(shard);
    c->version = version;
    c->has_on_current_shard_since = true;
    c->on_current_shard_since = ts;
    shl_chunk_type_set_history(c, &h, 1);
}

/* Insert chunks into config.chunks (in batches). */
static int
insert_chunks(const shl_chunk_type_t *chunks, size_t n, shl_status_t *st)
{
    int ret = 0;
    bson_t *docs = bson_aligned_alloc0(BSON_ALIGNOF(bson_t), (n + 1) * sizeof(*docs));
    const bson_t **ptrs = bson_malloc0((n + 1) * sizeof(*ptrs));
    size_t built = 0;

    for (built = 0; built < n; built++) {
        shl_chunk_type_to_config_bson(&chunks[built], &docs[built]);
        ptrs[built] = &docs[built];
    }
    for (size_t off = 0; off < n; off += 1000) {
        size_t m = n - off < 1000 ? n - off : 1000;
        SHL_ERR(cfg_insert("chunks", ptrs + off, m, st));
    }
done:
    for (size_t i = 0; i < built; i++) {
        bson_destroy(&docs[i]);
    }
    bson_free(docs);
    bson_free(ptrs);
    return ret;
}

/* The config.collections document for a new generation. */
static void
collection_doc(const char *ns, const bson_oid_t *epoch, shl_ts_t ts, const shl_uuid_t *uuid,
               const bson_t *key, bool unique, const bson_t *options, bson_t *out)
{
    shl_collection_type_t c;
    bson_iter_t it;
    bson_t dflt;
    const uint8_t *data;
    uint32_t len;

    memset(&c, 0, sizeof(c));
    c.ns = (char *)(uintptr_t)ns;
    c.has_epoch = true;
    c.epoch = *epoch;
    c.updated_at = shl_clock_wall_ms();
    c.timestamp = ts;
    c.uuid = *uuid;
    c.key = (bson_t *)(uintptr_t)key;
    c.unique = unique;
    if (options != NULL && bson_iter_init_find(&it, options, "collation") &&
        BSON_ITER_HOLDS_DOCUMENT(&it)) {
        /* The collection's default collation, which routers target and merge under. */
        bson_iter_document(&it, &len, &data);
        if (bson_init_static(&dflt, data, len)) {
            c.default_collation = &dflt;
        }
    }
    shl_collection_type_to_bson(&c, out);
}

static bool
same_pattern(const bson_t *a, const bson_t *b)
{
    bson_iter_t ia, ib;

    if (!bson_iter_init(&ia, a) || !bson_iter_init(&ib, b)) {
        return false;
    }
    for (;;) {
        bool na = shl_iter_next(&ia), nb = shl_iter_next(&ib);
        if (!na || !nb) {
            return na == nb;
        }
        if (strcmp(shl_iter_key(&ia), shl_iter_key(&ib)) != 0) {
            return false;
        }
        if (BSON_ITER_HOLDS_UTF8(&ia) != BSON_ITER_HOLDS_UTF8(&ib)) {
            return false;
        }
        if (BSON_ITER_HOLDS_UTF8(&ia) &&
            strcmp(bson_iter_utf8(&ia, NULL), bson_iter_utf8(&ib, NULL)) != 0) {
            return false;
        }
    }
}

static void
append_uuid_reply(bson_t *reply, const char *ns, const shl_uuid_t *uuid)
{
    BSON_APPEND_UTF8(reply, "collectionsharded", ns);
    shl_uuid_append(reply, "collectionUUID", uuid);
}

static int
cmd_shard_collection(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *ns_str = NULL;
    shl_ns_t ns;
    bson_t key, collation, coll_doc = BSON_INITIALIZER, details = BSON_INITIALIZER;
    bson_t options = BSON_INITIALIZER;
    bool has_key = false, has_collation = false, unique = false, locked = false;
    bool pattern_ok = false, found = false, exists = false, is_view = false;
    int64_t num_initial = 0, ndocs = 0;
    shl_shard_key_pattern_t pattern;
    shl_collection_type_t existing;
    shl_database_type_t db;
    shl_shard_type_t *shards = NULL;
    size_t nshards = 0, nchunks = 0;
    shl_chunk_type_t *chunks = NULL;
    shl_uuid_t uuid;
    bson_oid_t epoch;
    shl_ts_t ts;
    bson_iter_t it;
    const bson_t *cdocs[1] = {&coll_doc};
    const char **receivers = NULL;
    size_t nreceivers = 0;

    memset(&existing, 0, sizeof(existing));
    memset(&db, 0, sizeof(db));
    memset(&uuid, 0, sizeof(uuid));
    SHL_ERR(cfg_cmd_string(cmd, &ns_str, st));
    SHL_ERR(check_shardable_ns(ns_str, &ns, st));
    SHL_ERR(cfg_doc_field(cmd, "key", &key, &has_key, st));
    if (!has_key) {
        SHL_ERR(shl_idl_missing("_configsvrShardCollection", "key", st));
    }
    SHL_ERR(shl_shard_key_pattern_init(&pattern, &key, st));
    pattern_ok = true;
    if (bson_iter_init_find(&it, cmd, "unique")) {
        unique = bson_iter_as_bool(&it);
    }
    if (unique && shl_shard_key_pattern_is_hashed(&pattern)) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "Hashed shard keys cannot be declared unique. It's possible to ensure uniqueness "
                 "on the hashed field by declaring an additional (non-hashed) unique index on the "
                 "field.");
    }
    SHL_ERR(cfg_doc_field(cmd, "collation", &collation, &has_collation, st));
    if (has_collation && !bson_empty(&collation)) {
        if (!bson_iter_init_find(&it, &collation, "locale") || !BSON_ITER_HOLDS_UTF8(&it) ||
            strcmp(bson_iter_utf8(&it, NULL), "simple") != 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "The collation for shardCollection must be {locale: 'simple'}, but found: "
                     "a non-simple collation");
        }
    }
    if (bson_iter_init_find(&it, cmd, "numInitialChunks")) {
        if (!BSON_ITER_HOLDS_NUMBER(&it)) {
            SHL_ERR(shl_idl_wrong_type(&it, "_configsvrShardCollection", "int", st));
        }
        num_initial = bson_iter_as_int64(&it);
        if (num_initial < 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "numInitialChunks cannot be negative");
        }
        if (num_initial > 0 && !shl_shard_key_pattern_has_hashed_prefix(&pattern)) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "numInitialChunks is only supported when the collection is empty and has a "
                     "hashed field as the shard key prefix");
        }
    }

    /* The database first, outside the collection's lock: the lock order is database name
     * before namespace (dropDatabase takes both in that order). */
    SHL_ERR(cfg_create_database(op, ns.db, NULL, &db, st));
    cfg_lock_ns(ns.full);
    locked = true;
    SHL_ERR(cfg_get_collection(ns.full, &existing, &found, st));
    if (found) {
        if (same_pattern(existing.key, &key) && existing.unique == unique) {
            append_uuid_reply(reply, ns.full, &existing.uuid);
            goto done;
        }
        SHL_FAIL(st, SHL_CODE_ALREADY_INITIALIZED, "sharding already enabled for collection %s",
                 ns.full);
    }

    SHL_ERR(active_shards(&shards, &nshards, st));
    if (strcmp(ns.full, SHL_SESSIONS_NS) == 0) {
        /* The config database's primary is this config server, which holds no chunks:
         * config.system.sessions starts as one chunk on a shard (the first by name). */
        if (nshards == 0) {
            SHL_FAIL(st, SHL_CODE_SHARD_NOT_FOUND,
                     "Failed to create %s: cannot create the collection until there are shards",
                     SHL_SESSIONS_NS);
        }
        bson_free(db.primary);
        db.primary = bson_strdup(shards[0].name);
    }
    SHL_ERR(cfg_shard_collection_info(db.primary, &ns, &exists, &uuid, &is_view, &options, st));
    if (is_view) {
        SHL_FAIL(st, SHL_CODE_COMMAND_NOT_SUPPORTED_ON_VIEW,
                 "Namespace %s is a view, not a "
                 "collection",
                 ns.full);
    }
    if (exists) {
        SHL_ERR(shard_count(db.primary, &ns, &ndocs, st));
    }
    if (ndocs > 0 && num_initial > 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "numInitialChunks is only supported when the collection is empty and has a "
                 "hashed field as the shard key prefix");
    }
    {
        /* An existing usable index is used as it is; only an empty (or missing) collection
         * gets one created. */
        bool has_index = false, index_unique = false;
        if (exists) {
            SHL_ERR(shard_has_key_index(db.primary, &ns, &key, &has_index, &index_unique, st));
        }
        if (has_index && unique && !index_unique) {
            char *k = shl_bson_as_json(&key);
            ret = shl_status_set(st, SHL_CODE_INVALID_OPTIONS,
                                 "can't shard collection '%s' with unique: true: the index on "
                                 "the proposed shard key %s is not unique, so uniqueness can't "
                                 "be maintained",
                                 ns.full, k);
            bson_free(k);
            goto done;
        }
        if (!has_index && ndocs > 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "Please create an index that starts with the proposed shard key before "
                     "sharding the collection.");
        }
        if (!has_index) {
            SHL_ERR(shard_create_index(db.primary, &ns, &key, unique, st));
            SHL_ERR(
                cfg_shard_collection_info(db.primary, &ns, &exists, &uuid, &is_view, &options, st));
        }
    }
    if (!exists) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "collection %s was not created on %s", ns.full,
                 db.primary);
    }

    bson_oid_init(&epoch, NULL);
    ts = cfg_fresh_ts();
    {
        bson_t gmin, gmax;
        shl_shard_key_global_min(&pattern, &gmin);
        shl_shard_key_global_max(&pattern, &gmax);
        receivers = bson_malloc0((nshards + 2) * sizeof(*receivers));
        receivers[nreceivers++] = db.primary;
        if (ndocs == 0 && shl_shard_key_pattern_has_hashed_prefix(&pattern) && nshards > 0) {
            int n = num_initial > 0 ? (int)num_initial : (int)(2 * nshards);
            int64_t *points;
            int npoints = 0;
            if ((size_t)n > MAX_INITIAL_CHUNKS_PER_SHARD * nshards) {
                bson_destroy(&gmin);
                bson_destroy(&gmax);
                SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                         "numInitialChunks cannot be more than either: %d, 8192 * number of "
                         "shards; or 8192",
                         MAX_INITIAL_CHUNKS_PER_SHARD * (int)nshards);
            }
            points = bson_malloc0(((size_t)n + 1) * sizeof(*points));
            cfg_hashed_split_points(n, points, &npoints);
            chunks = bson_malloc0(((size_t)npoints + 1) * sizeof(*chunks));
            for (int i = 0; i <= npoints; i++) {
                bson_t lo = BSON_INITIALIZER, hi = BSON_INITIALIZER;
                bson_iter_t f;
                /* bounds: the hashed prefix at the point, MinKey for the other fields */
                bson_iter_init(&f, &pattern.pattern);
                for (size_t k = 0; shl_iter_next(&f); k++) {
                    if (k == 0) {
                        if (i == 0) {
                            BSON_APPEND_MINKEY(&lo, shl_iter_key(&f));
                        } else {
                            BSON_APPEND_INT64(&lo, shl_iter_key(&f), points[i - 1]);
                        }
                        if (i == npoints) {
                            BSON_APPEND_MAXKEY(&hi, shl_iter_key(&f));
                        } else {
                            BSON_APPEND_INT64(&hi, shl_iter_key(&f), points[i]);
                        }
                    } else {
                        BSON_APPEND_MINKEY(&lo, shl_iter_key(&f));
                        if (i == npoints) {
                            BSON_APPEND_MAXKEY(&hi, shl_iter_key(&f));
                        } else {
                            BSON_APPEND_MINKEY(&hi, shl_iter_key(&f));
                        }
                    }
                }
                make_chunk(&chunks[i], &uuid, &lo, &hi, shards[(size_t)i % nshards].name,
                           shl_chunk_version_make(&epoch, ts, 1, (uint32_t)i), ts);
                bson_destroy(&lo);
                bson_destroy(&hi);
            }
            nchunks = (size_t)npoints + 1;
            bson_free(points);
            for (size_t s = 0; s < nshards && s < nchunks; s++) {
                if (strcmp(shards[s].name, db.primary) != 0) {
                    receivers[nreceivers++] = shards[s].name;
                }
            }
        } else {
            chunks = bson_malloc0(sizeof(*chunks));
            make_chunk(&chunks[0], &uuid, &gmin, &gmax, db.primary,
                       shl_chunk_version_make(&epoch, ts, 1, 0), ts);
            nchunks = 1;
        }
        bson_destroy(&gmin);
        bson_destroy(&gmax);
    }
    /* Shards other than the primary that receive chunks get the collection, with the
     * primary's UUID (the one config.collections records) and options (its validator), and
     * the shard key's index. */
    for (size_t r = 1; r < nreceivers; r++) {
        SHL_ERR(shard_create_participant(receivers[r], &ns, &uuid, &options, &key, unique, st));
    }

    BSON_APPEND_DOCUMENT(&details, "shardKey", &key);
    BSON_APPEND_UTF8(&details, "collection", ns.full);
    shl_uuid_append(&details, "uuid", &uuid);
    BSON_APPEND_BOOL(&details, "empty", ndocs == 0);
    BSON_APPEND_UTF8(&details, "primary", db.primary);
    BSON_APPEND_INT64(&details, "numChunks", (int64_t)nchunks);
    cfg_changelog(op, "shardCollection.start", ns.full, &details);

    /* Chunks first, then the entry: a reader never sees a collection without chunks. */
    SHL_ERR(insert_chunks(chunks, nchunks, st));
    collection_doc(ns.full, &epoch, ts, &uuid, &key, unique, &options, &coll_doc);
    SHL_ERR(cfg_insert("collections", cdocs, 1, st));
    {
        bson_t end = BSON_INITIALIZER;
        shl_chunk_version_t v = shl_chunk_version_make(&epoch, ts, 1, (uint32_t)(nchunks - 1));
        shl_chunk_version_append(&end, "version", &v);
        cfg_changelog(op, "shardCollection.end", ns.full, &end);
        bson_destroy(&end);
    }
    SHL_LOG_INFO(SHARDING, 4200121, "sharded collection", "ns", BCON_UTF8(ns.full), "chunks",
                 BCON_INT64((int64_t)nchunks));
    cfg_flush_shards(ns.full, receivers, nreceivers);
    append_uuid_reply(reply, ns.full, &uuid);
done:
    if (locked) {
        cfg_unlock_ns(ns.full);
    }
    if (pattern_ok) {
        shl_shard_key_pattern_cleanup(&pattern);
    }
    if (chunks != NULL) {
        shl_chunk_types_free(chunks, nchunks);
    }
    bson_free(receivers);
    if (shards != NULL) {
        cfg_shards_free(shards, nshards);
    }
    shl_collection_type_cleanup(&existing);
    shl_database_type_cleanup(&db);
    bson_destroy(&coll_doc);
    bson_destroy(&details);
    bson_destroy(&options);
    return ret;
}

/* ---------------------------------------------------------------- refineCollectionShardKey */

/* 'bound' extended with MinKey for the fields of 'new_key' it lacks -- MaxKey when the bound
 * is the old global max, so the last chunk still ends at the new global max. */
static void
extend_bound(const bson_t *bound, const bson_t *new_key, bson_t *out)
{
    bson_iter_t it;
    bool global_max = shl_shard_key_all_of_type(bound, BSON_TYPE_MAXKEY);

    bson_init(out);
    bson_copy_to_excluding_noinit(bound, out, "", NULL);
    bson_iter_init(&it, new_key);
    while (shl_iter_next(&it)) {
        if (!bson_has_field(bound, shl_iter_key(&it))) {
            if (global_max) {
                BSON_APPEND_MAXKEY(out, shl_iter_key(&it));
            } else {
                BSON_APPEND_MINKEY(out, shl_iter_key(&it));
            }
        }
    }
}

static int
cmd_refine(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *ns_str = NULL;
    shl_ns_t ns;
    bson_t key, details = BSON_INITIALIZER;
    bool has_key = false, locked = false, old_ok = false, new_ok = false;
    shl_shard_key_pattern_t old_p, new_p;
    shl_collection_type_t coll;
    shl_routing_table_t *rt = NULL;
    shl_database_type_t db;
    bson_oid_t epoch;
    shl_ts_t ts;
    bool has_index = false, index_unique = false, found_db = false;
    cfg_docs_t tags = {0};

    (void)reply;
    memset(&coll, 0, sizeof(coll));
    memset(&db, 0, sizeof(db));
    SHL_ERR(cfg_cmd_string(cmd, &ns_str, st));
    SHL_ERR(shl_ns_parse(&ns, ns_str, st));
    SHL_ERR(cfg_doc_field(cmd, "key", &key, &has_key, st));
    if (!has_key) {
        SHL_ERR(shl_idl_missing("_configsvrRefineCollectionShardKey", "key", st));
    }
    SHL_ERR(shl_shard_key_pattern_init(&new_p, &key, st));
    new_ok = true;
    cfg_lock_ns(ns.full);
    locked = true;
    SHL_ERR(cfg_load_routing_table(ns.full, &coll, &rt, st));
    SHL_ERR(shl_shard_key_pattern_init(&old_p, coll.key, st));
    old_ok = true;
    if (same_pattern(coll.key, &key)) {
        goto done; /* already the key: nothing to do */
    }
    if (!shl_shard_key_is_extended_by(&old_p, &new_p)) {
        char *a = shl_bson_as_json(coll.key);
        char *b = shl_bson_as_json(&key);
        ret = shl_status_set(st, SHL_CODE_INVALID_OPTIONS,
                             "refineCollectionShardKey must use a shard key that has the current "
                             "shard key %s as a prefix; proposed key: %s",
                             a, b);
        bson_free(a);
        bson_free(b);
        goto done;
    }
    SHL_ERR(cfg_get_database(ns.db, &db, &found_db, st));
    if (found_db) {
        SHL_ERR(shard_has_key_index(db.primary, &ns, &key, &has_index, &index_unique, st));
        if (!has_index) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "Please create an index that starts with the proposed shard key before "
                     "sharding the collection.");
        }
    }

    bson_oid_init(&epoch, NULL);
    ts = cfg_fresh_ts();
    BSON_APPEND_DOCUMENT(&details, "oldKey", coll.key);
    BSON_APPEND_DOCUMENT(&details, "newKey", &key);
    cfg_changelog(op, "refineCollectionShardKey.start", ns.full, &details);
    {
        bson_t *tq = BCON_NEW("ns", BCON_UTF8(ns.full));
        ret = cfg_find("tags", tq, NULL, &tags, st);
        bson_destroy(tq);
        if (ret != 0) {
            goto done;
        }
    }
    /* Chunks: bounds extended with MinKey, versions in the new generation (config.chunks
     * stores only major/minor, so lastmod is unchanged); the collection entry gets the new
     * key and generation. All in one applyOps: a crash leaves the old key or the new one. */
    {
        cfg_batch_t b;
        bson_t cdoc;
        cfg_batch_init(&b);
        for (size_t i = 0; i < shl_routing_table_nchunks(rt); i++) {
            shl_chunk_type_t c;
            bson_t nmin, nmax, doc;
            shl_routing_table_chunk_to_type(rt, i, &c);
            extend_bound(c.min, &key, &nmin);
            extend_bound(c.max, &key, &nmax);
            bson_destroy(c.min);
            bson_destroy(c.max);
            c.min = bson_copy(&nmin);
            c.max = bson_copy(&nmax);
            c.version = shl_chunk_version_after_refine(&c.version, &epoch, ts);
            shl_chunk_type_to_config_bson(&c, &doc);
            cfg_batch_upsert(&b, "chunks", &doc);
            bson_destroy(&doc);
            bson_destroy(&nmin);
            bson_destroy(&nmax);
            shl_chunk_type_cleanup(&c);
        }
        /* Zone ranges follow the key as the chunks do (MongoDB 7.0 refines config.tags). */
        for (size_t i = 0; i < tags.n; i++) {
            bson_t tmin, tmax, nmin, nmax, tdoc = BSON_INITIALIZER;
            bson_iter_t it;
            if (!shl_bson_get_subdoc(tags.docs[i], "min", &tmin) ||
                !shl_bson_get_subdoc(tags.docs[i], "max", &tmax) ||
                !bson_iter_init_find(&it, tags.docs[i], "_id")) {
                continue;
            }
            extend_bound(&tmin, &key, &nmin);
            extend_bound(&tmax, &key, &nmax);
            bson_copy_to_excluding_noinit(tags.docs[i], &tdoc, "min", "max", NULL);
            BSON_APPEND_DOCUMENT(&tdoc, "min", &nmin);
            BSON_APPEND_DOCUMENT(&tdoc, "max", &nmax);
            cfg_batch_upsert(&b, "tags", &tdoc);
            bson_destroy(&tdoc);
            bson_destroy(&nmin);
            bson_destroy(&nmax);
        }
        bson_destroy(coll.key);
        coll.key = bson_copy(&key);
        coll.has_epoch = true;
        coll.epoch = epoch;
        coll.timestamp = ts;
        coll.updated_at = shl_clock_wall_ms();
        shl_collection_type_to_bson(&coll, &cdoc);
        cfg_batch_upsert(&b, "collections", &cdoc);
        bson_destroy(&cdoc);
        ret = cfg_batch_commit(&b, st);
        cfg_batch_cleanup(&b);
        if (ret != 0) {
            goto done;
        }
    }
    cfg_changelog(op, "refineCollectionShardKey.end", ns.full, &details);
    cfg_flush_all_shards(ns.full);
done:
    if (locked) {
        cfg_unlock_ns(ns.full);
    }
    if (rt != NULL) {
        shl_routing_table_release(rt);
    }
    if (old_ok) {
        shl_shard_key_pattern_cleanup(&old_p);
    }
    if (new_ok) {
        shl_shard_key_pattern_cleanup(&new_p);
    }
    shl_collection_type_cleanup(&coll);
    shl_database_type_cleanup(&db);
    cfg_docs_cleanup(&tags);
    bson_destroy(&details);
    return ret;
}

static const shl_command_t create_database_cmd = {
    .name = "_configsvrCreateDatabase",
    .run = cmd_create_database,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "create a database's entry, choosing its primary shard (config server)",
};
static const shl_command_t shard_collection_cmd = {
    .name = "_configsvrShardCollection",
    .run = cmd_shard_collection,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "shard a collection (config server)",
};
static const shl_command_t refine_cmd = {
    .name = "_configsvrRefineCollectionShardKey",
    .run = cmd_refine,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "extend a collection's shard key with more fields (config server)",
};
void
cfg_register_ddl_commands(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &create_database_cmd);
    shl_command_registry_add(reg, &shard_collection_cmd);
    shl_command_registry_add(reg, &refine_cmd);
}
