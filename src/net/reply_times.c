/*
 * reply_times.c -- see reply_times.h.
 */
#include "bson/bson_iter.h"
#include "net/reply_times.h"

#include <pthread.h>
#include <string.h>

#include "base/status.h"

static void
append_ts(bson_t *doc, const char *key, uint64_t ts)
{
    bson_append_timestamp(doc, key, -1, (uint32_t)(ts >> 32), (uint32_t)ts);
}

static void
append_signed(bson_t *reply, uint64_t cluster_time, int64_t key_id, const uint8_t *hash)
{
    bson_t ct, sig;

    BSON_APPEND_DOCUMENT_BEGIN(reply, "$clusterTime", &ct);
    append_ts(&ct, "clusterTime", cluster_time);
    BSON_APPEND_DOCUMENT_BEGIN(&ct, "signature", &sig);
    bson_append_binary(&sig, "hash", 4, BSON_SUBTYPE_BINARY, hash, 20);
    BSON_APPEND_INT64(&sig, "keyId", key_id);
    bson_append_document_end(&ct, &sig);
    bson_append_document_end(reply, &ct);
}

static void
append_cluster_time(bson_t *reply, uint64_t cluster_time)
{
    static const uint8_t zero_hash[20] = {0};

    append_signed(reply, cluster_time, 0, zero_hash);
}

/* {operationTime: 0, $clusterTime: {clusterTime: 0, signature}} and where its two
 * timestamps are; written once, read-only after. */
static bson_t template_doc;
static size_t op_time_off, cluster_time_off;
static pthread_once_t template_once = PTHREAD_ONCE_INIT;

static void
template_init(void)
{
    bson_iter_t it, child;

    bson_init(&template_doc);
    append_ts(&template_doc, "operationTime", 0);
    append_cluster_time(&template_doc, 0);
    SHL_INVARIANT(bson_iter_init_find(&it, &template_doc, "operationTime"));
    op_time_off = it.d1;
    SHL_INVARIANT(bson_iter_init(&it, &template_doc) &&
                  bson_iter_find_descendant(&it, "$clusterTime.clusterTime", &child));
    cluster_time_off = (size_t)(child.raw - bson_get_data(&template_doc)) + child.d1;
}

static void
put_ts(uint8_t *at, uint64_t ts)
{
    uint64_t le = BSON_UINT64_TO_LE(ts); /* increment, then seconds, as BSON stores it */
    memcpy(at, &le, sizeof(le));
}

/* Whether 'reply' already has operationTime / $clusterTime (one pass over its top level). */
static void
scan_reply(const bson_t *reply, bool *has_op_time, bool *has_cluster_time)
{
    bson_iter_t it;

    *has_op_time = *has_cluster_time = false;
    if (bson_iter_init(&it, reply)) {
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (k[0] == 'o' && strcmp(k, "operationTime") == 0) {
                *has_op_time = true;
            } else if (k[0] == '$' && strcmp(k, "$clusterTime") == 0) {
                *has_cluster_time = true;
            }
        }
    }
}

void
shl_reply_append_signed_times(bson_t *reply, uint64_t op_time, uint64_t cluster_time,
                              int64_t key_id, const uint8_t hash[20])
{
    bool has_op_time, has_cluster_time;

    scan_reply(reply, &has_op_time, &has_cluster_time);
    if (!has_op_time) {
        append_ts(reply, "operationTime", op_time);
    }
    if (!has_cluster_time) {
        append_signed(reply, cluster_time, key_id, hash);
    }
}

void
shl_reply_append_times(bson_t *reply, uint64_t op_time, uint64_t cluster_time)
{
    bool has_op_time, has_cluster_time;

    scan_reply(reply, &has_op_time, &has_cluster_time);
    if (!has_op_time && !has_cluster_time) {
        uint8_t buf[256]; /* 130 bytes */
        bson_t view;
        pthread_once(&template_once, template_init);
        SHL_INVARIANT(template_doc.len <= sizeof(buf));
        memcpy(buf, bson_get_data(&template_doc), template_doc.len);
        put_ts(buf + op_time_off, op_time);
        put_ts(buf + cluster_time_off, cluster_time);
        SHL_INVARIANT(bson_init_static(&view, buf, template_doc.len));
        bson_concat(reply, &view);
    } else if (!has_op_time) {
        append_ts(reply, "operationTime", op_time);
    } else if (!has_cluster_time) {
        append_cluster_time(reply, cluster_time);
    }
}
