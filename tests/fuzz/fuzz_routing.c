/*
 * fuzz_routing.c -- libFuzzer target for routing: the input, if it is valid BSON, is used as
 * a query filter and as a document against routing tables of several shard-key shapes
 * (range, compound, hashed, dotted): shard-key extraction from the query and from the
 * document, and the router's targeting of the filter (shl_router_target_filter) and of the
 * document. Nothing may crash, leak or read out of bounds; every targeted shard must be one
 * the table names.
 */
#include <bson/bson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "net/message.h"
#include "router/cluster_routing.h"
#include "sharding/routing_table.h"
#include "sharding/shard_key.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const PATTERNS[] = {"{\"x\": 1}", "{\"x\": 1, \"y\": 1}", "{\"x\": \"hashed\"}",
                                       "{\"a.b\": 1}"};
static shl_routing_table_t *tables[4];

/* Three shards; the first field split at two points (hashed: at two hash values). */
static shl_routing_table_t *
build(const char *pattern_json)
{
    bson_t *pattern = bson_new_from_json((const uint8_t *)pattern_json, -1, NULL);
    shl_shard_key_pattern_t p;
    shl_routing_table_info_t info;
    shl_chunk_type_t chunks[3];
    shl_routing_table_t *rt = NULL;
    shl_status_t st;
    bson_oid_t epoch;
    bool hashed;
    int64_t points[2];

    if (shl_shard_key_pattern_init(&p, pattern, &st) != 0) {
        bson_destroy(pattern);
        return NULL;
    }
    hashed = shl_shard_key_pattern_is_hashed(&p);
    points[0] = hashed ? -1000000000000000000LL : 10;
    points[1] = hashed ? 1000000000000000000LL : 20;
    bson_oid_init_from_string(&epoch, "5f1a2b3c4d5e6f7081920304");
    memset(chunks, 0, sizeof(chunks));
    for (int i = 0; i < 3; i++) {
        bson_t *lo = bson_new(), *hi = bson_new();
        for (size_t f = 0; f < p.nfields; f++) {
            if (f == 0 && i > 0) {
                BSON_APPEND_INT64(lo, p.paths[f], points[i - 1]);
            } else {
                BSON_APPEND_MINKEY(lo, p.paths[f]);
            }
            if (f == 0 && i < 2) {
                BSON_APPEND_INT64(hi, p.paths[f], points[i]);
            } else if (i < 2) {
                BSON_APPEND_MINKEY(hi, p.paths[f]);
            } else {
                BSON_APPEND_MAXKEY(hi, p.paths[f]);
            }
        }
        chunks[i].min = lo;
        chunks[i].max = hi;
        chunks[i].shard = bson_strdup(i == 0 ? "s0" : i == 1 ? "s1" : "s2");
        chunks[i].version = shl_chunk_version_make(&epoch, (shl_ts_t){1, 0}, 1, (uint32_t)i);
    }
    memset(&info, 0, sizeof(info));
    info.ns = "db.c";
    info.key_pattern = pattern;
    info.allow_migrations = true;
    info.generation = shl_chunk_version_make(&epoch, (shl_ts_t){1, 0}, 0, 0);
    if (shl_routing_table_new(&info, chunks, 3, &rt, &st) != 0) {
        rt = NULL;
    }
    for (int i = 0; i < 3; i++) {
        shl_chunk_type_cleanup(&chunks[i]);
    }
    shl_shard_key_pattern_cleanup(&p);
    bson_destroy(pattern);
    return rt;
}

static void
check_shards(const shl_router_shards_t *s)
{
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(s->names[i], "s0") != 0 && strcmp(s->names[i], "s1") != 0 &&
            strcmp(s->names[i], "s2") != 0) {
            __builtin_trap();
        }
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bson_t in;

    if (tables[0] == NULL) {
        for (size_t i = 0; i < 4; i++) {
            tables[i] = build(PATTERNS[i]);
        }
    }
    /* What the server does with bytes from the network before anything reads them. */
    if (shl_msg_check_bson(data, size, &(shl_status_t){0}) != 0 ||
        !bson_init_static(&in, data, size)) {
        return 0;
    }
    for (size_t i = 0; i < 4; i++) {
        shl_router_routing_t rr;
        shl_router_shards_t s;
        shl_status_t st;
        const char *shard = NULL;
        bson_t key;

        if (tables[i] == NULL) {
            continue;
        }
        memset(&rr, 0, sizeof(rr));
        snprintf(rr.ns, sizeof(rr.ns), "db.c");
        snprintf(rr.db.primary, sizeof(rr.db.primary), "s0");
        rr.rt = tables[i];
        (void)shl_shard_key_extract_from_query(shl_routing_table_key_pattern(tables[i]), &in, &key);
        bson_destroy(&key);
        shl_router_target_filter(&rr, &in, &s);
        check_shards(&s);
        shl_router_shards_cleanup(&s);
        if (shl_router_target_doc(&rr, &in, &shard, &st) == 0) {
            check_shards(&(shl_router_shards_t){.names = &shard, .n = 1});
        }
    }
    return 0;
}
