/*
 * cluster_status.c -- `shale status`: what mongosh's sh.status() prints, built from
 * ordinary `find`s on config.version/shards/mongos/settings/databases/collections/
 * chunks/tags through the router (any process that serves config.* will do, e.g. the
 * config server itself), and printed in mongosh's notation (shell_print.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bson/bson_iter.h"
#include "auth/auth.h"
#include "main/cluster_args.h"
#include "main/cluster_cli.h"
#include "main/cluster_layout.h"
#include "main/shell_print.h"
#include "net/client.h"
#include "net/tls.h"

#define STATUS_TIMEOUT_MS 30000
/* mongosh lists a collection's chunks only when there are fewer than this. */
#define MAX_CHUNKS_PRINTED 20

typedef struct status_ctx {
    shl_conn_pool_t *pool;
    char host[SHL_CLIENT_HOST_MAX];
} status_ctx_t;

static void
append_key_u32(bson_t *arr, uint32_t i, bson_t *child, bool is_array)
{
    char buf[16];
    const char *key;
    bson_uint32_to_string(i, &key, buf, sizeof(buf));
    if (is_array) {
        bson_append_array_begin(arr, key, -1, child);
    } else {
        bson_append_document_begin(arr, key, -1, child);
    }
}

/*
 * Every document of config.<coll> matching 'filter', in 'sort' order, appended to the
 * array 'out' (its next index in *n). Follows the cursor with getMore.
 */
static int
find_all(status_ctx_t *c, const char *coll, const bson_t *filter, const bson_t *sort, bson_t *out,
         uint32_t *n, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    int64_t cursor_id = 0;
    bool first = true;

    BSON_APPEND_UTF8(&cmd, "find", coll);
    if (filter != NULL) {
        BSON_APPEND_DOCUMENT(&cmd, "filter", filter);
    }
    if (sort != NULL) {
        BSON_APPEND_DOCUMENT(&cmd, "sort", sort);
    }
    do {
        bson_iter_t it, cur, batch;
        if (!first) {
            bson_reinit(&cmd);
            BSON_APPEND_INT64(&cmd, "getMore", cursor_id);
            BSON_APPEND_UTF8(&cmd, "collection", coll);
        }
        bson_destroy(&reply);
        if (shl_client_run(c->pool, c->host, "config", &cmd, STATUS_TIMEOUT_MS, &reply, st) != 0) {
            shl_status_t why = *st;
            ret = why.code;
            shl_status_set(st, ret, "%s on config.%s at %s failed: %s (%s)",
                           first ? "find" : "getMore", coll, c->host, why.reason,
                           shl_code_name(ret));
            goto done;
        }
        if (!bson_iter_init_find(&it, &reply, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
            !bson_iter_recurse(&it, &cur)) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "reply to find on config.%s has no cursor",
                     coll);
        }
        cursor_id = 0;
        while (shl_iter_next(&cur)) {
            const char *k = shl_iter_key(&cur);
            if (strcmp(k, "id") == 0) {
                cursor_id = bson_iter_as_int64(&cur);
            } else if ((strcmp(k, "firstBatch") == 0 || strcmp(k, "nextBatch") == 0) &&
                       BSON_ITER_HOLDS_ARRAY(&cur) && bson_iter_recurse(&cur, &batch)) {
                while (shl_iter_next(&batch)) {
                    char buf[16];
                    const char *key;
                    bson_uint32_to_string((*n)++, &key, buf, sizeof(buf));
                    bson_append_value(out, key, -1, bson_iter_value(&batch));
                }
            }
        }
        first = false;
    } while (cursor_id != 0);
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/*
 * A router that cannot serve `find` on config.* yet (CommandNotFound) still names its
 * config server in getCmdLineOpts' sharding.configDB ("csrs/host:port,..."): read the
 * catalog there instead, as the router itself would.
 */
static int
use_config_server(status_ctx_t *c, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    bson_iter_t it;
    const char *cfgdb, *first;
    size_t n;

    BSON_APPEND_INT32(&cmd, "getCmdLineOpts", 1);
    SHL_ERR(shl_client_run(c->pool, c->host, "admin", &cmd, STATUS_TIMEOUT_MS, &reply, st));
    if (!bson_iter_init(&it, &reply) ||
        !bson_iter_find_descendant(&it, "parsed.sharding.configDB", &it) ||
        !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_COMMAND_NOT_FOUND,
                 "%s does not serve find on config.* and names no config server", c->host);
    }
    cfgdb = bson_iter_utf8(&it, NULL);
    first = strchr(cfgdb, '/') != NULL ? strchr(cfgdb, '/') + 1 : cfgdb;
    n = strcspn(first, ",");
    if (n == 0 || n >= sizeof(c->host)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "bad sharding.configDB '%s'", cfgdb);
    }
    fprintf(stderr,
            "(%s cannot serve find on config.* yet; reading them from the config server "
            "%.*s)\n",
            c->host, (int)n, first);
    snprintf(c->host, sizeof(c->host), "%.*s", (int)n, first);
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

static void
print_section_doc(const char *title, const bson_t *doc, bool is_array, bool last)
{
    char *text = shl_shell_doc_new(doc, is_array, 0);
    printf("%s\n%s\n%s", title, text, last ? "" : "---\n");
    bson_free(text);
}

/* The doc at index 0 of an array document, as a borrowed view; false if none. */
static bool
first_doc(const bson_t *arr, bson_t *view)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    if (!bson_iter_init(&it, arr) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return false;
    }
    bson_iter_document(&it, &len, &data);
    return bson_init_static(view, data, len);
}

/* 'shards' counts chunks per shard name; kept sorted by name (a small list). */
typedef struct shard_count {
    char name[128];
    int64_t n;
} shard_count_t;

static void
count_chunk(shard_count_t *counts, int *ncounts, int max, const char *shard)
{
    int i = 0;
    while (i < *ncounts && strcmp(counts[i].name, shard) < 0) {
        i++;
    }
    if (i < *ncounts && strcmp(counts[i].name, shard) == 0) {
        counts[i].n++;
        return;
    }
    if (*ncounts >= max) {
        return;
    }
    memmove(&counts[i + 1], &counts[i], sizeof(counts[0]) * (size_t)(*ncounts - i));
    snprintf(counts[i].name, sizeof(counts[i].name), "%s", shard);
    counts[i].n = 1;
    (*ncounts)++;
}

/* One sharded collection's entry: shardKey, unique, balancing, chunkMetadata, chunks, tags. */
static int
collection_entry(status_ctx_t *c, const bson_t *coll, bool verbose, bson_t *entry, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bson_t filter = BSON_INITIALIZER, sort = BSON_INITIALIZER;
    bson_t chunks = BSON_INITIALIZER, tags = BSON_INITIALIZER;
    bson_t arr, child;
    uint32_t nchunks = 0, ntags = 0;
    const char *ns = "";
    bool unique = false, balancing = true;
    shard_count_t counts[SHL_CLUSTER_MAX_SHARDS * 4];
    int ncounts = 0;

    if (bson_iter_init_find(&it, coll, "_id") && BSON_ITER_HOLDS_UTF8(&it)) {
        ns = bson_iter_utf8(&it, NULL);
    }
    if (bson_iter_init_find(&it, coll, "key") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        BSON_APPEND_VALUE(entry, "shardKey", bson_iter_value(&it));
    }
    if (bson_iter_init_find(&it, coll, "unique")) {
        unique = bson_iter_as_bool(&it);
    }
    if (bson_iter_init_find(&it, coll, "noBalance")) {
        balancing = !bson_iter_as_bool(&it);
    }
    BSON_APPEND_BOOL(entry, "unique", unique);
    BSON_APPEND_BOOL(entry, "balancing", balancing);

    /* 7.0 chunks are keyed by the collection's uuid; older catalogs by ns. */
    if (bson_iter_init_find(&it, coll, "uuid")) {
        BSON_APPEND_VALUE(&filter, "uuid", bson_iter_value(&it));
    } else {
        BSON_APPEND_UTF8(&filter, "ns", ns);
    }
    BSON_APPEND_INT32(&sort, "min", 1);
    SHL_ERR(find_all(c, "chunks", &filter, &sort, &chunks, &nchunks, st));
    bson_reinit(&filter);
    BSON_APPEND_UTF8(&filter, "ns", ns);
    SHL_ERR(find_all(c, "tags", &filter, &sort, &tags, &ntags, st));

    bson_iter_init(&it, &chunks);
    while (shl_iter_next(&it)) {
        bson_iter_t f;
        if (bson_iter_recurse(&it, &f) && bson_iter_find(&f, "shard") && BSON_ITER_HOLDS_UTF8(&f)) {
            count_chunk(counts, &ncounts, (int)(sizeof(counts) / sizeof(counts[0])),
                        bson_iter_utf8(&f, NULL));
        }
    }
    BSON_APPEND_ARRAY_BEGIN(entry, "chunkMetadata", &arr);
    for (int i = 0; i < ncounts; i++) {
        append_key_u32(&arr, (uint32_t)i, &child, false);
        BSON_APPEND_UTF8(&child, "shard", counts[i].name);
        BSON_APPEND_INT32(&child, "nChunks", (int32_t)counts[i].n);
        bson_append_document_end(&arr, &child);
    }
    bson_append_array_end(entry, &arr);

    BSON_APPEND_ARRAY_BEGIN(entry, "chunks", &arr);
    if (nchunks >= MAX_CHUNKS_PRINTED && !verbose) {
        BSON_APPEND_UTF8(&arr, "0",
                         "too many chunks to print, use verbose if you want to force print");
    } else {
        uint32_t i = 0;
        bson_iter_init(&it, &chunks);
        while (shl_iter_next(&it)) {
            bson_iter_t f;
            append_key_u32(&arr, i++, &child, false);
            if (bson_iter_recurse(&it, &f) && bson_iter_find(&f, "min")) {
                BSON_APPEND_VALUE(&child, "min", bson_iter_value(&f));
            }
            if (bson_iter_recurse(&it, &f) && bson_iter_find(&f, "max")) {
                BSON_APPEND_VALUE(&child, "max", bson_iter_value(&f));
            }
            if (bson_iter_recurse(&it, &f) && bson_iter_find(&f, "shard")) {
                BSON_APPEND_VALUE(&child, "on shard", bson_iter_value(&f));
            }
            if (bson_iter_recurse(&it, &f) && bson_iter_find(&f, "lastmod")) {
                BSON_APPEND_VALUE(&child, "last modified", bson_iter_value(&f));
            }
            if (bson_iter_recurse(&it, &f) && bson_iter_find(&f, "jumbo") &&
                bson_iter_as_bool(&f)) {
                BSON_APPEND_BOOL(&child, "jumbo", true);
            }
            bson_append_document_end(&arr, &child);
        }
    }
    bson_append_array_end(entry, &arr);

    BSON_APPEND_ARRAY_BEGIN(entry, "tags", &arr);
    {
        uint32_t i = 0;
        bson_iter_init(&it, &tags);
        while (shl_iter_next(&it)) {
            bson_iter_t f;
            append_key_u32(&arr, i++, &child, false);
            if (bson_iter_recurse(&it, &f) && bson_iter_find(&f, "tag")) {
                BSON_APPEND_VALUE(&child, "tag", bson_iter_value(&f));
            }
            if (bson_iter_recurse(&it, &f) && bson_iter_find(&f, "min")) {
                BSON_APPEND_VALUE(&child, "min", bson_iter_value(&f));
            }
            if (bson_iter_recurse(&it, &f) && bson_iter_find(&f, "max")) {
                BSON_APPEND_VALUE(&child, "max", bson_iter_value(&f));
            }
            bson_append_document_end(&arr, &child);
        }
    }
    bson_append_array_end(entry, &arr);
done:
    bson_destroy(&filter);
    bson_destroy(&sort);
    bson_destroy(&chunks);
    bson_destroy(&tags);
    return ret;
}

/* databases: [{database: <config.databases doc>, collections: {ns: entry, ...}}, ...] */
/* The state hello gives a member: PRIMARY, SECONDARY, or what stops it answering. */
static const char *
member_state(status_ctx_t *c, const char *host)
{
    bson_t *cmd = BCON_NEW("hello", BCON_INT32(1));
    bson_t reply;
    bson_iter_t it;
    shl_status_t st = SHL_STATUS_INIT;
    const char *state = "(not reachable)";

    if (shl_client_run(c->pool, host, "admin", cmd, 5000, &reply, &st) == 0) {
        state = "(not in the set yet)";
        if (bson_iter_init_find(&it, &reply, "isWritablePrimary") && bson_iter_as_bool(&it)) {
            state = "PRIMARY";
        } else if (bson_iter_init_find(&it, &reply, "secondary") && bson_iter_as_bool(&it)) {
            state = "SECONDARY";
        }
    }
    bson_destroy(&reply);
    bson_destroy(cmd);
    return state;
}

/*
 * The members of each shard that is a replica set of several members (`shale up --replicas`)
 * and their states: {<shard>: {<host>: "PRIMARY", ...}}. Appends nothing for one-member shards.
 * (The config server's set goes through it too, as the "shard" named config.)
 */
static void
members_section(status_ctx_t *c, const bson_t *shards, bson_t *out)
{
    bson_iter_t it, f;

    bson_iter_init(&it, shards);
    while (shl_iter_next(&it)) {
        const char *id = NULL, *host = NULL, *p;
        bson_t members;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &f)) {
            continue;
        }
        while (shl_iter_next(&f)) {
            if (strcmp(shl_iter_key(&f), "_id") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                id = bson_iter_utf8(&f, NULL);
            } else if (strcmp(shl_iter_key(&f), "host") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                host = bson_iter_utf8(&f, NULL);
            }
        }
        if (id == NULL || host == NULL || strchr(host, ',') == NULL) {
            continue;
        }
        BSON_APPEND_DOCUMENT_BEGIN(out, id, &members);
        p = strchr(host, '/');
        for (p = p != NULL ? p + 1 : host; *p != '\0';) {
            char member[SHL_CLIENT_HOST_MAX];
            size_t len = strcspn(p, ",");
            snprintf(member, sizeof(member), "%.*s", (int)len, p);
            BSON_APPEND_UTF8(&members, member, member_state(c, member));
            p += len;
            p += *p == ',' ? 1 : 0;
        }
        bson_append_document_end(out, &members);
    }
}

/* The config server's set as one more "shard" for members_section: [{_id: "config", host:
 * <the router's sharding.configDB>}] into *out (empty when c->host names none). */
static void
config_set_entry(status_ctx_t *c, bson_t *out)
{
    bson_t cmd = BSON_INITIALIZER, reply, one;
    bson_iter_t it;
    shl_status_t st = SHL_STATUS_INIT;

    BSON_APPEND_INT32(&cmd, "getCmdLineOpts", 1);
    if (shl_client_run(c->pool, c->host, "admin", &cmd, STATUS_TIMEOUT_MS, &reply, &st) == 0 &&
        bson_iter_init(&it, &reply) &&
        bson_iter_find_descendant(&it, "parsed.sharding.configDB", &it) &&
        BSON_ITER_HOLDS_UTF8(&it)) {
        BSON_APPEND_DOCUMENT_BEGIN(out, "0", &one);
        BSON_APPEND_UTF8(&one, "_id", "config");
        BSON_APPEND_UTF8(&one, "host", bson_iter_utf8(&it, NULL));
        bson_append_document_end(out, &one);
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
}

static int
databases_section(status_ctx_t *c, bool verbose, bson_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_t dbs = BSON_INITIALIZER, colls = BSON_INITIALIZER, sort = BSON_INITIALIZER;
    bson_t all = BSON_INITIALIZER; /* config's own entry first, then config.databases */
    uint32_t ndbs = 0, ncolls = 0, nall = 0, idx = 0;
    bson_iter_t it;

    BSON_APPEND_INT32(&sort, "_id", 1);
    SHL_ERR(find_all(c, "databases", NULL, &sort, &dbs, &ndbs, st));
    SHL_ERR(find_all(c, "collections", NULL, &sort, &colls, &ncolls, st));
    {
        bson_t cfg;
        BSON_APPEND_DOCUMENT_BEGIN(&all, "0", &cfg);
        BSON_APPEND_UTF8(&cfg, "_id", "config");
        BSON_APPEND_UTF8(&cfg, "primary", "config");
        BSON_APPEND_BOOL(&cfg, "partitioned", true);
        bson_append_document_end(&all, &cfg);
        nall = 1;
    }
    bson_iter_init(&it, &dbs);
    while (shl_iter_next(&it)) {
        char buf[16];
        const char *key;
        bson_uint32_to_string(nall++, &key, buf, sizeof(buf));
        bson_append_value(&all, key, -1, bson_iter_value(&it));
    }

    bson_iter_init(&it, &all);
    while (shl_iter_next(&it)) {
        bson_t db, entry, collections;
        bson_iter_t f, cit;
        const char *name = "";
        size_t nlen;
        const uint8_t *data;
        uint32_t len;

        bson_iter_document(&it, &len, &data);
        if (!bson_init_static(&db, data, len)) {
            continue;
        }
        if (bson_iter_init_find(&f, &db, "_id") && BSON_ITER_HOLDS_UTF8(&f)) {
            name = bson_iter_utf8(&f, NULL);
        }
        nlen = strlen(name);
        append_key_u32(out, idx++, &entry, false);
        BSON_APPEND_DOCUMENT(&entry, "database", &db);
        BSON_APPEND_DOCUMENT_BEGIN(&entry, "collections", &collections);
        bson_iter_init(&cit, &colls);
        while (shl_iter_next(&cit)) {
            bson_t coll, centry;
            const char *ns = "";
            bson_iter_document(&cit, &len, &data);
            if (!bson_init_static(&coll, data, len)) {
                continue;
            }
            if (bson_iter_init_find(&f, &coll, "_id") && BSON_ITER_HOLDS_UTF8(&f)) {
                ns = bson_iter_utf8(&f, NULL);
            }
            if (strncmp(ns, name, nlen) != 0 || ns[nlen] != '.') {
                continue;
            }
            if (bson_iter_init_find(&f, &coll, "dropped") && bson_iter_as_bool(&f)) {
                continue;
            }
            BSON_APPEND_DOCUMENT_BEGIN(&collections, ns, &centry);
            ret = collection_entry(c, &coll, verbose, &centry, st);
            bson_append_document_end(&collections, &centry);
            if (ret != 0) {
                bson_append_document_end(&entry, &collections);
                bson_append_document_end(out, &entry);
                goto done;
            }
        }
        bson_append_document_end(&entry, &collections);
        bson_append_document_end(out, &entry);
    }
done:
    bson_destroy(&dbs);
    bson_destroy(&colls);
    bson_destroy(&sort);
    bson_destroy(&all);
    return ret;
}

int
shl_cluster_status_main(int argc, char **argv)
{
    int ret = 0;
    shl_status_t st = SHL_STATUS_INIT;
    shl_cluster_args_t a;
    shl_conn_pool_options_t popts = {.connect_timeout_ms = 5000};
    status_ctx_t c = {0};
    bson_t version = BSON_INITIALIZER, shards = BSON_INITIALIZER, mongos = BSON_INITIALIZER;
    bson_t settings = BSON_INITIALIZER, dbs = BSON_INITIALIZER, filter = BSON_INITIALIZER;
    bson_t sort = BSON_INITIALIZER, one = BSON_INITIALIZER, balancer = BSON_INITIALIZER;
    uint32_t n = 0;

    if (shl_cluster_args_parse(&a, SHL_CLUSTER_CMD_STATUS, argc, argv, &st) != 0) {
        fprintf(stderr, "shale status: %s\n", st.reason);
        shl_cluster_args_usage(stderr, SHL_CLUSTER_CMD_STATUS);
        return 2;
    }
    if (a.host != NULL) {
        /* "mongodb://h:p/?opts" (what `shale up` prints) names the same router as "h:p". */
        const char *h = strncmp(a.host, "mongodb://", 10) == 0 ? a.host + 10 : a.host;
        snprintf(c.host, sizeof(c.host), "%.*s", (int)strcspn(h, "/?,"), h);
    } else {
        shl_cluster_layout_t lay;
        bool found = false;
        SHL_ERR(shl_cluster_layout_load(&lay, a.dbpath, &found, &st));
        if (!found) {
            SHL_FAIL(&st, SHL_CODE_BAD_VALUE,
                     "no cluster in %s (no cluster.json); start one with `shale up --dbpath %s` "
                     "or pass --host",
                     lay.dir, a.dbpath);
        }
        snprintf(c.host, sizeof(c.host), "%s:%d", lay.host_ip, lay.port);
        {
            /* A cluster started with --auth: read it as a member, with its key file. */
            char key_path[SHL_CLUSTER_PATH_MAX + 16];
            snprintf(key_path, sizeof(key_path), "%s/keyfile", lay.dir);
            if (a.username == NULL && access(key_path, F_OK) == 0) {
                SHL_ERR(shl_auth_client_init(key_path, &st));
            }
        }
    }
    if (a.username != NULL) {
        if (a.password == NULL) {
            SHL_FAIL(&st, SHL_CODE_BAD_VALUE, "--username needs --password");
        }
        SHL_ERR(shl_auth_client_init_user(a.username, a.auth_db != NULL ? a.auth_db : "admin",
                                          a.password, &st));
    }
    if (a.tls || a.tls_ca_file != NULL || a.tls_cert_file != NULL) {
        SHL_ERR(shl_tls_client_init(a.tls_ca_file, a.tls_cert_file, &st));
    }
    c.pool = shl_conn_pool_new(&popts);

    if (find_all(&c, "version", NULL, NULL, &version, &n, &st) == SHL_CODE_COMMAND_NOT_FOUND) {
        SHL_ERR(use_config_server(&c, &st));
        bson_reinit(&version);
        n = 0;
        SHL_ERR(find_all(&c, "version", NULL, NULL, &version, &n, &st));
    } else if (st.code != 0) {
        ret = st.code;
        goto done;
    }
    n = 0;
    BSON_APPEND_INT32(&sort, "_id", 1);
    SHL_ERR(find_all(&c, "shards", NULL, &sort, &shards, &n, &st));
    n = 0;
    SHL_ERR(find_all(&c, "mongos", NULL, &sort, &mongos, &n, &st));
    n = 0;
    BSON_APPEND_UTF8(&filter, "_id", "balancer");
    SHL_ERR(find_all(&c, "settings", &filter, NULL, &settings, &n, &st));
    SHL_ERR(databases_section(&c, a.verbose, &dbs, &st));

    {
        bson_t view;
        if (first_doc(&version, &view)) {
            bson_t clean = BSON_INITIALIZER;
            bson_iter_t it;
            /* mongosh shows the document without the legacy version fields. */
            bson_iter_init(&it, &view);
            while (shl_iter_next(&it)) {
                if (strcmp(shl_iter_key(&it), "minCompatibleVersion") != 0 &&
                    strcmp(shl_iter_key(&it), "currentVersion") != 0) {
                    bson_append_value(&clean, shl_iter_key(&it), -1, bson_iter_value(&it));
                }
            }
            print_section_doc("shardingVersion", &clean, false, false);
            bson_destroy(&clean);
        } else {
            print_section_doc("shardingVersion", &one, false, false);
        }
    }
    print_section_doc("shards", &shards, true, false);
    {
        bson_t sets = BSON_INITIALIZER, cfg = BSON_INITIALIZER;
        config_set_entry(&c, &cfg);
        members_section(&c, &cfg, &sets);
        bson_destroy(&cfg);
        members_section(&c, &shards, &sets);
        if (!bson_empty(&sets)) {
            print_section_doc("replica set members", &sets, false, false);
        }
        bson_destroy(&sets);
    }
    {
        /* mongosh groups the live routers by version: [ { '7.0.0': 2 } ]. */
        bson_t groups = BSON_INITIALIZER, g;
        bson_iter_t it, f;
        char names[32][64];
        int counts[32], ng = 0;
        bson_iter_init(&it, &mongos);
        while (shl_iter_next(&it)) {
            const char *ver = "unknown";
            int i;
            if (bson_iter_recurse(&it, &f) && bson_iter_find(&f, "mongoVersion") &&
                BSON_ITER_HOLDS_UTF8(&f)) {
                ver = bson_iter_utf8(&f, NULL);
            }
            for (i = 0; i < ng && strcmp(names[i], ver) != 0; i++) {
            }
            if (i == ng && ng < 32) {
                snprintf(names[ng], sizeof(names[ng]), "%s", ver);
                counts[ng++] = 0;
            }
            if (i < ng) {
                counts[i]++;
            }
        }
        for (int i = 0; i < ng; i++) {
            append_key_u32(&groups, (uint32_t)i, &g, false);
            BSON_APPEND_INT32(&g, names[i], counts[i]);
            bson_append_document_end(&groups, &g);
        }
        print_section_doc("active mongoses", &groups, true, false);
        bson_destroy(&groups);
    }
    {
        bson_t view;
        bool enabled = false; /* as balancerStatus: no balancer runs unless one was started */
        bson_iter_t it;
        if (first_doc(&settings, &view)) {
            enabled = true;
            if (bson_iter_init_find(&it, &view, "stopped") && bson_iter_as_bool(&it)) {
                enabled = false;
            }
            if (bson_iter_init_find(&it, &view, "mode") && BSON_ITER_HOLDS_UTF8(&it) &&
                strcmp(bson_iter_utf8(&it, NULL), "off") == 0) {
                enabled = false;
            }
        }
        BSON_APPEND_UTF8(&balancer, "Currently enabled", enabled ? "yes" : "no");
        BSON_APPEND_UTF8(&balancer, "Currently running", "no");
        print_section_doc("balancer", &balancer, false, false);
    }
    print_section_doc("databases", &dbs, true, true);
    fflush(stdout);
done:
    if (ret != 0) {
        fprintf(stderr, "shale status: %s\n", st.reason);
    }
    shl_conn_pool_destroy(c.pool);
    bson_destroy(&version);
    bson_destroy(&shards);
    bson_destroy(&mongos);
    bson_destroy(&settings);
    bson_destroy(&dbs);
    bson_destroy(&filter);
    bson_destroy(&sort);
    bson_destroy(&one);
    bson_destroy(&balancer);
    return ret != 0 ? 1 : 0;
}
