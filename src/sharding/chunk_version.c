/*
 * chunk_version.c -- see chunk_version.h. Wire forms follow MongoDB 7.0's ShardVersion,
 * ChunkVersion, DatabaseVersion, StaleConfigInfo and StaleDbRoutingVersion (facts only).
 */
#include "bson/bson_iter.h"
#include "sharding/chunk_version.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "bson/bson_util.h"

/* ---- chunk versions ---- */

shl_chunk_version_t
shl_chunk_version_make(const bson_oid_t *epoch, shl_ts_t timestamp, uint32_t major, uint32_t minor)
{
    shl_chunk_version_t v;
    bson_oid_copy(epoch, &v.epoch);
    v.timestamp = timestamp;
    v.major = major;
    v.minor = minor;
    return v;
}

shl_chunk_version_t
shl_chunk_version_unsharded(void)
{
    shl_chunk_version_t v;
    memset(&v, 0, sizeof(v));
    return v;
}

shl_chunk_version_t
shl_chunk_version_ignored(void)
{
    /* MongoDB's OID::init(Date_t(), true): a zero time and every other byte 0xff. */
    shl_chunk_version_t v;
    memset(&v, 0, sizeof(v));
    memset(v.epoch.bytes + 4, 0xff, sizeof(v.epoch.bytes) - 4);
    v.timestamp = SHL_TS_MAX;
    return v;
}

shl_chunk_version_t
shl_chunk_version_first(const bson_oid_t *epoch, shl_ts_t timestamp)
{
    return shl_chunk_version_make(epoch, timestamp, 1, 0);
}

static bool
same_oid(const bson_oid_t *a, const bson_oid_t *b)
{
    return memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

bool
shl_chunk_version_is_unsharded(const shl_chunk_version_t *v)
{
    shl_chunk_version_t u = shl_chunk_version_unsharded();
    return shl_chunk_version_equal(v, &u);
}

bool
shl_chunk_version_is_ignored(const shl_chunk_version_t *v)
{
    shl_chunk_version_t g = shl_chunk_version_ignored();
    return shl_chunk_version_equal(v, &g);
}

bool
shl_chunk_version_is_set(const shl_chunk_version_t *v)
{
    return v->major != 0 || v->minor != 0;
}

bool
shl_chunk_version_same_generation(const shl_chunk_version_t *a, const shl_chunk_version_t *b)
{
    return shl_ts_eq(a->timestamp, b->timestamp) && same_oid(&a->epoch, &b->epoch);
}

bool
shl_chunk_version_equal(const shl_chunk_version_t *a, const shl_chunk_version_t *b)
{
    return shl_chunk_version_same_generation(a, b) && a->major == b->major && a->minor == b->minor;
}

bool
shl_chunk_version_is_older_than(const shl_chunk_version_t *a, const shl_chunk_version_t *b)
{
    int c = shl_ts_cmp(a->timestamp, b->timestamp);
    if (c != 0) {
        return c < 0;
    }
    if (a->major != b->major) {
        return a->major < b->major;
    }
    return a->minor < b->minor;
}

bool
shl_chunk_version_is_older_or_equal(const shl_chunk_version_t *a, const shl_chunk_version_t *b)
{
    return shl_chunk_version_is_older_than(a, b) || shl_chunk_version_equal(a, b);
}

bool
shl_chunk_version_write_compatible(const shl_chunk_version_t *a, const shl_chunk_version_t *b)
{
    return shl_chunk_version_same_generation(a, b) && a->major == b->major;
}

int
shl_chunk_version_inc_major(shl_chunk_version_t *v, shl_status_t *st)
{
    if (v->major == UINT32_MAX) {
        return shl_status_set(st, 31180,
                              "The chunk major version has reached its maximum value. Manual "
                              "intervention will be required before more chunk move, split, or "
                              "merge operations are allowed.");
    }
    v->major++;
    v->minor = 0;
    return 0;
}

int
shl_chunk_version_inc_minor(shl_chunk_version_t *v, shl_status_t *st)
{
    if (v->minor == UINT32_MAX) {
        return shl_status_set(st, 31181,
                              "The chunk minor version has reached its maximum value. Manual "
                              "intervention will be required before more chunk split or merge "
                              "operations are allowed.");
    }
    v->minor++;
    return 0;
}

void
shl_chunk_version_to_string(const shl_chunk_version_t *v, char buf[SHL_CHUNK_VERSION_STR_MAX])
{
    char oid[25];
    bson_oid_to_string(&v->epoch, oid);
    snprintf(buf, SHL_CHUNK_VERSION_STR_MAX, "%u|%u||%s||Timestamp(%u, %u)", v->major, v->minor,
             oid, v->timestamp.t, v->timestamp.i);
}

static void
append_placement_fields(bson_t *b, const shl_chunk_version_t *v)
{
    BSON_APPEND_OID(b, "e", &v->epoch);
    shl_ts_append(b, "t", v->timestamp);
    bson_append_timestamp(b, "v", 1, v->major, v->minor);
}

void
shl_chunk_version_append(bson_t *b, const char *key, const shl_chunk_version_t *v)
{
    bson_t sub;
    bson_append_document_begin(b, key, -1, &sub);
    append_placement_fields(&sub, v);
    bson_append_document_end(b, &sub);
}

/* The positional forms: [Timestamp(major, minor), epoch, <bool>?, timestamp?]. */
static int
parse_positional(const bson_iter_t *outer, shl_chunk_version_t *out, shl_status_t *st)
{
    bson_iter_t it;
    shl_chunk_version_t unsharded = shl_chunk_version_unsharded();
    shl_chunk_version_t ignored = shl_chunk_version_ignored();

    SHL_INVARIANT(bson_iter_recurse(outer, &it));
    memset(out, 0, sizeof(*out));
    if (!shl_iter_next(&it)) {
        return shl_status_set(st, SHL_CODE_BAD_VALUE, "Unexpected empty version array");
    }
    if (!BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                              "Invalid type %s for version major and minor part.",
                              shl_bson_type_name(shl_iter_type(&it)));
    }
    bson_iter_timestamp(&it, &out->major, &out->minor);
    bool more = shl_iter_next(&it);
    if (!more || !BSON_ITER_HOLDS_OID(&it)) {
        return shl_status_set(st, SHL_CODE_TYPE_MISMATCH, "Invalid type %s for version epoch part.",
                              shl_bson_type_name(more ? shl_iter_type(&it) : BSON_TYPE_EOD));
    }
    bson_oid_copy(bson_iter_oid(&it), &out->epoch);
    more = shl_iter_next(&it);
    if (more && BSON_ITER_HOLDS_BOOL(&it)) {
        /* A 5.0 router's canThrowSSVOnIgnored; parsed and ignored, as MongoDB does. */
        more = shl_iter_next(&it);
    }
    if (more && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        bson_iter_timestamp(&it, &out->timestamp.t, &out->timestamp.i);
    } else if (!more && same_oid(&out->epoch, &unsharded.epoch)) {
        out->timestamp = unsharded.timestamp;
    } else if (!more && same_oid(&out->epoch, &ignored.epoch)) {
        out->timestamp = ignored.timestamp;
    } else {
        return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                              "Invalid type %s for version timestamp part.",
                              shl_bson_type_name(more ? shl_iter_type(&it) : BSON_TYPE_EOD));
    }
    return 0;
}

/* Whether a document's keys are "0", "1", ... (BSONObj::couldBeArray). */
static bool
could_be_array(const bson_iter_t *outer)
{
    bson_iter_t it;
    int n = 0;
    char want[16];

    SHL_INVARIANT(bson_iter_recurse(outer, &it));
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        /* A key not starting with a digit is no index: no number to format (the object
         * form's "e" ends the check here on every versioned request). */
        if (k[0] < '0' || k[0] > '9') {
            return false;
        }
        snprintf(want, sizeof(want), "%d", n++);
        if (strcmp(k, want) != 0) {
            return false;
        }
    }
    return true;
}

/* The object form's fields; 'ctx' names the structure in IDL errors. */
static int
parse_object_form(const bson_iter_t *outer, const char *ctx, shl_shard_version_t *out,
                  shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool have_e = false, have_t = false, have_v = false;

    memset(out, 0, sizeof(*out));
    SHL_INVARIANT(bson_iter_recurse(outer, &it));
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "e") == 0) {
            SHL_ERR(shl_idl_read_oid(&it, ctx, &out->placement.epoch, st));
            have_e = true;
        } else if (strcmp(k, "t") == 0) {
            SHL_ERR(shl_idl_read_ts(&it, ctx, &out->placement.timestamp, st));
            have_t = true;
        } else if (strcmp(k, "v") == 0) {
            shl_ts_t v;
            SHL_ERR(shl_idl_read_ts(&it, ctx, &v, st));
            out->placement.major = v.t;
            out->placement.minor = v.i;
            have_v = true;
        } else if (strcmp(k, "i") == 0) {
            SHL_ERR(shl_idl_read_ts(&it, ctx, &out->index_version, st));
            out->has_index_version = true;
        } else if (strcmp(k, "placementConflictTime") == 0) {
            SHL_ERR(shl_idl_read_ts(&it, ctx, &out->placement_conflict_time, st));
            out->has_placement_conflict_time = true;
        }
    }
    if (!have_e) {
        SHL_ERR(shl_idl_missing(ctx, "e", st));
    }
    if (!have_t) {
        SHL_ERR(shl_idl_missing(ctx, "t", st));
    }
    if (!have_v) {
        SHL_ERR(shl_idl_missing(ctx, "v", st));
    }
done:
    return ret;
}

static int
parse_any(const bson_iter_t *it, const char *ctx, shl_shard_version_t *out, shl_status_t *st)
{
    memset(out, 0, sizeof(*out));
    if (BSON_ITER_HOLDS_ARRAY(it)) {
        return parse_positional(it, &out->placement, st);
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(it)) {
        return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                              "BSON field '%s' is the wrong type '%s', expected type 'object'",
                              shl_iter_key(it), shl_bson_type_name(shl_iter_type(it)));
    }
    if (could_be_array(it)) {
        return parse_positional(it, &out->placement, st);
    }
    return parse_object_form(it, ctx, out, st);
}

int
shl_chunk_version_parse(const bson_iter_t *it, shl_chunk_version_t *out, shl_status_t *st)
{
    shl_shard_version_t sv;
    int ret = parse_any(it, "ChunkVersion", &sv, st);
    *out = sv.placement;
    return ret;
}

/* ---- bump rules ---- */

int
shl_chunk_version_after_split(const shl_chunk_version_t *coll_version, uint32_t n,
                              shl_chunk_version_t *out, shl_status_t *st)
{
    int ret = 0;
    shl_chunk_version_t v = *coll_version;

    for (uint32_t i = 0; i < n; i++) {
        SHL_ERR(shl_chunk_version_inc_minor(&v, st));
        out[i] = v;
    }
done:
    return ret;
}

int
shl_chunk_version_after_merge(const shl_chunk_version_t *coll_version, shl_chunk_version_t *out,
                              shl_status_t *st)
{
    *out = *coll_version;
    return shl_chunk_version_inc_minor(out, st);
}

int
shl_chunk_version_after_move(const shl_chunk_version_t *coll_version, shl_chunk_version_t *moved,
                             shl_chunk_version_t *control, shl_status_t *st)
{
    int ret = 0;

    *moved = *coll_version;
    SHL_ERR(shl_chunk_version_inc_major(moved, st));
    *control = *moved;
    SHL_ERR(shl_chunk_version_inc_minor(control, st));
done:
    return ret;
}

shl_chunk_version_t
shl_chunk_version_after_refine(const shl_chunk_version_t *chunk, const bson_oid_t *new_epoch,
                               shl_ts_t new_timestamp)
{
    return shl_chunk_version_make(new_epoch, new_timestamp, chunk->major, chunk->minor);
}

/* ---- shard versions ---- */

shl_shard_version_t
shl_shard_version_make(const shl_chunk_version_t *placement)
{
    shl_shard_version_t v;
    memset(&v, 0, sizeof(v));
    v.placement = *placement;
    return v;
}

shl_shard_version_t
shl_shard_version_unsharded(void)
{
    shl_chunk_version_t p = shl_chunk_version_unsharded();
    return shl_shard_version_make(&p);
}

shl_shard_version_t
shl_shard_version_ignored(void)
{
    shl_chunk_version_t p = shl_chunk_version_ignored();
    return shl_shard_version_make(&p);
}

bool
shl_shard_version_equal(const shl_shard_version_t *a, const shl_shard_version_t *b)
{
    if (!shl_chunk_version_equal(&a->placement, &b->placement)) {
        return false;
    }
    if (a->has_index_version != b->has_index_version) {
        return false;
    }
    return !a->has_index_version || shl_ts_eq(a->index_version, b->index_version);
}

/* Timestamp(t, i) as BSON stores it: the increment, then the seconds, little-endian. */
static void
put_ts(uint8_t *at, uint32_t t, uint32_t i)
{
    uint64_t le = BSON_UINT64_TO_LE(((uint64_t)t << 32) | i);

    memcpy(at, &le, sizeof(le));
}

void
shl_shard_version_append(bson_t *b, const char *key, const shl_shard_version_t *v)
{
    bson_t sub;

    if (!v->has_index_version && !v->has_placement_conflict_time) {
        /* {e: ObjectId, t: Timestamp, v: Timestamp} written as bytes and appended whole
         * (every routed request carries one): the same bytes as the appends below. */
        uint8_t raw[42] = {42, 0, 0, 0, BSON_TYPE_OID, 'e', 0};
        bson_t view;

        memcpy(raw + 7, v->placement.epoch.bytes, 12);
        raw[19] = BSON_TYPE_TIMESTAMP;
        raw[20] = 't';
        put_ts(raw + 22, v->placement.timestamp.t, v->placement.timestamp.i);
        raw[30] = BSON_TYPE_TIMESTAMP;
        raw[31] = 'v';
        put_ts(raw + 33, v->placement.major, v->placement.minor);
        SHL_INVARIANT(bson_init_static(&view, raw, sizeof(raw)));
        bson_append_document(b, key, -1, &view);
        return;
    }
    bson_append_document_begin(b, key, -1, &sub);
    append_placement_fields(&sub, &v->placement);
    if (v->has_index_version) {
        shl_ts_append(&sub, "i", v->index_version);
    }
    if (v->has_placement_conflict_time) {
        shl_ts_append(&sub, "placementConflictTime", v->placement_conflict_time);
    }
    bson_append_document_end(b, &sub);
}

int
shl_shard_version_parse(const bson_iter_t *it, shl_shard_version_t *out, shl_status_t *st)
{
    return parse_any(it, "ShardVersion", out, st);
}

void
shl_shard_version_to_string(const shl_shard_version_t *v, char buf[SHL_CHUNK_VERSION_STR_MAX])
{
    shl_chunk_version_to_string(&v->placement, buf);
}

/* ---- database versions ---- */

shl_database_version_t
shl_database_version_new(shl_ts_t timestamp)
{
    shl_database_version_t v;
    memset(&v, 0, sizeof(v));
    v.uuid = shl_uuid_new();
    v.timestamp = timestamp;
    v.last_mod = 1;
    return v;
}

shl_database_version_t
shl_database_version_fixed(void)
{
    shl_database_version_t v = shl_database_version_new(SHL_TS_NULL);
    v.last_mod = 0;
    return v;
}

bool
shl_database_version_is_fixed(const shl_database_version_t *v)
{
    return v->last_mod == 0;
}

shl_database_version_t
shl_database_version_after_move_primary(const shl_database_version_t *v)
{
    shl_database_version_t n = *v;
    n.last_mod++;
    return n;
}

bool
shl_database_version_equal(const shl_database_version_t *a, const shl_database_version_t *b)
{
    return shl_ts_eq(a->timestamp, b->timestamp) && a->last_mod == b->last_mod;
}

bool
shl_database_version_is_older_than(const shl_database_version_t *a, const shl_database_version_t *b)
{
    int c = shl_ts_cmp(a->timestamp, b->timestamp);
    if (c != 0) {
        return c < 0;
    }
    return a->last_mod < b->last_mod;
}

void
shl_database_version_append(bson_t *b, const char *key, const shl_database_version_t *v)
{
    bson_t sub;
    bson_append_document_begin(b, key, -1, &sub);
    shl_uuid_append(&sub, "uuid", &v->uuid);
    shl_ts_append(&sub, "timestamp", v->timestamp);
    BSON_APPEND_INT32(&sub, "lastMod", v->last_mod);
    if (v->has_placement_conflict_time) {
        shl_ts_append(&sub, "placementConflictTime", v->placement_conflict_time);
    }
    bson_append_document_end(b, &sub);
}

int
shl_database_version_parse_doc(const bson_t *doc, shl_database_version_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool have_uuid = false, have_ts = false, have_mod = false;
    static const char ctx[] = "DatabaseVersion";

    memset(out, 0, sizeof(*out));
    SHL_INVARIANT(bson_iter_init(&it, doc));
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "uuid") == 0) {
            SHL_ERR(shl_idl_read_uuid(&it, ctx, &out->uuid, st));
            have_uuid = true;
        } else if (strcmp(k, "timestamp") == 0) {
            SHL_ERR(shl_idl_read_ts(&it, ctx, &out->timestamp, st));
            have_ts = true;
        } else if (strcmp(k, "lastMod") == 0) {
            SHL_ERR(shl_idl_read_int32(&it, ctx, &out->last_mod, st));
            have_mod = true;
        } else if (strcmp(k, "placementConflictTime") == 0) {
            SHL_ERR(shl_idl_read_ts(&it, ctx, &out->placement_conflict_time, st));
            out->has_placement_conflict_time = true;
        }
    }
    if (!have_uuid) {
        SHL_ERR(shl_idl_missing(ctx, "uuid", st));
    }
    if (!have_ts) {
        SHL_ERR(shl_idl_missing(ctx, "timestamp", st));
    }
    if (!have_mod) {
        SHL_ERR(shl_idl_missing(ctx, "lastMod", st));
    }
done:
    return ret;
}

int
shl_database_version_parse(const bson_iter_t *it, shl_database_version_t *out, shl_status_t *st)
{
    bson_t view;
    int ret = shl_idl_read_doc(it, "DatabaseVersion", &view, st);
    if (ret != 0) {
        memset(out, 0, sizeof(*out));
        return ret;
    }
    return shl_database_version_parse_doc(&view, out, st);
}

/* ---- stale version errors ---- */

void
shl_stale_config_info_append(const shl_stale_config_info_t *info, bson_t *b)
{
    BSON_APPEND_UTF8(b, "ns", info->ns);
    shl_shard_version_append(b, "vReceived", &info->received);
    if (info->has_wanted) {
        shl_shard_version_append(b, "vWanted", &info->wanted);
    }
    BSON_APPEND_UTF8(b, "shardId", info->shard_id);
}

/* Copy a string field into a fixed buffer; BadValue if it does not fit. */
static int
read_string_into(const bson_iter_t *it, const char *ctx, char *buf, size_t cap, shl_status_t *st)
{
    uint32_t len;
    const char *s;

    if (!BSON_ITER_HOLDS_UTF8(it)) {
        return shl_idl_wrong_type(it, ctx, "string", st);
    }
    s = bson_iter_utf8(it, &len);
    if (len >= cap) {
        return shl_status_set(st, SHL_CODE_BAD_VALUE, "%s.%s is too long (%u bytes)", ctx,
                              shl_iter_key(it), len);
    }
    memcpy(buf, s, (size_t)len + 1);
    return 0;
}

int
shl_stale_config_info_parse(const bson_t *extra, shl_stale_config_info_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool have_ns = false, have_received = false;
    static const char ctx[] = "StaleConfigInfo";

    memset(out, 0, sizeof(*out));
    SHL_INVARIANT(bson_iter_init(&it, extra));
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "ns") == 0) {
            SHL_ERR(read_string_into(&it, ctx, out->ns, sizeof(out->ns), st));
            have_ns = true;
        } else if (strcmp(k, "vReceived") == 0) {
            SHL_ERR(shl_shard_version_parse(&it, &out->received, st));
            have_received = true;
        } else if (strcmp(k, "vWanted") == 0) {
            SHL_ERR(shl_shard_version_parse(&it, &out->wanted, st));
            out->has_wanted = true;
        } else if (strcmp(k, "shardId") == 0) {
            SHL_ERR(read_string_into(&it, ctx, out->shard_id, sizeof(out->shard_id), st));
        }
    }
    if (out->shard_id[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "The shardId field is missing");
    }
    if (!have_ns) {
        SHL_ERR(shl_idl_missing(ctx, "ns", st));
    }
    if (!have_received) {
        SHL_ERR(shl_idl_missing(ctx, "vReceived", st));
    }
done:
    return ret;
}

/* Set 'code' with a formatted reason, then attach 'extra'. */
__attribute__((format(printf, 4, 0))) static int
set_with_extra(shl_status_t *st, int code, const bson_t *extra, const char *fmt, va_list ap)
{
    char reason[SHL_STATUS_REASON_MAX];
    vsnprintf(reason, sizeof(reason), fmt, ap);
    shl_status_set(st, code, "%s", reason);
    if (st != NULL) {
        shl_status_set_extra(st, extra);
    }
    return code;
}

int
shl_status_set_stale_config(shl_status_t *st, const shl_stale_config_info_t *info, const char *fmt,
                            ...)
{
    bson_t extra = BSON_INITIALIZER;
    va_list ap;
    int ret;

    shl_stale_config_info_append(info, &extra);
    va_start(ap, fmt);
    ret = set_with_extra(st, SHL_CODE_STALE_CONFIG, &extra, fmt, ap);
    va_end(ap);
    bson_destroy(&extra);
    return ret;
}

void
shl_stale_db_info_append(const shl_stale_db_info_t *info, bson_t *b)
{
    BSON_APPEND_UTF8(b, "db", info->db);
    shl_database_version_append(b, "vReceived", &info->received);
    if (info->has_wanted) {
        shl_database_version_append(b, "vWanted", &info->wanted);
    }
}

int
shl_stale_db_info_parse(const bson_t *extra, shl_stale_db_info_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool have_db = false, have_received = false;
    static const char ctx[] = "StaleDbRoutingVersion";

    memset(out, 0, sizeof(*out));
    SHL_INVARIANT(bson_iter_init(&it, extra));
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "db") == 0) {
            SHL_ERR(read_string_into(&it, ctx, out->db, sizeof(out->db), st));
            have_db = true;
        } else if (strcmp(k, "vReceived") == 0) {
            SHL_ERR(shl_database_version_parse(&it, &out->received, st));
            have_received = true;
        } else if (strcmp(k, "vWanted") == 0) {
            SHL_ERR(shl_database_version_parse(&it, &out->wanted, st));
            out->has_wanted = true;
        }
    }
    if (!have_db) {
        SHL_ERR(shl_idl_missing(ctx, "db", st));
    }
    if (!have_received) {
        SHL_ERR(shl_idl_missing(ctx, "vReceived", st));
    }
done:
    return ret;
}

int
shl_status_set_stale_db(shl_status_t *st, const shl_stale_db_info_t *info, const char *fmt, ...)
{
    bson_t extra = BSON_INITIALIZER;
    va_list ap;
    int ret;

    shl_stale_db_info_append(info, &extra);
    va_start(ap, fmt);
    ret = set_with_extra(st, SHL_CODE_STALE_DB_VERSION, &extra, fmt, ap);
    va_end(ap);
    bson_destroy(&extra);
    return ret;
}
