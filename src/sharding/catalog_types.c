/*
 * catalog_types.c -- see catalog_types.h. Field names, optionality and error texts follow
 * MongoDB 7.0's type_shard.cpp, type_database.idl, type_collection.idl and type_chunk.cpp
 * (IDL-generated parsers for databases/collections, bsonExtract-style checks for shards and
 * chunks), facts only.
 */
#include "bson/bson_iter.h"
#include "sharding/catalog_types.h"

#include <string.h>

#include "bson/bson_compare.h"
#include "bson/bson_util.h"

/* ---- bsonExtract-style helpers (shards, chunks) ---- */

static int
extract_missing(const char *field, shl_status_t *st)
{
    return shl_status_set(st, SHL_CODE_NO_SUCH_KEY, "Missing expected field \"%s\"", field);
}

static int
extract_wrong_type(const bson_iter_t *it, const char *want, shl_status_t *st)
{
    return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                          "\"%s\" had the wrong type. Expected %s, found %s", shl_iter_key(it),
                          want, shl_bson_type_name(shl_iter_type(it)));
}

static int
extract_string(const bson_t *doc, const char *field, bool required, char **out, shl_status_t *st)
{
    bson_iter_t it;
    *out = NULL;
    if (!bson_iter_init_find(&it, doc, field)) {
        return required ? extract_missing(field, st) : 0;
    }
    if (!BSON_ITER_HOLDS_UTF8(&it)) {
        return extract_wrong_type(&it, "string", st);
    }
    *out = bson_strdup(bson_iter_utf8(&it, NULL));
    return 0;
}

static bson_t *
copy_doc_at(const bson_iter_t *it)
{
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(it, &len, &data);
    return bson_new_from_data(data, len);
}

static void
append_others(bson_t *out, const bson_t *others)
{
    bson_iter_t it;
    if (others == NULL) {
        return;
    }
    SHL_INVARIANT(bson_iter_init(&it, others));
    while (shl_iter_next(&it)) {
        bson_append_iter(out, shl_iter_key(&it), -1, &it);
    }
}

/* ---- config.shards ---- */

int
shl_shard_type_parse(const bson_t *doc, shl_shard_type_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, sub;

    memset(out, 0, sizeof(*out));
    SHL_ERR(extract_string(doc, "_id", true, &out->name, st));
    SHL_ERR(extract_string(doc, "host", true, &out->host, st));
    if (out->name[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "missing _id field");
    }
    if (out->host[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "missing host field");
    }
    if (bson_iter_init_find(&it, doc, "draining")) {
        if (!BSON_ITER_HOLDS_BOOL(&it)) {
            SHL_ERR(extract_wrong_type(&it, "bool", st));
        }
        out->draining = bson_iter_bool(&it);
    }
    if (bson_iter_init_find(&it, doc, "tags")) {
        size_t n = 0;
        if (!BSON_ITER_HOLDS_ARRAY(&it)) {
            SHL_ERR(extract_wrong_type(&it, "array", st));
        }
        SHL_INVARIANT(bson_iter_recurse(&it, &sub));
        while (shl_iter_next(&sub)) {
            n++;
        }
        out->tags = bson_malloc0((n + 1) * sizeof(char *));
        SHL_INVARIANT(bson_iter_recurse(&it, &sub));
        while (shl_iter_next(&sub)) {
            if (!BSON_ITER_HOLDS_UTF8(&sub)) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "Elements in \"tags\" array must be strings but found %s",
                         shl_bson_type_name(shl_iter_type(&sub)));
            }
            out->tags[out->ntags++] = bson_strdup(bson_iter_utf8(&sub, NULL));
        }
    }
    if (bson_iter_init_find(&it, doc, "state")) {
        if (!BSON_ITER_HOLDS_NUMBER(&it)) {
            SHL_ERR(extract_wrong_type(&it, "number", st));
        }
        out->state = (int32_t)bson_iter_as_int64(&it);
        out->has_state = true;
        if (out->state != SHL_SHARD_STATE_NOT_SHARD_AWARE &&
            out->state != SHL_SHARD_STATE_SHARD_AWARE) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Invalid shard state value: %d", out->state);
        }
    }
    if (bson_iter_init_find(&it, doc, "topologyTime")) {
        if (!BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            SHL_ERR(extract_wrong_type(&it, "timestamp", st));
        }
        bson_iter_timestamp(&it, &out->topology_time.t, &out->topology_time.i);
        out->has_topology_time = true;
    }
    if (bson_iter_init_find(&it, doc, "replSetConfigVersion")) {
        if (!BSON_ITER_HOLDS_NUMBER(&it)) {
            SHL_ERR(extract_wrong_type(&it, "number", st));
        }
        out->repl_set_config_version = bson_iter_as_int64(&it);
        out->has_repl_set_config_version = true;
        if (out->repl_set_config_version < 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "replSetConfigVersion can't be negative");
        }
    }
done:
    if (ret != 0) {
        shl_shard_type_cleanup(out);
    }
    return ret;
}

void
shl_shard_type_to_bson(const shl_shard_type_t *t, bson_t *out)
{
    bson_init(out);
    BSON_APPEND_UTF8(out, "_id", t->name);
    BSON_APPEND_UTF8(out, "host", t->host);
    if (t->draining) {
        BSON_APPEND_BOOL(out, "draining", true);
    }
    if (t->tags != NULL) {
        bson_t arr;
        char idx[16];
        const char *key;
        BSON_APPEND_ARRAY_BEGIN(out, "tags", &arr);
        for (size_t i = 0; i < t->ntags; i++) {
            bson_uint32_to_string((uint32_t)i, &key, idx, sizeof(idx));
            BSON_APPEND_UTF8(&arr, key, t->tags[i]);
        }
        bson_append_array_end(out, &arr);
    }
    if (t->has_state) {
        BSON_APPEND_INT32(out, "state", t->state);
    }
    if (t->has_topology_time) {
        shl_ts_append(out, "topologyTime", t->topology_time);
    }
    if (t->has_repl_set_config_version) {
        BSON_APPEND_INT64(out, "replSetConfigVersion", t->repl_set_config_version);
    }
}

void
shl_shard_type_cleanup(shl_shard_type_t *t)
{
    bson_free(t->name);
    bson_free(t->host);
    for (size_t i = 0; i < t->ntags; i++) {
        bson_free(t->tags[i]);
    }
    bson_free(t->tags);
    memset(t, 0, sizeof(*t));
}

/* ---- config.databases ---- */

static int
idl_string(const bson_iter_t *it, const char *ctx, char **out, shl_status_t *st)
{
    if (!BSON_ITER_HOLDS_UTF8(it)) {
        return shl_idl_wrong_type(it, ctx, "string", st);
    }
    bson_free(*out);
    *out = bson_strdup(bson_iter_utf8(it, NULL));
    return 0;
}

int
shl_database_type_parse(const bson_t *doc, shl_database_type_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool have_version = false;
    static const char ctx[] = "DatabaseType";

    memset(out, 0, sizeof(*out));
    SHL_INVARIANT(bson_iter_init(&it, doc));
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "_id") == 0) {
            SHL_ERR(idl_string(&it, ctx, &out->name, st));
        } else if (strcmp(k, "primary") == 0) {
            SHL_ERR(idl_string(&it, ctx, &out->primary, st));
        } else if (strcmp(k, "version") == 0) {
            SHL_ERR(shl_database_version_parse(&it, &out->version, st));
            have_version = true;
        }
    }
    if (out->name == NULL) {
        SHL_ERR(shl_idl_missing(ctx, "_id", st));
    }
    if (out->primary == NULL) {
        SHL_ERR(shl_idl_missing(ctx, "primary", st));
    }
    if (!have_version) {
        SHL_ERR(shl_idl_missing(ctx, "version", st));
    }
    SHL_ERR(shl_ns_check_db(out->name, st));
    if (out->primary[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "ShardId cannot be empty");
    }
done:
    if (ret != 0) {
        shl_database_type_cleanup(out);
    }
    return ret;
}

void
shl_database_type_to_bson(const shl_database_type_t *t, bson_t *out)
{
    bson_init(out);
    BSON_APPEND_UTF8(out, "_id", t->name);
    BSON_APPEND_UTF8(out, "primary", t->primary);
    shl_database_version_append(out, "version", &t->version);
}

void
shl_database_type_cleanup(shl_database_type_t *t)
{
    bson_free(t->name);
    bson_free(t->primary);
    memset(t, 0, sizeof(*t));
}

/* ---- config.collections ---- */

static int
idl_int64(const bson_iter_t *it, const char *ctx, int64_t *out, shl_status_t *st)
{
    /* IDL safeInt64: int, long, or a double holding an integral value. */
    if (BSON_ITER_HOLDS_INT32(it) || BSON_ITER_HOLDS_INT64(it)) {
        *out = bson_iter_as_int64(it);
        return 0;
    }
    if (BSON_ITER_HOLDS_DOUBLE(it)) {
        double d = bson_iter_double(it);
        if (d == (double)(int64_t)d) {
            *out = (int64_t)d;
            return 0;
        }
    }
    return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                          "BSON field '%s.%s' is the wrong type '%s', expected types '[long, "
                          "int, decimal, double]'",
                          ctx, shl_iter_key(it), shl_bson_type_name(shl_iter_type(it)));
}

int
shl_collection_type_parse(const bson_t *doc, shl_collection_type_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool have_lastmod = false, have_ts = false, have_uuid = false;
    static const char ctx[] = "CollectionType";
    shl_ns_t ns;

    memset(out, 0, sizeof(*out));
    SHL_INVARIANT(bson_iter_init(&it, doc));
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "_id") == 0) {
            SHL_ERR(idl_string(&it, ctx, &out->ns, st));
        } else if (strcmp(k, "lastmodEpoch") == 0) {
            SHL_ERR(shl_idl_read_oid(&it, ctx, &out->epoch, st));
            out->has_epoch = true;
        } else if (strcmp(k, "lastmod") == 0) {
            if (!BSON_ITER_HOLDS_DATE_TIME(&it)) {
                SHL_ERR(shl_idl_wrong_type(&it, ctx, "date", st));
            }
            out->updated_at = bson_iter_date_time(&it);
            have_lastmod = true;
        } else if (strcmp(k, "timestamp") == 0) {
            SHL_ERR(shl_idl_read_ts(&it, ctx, &out->timestamp, st));
            have_ts = true;
        } else if (strcmp(k, "uuid") == 0) {
            SHL_ERR(shl_idl_read_uuid(&it, ctx, &out->uuid, st));
            have_uuid = true;
        } else if (strcmp(k, "key") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
                SHL_ERR(shl_idl_wrong_type(&it, ctx, "object", st));
            }
            bson_destroy(out->key);
            out->key = copy_doc_at(&it);
        } else if (strcmp(k, "defaultCollation") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
                SHL_ERR(shl_idl_wrong_type(&it, ctx, "object", st));
            }
            bson_destroy(out->default_collation);
            out->default_collation = copy_doc_at(&it);
        } else if (strcmp(k, "unique") == 0) {
            SHL_ERR(shl_idl_read_bool(&it, ctx, &out->unique, st));
        } else if (strcmp(k, "maxChunkSizeBytes") == 0) {
            SHL_ERR(idl_int64(&it, ctx, &out->max_chunk_size_bytes, st));
            out->has_max_chunk_size_bytes = true;
        } else if (strcmp(k, "defragmentCollection") == 0) {
            SHL_ERR(shl_idl_read_bool(&it, ctx, &out->defragment_collection, st));
            out->has_defragment_collection = true;
        } else if (strcmp(k, "enableAutoMerge") == 0) {
            SHL_ERR(shl_idl_read_bool(&it, ctx, &out->enable_auto_merge, st));
            out->has_enable_auto_merge = true;
        } else if (strcmp(k, "noBalance") == 0) {
            SHL_ERR(shl_idl_read_bool(&it, ctx, &out->no_balance, st));
        } else if (strcmp(k, "allowMigrations") == 0) {
            SHL_ERR(shl_idl_read_bool(&it, ctx, &out->allow_migrations, st));
            out->has_allow_migrations = true;
        } else if (strcmp(k, "permitMigrations") == 0) {
            SHL_ERR(shl_idl_read_bool(&it, ctx, &out->permit_migrations, st));
            out->has_permit_migrations = true;
        } else if (strcmp(k, "indexVersion") == 0) {
            SHL_ERR(shl_idl_read_ts(&it, ctx, &out->index_version, st));
            out->has_index_version = true;
        } else {
            if (out->others == NULL) {
                out->others = bson_new();
            }
            bson_append_iter(out->others, k, -1, &it);
        }
    }
    if (out->ns == NULL) {
        SHL_ERR(shl_idl_missing(ctx, "_id", st));
    }
    if (!have_lastmod) {
        SHL_ERR(shl_idl_missing(ctx, "lastmod", st));
    }
    if (!have_ts) {
        SHL_ERR(shl_idl_missing(ctx, "timestamp", st));
    }
    if (!have_uuid) {
        SHL_ERR(shl_idl_missing(ctx, "uuid", st));
    }
    if (out->key == NULL) {
        SHL_ERR(shl_idl_missing(ctx, "key", st));
    }
    SHL_ERR(shl_ns_parse(&ns, out->ns, st));
done:
    if (ret != 0) {
        shl_collection_type_cleanup(out);
    }
    return ret;
}

void
shl_collection_type_to_bson(const shl_collection_type_t *t, bson_t *out)
{
    bson_init(out);
    BSON_APPEND_UTF8(out, "_id", t->ns);
    if (t->has_epoch) {
        BSON_APPEND_OID(out, "lastmodEpoch", &t->epoch);
    }
    BSON_APPEND_DATE_TIME(out, "lastmod", t->updated_at);
    shl_ts_append(out, "timestamp", t->timestamp);
    shl_uuid_append(out, "uuid", &t->uuid);
    BSON_APPEND_DOCUMENT(out, "key", t->key);
    if (t->default_collation != NULL) {
        BSON_APPEND_DOCUMENT(out, "defaultCollation", t->default_collation);
    }
    BSON_APPEND_BOOL(out, "unique", t->unique);
    if (t->has_max_chunk_size_bytes) {
        BSON_APPEND_INT64(out, "maxChunkSizeBytes", t->max_chunk_size_bytes);
    }
    if (t->has_defragment_collection) {
        BSON_APPEND_BOOL(out, "defragmentCollection", t->defragment_collection);
    }
    if (t->has_enable_auto_merge) {
        BSON_APPEND_BOOL(out, "enableAutoMerge", t->enable_auto_merge);
    }
    BSON_APPEND_BOOL(out, "noBalance", t->no_balance);
    if (t->has_allow_migrations) {
        BSON_APPEND_BOOL(out, "allowMigrations", t->allow_migrations);
    }
    if (t->has_permit_migrations) {
        BSON_APPEND_BOOL(out, "permitMigrations", t->permit_migrations);
    }
    if (t->has_index_version) {
        shl_ts_append(out, "indexVersion", t->index_version);
    }
    append_others(out, t->others);
}

void
shl_collection_type_cleanup(shl_collection_type_t *t)
{
    bson_free(t->ns);
    if (t->key != NULL) {
        bson_destroy(t->key);
    }
    if (t->default_collation != NULL) {
        bson_destroy(t->default_collation);
    }
    if (t->others != NULL) {
        bson_destroy(t->others);
    }
    memset(t, 0, sizeof(*t));
}

shl_chunk_version_t
shl_collection_type_generation(const shl_collection_type_t *t)
{
    bson_oid_t zero;
    memset(&zero, 0, sizeof(zero));
    return shl_chunk_version_make(t->has_epoch ? &t->epoch : &zero, t->timestamp, 0, 0);
}

/* ---- config.chunks ---- */

void
shl_chunk_type_set_history(shl_chunk_type_t *c, const shl_chunk_history_t *h, size_t n)
{
    shl_chunk_history_t *nh = n > 0 ? bson_malloc0(n * sizeof(*nh)) : NULL;
    for (size_t i = 0; i < n; i++) {
        nh[i].valid_after = h[i].valid_after;
        nh[i].shard = bson_strdup(h[i].shard);
    }
    for (size_t i = 0; i < c->nhistory; i++) {
        bson_free(c->history[i].shard);
    }
    bson_free(c->history);
    c->history = nh;
    c->nhistory = n;
}

/* Parse the fields both forms share: shard, history, onCurrentShardSince, lastmod. */
static int
parse_chunk_base(const bson_t *doc, const shl_chunk_version_t *generation, shl_chunk_type_t *out,
                 shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, arr;

    SHL_ERR(extract_string(doc, "shard", true, &out->shard, st));
    if (bson_iter_init_find(&it, doc, "history")) {
        size_t n = 0;
        if (!BSON_ITER_HOLDS_ARRAY(&it)) {
            SHL_ERR(extract_wrong_type(&it, "array", st));
        }
        SHL_INVARIANT(bson_iter_recurse(&it, &arr));
        while (shl_iter_next(&arr)) {
            n++;
        }
        out->history = n > 0 ? bson_malloc0(n * sizeof(shl_chunk_history_t)) : NULL;
        SHL_INVARIANT(bson_iter_recurse(&it, &arr));
        while (shl_iter_next(&arr)) {
            bson_t entry;
            bson_iter_t f;
            shl_chunk_history_t *h = &out->history[out->nhistory];
            bool have_va = false;
            if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "array element does not have the object type: %d",
                         (int)shl_iter_type(&arr));
            }
            SHL_ERR(shl_idl_read_doc(&arr, "chunk history array", &entry, st));
            out->nhistory++;
            SHL_INVARIANT(bson_iter_init(&f, &entry));
            while (shl_iter_next(&f)) {
                if (strcmp(shl_iter_key(&f), "validAfter") == 0) {
                    SHL_ERR(shl_idl_read_ts(&f, "ChunkHistoryBase", &h->valid_after, st));
                    have_va = true;
                } else if (strcmp(shl_iter_key(&f), "shard") == 0) {
                    SHL_ERR(idl_string(&f, "ChunkHistoryBase", &h->shard, st));
                }
            }
            if (!have_va) {
                SHL_ERR(shl_idl_missing("ChunkHistoryBase", "validAfter", st));
            }
            if (h->shard == NULL) {
                SHL_ERR(shl_idl_missing("ChunkHistoryBase", "shard", st));
            }
        }
    }
    if (out->nhistory > 0 && bson_iter_init_find(&it, doc, "onCurrentShardSince")) {
        char a[40], b[40];
        if (!BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            SHL_ERR(extract_wrong_type(&it, "timestamp", st));
        }
        bson_iter_timestamp(&it, &out->on_current_shard_since.t, &out->on_current_shard_since.i);
        out->has_on_current_shard_since = true;
        if (!shl_ts_eq(out->history[0].valid_after, out->on_current_shard_since)) {
            shl_ts_to_string(out->history[0].valid_after, a);
            shl_ts_to_string(out->on_current_shard_since, b);
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "The first `validAfter` in the chunk's history is not consistent with "
                     "`onCurrentShardSince`: validAfter is %s while onCurrentShardSince is %s",
                     a, b);
        }
    }
    if (!bson_iter_init_find(&it, doc, "lastmod")) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "No version found");
    }
    out->version = *generation;
    if (BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        bson_iter_timestamp(&it, &out->version.major, &out->version.minor);
    } else if (BSON_ITER_HOLDS_DATE_TIME(&it)) {
        uint64_t combined = (uint64_t)bson_iter_date_time(&it);
        out->version.major = (uint32_t)(combined >> 32);
        out->version.minor = (uint32_t)combined;
    } else {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "The field lastmod cannot be parsed.");
    }
done:
    return ret;
}

/* A chunk bound: a non-empty object. */
static int
extract_bound(const bson_t *doc, const char *field, const char *ctx, bson_t **out, shl_status_t *st)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, field)) {
        return shl_idl_missing(ctx, field, st);
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return shl_idl_wrong_type(&it, ctx, "object", st);
    }
    *out = copy_doc_at(&it);
    if (bson_empty(*out)) {
        return shl_status_set(st, SHL_CODE_BAD_VALUE, "%s field is empty",
                              strcmp(field, "_id") == 0 ? "min" : field);
    }
    return 0;
}

static int
check_range(const bson_t *min, const bson_t *max, shl_status_t *st)
{
    int ret = 0;
    char *a = NULL, *b = NULL;
    if (shl_bson_doc_compare(min, max) >= 0) {
        a = shl_bson_to_string(min);
        b = shl_bson_to_string(max);
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "min: %s should be less than max: %s", a, b);
    }
done:
    bson_free(a);
    bson_free(b);
    return ret;
}

int
shl_chunk_type_parse_config(const bson_t *doc, const shl_chunk_version_t *generation,
                            shl_chunk_type_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    memset(out, 0, sizeof(*out));
    SHL_ERR(parse_chunk_base(doc, generation, out, st));
    if (!bson_iter_init_find(&it, doc, "uuid")) {
        SHL_ERR(extract_missing("uuid", st));
    }
    SHL_ERR(shl_idl_read_uuid(&it, "ChunkType", &out->uuid, st));
    out->has_uuid = true;
    if (!bson_iter_init_find(&it, doc, "_id")) {
        SHL_ERR(extract_missing("_id", st));
    }
    if (!BSON_ITER_HOLDS_OID(&it)) {
        SHL_ERR(extract_wrong_type(&it, "objectId", st));
    }
    bson_oid_copy(bson_iter_oid(&it), &out->id);
    out->has_id = true;
    SHL_ERR(extract_bound(doc, "min", "ChunkRange", &out->min, st));
    SHL_ERR(extract_bound(doc, "max", "ChunkRange", &out->max, st));
    SHL_ERR(check_range(out->min, out->max, st));
    if (bson_iter_init_find(&it, doc, "estimatedDataSizeBytes")) {
        if (!BSON_ITER_HOLDS_NUMBER(&it)) {
            SHL_ERR(extract_wrong_type(&it, "number", st));
        }
        out->estimated_size_bytes = bson_iter_as_int64(&it);
        out->has_estimated_size = true;
    }
    if (bson_iter_init_find(&it, doc, "jumbo")) {
        if (!BSON_ITER_HOLDS_BOOL(&it)) {
            SHL_ERR(extract_wrong_type(&it, "bool", st));
        }
        out->jumbo = bson_iter_bool(&it);
    }
done:
    if (ret != 0) {
        shl_chunk_type_cleanup(out);
    }
    return ret;
}

static void
append_history(bson_t *out, const shl_chunk_type_t *c)
{
    bson_t arr, entry;
    char idx[16];
    const char *key;

    if (c->nhistory == 0) {
        return;
    }
    if (c->has_on_current_shard_since) {
        shl_ts_append(out, "onCurrentShardSince", c->on_current_shard_since);
    }
    BSON_APPEND_ARRAY_BEGIN(out, "history", &arr);
    for (size_t i = 0; i < c->nhistory; i++) {
        bson_uint32_to_string((uint32_t)i, &key, idx, sizeof(idx));
        BSON_APPEND_DOCUMENT_BEGIN(&arr, key, &entry);
        shl_ts_append(&entry, "validAfter", c->history[i].valid_after);
        BSON_APPEND_UTF8(&entry, "shard", c->history[i].shard);
        bson_append_document_end(&arr, &entry);
    }
    bson_append_array_end(out, &arr);
}

void
shl_chunk_type_to_config_bson(const shl_chunk_type_t *c, bson_t *out)
{
    bson_init(out);
    if (c->has_id) {
        BSON_APPEND_OID(out, "_id", &c->id);
    }
    if (c->has_uuid) {
        shl_uuid_append(out, "uuid", &c->uuid);
    }
    if (c->min != NULL) {
        BSON_APPEND_DOCUMENT(out, "min", c->min);
    }
    if (c->max != NULL) {
        BSON_APPEND_DOCUMENT(out, "max", c->max);
    }
    if (c->shard != NULL) {
        BSON_APPEND_UTF8(out, "shard", c->shard);
    }
    bson_append_timestamp(out, "lastmod", -1, c->version.major, c->version.minor);
    if (c->has_estimated_size) {
        BSON_APPEND_INT64(out, "estimatedDataSizeBytes", c->estimated_size_bytes);
    }
    if (c->jumbo) {
        BSON_APPEND_BOOL(out, "jumbo", true);
    }
    append_history(out, c);
}

int
shl_chunk_type_parse_shard(const bson_t *doc, const shl_chunk_version_t *generation,
                           shl_chunk_type_t *out, shl_status_t *st)
{
    int ret = 0;

    memset(out, 0, sizeof(*out));
    SHL_ERR(parse_chunk_base(doc, generation, out, st));
    SHL_ERR(extract_bound(doc, "_id", "ChunkType", &out->min, st));
    SHL_ERR(extract_bound(doc, "max", "ChunkType", &out->max, st));
    SHL_ERR(check_range(out->min, out->max, st));
done:
    if (ret != 0) {
        shl_chunk_type_cleanup(out);
    }
    return ret;
}

void
shl_chunk_type_to_shard_bson(const shl_chunk_type_t *c, bson_t *out)
{
    SHL_INVARIANT(c->min != NULL && c->max != NULL && c->shard != NULL);
    bson_init(out);
    BSON_APPEND_DOCUMENT(out, "_id", c->min);
    BSON_APPEND_DOCUMENT(out, "max", c->max);
    BSON_APPEND_UTF8(out, "shard", c->shard);
    bson_append_timestamp(out, "lastmod", -1, c->version.major, c->version.minor);
    append_history(out, c);
}

int
shl_chunk_type_validate(const shl_chunk_type_t *c, shl_status_t *st)
{
    int ret = 0;

    if (!shl_chunk_version_is_set(&c->version)) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "missing version field");
    }
    if (c->shard == NULL || c->shard[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "missing shard field");
    }
    if (c->min == NULL || c->max == NULL) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "missing range field");
    }
    SHL_ERR(check_range(c->min, c->max, st));
    if (c->nhistory > 0) {
        if (strcmp(c->history[0].shard, c->shard) != 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "Latest entry of chunk history refer to shard %s that does not match the "
                     "current shard %s",
                     c->history[0].shard, c->shard);
        }
        if (c->has_on_current_shard_since &&
            !shl_ts_eq(c->history[0].valid_after, c->on_current_shard_since)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "The first `validAfter` in the chunk's `history` is not consistent with "
                     "`onCurrentShardSince`");
        }
    }
done:
    return ret;
}

void
shl_chunk_type_copy(const shl_chunk_type_t *src, shl_chunk_type_t *dst)
{
    *dst = *src;
    dst->min = src->min ? bson_copy(src->min) : NULL;
    dst->max = src->max ? bson_copy(src->max) : NULL;
    dst->shard = src->shard ? bson_strdup(src->shard) : NULL;
    dst->history = NULL;
    dst->nhistory = 0;
    shl_chunk_type_set_history(dst, src->history, src->nhistory);
}

void
shl_chunk_type_cleanup(shl_chunk_type_t *c)
{
    if (c->min != NULL) {
        bson_destroy(c->min);
    }
    if (c->max != NULL) {
        bson_destroy(c->max);
    }
    bson_free(c->shard);
    shl_chunk_type_set_history(c, NULL, 0);
    memset(c, 0, sizeof(*c));
}
