/*
 * change_stream.c -- see change_stream.h. The stream's state is a position in the oplog
 * (every entry at or below 'last_ts' has been turned into events) and a queue of the events
 * of the last entry read; each batch reads the oplog in a fresh snapshot ("round") up to the
 * no-holes point, like a tailable cursor, and feeds the events to the follow-on stages.
 * docs/design/change_streams.md.
 */
#include "bson/bson_iter.h"
#include "db/change_stream.h"

#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "bson/bson_path.h"
#include "bson/bson_util.h"
#include "bson/event_split.h"
#include "bson/resume_token.h"
#include "bson/update_diff.h"
#include "db/db_private.h"
#include "db/sharding_hooks.h"
#include "net/command_args.h"
#include "net/message.h"
#include "net/server.h"
#include "session/session_commands.h"
#include "storage/index.h"
#include "storage/oplog.h"
#include "storage/record_store.h"
#include "storage/write.h"

typedef enum { CS_COLL, CS_DB, CS_CLUSTER } cs_scope_t;
typedef enum { FD_DEFAULT, FD_UPDATE_LOOKUP, FD_WHEN_AVAILABLE, FD_REQUIRED } fd_mode_t;
typedef enum { FDBC_OFF, FDBC_WHEN_AVAILABLE, FDBC_REQUIRED } fdbc_mode_t;

/* awaitData getMores wait 1 s by default (MongoDB's default await time). */
#define CS_AWAIT_DEFAULT_MS 1000
#define CS_AWAIT_SLICE_US 500000

typedef struct cs_state {
    shl_storage_engine_t *eng;
    shl_op_ctx_t *op; /* the operation running the current batch */
    cs_scope_t scope;
    char db[SHL_NS_MAX + 1];
    char coll[SHL_NS_MAX + 1];
    fd_mode_t fd;
    fdbc_mode_t fdbc;
    bool expanded;   /* showExpandedEvents */
    bool migrations; /* showMigrationEvents (internal) */
    /* Position: every entry with ts <= last_ts has been read. */
    uint64_t last_ts;
    /* Resuming: events at or below this token are skipped (NULL: none). */
    char *skip_hex;
    uint64_t skip_ts;
    bool must_find; /* resumeAfter/startAfter on a client stream: the token's event must exist */
    bool found;
    /* The current round (NULL between batches). */
    shl_storage_txn_t *txn;
    shl_record_cursor_t *cur;
    uint64_t round_hwm;
    bool exhausted; /* the last pull reached the end of the visible oplog */
    /* Events of the last entry read, handed out in order. */
    bson_t **pending;
    size_t npending, ipending, cap;
    bson_t *out;     /* the event handed out last (owned) */
    char *last_hex;  /* its token */
    bool ended;      /* an invalidate was queued: nothing follows it */
    bool ended_sent; /* the invalidate was handed out */
    shl_pipeline_t *pl;
    /* $changeStreamSplitLargeEvent: an event over 16 MB goes out as fragments, handed out
     * from 'frags' (owned) before the pipeline is asked for more. */
    bool split;
    bson_t **frags;
    size_t nfrags, ifrag;
    /* Resuming from a fragment's token: its event is kept and its fragments up to this one
     * skipped (NULL: none). */
    char *skip_frag_hex;
} cs_state_t;

/* ---------------------------------------------------------------- helpers */

static bool
internal_db(const char *db)
{
    return strcmp(db, "admin") == 0 || strcmp(db, "config") == 0 || strcmp(db, "local") == 0;
}

/* Whether namespace 'ns' ("db.coll") is one the stream reports. */
static bool
ns_watched(const cs_state_t *s, const char *ns)
{
    const char *dot = strchr(ns, '.');
    size_t dlen;

    if (dot == NULL) {
        return false;
    }
    dlen = (size_t)(dot - ns);
    switch (s->scope) {
    case CS_COLL:
        return strlen(s->db) == dlen && strncmp(ns, s->db, dlen) == 0 &&
               strcmp(dot + 1, s->coll) == 0;
    case CS_DB:
        return strlen(s->db) == dlen && strncmp(ns, s->db, dlen) == 0 &&
               strncmp(dot + 1, "system.", 7) != 0;
    case CS_CLUSTER: {
        char db[SHL_NS_MAX + 1];
        snprintf(db, sizeof(db), "%.*s", (int)dlen, ns);
        return !internal_db(db) && strncmp(dot + 1, "system.", 7) != 0;
    }
    }
    return false;
}

static bool
db_watched(const cs_state_t *s, const char *db)
{
    return s->scope == CS_CLUSTER ? !internal_db(db) : strcmp(s->db, db) == 0;
}

static void
append_ns(bson_t *ev, const char *key, const char *ns)
{
    bson_t d;
    const char *dot = strchr(ns, '.');
    bson_append_document_begin(ev, key, -1, &d);
    if (dot != NULL) {
        bson_append_utf8(&d, "db", 2, ns, (int)(dot - ns));
        BSON_APPEND_UTF8(&d, "coll", dot + 1);
    } else {
        BSON_APPEND_UTF8(&d, "db", ns);
    }
    bson_append_document_end(ev, &d);
}

static void
push_event(cs_state_t *s, bson_t *ev)
{
    if (s->npending == s->cap) {
        s->cap = s->cap * 2 + 4;
        s->pending = bson_realloc(s->pending, s->cap * sizeof(*s->pending));
    }
    s->pending[s->npending++] = ev;
}

static void
clear_pending(cs_state_t *s)
{
    for (size_t i = s->ipending; i < s->npending; i++) {
        bson_destroy(s->pending[i]);
    }
    s->npending = s->ipending = 0;
}

/* documentKey: the shard key's fields (on a shard) then _id, from 'doc' (the document), or
 * else 'key' (an update's o2 or a delete's o, which on a sharded collection holds the
 * shard key's fields too) as it is. */
static void
append_document_key(const cs_state_t *s, const char *ns, const bson_t *doc, const bson_t *key,
                    bson_t *ev)
{
    bson_t dk;
    bson_iter_t it;

    if (doc != NULL) {
        shl_db_document_key(s->op, ns, doc, &dk);
        if (!bson_has_field(&dk, "_id") && key != NULL &&
            bson_iter_init_find(&it, key, "_id")) {
            bson_append_iter(&dk, "_id", 3, &it);
        }
    } else {
        bson_init(&dk);
        if (key != NULL) {
            bson_concat(&dk, key);
        }
    }
    BSON_APPEND_DOCUMENT(ev, "documentKey", &dk);
    bson_destroy(&dk);
}

/* The event identifier of a token (version 2): {operationType, documentKey} for document
 * events, {operationType, operationDescription} for DDL ones. */
static void
token_for(const bson_t *ev, uint64_t ts, int64_t txn_op_index, const uint8_t *uuid,
          bool from_invalidate, bson_t *out_ev_id, shl_resume_token_t *t)
{
    bson_iter_t it;

    bson_init(out_ev_id);
    if (bson_iter_init_find(&it, ev, "operationType")) {
        bson_append_iter(out_ev_id, "operationType", -1, &it);
    }
    if (bson_iter_init_find(&it, ev, "documentKey")) {
        bson_append_iter(out_ev_id, "documentKey", -1, &it);
    } else if (bson_iter_init_find(&it, ev, "to")) {
        bson_append_iter(out_ev_id, "operationDescription", -1, &it);
    }
    memset(t, 0, sizeof(*t));
    t->cluster_time = ts;
    t->version = SHL_RESUME_TOKEN_VERSION;
    t->token_type = SHL_RESUME_TOKEN_EVENT;
    t->txn_op_index = txn_op_index;
    t->from_invalidate = from_invalidate;
    if (uuid != NULL) {
        t->has_uuid = true;
        memcpy(t->uuid, uuid, 16);
    }
    t->event_id = out_ev_id;
}

/* Whether the document 'it' holds is empty. */
static bool
empty_doc_iter(const bson_iter_t *it)
{
    bson_iter_t sub;
    return bson_iter_recurse(it, &sub) && !bson_iter_next(&sub);
}

/*
 * Finish an event: prepend _id (its token) to the fields built in 'body' and queue it,
 * unless a resume skips it. Returns true when queued.
 */
static bool
queue_event(cs_state_t *s, bson_t *body, uint64_t ts, int64_t txn_op_index, const uint8_t *uuid,
            bool from_invalidate)
{
    bson_t ev_id, *ev;
    shl_resume_token_t t;
    char *hex;
    bool skip = false;

    token_for(body, ts, txn_op_index, uuid, from_invalidate, &ev_id, &t);
    hex = shl_resume_token_hex(&t);
    if (s->skip_hex != NULL && s->split && shl_event_is_fragment_of(s->skip_hex, hex)) {
        /* The token is one of this event's fragments (which sort after it): the rest of
         * them follow. */
        s->found = true;
        bson_free(s->skip_frag_hex);
        s->skip_frag_hex = bson_strdup(s->skip_hex);
    } else if (s->skip_hex != NULL && strcmp(hex, s->skip_hex) <= 0) {
        skip = true;
        if (strcmp(hex, s->skip_hex) == 0) {
            s->found = true;
        }
    }
    if (!skip) {
        ev = bson_new();
        shl_resume_token_append(ev, "_id", &t);
        bson_concat(ev, body);
        push_event(s, ev);
    }
    bson_free(hex);
    bson_destroy(&ev_id);
    return !skip;
}

static void
append_common(bson_t *ev, const char *type, uint64_t ts, const bson_t *entry)
{
    bson_iter_t it;
    BSON_APPEND_UTF8(ev, "operationType", type);
    BSON_APPEND_TIMESTAMP(ev, "clusterTime", SHL_TS_SECS(ts), SHL_TS_INC(ts));
    if (bson_iter_init_find(&it, entry, "wall") && BSON_ITER_HOLDS_DATE_TIME(&it)) {
        bson_append_iter(ev, "wallTime", -1, &it);
    }
}

static void
append_session(bson_t *ev, const bson_t *txn_entry)
{
    bson_iter_t it;
    if (txn_entry == NULL) {
        return;
    }
    if (bson_iter_init_find(&it, txn_entry, "lsid") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_append_iter(ev, "lsid", -1, &it);
    }
    if (bson_iter_init_find(&it, txn_entry, "txnNumber")) {
        bson_append_iter(ev, "txnNumber", -1, &it);
    }
}

/* The current version of the document with 'key''s _id in 'ns', for updateLookup. */
static int
lookup_document(cs_state_t *s, const char *ns, const bson_t *key, bson_t *out, bool *found,
                shl_status_t *st)
{
    int ret = 0;
    shl_coll_handle_t h;
    shl_storage_txn_t *txn = NULL;
    bson_iter_t it;
    bool locked = false;

    bson_init(out);
    *found = false;
    if (!bson_iter_init_find(&it, key, "_id")) {
        goto done;
    }
    SHL_ERR(shl_storage_coll_acquire(s->eng, ns, SHL_LOCK_SHARED, &h, st));
    locked = true;
    if (h.coll == NULL) {
        goto done;
    }
    SHL_ERR(shl_storage_txn_begin(s->eng, NULL, &txn, st));
    bson_destroy(out);
    SHL_ERR(shl_doc_find_by_id(txn, h.coll, bson_iter_value(&it), out, NULL, found, st));
done:
    if (txn != NULL) {
        shl_storage_txn_abort(txn);
    }
    if (locked) {
        shl_storage_coll_release(&h);
    }
    return ret;
}

/*
 * The pre-image of the write at 'ts' (op 'index' of its entry) to collection 'uuid', read in
 * the round's snapshot from config.system.preimages (storage/write.h), where the write's
 * transaction put it. An entry written before pre-images moved there carries it as
 * 'preImage'. *found false: none (not enabled then, or expired).
 */
static int
find_pre_image(cs_state_t *s, const uint8_t *uuid, uint64_t ts, int64_t index,
               const bson_t *op_doc, bson_t *out, bool *found, shl_status_t *st)
{
    shl_collection_t *pc = NULL;
    bson_t id = BSON_INITIALIZER, wrap = BSON_INITIALIZER, rec = BSON_INITIALIZER, legacy;
    bson_iter_t it;
    int ret = 0;

    bson_reinit(out);
    *found = false;
    if (shl_bson_get_subdoc(op_doc, "preImage", &legacy)) {
        bson_concat(out, &legacy);
        *found = true;
        goto done;
    }
    pc = shl_catalog_get(s->eng, SHL_PREIMAGES_NS);
    if (pc == NULL || s->txn == NULL) {
        goto done;
    }
    shl_bson_append_uuid(&id, "nsUUID", uuid);
    BSON_APPEND_TIMESTAMP(&id, "ts", SHL_TS_SECS(ts), SHL_TS_INC(ts));
    BSON_APPEND_INT64(&id, "applyOpsIndex", index);
    BSON_APPEND_DOCUMENT(&wrap, "_id", &id);
    bson_iter_init_find(&it, &wrap, "_id");
    bson_destroy(&rec);
    SHL_ERR(shl_doc_find_by_id(s->txn, pc, bson_iter_value(&it), &rec, NULL, found, st));
    if (*found && bson_iter_init_find(&it, &rec, "preImage") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t doc;
        shl_bson_get_subdoc(&rec, "preImage", &doc);
        bson_concat(out, &doc);
    } else {
        *found = false;
    }
done:
    shl_collection_release(pc);
    bson_destroy(&id);
    bson_destroy(&wrap);
    bson_destroy(&rec);
    return ret;
}

/*
 * fullDocument of a $v:2 update for whenAvailable / required: 'pre' (the pre-image, NULL when
 * there is none) with 'diff' applied; without a pre-image null, or for required
 * NoMatchingDocument (47), as MongoDB answers without a post-image.
 */
static int
append_post_image(const cs_state_t *s, const bson_t *pre, const bson_t *diff, uint64_t ts,
                  bson_t *ev, shl_status_t *st)
{
    bson_t post = BSON_INITIALIZER;
    bool have = false;
    int ret = 0;

    if (pre != NULL) {
        bson_destroy(&post);
        have = shl_update_diff_apply(pre, diff, &post);
    }
    if (have) {
        BSON_APPEND_DOCUMENT(ev, "fullDocument", &post);
    } else if (s->fd == FD_WHEN_AVAILABLE) {
        BSON_APPEND_NULL(ev, "fullDocument");
    } else {
        SHL_FAIL(st, SHL_CODE_NO_MATCHING_DOCUMENT,
                 "Change stream was configured to require a post-image for all update events, "
                 "but the post-image was not found for event: {clusterTime: Timestamp(%u, %u)}",
                 SHL_TS_SECS(ts), SHL_TS_INC(ts));
    }
done:
    bson_destroy(&post);
    return ret;
}

/* ---------------------------------------------------------------- entries to events */

/* One CRUD op ('i', 'u', 'd'; top-level or inside applyOps) into an event. */
static int
crud_event(cs_state_t *s, const bson_t *entry, const bson_t *op_doc, uint64_t ts,
           int64_t txn_op_index, const bson_t *txn_entry, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    const char *op, *ns;
    bson_t o, o2, desc, diff, pre = BSON_INITIALIZER, ev = BSON_INITIALIZER;
    bson_t looked = BSON_INITIALIZER;
    bool has_o2, has_desc, has_diff, want_pre, found = false, have_pre = false;
    const uint8_t *uuid = NULL;
    uint32_t len;
    bson_subtype_t sub;

    if (!bson_iter_init_find(&it, op_doc, "op") || !BSON_ITER_HOLDS_UTF8(&it)) {
        goto done;
    }
    op = bson_iter_utf8(&it, NULL);
    if (!bson_iter_init_find(&it, op_doc, "ns") || !BSON_ITER_HOLDS_UTF8(&it)) {
        goto done;
    }
    ns = bson_iter_utf8(&it, NULL);
    if (!ns_watched(s, ns) || !shl_bson_get_subdoc(op_doc, "o", &o)) {
        goto done;
    }
    if (bson_iter_init_find(&it, op_doc, "ui") && BSON_ITER_HOLDS_BINARY(&it)) {
        bson_iter_binary(&it, &sub, &len, &uuid);
        if (len != 16) {
            uuid = NULL;
        }
    }
    has_o2 = shl_bson_get_subdoc(op_doc, "o2", &o2);
    has_diff = strcmp(op, "u") == 0 && shl_update_diff_of(&o, &diff);
    /* Entries written before $v:2 carried the description beside the whole document. */
    has_desc = !has_diff && shl_bson_get_subdoc(op_doc, "updateDescription", &desc);
    /* The pre-image: for fullDocumentBeforeChange, and for a $v:2 update's post-image. */
    want_pre = s->fdbc != FDBC_OFF ||
               (has_diff && (s->fd == FD_WHEN_AVAILABLE || s->fd == FD_REQUIRED));
    if (want_pre && strcmp(op, "i") != 0 && uuid != NULL) {
        SHL_ERR(find_pre_image(s, uuid, ts, txn_op_index, op_doc, &pre, &have_pre, st));
    }
    if (strcmp(op, "i") == 0) {
        append_common(&ev, "insert", ts, entry);
        if (s->expanded && uuid != NULL) {
            shl_bson_append_uuid(&ev, "collectionUUID", uuid);
        }
        BSON_APPEND_DOCUMENT(&ev, "fullDocument", &o);
        append_ns(&ev, "ns", ns);
        append_document_key(s, ns, &o, has_o2 ? &o2 : NULL, &ev);
    } else if (strcmp(op, "u") == 0) {
        bool update = has_desc || has_diff;
        append_common(&ev, update ? "update" : "replace", ts, entry);
        if (s->expanded && uuid != NULL) {
            shl_bson_append_uuid(&ev, "collectionUUID", uuid);
        }
        if (!update) {
            BSON_APPEND_DOCUMENT(&ev, "fullDocument", &o);
        } else if (has_desc && (s->fd == FD_WHEN_AVAILABLE || s->fd == FD_REQUIRED)) {
            /* An old entry carries the post-image whole. */
            BSON_APPEND_DOCUMENT(&ev, "fullDocument", &o);
        } else if (s->fd == FD_WHEN_AVAILABLE || s->fd == FD_REQUIRED) {
            /* The post-image is the pre-image with the diff applied, as MongoDB makes it. */
            SHL_ERR(append_post_image(s, have_pre ? &pre : NULL, &diff, ts, &ev, st));
        } else if (s->fd == FD_UPDATE_LOOKUP) {
            bson_destroy(&looked);
            SHL_ERR(lookup_document(s, ns, has_o2 ? &o2 : &o, &looked, &found, st));
            if (found) {
                BSON_APPEND_DOCUMENT(&ev, "fullDocument", &looked);
            } else {
                BSON_APPEND_NULL(&ev, "fullDocument");
            }
        }
        append_ns(&ev, "ns", ns);
        /* A $v:2 entry's o2 is the documentKey (shard key fields and _id). */
        append_document_key(s, ns, has_diff ? NULL : &o, has_o2 ? &o2 : NULL, &ev);
        if (has_desc) {
            BSON_APPEND_DOCUMENT(&ev, "updateDescription", &desc);
        } else if (has_diff) {
            bson_t ud;
            BSON_APPEND_DOCUMENT_BEGIN(&ev, "updateDescription", &ud);
            shl_update_diff_describe(&diff, s->expanded, &ud);
            bson_append_document_end(&ev, &ud);
        }
    } else if (strcmp(op, "d") == 0) {
        append_common(&ev, "delete", ts, entry);
        if (s->expanded && uuid != NULL) {
            shl_bson_append_uuid(&ev, "collectionUUID", uuid);
        }
        append_ns(&ev, "ns", ns);
        append_document_key(s, ns, NULL, &o, &ev);
    } else {
        goto done;
    }
    if (have_pre && s->fdbc != FDBC_OFF) {
        BSON_APPEND_DOCUMENT(&ev, "fullDocumentBeforeChange", &pre);
    } else if (s->fdbc == FDBC_WHEN_AVAILABLE && strcmp(op, "i") != 0) {
        BSON_APPEND_NULL(&ev, "fullDocumentBeforeChange");
    } else if (s->fdbc == FDBC_REQUIRED && strcmp(op, "i") != 0) {
        SHL_FAIL(st, SHL_CODE_NO_MATCHING_DOCUMENT,
                 "Change stream was configured to require a pre-image for all update, delete "
                 "and replace events, but the pre-image was not found for the event at "
                 "Timestamp(%u, %u)",
                 SHL_TS_SECS(ts), SHL_TS_INC(ts));
    }
    append_session(&ev, txn_entry);
    queue_event(s, &ev, ts, txn_op_index, uuid, false);
done:
    bson_destroy(&pre);
    bson_destroy(&ev);
    bson_destroy(&looked);
    return ret;
}

/* Queue the invalidate that follows the event just built, and end the stream. */
static void
queue_invalidate(cs_state_t *s, const bson_t *cause, uint64_t ts, const bson_t *entry,
                 const uint8_t *uuid)
{
    bson_t ev = BSON_INITIALIZER, ev_id, body = BSON_INITIALIZER;
    shl_resume_token_t t;
    char *hex;

    /* The invalidate's token is the cause's, marked fromInvalidate. */
    token_for(cause, ts, 0, uuid, true, &ev_id, &t);
    hex = shl_resume_token_hex(&t);
    if (s->skip_hex == NULL || strcmp(hex, s->skip_hex) > 0) {
        shl_resume_token_append(&ev, "_id", &t);
        append_common(&body, "invalidate", ts, entry);
        bson_concat(&ev, &body);
        push_event(s, bson_copy(&ev));
        s->ended = true;
    } else if (strcmp(hex, s->skip_hex) == 0) {
        s->found = true;
    }
    bson_free(hex);
    bson_destroy(&ev_id);
    bson_destroy(&ev);
    bson_destroy(&body);
}

/* A 'c' entry of DDL. */
static void
ddl_events(cs_state_t *s, const bson_t *entry, const bson_t *o, uint64_t ts)
{
    bson_iter_t it, f;
    const char *cmd, *ns = NULL, *dot;
    char db[SHL_NS_MAX + 1], full[2 * SHL_NS_MAX + 2];
    const uint8_t *uuid = NULL;
    uint32_t len;
    bson_subtype_t sub;
    bson_t ev = BSON_INITIALIZER;

    if (!bson_iter_init(&it, o) || !shl_iter_next(&it)) {
        goto done;
    }
    cmd = shl_iter_key(&it);
    if (bson_iter_init_find(&f, entry, "ns") && BSON_ITER_HOLDS_UTF8(&f)) {
        ns = bson_iter_utf8(&f, NULL);
    }
    if (ns == NULL || (dot = strchr(ns, '.')) == NULL) {
        goto done;
    }
    snprintf(db, sizeof(db), "%.*s", (int)(dot - ns), ns);
    if (bson_iter_init_find(&f, entry, "ui") && BSON_ITER_HOLDS_BINARY(&f)) {
        bson_iter_binary(&f, &sub, &len, &uuid);
        if (len != 16) {
            uuid = NULL;
        }
    }
    if (strcmp(cmd, "drop") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
        snprintf(full, sizeof(full), "%s.%s", db, bson_iter_utf8(&it, NULL));
        if (!ns_watched(s, full)) {
            goto done;
        }
        append_common(&ev, "drop", ts, entry);
        if (s->expanded && uuid != NULL) {
            shl_bson_append_uuid(&ev, "collectionUUID", uuid);
        }
        append_ns(&ev, "ns", full);
        queue_event(s, &ev, ts, 0, uuid, false);
        if (s->scope == CS_COLL) {
            queue_invalidate(s, &ev, ts, entry, uuid);
        }
    } else if (strcmp(cmd, "renameCollection") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
        const char *from = bson_iter_utf8(&it, NULL), *to = NULL;
        if (bson_iter_init_find(&f, o, "to") && BSON_ITER_HOLDS_UTF8(&f)) {
            to = bson_iter_utf8(&f, NULL);
        }
        if (to == NULL || (!ns_watched(s, from) && !(s->scope != CS_COLL && ns_watched(s, to)))) {
            goto done;
        }
        append_common(&ev, "rename", ts, entry);
        if (s->expanded && uuid != NULL) {
            shl_bson_append_uuid(&ev, "collectionUUID", uuid);
        }
        append_ns(&ev, "ns", from);
        append_ns(&ev, "to", to);
        queue_event(s, &ev, ts, 0, uuid, false);
        if (s->scope == CS_COLL) {
            queue_invalidate(s, &ev, ts, entry, uuid);
        }
    } else if (strcmp(cmd, "dropDatabase") == 0) {
        if (s->scope == CS_COLL || !db_watched(s, db)) {
            goto done;
        }
        append_common(&ev, "dropDatabase", ts, entry);
        append_ns(&ev, "ns", db);
        queue_event(s, &ev, ts, 0, NULL, false);
        if (s->scope == CS_DB) {
            queue_invalidate(s, &ev, ts, entry, NULL);
        }
    } else if (s->expanded && (strcmp(cmd, "create") == 0 || strcmp(cmd, "createIndexes") == 0 ||
                               strcmp(cmd, "dropIndexes") == 0 || strcmp(cmd, "collMod") == 0) &&
               BSON_ITER_HOLDS_UTF8(&it)) {
        bson_t desc;
        snprintf(full, sizeof(full), "%s.%s", db, bson_iter_utf8(&it, NULL));
        if (!ns_watched(s, full)) {
            goto done;
        }
        append_common(&ev, strcmp(cmd, "collMod") == 0 ? "modify" : cmd, ts, entry);
        if (uuid != NULL) {
            shl_bson_append_uuid(&ev, "collectionUUID", uuid);
        }
        append_ns(&ev, "ns", full);
        BSON_APPEND_DOCUMENT_BEGIN(&ev, "operationDescription", &desc);
        bson_iter_init(&f, o);
        shl_iter_next(&f);
        while (shl_iter_next(&f)) {
            bson_append_iter(&desc, NULL, 0, &f);
        }
        bson_append_document_end(&ev, &desc);
        queue_event(s, &ev, ts, 0, uuid, false);
    }
done:
    bson_destroy(&ev);
}

/* A no-op entry a sharding DDL wrote (shard/sharding_events.c): with showExpandedEvents, a
 * shardCollection or refineCollectionShardKey event whose operationDescription is the entry's
 * o2 without its first field (the event's name), as MongoDB reports them. */
static void
sharding_event(cs_state_t *s, const bson_t *entry, uint64_t ts)
{
    bson_t o2, ev = BSON_INITIALIZER, desc;
    bson_iter_t it, f;
    const char *type, *ns;
    const uint8_t *uuid = NULL;
    uint32_t len;
    bson_subtype_t sub;

    if (!s->expanded || !shl_bson_get_subdoc(entry, "o2", &o2) || !bson_iter_init(&it, &o2) ||
        !shl_iter_next(&it)) {
        goto done;
    }
    type = shl_iter_key(&it);
    if ((strcmp(type, "shardCollection") != 0 && strcmp(type, "refineCollectionShardKey") != 0) ||
        !bson_iter_init_find(&f, entry, "ns") || !BSON_ITER_HOLDS_UTF8(&f)) {
        goto done;
    }
    ns = bson_iter_utf8(&f, NULL);
    if (!ns_watched(s, ns)) {
        goto done;
    }
    if (bson_iter_init_find(&f, entry, "ui") && BSON_ITER_HOLDS_BINARY(&f)) {
        bson_iter_binary(&f, &sub, &len, &uuid);
        uuid = len == 16 ? uuid : NULL;
    }
    append_common(&ev, type, ts, entry);
    if (uuid != NULL) {
        shl_bson_append_uuid(&ev, "collectionUUID", uuid);
    }
    append_ns(&ev, "ns", ns);
    BSON_APPEND_DOCUMENT_BEGIN(&ev, "operationDescription", &desc);
    while (shl_iter_next(&it)) {
        bson_append_iter(&desc, NULL, 0, &it);
    }
    bson_append_document_end(&ev, &desc);
    queue_event(s, &ev, ts, 0, uuid, false);
done:
    bson_destroy(&ev);
}

/* The ops of a committed transaction, as events sharing the commit's clusterTime. */
static int
txn_events(cs_state_t *s, const bson_t *entry, const bson_t *last_apply, uint64_t ts,
           shl_status_t *st)
{
    int ret = 0;
    bson_t ops = BSON_INITIALIZER, op_doc;
    bson_iter_t it;
    int64_t idx = 0;

    bson_destroy(&ops);
    SHL_ERR(shl_oplog_txn_ops(s->eng, last_apply, &ops, st));
    if (!bson_iter_init(&it, &ops)) {
        goto done;
    }
    while (shl_iter_next(&it)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && shl_bson_get_subdoc(&ops, shl_iter_key(&it), &op_doc)) {
            SHL_ERR(crud_event(s, entry, &op_doc, ts, idx, entry, st));
        }
        idx++;
    }
done:
    bson_destroy(&ops);
    return ret;
}

/* Turn oplog entry 'entry' (at 'ts') into queued events. */
static int
entry_events(cs_state_t *s, const bson_t *entry, uint64_t ts, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    const char *op;
    bson_t o;

    if (!s->migrations && bson_iter_init_find(&it, entry, "fromMigrate") && bson_iter_as_bool(&it)) {
        goto done;
    }
    if (!bson_iter_init_find(&it, entry, "op") || !BSON_ITER_HOLDS_UTF8(&it)) {
        goto done;
    }
    op = bson_iter_utf8(&it, NULL);
    if (op[0] == 'i' || op[0] == 'u' || op[0] == 'd') {
        SHL_ERR(crud_event(s, entry, entry, ts, 0, NULL, st));
    } else if (op[0] == 'n') {
        sharding_event(s, entry, ts);
    } else if (op[0] == 'c' && shl_bson_get_subdoc(entry, "o", &o) && bson_iter_init(&it, &o) &&
               shl_iter_next(&it)) {
        const char *cmd = shl_iter_key(&it);
        if (strcmp(cmd, "applyOps") == 0) {
            if (!bson_has_field(&o, "partialTxn") && !bson_has_field(&o, "prepare")) {
                SHL_ERR(txn_events(s, entry, entry, ts, st));
            }
        } else if (strcmp(cmd, "commitTransaction") == 0) {
            bson_t po, prep = BSON_INITIALIZER;
            bson_iter_t f;
            bool found = false;
            uint64_t pts = 0;
            if (shl_bson_get_subdoc(entry, "prevOpTime", &po) &&
                bson_iter_init_find(&f, &po, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&f)) {
                pts = shl_bson_iter_timestamp_u64(&f);
            }
            bson_destroy(&prep);
            ret = shl_oplog_read(s->eng, pts, &prep, &found, st);
            if (ret == 0 && found) {
                ret = txn_events(s, entry, &prep, ts, st);
            }
            bson_destroy(&prep);
            SHL_ERR(ret);
        } else {
            ddl_events(s, entry, &o, ts);
        }
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- the source */

static void
end_round(cs_state_t *s)
{
    shl_record_cursor_close(s->cur);
    s->cur = NULL;
    if (s->txn != NULL) {
        shl_storage_txn_abort(s->txn);
        s->txn = NULL;
    }
}

/* The oldest entry still in the oplog (0: empty). */
int
db_oplog_oldest(shl_storage_engine_t *eng, uint64_t *ts, shl_status_t *st)
{
    int ret = 0;
    shl_storage_txn_t *txn = NULL;
    shl_record_cursor_t *cur = NULL;
    int64_t rid = 0;
    bson_t d;
    bool eof = true;

    *ts = 0;
    SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
    SHL_ERR(shl_oplog_cursor_open(txn, 0, &cur, st));
    SHL_ERR(shl_record_cursor_next(cur, &rid, &d, &eof, st));
    if (!eof) {
        *ts = (uint64_t)rid;
    }
done:
    shl_record_cursor_close(cur);
    if (txn != NULL) {
        shl_storage_txn_abort(txn);
    }
    return ret;
}

static int
check_history(cs_state_t *s, shl_status_t *st)
{
    int ret = 0;
    uint64_t oldest = 0;

    SHL_ERR(db_oplog_oldest(s->eng, &oldest, st));
    if (oldest != 0 && oldest > s->last_ts + 1 && s->last_ts != 0) {
        SHL_FAIL(st, SHL_CODE_CHANGE_STREAM_HISTORY_LOST,
                 "Executor error during getMore :: caused by :: Resume of change stream was not "
                 "possible, as the resume point may no longer be in the oplog.");
    }
done:
    return ret;
}

static int
begin_round(cs_state_t *s, shl_status_t *st)
{
    int ret = 0;

    /* The no-holes point first: every entry at or below it is in the snapshot begun after. */
    s->round_hwm = shl_storage_all_durable(s->eng);
    SHL_ERR(check_history(s, st));
    SHL_ERR(shl_storage_txn_begin(s->eng, NULL, &s->txn, st));
    SHL_ERR(shl_oplog_cursor_open(s->txn, s->last_ts, &s->cur, st));
done:
    if (ret != 0) {
        end_round(s);
    }
    return ret;
}

static void
hand_out(cs_state_t *s, const bson_t **doc)
{
    bson_t *ev = s->pending[s->ipending++];
    const char *hex;
    bson_t id;

    if (s->out != NULL) {
        bson_destroy(s->out);
    }
    s->out = ev;
    if (s->ipending == s->npending) {
        s->npending = s->ipending = 0;
    }
    bson_free(s->last_hex);
    s->last_hex = NULL;
    if (shl_bson_get_subdoc(ev, "_id", &id) && (hex = shl_resume_token_doc_hex(&id)) != NULL) {
        s->last_hex = bson_strdup(hex);
    }
    if (s->ended && s->npending == 0) {
        s->ended_sent = true;
    }
    *doc = ev;
}

static int
cs_source_next(void *arg, const bson_t **doc, shl_status_t *st)
{
    cs_state_t *s = arg;
    int ret = 0;
    int64_t scanned = 0;

    *doc = NULL;
    s->exhausted = false;
    for (;;) {
        int64_t rid;
        bson_t entry;
        bool eof = false;

        if (s->ipending < s->npending) {
            hand_out(s, doc);
            break;
        }
        if (s->ended) {
            break;
        }
        if ((++scanned & 1023) == 0) {
            SHL_ERR(shl_op_check_interrupt(s->op, st));
        }
        if (s->cur == NULL) {
            SHL_ERR(begin_round(s, st));
        }
        SHL_ERR(shl_record_cursor_next(s->cur, &rid, &entry, &eof, st));
        if (eof) {
            end_round(s);
            if (s->round_hwm > s->last_ts) {
                s->last_ts = s->round_hwm;
            }
            s->exhausted = true;
            break;
        }
        s->last_ts = (uint64_t)rid;
        if (s->skip_hex != NULL && (uint64_t)rid > s->skip_ts) {
            if (s->must_find && !s->found) {
                SHL_FAIL(st, SHL_CODE_CHANGE_STREAM_FATAL_ERROR,
                         "cannot resume stream; the resume token was not found. %s",
                         s->skip_hex);
            }
            bson_free(s->skip_hex);
            s->skip_hex = NULL;
        }
        SHL_ERR(entry_events(s, &entry, (uint64_t)rid, st));
    }
done:
    if (ret != 0) {
        end_round(s);
    }
    return ret;
}

/* A stage that changed _id leaves no way to resume (MongoDB's 20 / ChangeStreamFatalError). */
static int
check_token_kept(const cs_state_t *s, const bson_t *doc, shl_status_t *st)
{
    bson_t id;
    const char *hex;
    int ret = 0;

    if (doc != NULL && (!shl_bson_get_subdoc(doc, "_id", &id) ||
                        (hex = shl_resume_token_doc_hex(&id)) == NULL || s->last_hex == NULL ||
                        strcmp(hex, s->last_hex) != 0)) {
        SHL_FAIL(st, SHL_CODE_CHANGE_STREAM_FATAL_ERROR,
                 "Encountered an event whose _id field, which contains the resume token, was "
                 "modified by the pipeline. Modifying the _id field of an event makes it "
                 "impossible to resume the stream from that point. Only transformations that "
                 "retain the unmodified _id field are allowed.");
    }
done:
    return ret;
}

static void
clear_fragments(cs_state_t *s)
{
    for (size_t i = 0; i < s->nfrags; i++) {
        bson_destroy(s->frags[i]);
    }
    bson_free(s->frags);
    s->frags = NULL;
    s->nfrags = s->ifrag = 0;
}

/*
 * $changeStreamSplitLargeEvent: 'ev' (over 16 MB) into s->frags (shl_event_split). When
 * resuming from a fragment's token, the fragments up to it are dropped.
 */
static int
split_event(cs_state_t *s, const bson_t *ev, const char *event_hex, shl_status_t *st)
{
    int ret = 0;

    clear_fragments(s);
    SHL_ERR(shl_event_split(ev, event_hex, s->skip_frag_hex, SHL_MAX_BSON_SIZE, &s->frags,
                            &s->nfrags, st));
    bson_free(s->skip_frag_hex);
    s->skip_frag_hex = NULL;
done:
    return ret;
}

/* Hand out the next fragment of s->frags; its token becomes the stream's position. */
static void
next_fragment(cs_state_t *s, const bson_t **doc)
{
    bson_t id;
    const char *hex;

    *doc = s->frags[s->ifrag++];
    if (shl_bson_get_subdoc(*doc, "_id", &id) && (hex = shl_resume_token_doc_hex(&id)) != NULL) {
        bson_free(s->last_hex);
        s->last_hex = bson_strdup(hex);
    }
}

static int
cs_cursor_next(void *state, shl_op_ctx_t *op, const bson_t **doc, shl_status_t *st)
{
    cs_state_t *s = state;
    int ret = 0;

    s->op = op;
    for (;;) {
        if (s->ifrag < s->nfrags) {
            next_fragment(s, doc);
            goto done;
        }
        clear_fragments(s);
        SHL_ERR(shl_pipeline_next(s->pl, doc, st));
        if (*doc == NULL || (*doc)->len <= SHL_MAX_BSON_SIZE || !s->split) {
            break;
        }
        SHL_ERR(check_token_kept(s, *doc, st));
        SHL_ERR(split_event(s, *doc, s->last_hex, st));
    }
    SHL_ERR(check_token_kept(s, *doc, st));
    if (*doc != NULL && (*doc)->len > SHL_MAX_BSON_SIZE) {
        SHL_FAIL(st, SHL_CODE_BSON_OBJECT_TOO_LARGE,
                 "BSONObj size: %u (0x%X) is invalid. Size must be between 0 and 16793600(16MB) "
                 "First element: _id: %s (use $changeStreamSplitLargeEvent to split such "
                 "events)",
                 (unsigned)(*doc)->len, (unsigned)(*doc)->len,
                 s->last_hex != NULL ? s->last_hex : "");
    }
done:
    return ret;
}

static void
cs_state_destroy(void *state)
{
    cs_state_t *s = state;
    if (s == NULL) {
        return;
    }
    shl_pipeline_destroy(s->pl);
    end_round(s);
    clear_pending(s);
    clear_fragments(s);
    bson_free(s->skip_frag_hex);
    bson_free(s->pending);
    if (s->out != NULL) {
        bson_destroy(s->out);
    }
    bson_free(s->last_hex);
    bson_free(s->skip_hex);
    bson_free(s);
}

static const shl_cursor_source_ops_t cs_cursor_ops = {cs_cursor_next, cs_state_destroy};

bool
db_change_stream_is_cursor(const shl_cursor_t *c)
{
    return c->ops == &cs_cursor_ops;
}

/* ---------------------------------------------------------------- parsing */

static const char *const allowed_stages[] = {
    "$match", "$project", "$addFields", "$set", "$unset", "$replaceRoot", "$replaceWith",
    "$redact", NULL};

static const char *const spec_fields[] = {"fullDocument",
                                          "fullDocumentBeforeChange",
                                          "resumeAfter",
                                          "startAfter",
                                          "startAtOperationTime",
                                          "allChangesForCluster",
                                          "showExpandedEvents",
                                          "showMigrationEvents",
                                          "showSystemEvents",
                                          "allowToRunOnConfigDB",
                                          "allowToRunOnSystemNS",
                                          "showRawUpdateDescription",
                                          "$_joiningShard",
                                          NULL};

static int
parse_mode(const bson_t *spec, const char *field, const char *const *names, int *out,
           shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    const char *v;

    if (!bson_iter_init_find(&it, spec, field)) {
        goto done;
    }
    if (!BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '$changeStream.%s' is the wrong type '%s', expected type 'string'",
                 field, shl_bson_type_name(shl_iter_type(&it)));
    }
    v = bson_iter_utf8(&it, NULL);
    for (int i = 0; names[i] != NULL; i++) {
        if (strcmp(v, names[i]) == 0) {
            *out = i;
            goto done;
        }
    }
    SHL_FAIL(st, SHL_CODE_BAD_VALUE,
             "Enumeration value '%s' for field '$changeStream.%s' is not a valid value.", v,
             field);
done:
    return ret;
}

static int
token_arg(const bson_t *spec, const char *field, bson_t *out, bool *found, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    *found = false;
    if (!bson_iter_init_find(&it, spec, field)) {
        goto done;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '$changeStream.%s' is the wrong type '%s', expected type 'object'",
                 field, shl_bson_type_name(shl_iter_type(&it)));
    }
    shl_bson_get_subdoc(spec, field, out);
    *found = true;
done:
    return ret;
}

/* Parse the $changeStream spec into 's' and position it. */
static int
parse_spec(shl_op_ctx_t *op, cs_state_t *s, const bson_t *spec, shl_status_t *st)
{
    int ret = 0;
    static const char *const fd_names[] = {"default", "updateLookup", "whenAvailable", "required",
                                           NULL};
    static const char *const fdbc_names[] = {"off", "whenAvailable", "required", NULL};
    int fd = FD_DEFAULT, fdbc = FDBC_OFF;
    bson_t resume_after, start_after, token;
    bool has_ra = false, has_sa = false;
    bson_iter_t it;
    bool has_at = false;
    uint64_t at = 0;

    bson_iter_init(&it, spec);
    while (shl_iter_next(&it)) {
        bool known = false;
        for (int i = 0; spec_fields[i] != NULL; i++) {
            if (strcmp(shl_iter_key(&it), spec_fields[i]) == 0) {
                known = true;
            }
        }
        if (!known) {
            SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD, "BSON field '$changeStream.%s' is an unknown field.",
                     shl_iter_key(&it));
        }
    }
    SHL_ERR(parse_mode(spec, "fullDocument", fd_names, &fd, st));
    SHL_ERR(parse_mode(spec, "fullDocumentBeforeChange", fdbc_names, &fdbc, st));
    s->fd = (fd_mode_t)fd;
    s->fdbc = (fdbc_mode_t)fdbc;
    SHL_ERR(shl_cmd_get_bool(spec, "showExpandedEvents", &s->expanded, st));
    SHL_ERR(shl_cmd_get_bool(spec, "showMigrationEvents", &s->migrations, st));
    SHL_ERR(token_arg(spec, "resumeAfter", &resume_after, &has_ra, st));
    SHL_ERR(token_arg(spec, "startAfter", &start_after, &has_sa, st));
    if (bson_iter_init_find(&it, spec, "startAtOperationTime")) {
        if (!BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field '$changeStream.startAtOperationTime' is the wrong type '%s', "
                     "expected type 'timestamp'",
                     shl_bson_type_name(shl_iter_type(&it)));
        }
        has_at = true;
        at = shl_bson_iter_timestamp_u64(&it);
    }
    if (has_ra && has_sa) {
        SHL_FAIL(st, 50865, "Do not specify both 'resumeAfter' and 'startAfter' in a $changeStream stage");
    }
    if ((has_ra || has_sa) && has_at) {
        SHL_FAIL(st, 40674, "Only one type of resume option is allowed, but multiple were found.");
    }
    if (has_ra || has_sa) {
        shl_resume_token_t t;
        char why[128];
        const char *hex;
        token = has_ra ? resume_after : start_after;
        if (!shl_resume_token_parse(&token, &t, &hex, why)) {
            SHL_FAIL(st, SHL_CODE_INVALID_RESUME_TOKEN, "%s", why);
        }
        if (has_ra && t.from_invalidate) {
            SHL_FAIL(st, SHL_CODE_INVALID_RESUME_TOKEN,
                     "Attempting to resume a change stream using 'resumeAfter' is not allowed "
                     "from an invalidate notification.");
        }
        s->last_ts = t.cluster_time > 0 ? t.cluster_time - 1 : 0;
        if (t.token_type == SHL_RESUME_TOKEN_EVENT) {
            s->skip_hex = bson_strdup(hex);
            s->skip_ts = t.cluster_time;
            /* Through a router each shard sees every shard's tokens: only a client's own
             * stream insists on finding the event. */
            s->must_find = op->conn == NULL || !op->conn->internal;
        }
        {
            uint64_t oldest = 0;
            SHL_ERR(db_oplog_oldest(s->eng, &oldest, st));
            if (oldest != 0 && oldest > t.cluster_time) {
                SHL_FAIL(st, SHL_CODE_CHANGE_STREAM_HISTORY_LOST,
                         "Resume of change stream was not possible, as the resume point may no "
                         "longer be in the oplog.");
            }
        }
    } else if (has_at) {
        uint64_t oldest = 0;
        bool joining = false;
        s->last_ts = at > 0 ? at - 1 : 0;
        /* A shard a router adds to an open stream: it has no history before it joined. */
        SHL_ERR(shl_cmd_get_bool(spec, "$_joiningShard", &joining, st));
        SHL_ERR(db_oplog_oldest(s->eng, &oldest, st));
        if (joining && oldest > at) {
            s->last_ts = oldest - 1;
        } else if (oldest != 0 && oldest > at) {
            SHL_FAIL(st, SHL_CODE_CHANGE_STREAM_HISTORY_LOST,
                     "Resume of change stream was not possible, as the resume point may no longer "
                     "be in the oplog.");
        }
    } else {
        /* From now: everything committed so far is behind the stream. */
        s->last_ts = shl_storage_all_durable(s->eng);
    }
done:
    return ret;
}

/* The follow-on stages (without the $changeStream), checked against the allowed list;
 * *split: it ends with $changeStreamSplitLargeEvent (not in 'rest'). */
static int
follow_on_stages(const bson_t *pipeline, bson_t *spec, bson_t *rest, bool *split,
                 shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, stage;
    uint32_t n = 0, i = 0;

    bson_init(spec);
    bson_init(rest);
    *split = false;
    bson_iter_init(&it, pipeline);
    while (shl_iter_next(&it)) {
        const char *name;
        char key[16];
        const char *kp;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &stage) ||
            !shl_iter_next(&stage)) {
            SHL_FAIL(st, 40323, "A pipeline stage specification object must contain exactly one field.");
        }
        name = shl_iter_key(&stage);
        if (i++ == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&stage)) {
                SHL_FAIL(st, 50808, "$changeStream stage expects a document as argument");
            }
            bson_destroy(spec);
            {
                uint32_t len;
                const uint8_t *data;
                bson_t view;
                bson_iter_document(&stage, &len, &data);
                bson_init_static(&view, data, len);
                bson_copy_to(&view, spec);
            }
            continue;
        }
        if (strcmp(name, "$changeStream") == 0) {
            SHL_FAIL(st, 40602, "$changeStream is only valid as the first stage in a pipeline.");
        }
        if (*split) {
            SHL_FAIL(st, 7182802, "$changeStreamSplitLargeEvent must be the last stage in the "
                                  "pipeline");
        }
        if (strcmp(name, "$changeStreamSplitLargeEvent") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&stage) || !empty_doc_iter(&stage)) {
                SHL_FAIL(st, 7182800,
                         "$changeStreamSplitLargeEvent accepts only an empty object as argument");
            }
            *split = true;
            continue;
        }
        {
            bool ok = false;
            for (int k = 0; allowed_stages[k] != NULL; k++) {
                if (strcmp(name, allowed_stages[k]) == 0) {
                    ok = true;
                }
            }
            if (!ok) {
                SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                         "%s is not permitted in a $changeStream pipeline", name);
            }
        }
        bson_uint32_to_string(n++, &kp, key, sizeof(key));
        bson_append_iter(rest, kp, -1, &it);
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- batches */

static void
append_pbrt(const cs_state_t *s, bool exhausted, bson_t *cursor)
{
    if (!exhausted && s->last_hex != NULL) {
        bson_t d;
        BSON_APPEND_DOCUMENT_BEGIN(cursor, "postBatchResumeToken", &d);
        BSON_APPEND_UTF8(&d, "_data", s->last_hex);
        bson_append_document_end(cursor, &d);
    } else {
        /* A high-water mark: every event below it has been seen. */
        shl_resume_token_t t;
        memset(&t, 0, sizeof(t));
        t.cluster_time = s->last_ts + 1;
        t.version = SHL_RESUME_TOKEN_VERSION;
        t.token_type = SHL_RESUME_TOKEN_HWM;
        if (s->ended_sent && s->last_hex != NULL) {
            bson_t d;
            BSON_APPEND_DOCUMENT_BEGIN(cursor, "postBatchResumeToken", &d);
            BSON_APPEND_UTF8(&d, "_data", s->last_hex);
            bson_append_document_end(cursor, &d);
        } else {
            shl_resume_token_append(cursor, "postBatchResumeToken", &t);
        }
    }
}

static void
reply_batch(const cs_state_t *s, bson_t *reply, const char *ns, int64_t id, bool first,
            const bson_t *arr, bool exhausted)
{
    bson_t cursor;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cursor);
    bson_append_array(&cursor, first ? "firstBatch" : "nextBatch", -1, arr);
    append_pbrt(s, exhausted, &cursor);
    BSON_APPEND_INT64(&cursor, "id", id);
    BSON_APPEND_UTF8(&cursor, "ns", ns);
    bson_append_document_end(reply, &cursor);
}

/* Fill one batch; wait for new entries (up to 'deadline_us', 0: no wait) while it is empty. */
static int
fill(shl_op_ctx_t *op, shl_cursor_t *c, int64_t batch_size, bool first, int64_t deadline_us,
     bson_t *arr, shl_status_t *st)
{
    int ret = 0;
    cs_state_t *s = c->state;
    shl_collection_t *oplog = shl_oplog_collection(s->eng);
    bool exhausted = false, woke = false;

    for (;;) {
        uint64_t seq = shl_collection_commit_seq(oplog);
        int64_t now;
        ret = shl_cursor_fill_batch(op, c, batch_size, first, arr, &exhausted, st);
        end_round(s);
        SHL_ERR(ret);
        /* As MongoDB's getMore, wait for new entries once: after one round over what arrived
         * the batch goes back even if empty, with a postBatchResumeToken past it (a router's
         * merge waits for that mark; docs/design/change_streams.md "Through a router"). */
        if (!bson_empty(arr) || s->ended_sent || deadline_us == 0 || woke) {
            break;
        }
        for (;;) {
            now = shl_clock_mono_us();
            if (now >= deadline_us) {
                goto done;
            }
            if (shl_collection_wait_commit(oplog, seq,
                                           deadline_us - now > CS_AWAIT_SLICE_US
                                               ? now + CS_AWAIT_SLICE_US
                                               : deadline_us)) {
                woke = true;
                break;
            }
            SHL_ERR(shl_op_check_interrupt(op, st));
        }
    }
done:
    shl_collection_release(oplog);
    return ret;
}

int
db_change_stream_aggregate(shl_op_ctx_t *op, const bson_t *cmd, const shl_ns_t *ns,
                           bool collectionless, const bson_t *pipeline, bson_t *reply,
                           shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    cs_state_t *s = bson_malloc0(sizeof(*s));
    bson_t spec, rest, arr = BSON_INITIALIZER;
    shl_pipeline_opts_t opts;
    shl_cursor_t *c = NULL;
    int64_t batch_size = 0, id = 0;
    bool all = false;

    s->eng = node->eng;
    s->op = op;
    SHL_ERR(follow_on_stages(pipeline, &spec, &rest, &s->split, st));
    if (!node->repl_set) {
        SHL_FAIL(st, 40573, "The $changeStream stage is only supported on replica sets");
    }
    if (op->has_autocommit && !op->autocommit) {
        SHL_FAIL(st, SHL_CODE_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                 "Operation not permitted in transaction :: caused by :: $changeStream cannot be "
                 "used in a transaction");
    }
    SHL_ERR(shl_cmd_get_bool(&spec, "allChangesForCluster", &all, st));
    snprintf(s->db, sizeof(s->db), "%s", ns->db);
    if (all) {
        if (!collectionless || strcmp(ns->db, "admin") != 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "A $changeStream with 'allChangesForCluster:true' may only be opened on the "
                     "'admin' database, and with no collection name; found %s",
                     ns->full);
        }
        s->scope = CS_CLUSTER;
    } else if (collectionless) {
        if (internal_db(ns->db)) {
            SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE,
                     "$changeStream may not be opened on the internal %s database", ns->db);
        }
        s->scope = CS_DB;
    } else {
        bool config_ok = false;
        /* A router's topology stream: config.shards on the config server (internal). */
        SHL_ERR(shl_cmd_get_bool(&spec, "allowToRunOnConfigDB", &config_ok, st));
        if (internal_db(ns->db) && !(config_ok && strcmp(ns->db, "config") == 0)) {
            SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE,
                     "$changeStream may not be opened on the internal %s database", ns->db);
        }
        if (strncmp(ns->coll, "system.", 7) == 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE,
                     "$changeStream may not be opened on the internal %s collection", ns->full);
        }
        s->scope = CS_COLL;
        snprintf(s->coll, sizeof(s->coll), "%s", ns->coll);
    }
    SHL_ERR(parse_spec(op, s, &spec, st));
    SHL_ERR(db_cursor_batch_size(cmd, &batch_size, st));
    memset(&opts, 0, sizeof(opts));
    SHL_ERR(shl_pipeline_parse(&rest, &opts, &s->pl, st));
    shl_pipeline_set_source(s->pl, &(shl_pipeline_source_t){cs_source_next, s});
    c = shl_cursor_new(ns->full, &cs_cursor_ops, s);
    s = NULL;
    c->tailable = true;
    c->await_data = true;
    c->outlives_namespace = true;
    SHL_ERR(fill(op, c, batch_size, true, 0, &arr, st));
    {
        const cs_state_t *cs = c->state;
        if (!cs->ended_sent) {
            /* Registered before the reply is built, which reads the state: the id is only
             * known to this thread until the reply is sent. */
            id = shl_cursor_manager_register(node->cursors, c, op);
            c = NULL;
        }
        reply_batch(cs, reply, ns->full, id, true, &arr, cs->exhausted);
    }
done:
    if (c != NULL) {
        shl_cursor_destroy(c);
    }
    cs_state_destroy(s);
    bson_destroy(&spec);
    bson_destroy(&rest);
    bson_destroy(&arr);
    return ret;
}

int
db_change_stream_get_more(shl_op_ctx_t *op, shl_cursor_t *c, int64_t batch_size,
                          int64_t await_deadline_us, bson_t *reply, bool *dead, shl_status_t *st)
{
    int ret = 0;
    cs_state_t *s = c->state;
    bson_t arr = BSON_INITIALIZER;

    *dead = false;
    if (await_deadline_us == 0) {
        await_deadline_us = shl_clock_mono_us() + CS_AWAIT_DEFAULT_MS * 1000;
    }
    SHL_ERR(fill(op, c, batch_size, false, await_deadline_us, &arr, st));
    *dead = s->ended_sent;
    reply_batch(s, reply, c->ns, *dead ? 0 : c->id, false, &arr, s->exhausted);
done:
    bson_destroy(&arr);
    return ret;
}

/* ---------------------------------------------------------------- periodic no-op writer */

static int
noop_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    int ret;
    bson_t o = BSON_INITIALIZER;
    (void)arg;
    BSON_APPEND_UTF8(&o, "msg", "periodic noop");
    ret = shl_oplog_append(txn, 'n', "", NULL, &o, NULL, NULL, NULL, st);
    bson_destroy(&o);
    return ret;
}

/* One pass of the no-op writer (db_node_every's body). */
static void
noop_pass(db_node_t *node)
{
    int64_t secs = shl_opt_int(SHL_OPT_periodicNoopIntervalSecs);
    uint64_t top = 0;
    shl_status_t st = SHL_STATUS_INIT;

    /* Only an idle oplog gets one: its newest entry is older than the interval. Only on a
     * primary (MongoDB's writer runs there): a secondary's own entry would be one the set
     * never had -- rolled back later, and counted as its newest replicated entry. */
    if (shl_db_repl_is_primary(node->svc) && shl_oplog_top(node->eng, &top, &st) == 0 &&
        (int64_t)SHL_TS_SECS(top) + (secs < 1 ? 1 : secs) <= shl_clock_wall_ms() / 1000) {
        if (shl_storage_write_retry(node->eng, noop_fn, NULL, NULL, &st) != 0) {
            SHL_LOG_WARNING(STORAGE, 2100001, "periodic no-op write failed", "error",
                            BCON_UTF8(st.reason));
        }
    }
}

void *
db_noop_writer_main(void *arg)
{
    shl_log_set_thread_ctx("NoopWriter");
    db_node_every(arg, SHL_OPT_periodicNoopIntervalSecs, noop_pass);
    return NULL;
}

void
db_node_every(db_node_t *node, shl_opt_id_t secs_opt, void (*pass)(db_node_t *node))
{
    pthread_mutex_lock(&node->reaper_lock);
    while (!node->reaper_stop) {
        struct timespec ts;
        int64_t secs = shl_opt_int(secs_opt);

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += secs < 1 ? 1 : secs;
        pthread_cond_timedwait(&node->reaper_cond, &node->reaper_lock, &ts);
        if (node->reaper_stop) {
            break;
        }
        pthread_mutex_unlock(&node->reaper_lock);
        pass(node);
        pthread_mutex_lock(&node->reaper_lock);
    }
    pthread_mutex_unlock(&node->reaper_lock);
}
