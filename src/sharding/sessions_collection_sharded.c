/*
 * sessions_collection_sharded.c -- config.system.sessions of a sharded cluster
 * (sessions_collection_sharded.h): each session's command goes to the shard owning its _id,
 * versioned, retried after a refresh on a stale answer.
 */
#include "sharding/sessions_collection_sharded.h"

#include <string.h>

#include "base/log.h"
#include "net/client.h"
#include "sharding/chunk_version.h"
#include "sharding/routing_table.h"
#include "sharding/shard_registry.h"

/* Bound on one round of commands to the shards (MongoDB's write concern timeout). */
#define SESSIONS_CALL_TIMEOUT_MS (SHL_SESSIONS_WTIMEOUT_MS + 5000)

struct shl_sessions_sharded {
    shl_catalog_cache_t *(*get_cache)(void *arg);
    void *arg;
    int (*setup)(void *arg, shl_status_t *st);
};

shl_sessions_sharded_t *
shl_sessions_sharded_new(shl_catalog_cache_t *(*get_cache)(void *arg), void *arg,
                         int (*setup)(void *arg, shl_status_t *st))
{
    shl_sessions_sharded_t *s = bson_malloc0(sizeof(*s));

    s->get_cache = get_cache;
    s->arg = arg;
    s->setup = setup;
    return s;
}

void
shl_sessions_sharded_destroy(shl_sessions_sharded_t *s)
{
    bson_free(s);
}

static bool
is_stale(int code)
{
    return code == SHL_CODE_STALE_CONFIG || code == SHL_CODE_STALE_EPOCH ||
           code == SHL_CODE_STALE_DB_VERSION || code == SHL_CODE_SHARD_NOT_FOUND;
}

/* The cache, and the routing table of the collection (a reference; *rt NULL never on success). */
static int
routing(shl_sessions_sharded_t *s, shl_catalog_cache_t **cache, shl_routing_table_t **rt,
        shl_status_t *st)
{
    int ret = 0;

    *rt = NULL;
    if ((*cache = s->get_cache(s->arg)) == NULL) {
        SHL_FAIL(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED,
                 "sharding state is not yet initialized");
    }
    SHL_ERR(shl_catalog_cache_get_collection(*cache, SHL_SESSIONS_NS, rt, st));
    if (*rt == NULL) {
        /* Only the config server creates it: a cached "unsharded" may be old news. */
        shl_catalog_cache_invalidate_collection(*cache, SHL_SESSIONS_NS);
        SHL_ERR(shl_catalog_cache_get_collection(*cache, SHL_SESSIONS_NS, rt, st));
    }
    if (*rt == NULL) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_SHARDED, "Session collection '%s' is not sharded",
                 SHL_SESSIONS_NS);
    }
done:
    return ret;
}

int
shl_sessions_sharded_check(shl_sessions_sharded_t *s, shl_status_t *st)
{
    shl_catalog_cache_t *cache;
    shl_routing_table_t *rt = NULL;
    int ret = routing(s, &cache, &rt, st);

    shl_routing_table_release(rt);
    return ret;
}

/* What one shard is sent: its command and the sessions it holds. */
typedef struct shard_part {
    const char *shard; /* borrowed from the routing table */
    char host[SHL_CLIENT_HOST_MAX];
    shl_lsid_t *ids;
    size_t n;
    size_t *index; /* each one's index in the caller's array */
    bson_t cmd;
} shard_part_t;

/* How the commands are made and the replies taken: 'build' writes the command for the part's
 * sessions (NULL ids for a command with none: every owner gets it); 'take' reads a reply. */
typedef struct sharded_op {
    void (*build)(const shl_lsid_t *ids, size_t n, bson_t *cmd);
    int (*take)(void *arg, const bson_t *reply, const shard_part_t *part, shl_status_t *st);
    void *arg;
    bool every_owner; /* one command to each shard owning chunks, no sessions */
} sharded_op_t;

static void
parts_cleanup(shard_part_t *parts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bson_free(parts[i].ids);
        bson_free(parts[i].index);
        bson_destroy(&parts[i].cmd);
    }
    bson_free(parts);
}

/* The part of 'shard' in parts[0..*n), added when missing. */
static shard_part_t *
part_of(shard_part_t *parts, size_t *n, const char *shard)
{
    for (size_t i = 0; i < *n; i++) {
        if (strcmp(parts[i].shard, shard) == 0) {
            return &parts[i];
        }
    }
    memset(&parts[*n], 0, sizeof(parts[*n]));
    parts[*n].shard = shard;
    bson_init(&parts[*n].cmd);
    return &parts[(*n)++];
}

/* One attempt; *stale says a shard answered with a stale-routing error. */
static int
attempt(shl_sessions_sharded_t *s, const sharded_op_t *o, const shl_lsid_t *ids, size_t n,
        bool *stale, shl_status_t *st)
{
    int ret = 0;
    shl_catalog_cache_t *cache = NULL;
    shl_routing_table_t *rt = NULL;
    shard_part_t *parts = NULL;
    size_t nparts = 0, cap;
    shl_fanout_req_t *reqs = NULL;
    shl_fanout_result_t *res = NULL;
    shl_shard_registry_t *reg;

    *stale = false;
    SHL_ERR(routing(s, &cache, &rt, st));
    reg = shl_catalog_cache_registry(cache);
    cap = (o->every_owner ? shl_routing_table_nchunks(rt) : n) + 1;
    parts = bson_malloc0(cap * sizeof(*parts));
    if (o->every_owner) {
        for (size_t i = 0; i < shl_routing_table_nchunks(rt); i++) {
            part_of(parts, &nparts, shl_routing_table_chunk_shard(rt, i));
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            bson_t key = BSON_INITIALIZER;
            const char *shard = NULL;
            shard_part_t *p;
            shl_sessions_id_doc(&ids[i], &key);
            ret = shl_routing_table_shard_for_key(rt, &key, NULL, &shard, st);
            bson_destroy(&key);
            SHL_ERR(ret);
            p = part_of(parts, &nparts, shard);
            p->ids = bson_realloc(p->ids, (p->n + 1) * sizeof(*p->ids));
            p->index = bson_realloc(p->index, (p->n + 1) * sizeof(*p->index));
            p->ids[p->n] = ids[i];
            p->index[p->n++] = i;
        }
    }
    if (nparts == 0) {
        goto done;
    }
    reqs = bson_malloc0(nparts * sizeof(*reqs));
    res = bson_malloc0(nparts * sizeof(*res));
    for (size_t i = 0; i < nparts; i++) {
        shl_chunk_version_t v = shl_routing_table_shard_version(rt, parts[i].shard);
        shl_shard_version_t sv = shl_shard_version_make(&v);
        SHL_ERR(shl_shard_registry_host_for(reg, parts[i].shard, parts[i].host,
                                            sizeof(parts[i].host), st));
        o->build(parts[i].ids, parts[i].n, &parts[i].cmd);
        shl_shard_version_append(&parts[i].cmd, "shardVersion", &sv);
        reqs[i].host = parts[i].host;
        reqs[i].db = SHL_SESSIONS_DB;
        reqs[i].cmd = &parts[i].cmd;
    }
    shl_client_fanout(shl_shard_registry_pool(reg), reqs, nparts, SESSIONS_CALL_TIMEOUT_MS, res);
    for (size_t i = 0; i < nparts; i++) {
        shl_status_t one = SHL_STATUS_INIT;
        int code = res[i].code;
        if (code == 0) {
            code = o->take(o->arg, &res[i].reply, &parts[i], &one);
        } else {
            one = res[i].status;
        }
        if (code != 0 && is_stale(code)) {
            *stale = true;
        }
        if (code != 0 && ret == 0) {
            ret = code;
            *st = one;
        }
    }
    if (*stale) {
        shl_catalog_cache_on_stale_shard(cache, SHL_SESSIONS_NS, NULL);
        if (ret == SHL_CODE_SHARD_NOT_FOUND) {
            shl_shard_registry_invalidate(reg);
        }
    }
done:
    if (res != NULL) {
        shl_fanout_results_cleanup(res, nparts);
    }
    bson_free(res);
    bson_free(reqs);
    if (parts != NULL) {
        parts_cleanup(parts, nparts);
    }
    shl_routing_table_release(rt);
    return ret;
}

static int
run_sharded(shl_sessions_sharded_t *s, const sharded_op_t *o, const shl_lsid_t *ids, size_t n,
            shl_status_t *st)
{
    int ret = 0;
    bool stale = true;

    for (int i = 0; stale && i < SHL_SESSIONS_SHARDED_MAX_RETRIES; i++) {
        shl_status_clear(st);
        ret = attempt(s, o, ids, n, &stale, st);
    }
    return ret;
}

/* ---------------------------------------------------------------- the interface */

static int
take_write(void *arg, const bson_t *reply, const shard_part_t *part, shl_status_t *st)
{
    (void)arg;
    (void)part;
    return shl_sessions_write_status(reply, st);
}

static int
coll_setup(void *arg, shl_status_t *st)
{
    shl_sessions_sharded_t *s = arg;

    if (s->setup != NULL) {
        return s->setup(s->arg, st);
    }
    return shl_sessions_sharded_check(s, st);
}

static int
coll_check(void *arg, shl_status_t *st)
{
    return shl_sessions_sharded_check(arg, st);
}

static int
coll_refresh(void *arg, const shl_lsid_t *ids, size_t n, shl_status_t *st)
{
    sharded_op_t o = {shl_sessions_refresh_cmd, take_write, NULL, false};

    return run_sharded(arg, &o, ids, n, st);
}

static int
coll_remove(void *arg, const shl_lsid_t *ids, size_t n, shl_status_t *st)
{
    sharded_op_t o = {shl_sessions_remove_cmd, take_write, NULL, false};

    return run_sharded(arg, &o, ids, n, st);
}

/* A find reply marks the sessions of its part that exist (in the caller's array). */
static int
take_found(void *arg, const bson_t *reply, const shard_part_t *part, shl_status_t *st)
{
    bool *removed = arg, *mine = bson_malloc0((part->n + 1) * sizeof(*mine));
    int ret;

    for (size_t i = 0; i < part->n; i++) {
        mine[i] = true;
    }
    ret = shl_sessions_mark_found(reply, part->ids, part->n, mine, st);
    for (size_t i = 0; ret == 0 && i < part->n; i++) {
        removed[part->index[i]] = mine[i];
    }
    bson_free(mine);
    return ret;
}

static int
coll_find_removed(void *arg, const shl_lsid_t *ids, size_t n, bool *removed, shl_status_t *st)
{
    sharded_op_t o = {shl_sessions_find_cmd, take_found, removed, false};

    return run_sharded(arg, &o, ids, n, st);
}

void
shl_sessions_sharded_coll(shl_sessions_sharded_t *s, shl_sessions_coll_t *out)
{
    memset(out, 0, sizeof(*out));
    out->setup = coll_setup;
    out->check = coll_check;
    out->refresh = coll_refresh;
    out->remove = coll_remove;
    out->find_removed = coll_find_removed;
    out->arg = s;
}

/* ---------------------------------------------------------------- the TTL index */

static void
build_ttl(const shl_lsid_t *ids, size_t n, bson_t *cmd)
{
    (void)ids;
    (void)n;
    shl_sessions_ttl_index_cmd(cmd);
}

static void
build_collmod(const shl_lsid_t *ids, size_t n, bson_t *cmd)
{
    (void)ids;
    (void)n;
    shl_sessions_collmod_cmd(cmd);
}

static int
take_status(void *arg, const bson_t *reply, const shard_part_t *part, shl_status_t *st)
{
    (void)arg;
    (void)part;
    return shl_status_from_reply(reply, st);
}

int
shl_sessions_sharded_create_ttl_index(shl_sessions_sharded_t *s, shl_status_t *st)
{
    sharded_op_t create = {build_ttl, take_status, NULL, true};
    sharded_op_t collmod = {build_collmod, take_status, NULL, true};
    int ret = run_sharded(s, &create, NULL, 0, st);

    /* A changed localLogicalSessionTimeoutMinutes: the existing index takes the new one. */
    if (ret == SHL_CODE_INDEX_OPTIONS_CONFLICT || ret == SHL_CODE_INDEX_KEY_SPECS_CONFLICT) {
        ret = run_sharded(s, &collmod, NULL, 0, st);
    }
    return ret;
}
