/*
 * collection_metadata.c -- the shard's filtering metadata (MongoDB's
 * CollectionShardingRuntime / CollectionMetadata / DatabaseShardingState) and the version
 * check of versioned requests (seeds/002 "Versioning Protocols", seeds/000 "Shard
 * versioning and database versioning", docs/design/sharding-protocol.md "Router ->
 * shard").
 *
 * Per namespace the shard keeps an immutable, refcounted metadata object: a routing table
 * reference from the catalog cache (NULL: unsharded) and this shard's name. It is loaded
 * lazily on first use and replaced by a refresh (a newer or other-generation version
 * received, or _flushRoutingTableCacheUpdates); holders of the old one (open cursors)
 * keep filtering with it.
 */
#include <stdint.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/str.h"
#include "sharding/keys_client.h"
#include "sharding/shard_key.h"
#include "shard/shard_private.h"
#include "shard/chunk_splitter.h"

static int
not_initialized(shl_status_t *st)
{
    return shl_status_set(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED,
                          "Cannot accept sharding commands if sharding state has not been "
                          "initialized with a shardIdentity document");
}

/* ---------------------------------------------------------------- metadata objects */

static bool
meta_owns(const shl_db_orphan_filter_t *f, const bson_t *doc)
{
    const shard_coll_meta_t *m = (const shard_coll_meta_t *)f;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t key;
    size_t idx;
    bool owns = false;

    if (m->rt != NULL) {
        /* The load policy's read counter (chunk_splitter.h): counters and samples are the
         * metadata's mutable part (atomics, load_mu). */
        shard_load_note_read((shard_coll_meta_t *)(uintptr_t)f, doc);
    }
    if (m->rt == NULL) {
        owns = true;
    } else if (m->owns_all_chunks) {
        /* Every key is in one of this shard's chunks (they cover MinKey to MaxKey): only
         * a key that cannot be extracted is not owned -- no key built, hashed or looked up. */
        owns = !shl_shard_key_doc_has_array(shl_routing_table_key_pattern(m->rt), doc);
    } else if (m->owns_no_chunk) {
        owns = false;
    } else {
        /* A document whose shard key cannot be extracted (an array on the key path)
         * belongs to no chunk, as MongoDB's keyBelongsToMe says. */
        if (shl_shard_key_extract_from_doc(shl_routing_table_key_pattern(m->rt), doc, &key, &st) ==
            0) {
            owns = shl_routing_table_find_chunk(m->rt, &key, &idx, &st) == 0 &&
                   strcmp(shl_routing_table_chunk_shard(m->rt, idx), m->shard_name) == 0;
        }
        bson_destroy(&key);
    }
    return owns;
}

static bool
meta_same_key(const shl_db_orphan_filter_t *f, const bson_t *a, const bson_t *b)
{
    const shard_coll_meta_t *m = (const shard_coll_meta_t *)f;

    return m->rt == NULL || shl_shard_key_values_equal(shl_routing_table_key_pattern(m->rt), a, b);
}

bool
shard_key_of(void *arg, const char *ns, bson_t *out)
{
    shard_coll_meta_t *m = shard_meta_peek(arg, ns);
    bool sharded = m != NULL && m->rt != NULL;

    if (sharded) {
        bson_copy_to(&shl_routing_table_key_pattern(m->rt)->pattern, out);
    } else {
        bson_init(out);
    }
    shard_meta_release(m);
    return sharded;
}

static void
meta_destroy(shl_db_orphan_filter_t *f)
{
    shard_coll_meta_t *m = (shard_coll_meta_t *)f;
    shard_state_t *s = m->owner;

    pthread_mutex_lock(&s->meta_mu);
    if (m->live_prev != NULL) {
        m->live_prev->live_next = m->live_next;
    } else {
        s->live_metas = m->live_next;
    }
    if (m->live_next != NULL) {
        m->live_next->live_prev = m->live_prev;
    }
    pthread_mutex_unlock(&s->meta_mu);
    /* The range deleter may be waiting for this query's metadata to go away. */
    if (atomic_load(&s->rd.waiting_for_queries)) {
        shard_range_deleter_wake(s);
    }
    shard_splitter_meta_cleanup(m);
    if (m->rt != NULL) {
        shl_routing_table_release(m->rt);
    }
    bson_free(m);
}

/* A metadata object over 'rt' (reference moves here; NULL: unsharded), one reference,
 * tracked on s's live list until destroyed. */
static shard_coll_meta_t *
meta_new(shard_state_t *s, shl_routing_table_t *rt, const char *shard_name)
{
    shard_coll_meta_t *m = bson_malloc0(sizeof(*m));

    atomic_init(&m->filter.refs, 1);
    m->filter.owns = meta_owns;
    m->filter.same_key = meta_same_key;
    m->filter.destroy = meta_destroy;
    m->rt = rt;
    snprintf(m->shard_name, sizeof(m->shard_name), "%s", shard_name);
    if (rt != NULL) {
        m->shard_version = shl_routing_table_shard_version(rt, shard_name);
        m->coll_version = shl_routing_table_collection_version(rt);
        m->owns_no_chunk = m->shard_version.major == 0;
        m->owns_all_chunks = !m->owns_no_chunk && shl_routing_table_nshards_owning(rt) == 1;
        shard_splitter_meta_init(m);
    } else {
        m->shard_version = shl_chunk_version_unsharded();
        m->coll_version = shl_chunk_version_unsharded();
    }
    m->owner = s;
    pthread_mutex_lock(&s->meta_mu);
    m->live_next = s->live_metas;
    if (s->live_metas != NULL) {
        s->live_metas->live_prev = m;
    }
    s->live_metas = m;
    pthread_mutex_unlock(&s->meta_mu);
    return m;
}

/* Whether 'm' gives its shard a chunk overlapping [min, max). */
static bool
meta_owns_part_of(const shard_coll_meta_t *m, const bson_t *min, const bson_t *max)
{
    bool owns = false;

    for (size_t i = 0; i < shl_routing_table_nchunks(m->rt) && !owns; i++) {
        bson_t cmin, cmax;
        if (strcmp(shl_routing_table_chunk_shard(m->rt, i), m->shard_name) != 0) {
            continue;
        }
        shl_routing_table_chunk_bounds(m->rt, i, &cmin, &cmax);
        owns = shl_shard_key_compare(&cmin, max) < 0 && shl_shard_key_compare(min, &cmax) < 0;
    }
    return owns;
}

bool
shard_meta_in_use_for_range(shard_state_t *s, const shard_coll_meta_t *current,
                            const shl_uuid_t *uuid, const bson_t *min, const bson_t *max)
{
    bool in_use = false;

    pthread_mutex_lock(&s->meta_mu);
    for (const shard_coll_meta_t *m = s->live_metas; m != NULL && !in_use; m = m->live_next) {
        if (m == current || m->rt == NULL || !shl_uuid_eq(shl_routing_table_uuid(m->rt), uuid)) {
            continue;
        }
        in_use = meta_owns_part_of(m, min, max);
    }
    pthread_mutex_unlock(&s->meta_mu);
    return in_use;
}

static shard_coll_meta_t *
meta_ref(shard_coll_meta_t *m)
{
    shl_db_orphan_filter_ref(&m->filter);
    return m;
}

void
shard_meta_release(shard_coll_meta_t *m)
{
    if (m != NULL) {
        shl_db_orphan_filter_release(&m->filter);
    }
}

/* ---------------------------------------------------------------- the map */

/*
 * The catalog cache of an aware shard, created on first use (no I/O) from the identity's
 * config server connection string. Errors: ShardingStateNotInitialized.
 */
/* Gossip from the config server and other shards (shard_clock.c). 's->registry' is set
 * before the pool sends anything and stays until shutdown. */
static void
observe_reply(void *arg, const char *host, const bson_t *reply)
{
    (void)host;
    shard_clock_observe(arg, reply);
}

static int
get_cache(shard_state_t *s, shl_catalog_cache_t **out, char shard_name[SHL_SHARD_ID_MAX],
          shl_status_t *st)
{
    int ret = 0;
    shard_identity_t id;

    (void)shard_get_identity(s, &id); /* a secondary may learn it from replication */
    pthread_mutex_lock(&s->mu);
    if (!s->aware) {
        ret = not_initialized(st);
    } else {
        if (s->cache == NULL) {
            shl_conn_pool_options_t po;
            memset(&po, 0, sizeof(po));
            po.hooks.observe = observe_reply;
            po.hooks.decorate = shard_clock_decorate_request;
            po.hooks.arg = s;
            s->pool = shl_conn_pool_new(&po);
            s->registry = shl_shard_registry_new(s->pool, s->id.config_cs);
            s->cache = shl_catalog_cache_new(s->registry);
        }
        *out = s->cache;
        if (shard_name != NULL) {
            memcpy(shard_name, s->id.shard_name, SHL_SHARD_ID_MAX);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return ret;
}

int
shard_net_get(shard_state_t *s, shl_conn_pool_t **pool, shl_shard_registry_t **registry,
              shl_status_t *st)
{
    shl_catalog_cache_t *cache = NULL;
    int ret = get_cache(s, &cache, NULL, st);

    *pool = ret == 0 ? s->pool : NULL;
    *registry = ret == 0 ? s->registry : NULL;
    return ret;
}

int
shard_keys_load(void *arg, shl_hmac_key_t **keys, size_t *n, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = arg;
    shl_catalog_cache_t *cache = NULL;
    shl_keys_source_t src;

    *keys = NULL;
    *n = 0;
    SHL_ERR(get_cache(s, &cache, NULL, st));
    src.pool = s->pool;
    shl_str_copy(src.host, sizeof(src.host), shl_shard_registry_config_host(s->registry));
    ret = shl_keys_client_load(&src, keys, n, st);
done:
    return ret;
}

/* The map entry of 'ns', created if missing. Entries live until shutdown. */
static shard_csr_t *
csr_get(shard_state_t *s, const char *ns)
{
    shard_csr_t *c;

    pthread_mutex_lock(&s->mu);
    for (c = s->csrs; c != NULL; c = c->next) {
        if (strcmp(c->ns, ns) == 0) {
            break;
        }
    }
    if (c == NULL) {
        c = bson_malloc0(sizeof(*c));
        c->ns = bson_strdup(ns);
        pthread_mutex_init(&c->refresh_mu, NULL);
        c->next = s->csrs;
        s->csrs = c;
    }
    pthread_mutex_unlock(&s->mu);
    return c;
}

shard_coll_meta_t *
shard_meta_peek(shard_state_t *s, const char *ns)
{
    shard_csr_t *c = csr_get(s, ns);
    shard_coll_meta_t *m;

    pthread_mutex_lock(&s->mu);
    m = c->meta != NULL ? meta_ref(c->meta) : NULL;
    pthread_mutex_unlock(&s->mu);
    return m;
}

/*
 * Load the metadata of c->ns through the catalog cache (after forgetting the cached entry
 * when 'invalidate') and install it. Called with c->refresh_mu held, so one refresh of a
 * namespace runs at a time; the network round trips run without s->mu.
 */
static int
load_locked(shard_state_t *s, shard_csr_t *c, bool invalidate, shard_coll_meta_t **out,
            shl_status_t *st)
{
    int ret = 0;
    shl_catalog_cache_t *cache = NULL;
    shl_routing_table_t *rt = NULL;
    char shard_name[SHL_SHARD_ID_MAX];
    shard_coll_meta_t *m, *old;

    SHL_ERR(get_cache(s, &cache, shard_name, st));
    if (invalidate) {
        shl_catalog_cache_invalidate_collection(cache, c->ns);
    }
    ret = shl_catalog_cache_get_collection(cache, c->ns, &rt, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        /* No database entry: nothing of it is sharded. */
        shl_status_clear(st);
        ret = 0;
        rt = NULL;
    }
    SHL_ERR(ret);
    m = meta_new(s, rt, shard_name);
    pthread_mutex_lock(&s->mu);
    old = c->meta;
    if (old != NULL) {
        shard_splitter_carry_over(old, m);
    }
    c->meta = meta_ref(m);
    pthread_mutex_unlock(&s->mu);
    shard_meta_release(old);
    {
        char v[SHL_CHUNK_VERSION_STR_MAX];
        shl_chunk_version_to_string(&m->shard_version, v);
        SHL_LOG_DEBUG(1, SHARDING, 22063, "Updated collection filtering metadata", "namespace",
                      BCON_UTF8(c->ns), "shardVersion", BCON_UTF8(v));
    }
    if (out != NULL) {
        *out = m;
    } else {
        shard_meta_release(m);
    }
done:
    return ret;
}

int
shard_meta_get(shard_state_t *s, const char *ns, shard_coll_meta_t **out, shl_status_t *st)
{
    int ret = 0;
    shard_csr_t *c;

    *out = shard_meta_peek(s, ns);
    if (*out == NULL) {
        c = csr_get(s, ns);
        pthread_mutex_lock(&c->refresh_mu);
        /* Someone else may have loaded it while this thread waited. */
        *out = shard_meta_peek(s, ns);
        if (*out == NULL) {
            ret = load_locked(s, c, false, out, st);
        }
        pthread_mutex_unlock(&c->refresh_mu);
    }
    return ret;
}

int
shard_meta_refresh(shard_state_t *s, const char *ns, shard_coll_meta_t **out, shl_status_t *st)
{
    int ret;
    shard_csr_t *c = csr_get(s, ns);

    if (out != NULL) {
        *out = NULL;
    }
    pthread_mutex_lock(&c->refresh_mu);
    ret = load_locked(s, c, true, out, st);
    pthread_mutex_unlock(&c->refresh_mu);
    return ret;
}

static bool name_in_db(const char *name, const char *db);

/* Forget the filtering metadata of the collections 'match' selects ('ns' is its argument);
 * their next use loads them again. Takes s->mu; never blocks on a holder (the map's
 * reference only is dropped: the last holder's release frees it). */
static void
forget_meta(shard_state_t *s, bool (*match)(const char *csr_ns, const char *arg),
            const char *arg)
{
    pthread_mutex_lock(&s->mu);
    for (shard_csr_t *c = s->csrs; c != NULL; c = c->next) {
        if (c->meta != NULL && match(c->ns, arg)) {
            shard_coll_meta_t *old = c->meta;
            c->meta = NULL;
            shard_meta_release(old);
        }
    }
    pthread_mutex_unlock(&s->mu);
}

static bool
ns_is(const char *csr_ns, const char *ns)
{
    return strcmp(csr_ns, ns) == 0;
}

static bool
ns_any(const char *csr_ns, const char *unused)
{
    (void)csr_ns;
    (void)unused;
    return true;
}

int
shard_db_refresh(shard_state_t *s, const char *db, shl_status_t *st)
{
    int ret = 0;
    shl_catalog_cache_t *cache = NULL;
    shl_cached_database_t have;

    SHL_ERR(get_cache(s, &cache, NULL, st));
    shl_catalog_cache_invalidate_database(cache, db);
    /* The collections of the database are reloaded on their next use. */
    forget_meta(s, name_in_db, db);
    ret = shl_catalog_cache_get_database(cache, db, &have, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        shl_status_clear(st);
        ret = 0;
    }
done:
    return ret;
}

int
shard_meta_forget(shard_state_t *s, const char *ns, shl_status_t *st)
{
    int ret = 0;
    shl_catalog_cache_t *cache = NULL;

    SHL_ERR(get_cache(s, &cache, NULL, st));
    shl_catalog_cache_invalidate_collection(cache, ns);
    forget_meta(s, ns_is, ns);
done:
    return ret;
}

int
shard_meta_forget_all(shard_state_t *s, shl_status_t *st)
{
    int ret = 0;
    shl_catalog_cache_t *cache = NULL;

    SHL_ERR(get_cache(s, &cache, NULL, st));
    shl_catalog_cache_purge(cache);
    forget_meta(s, ns_any, NULL);
done:
    return ret;
}

void
shard_meta_destroy_all(shard_state_t *s)
{
    shard_csr_t *c = s->csrs;

    while (c != NULL) {
        shard_csr_t *next = c->next;
        shard_meta_release(c->meta);
        pthread_mutex_destroy(&c->refresh_mu);
        bson_free(c->ns);
        bson_free(c);
        c = next;
    }
    s->csrs = NULL;
    while (s->db_crits != NULL) {
        shard_db_crit_t *d = s->db_crits;
        s->db_crits = d->next;
        bson_free(d->db);
        bson_free(d);
    }
    if (s->cache != NULL) {
        shl_catalog_cache_destroy(s->cache);
        s->cache = NULL;
    }
    if (s->registry != NULL) {
        shl_shard_registry_destroy(s->registry);
        s->registry = NULL;
    }
    if (s->pool != NULL) {
        shl_conn_pool_destroy(s->pool);
        s->pool = NULL;
    }
}

/* ---------------------------------------------------------------- version checks */

/* Whether a refresh could change the verdict on 'received' against 'wanted'. */
static bool
worth_refreshing(const shl_chunk_version_t *received, const shl_chunk_version_t *wanted)
{
    /* Either side unsharded: the collection may have been sharded, or dropped and
     * re-created unsharded, since the shard last looked. */
    if (shl_chunk_version_is_unsharded(received) || shl_chunk_version_is_unsharded(wanted)) {
        return true;
    }
    /* Newer than what the shard knows, or another generation not older than it. */
    return !shl_chunk_version_is_older_than(received, wanted);
}

static int
stale_config(const char *ns, const shl_shard_version_t *received, const shard_coll_meta_t *m,
             shl_status_t *st)
{
    shl_stale_config_info_t info;
    const shl_chunk_version_t *r = &received->placement, *w = &m->shard_version;
    const char *why = "placement version mismatch detected for";

    memset(&info, 0, sizeof(info));
    snprintf(info.ns, sizeof(info.ns), "%s", ns);
    info.received = *received;
    info.has_wanted = true;
    info.wanted = shl_shard_version_make(w);
    snprintf(info.shard_id, sizeof(info.shard_id), "%s", m->shard_name);
    if (m->rt != NULL && shl_chunk_version_is_unsharded(r)) {
        why = "this shard contains chunks for the collection, but the client expects an "
              "unsharded collection:";
    } else if (m->rt == NULL && !shl_chunk_version_is_unsharded(r)) {
        why = "this shard has no sharded collection, the collection may have been dropped:";
    } else if (!shl_chunk_version_same_generation(r, w)) {
        why = "timestamp mismatch detected for";
    }
    return shl_status_set_stale_config(st, &info, "%s %s", why, ns);
}

/* ---------------------------------------------------------------- critical section */

/*
 * A versioned write's filter: the metadata's, plus the count of writes in flight on the
 * namespace, dropped when the write command releases it (a critical section waits for
 * the count to reach zero).
 */
typedef struct write_guard {
    shl_db_orphan_filter_t filter; /* first */
    shard_state_t *s;
    shard_csr_t *c;
    shard_coll_meta_t *m;
    bool db_versioned; /* counted in c->inflight_db_writes too */
} write_guard_t;

static bool
guard_owns(const shl_db_orphan_filter_t *f, const bson_t *doc)
{
    const write_guard_t *g = (const write_guard_t *)f;

    return meta_owns(&g->m->filter, doc);
}

static bool
guard_same_key(const shl_db_orphan_filter_t *f, const bson_t *a, const bson_t *b)
{
    const write_guard_t *g = (const write_guard_t *)f;

    return meta_same_key(&g->m->filter, a, b);
}

static void
write_done(shard_state_t *s, shard_csr_t *c, bool db_versioned)
{
    pthread_mutex_lock(&s->mu);
    c->inflight_writes--;
    if (db_versioned) {
        c->inflight_db_writes--;
    }
    pthread_cond_broadcast(&s->crit_cv);
    pthread_mutex_unlock(&s->mu);
}

static void
guard_destroy(shl_db_orphan_filter_t *f)
{
    write_guard_t *g = (write_guard_t *)f;

    write_done(g->s, g->c, g->db_versioned);
    shard_meta_release(g->m);
    bson_free(g);
}

static void
timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
    shl_cond_timedwait_ms(cv, mu, ms);
}

/* Whether namespace or database name 'name' belongs to database 'db'. */
static bool
name_in_db(const char *name, const char *db)
{
    size_t n = strlen(db);

    return strncmp(name, db, n) == 0 && (name[n] == '\0' || name[n] == '.');
}

/* The level of the database critical section covering 'ns' (s->mu held). */
static int
db_crit_level_locked(shard_state_t *s, const char *ns)
{
    for (shard_db_crit_t *d = s->db_crits; d != NULL; d = d->next) {
        if (name_in_db(ns, d->db)) {
            return d->level;
        }
    }
    return SHARD_CRIT_NONE;
}

static bool
crit_blocks(int level, shl_db_shard_access_t access)
{
    /* Catalog reads are reads: MongoDB's catch-up phase blocks writes and DDL only. */
    return level == SHARD_CRIT_ALL || (level == SHARD_CRIT_WRITES && access != SHL_DB_SHARD_READ &&
                                       access != SHL_DB_SHARD_CATALOG);
}

/*
 * Wait while a critical section blocks 'access' on c; a write then counts as in flight.
 * The database's section is checked here too, under the same lock as the in-flight count,
 * so a movePrimary entering it either sees this write in flight or blocks it; *db_waited
 * tells the caller to check the database version again.
 */
static int
crit_gate(shard_state_t *s, shl_op_ctx_t *op, shard_csr_t *c, shl_db_shard_access_t access,
          bool db_versioned, const shl_shard_version_t *received, bool *db_waited, shl_status_t *st)
{
    int ret = 0;

    *db_waited = false;
    pthread_mutex_lock(&s->mu);
    while (crit_blocks(c->crit, access) ||
           (db_versioned && crit_blocks(db_crit_level_locked(s, c->ns), access))) {
        if (op->txn != NULL && crit_blocks(c->crit, access)) {
            /* A transaction's statement does not wait: the migration may be waiting for
             * this very transaction to end (db_txn_wait_writers). As mongod, StaleConfig,
             * which the router retries on a first statement and otherwise turns into a
             * transient transaction error. */
            shl_stale_config_info_t info;
            memset(&info, 0, sizeof(info));
            snprintf(info.ns, sizeof(info.ns), "%s", c->ns);
            info.received = *received;
            snprintf(info.shard_id, sizeof(info.shard_id), "%s", s->id.shard_name);
            ret = shl_status_set_stale_config(
                st, &info,
                "migration critical section active for %s: a transaction does not "
                "wait for it",
                c->ns);
            break;
        }
        if ((ret = shl_op_check_interrupt(op, st)) != 0) {
            break;
        }
        if (!crit_blocks(c->crit, access)) {
            *db_waited = true;
        }
        timed_wait(&s->crit_cv, &s->mu, 100);
    }
    if (ret == 0 && access == SHL_DB_SHARD_WRITE) {
        c->inflight_writes++;
        if (db_versioned) {
            c->inflight_db_writes++;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return ret;
}

int
shard_crit_enter(shard_state_t *s, shl_op_ctx_t *op, const char *ns, int level, shl_status_t *st)
{
    int ret = 0;
    shard_csr_t *c = csr_get(s, ns);
    int was;

    pthread_mutex_lock(&s->mu);
    was = c->crit;
    c->crit = level;
    while (c->inflight_writes > 0) {
        if ((ret = shl_op_check_interrupt(op, st)) != 0) {
            c->crit = was;
            pthread_cond_broadcast(&s->crit_cv);
            break;
        }
        timed_wait(&s->crit_cv, &s->mu, 100);
    }
    pthread_mutex_unlock(&s->mu);
    return ret;
}

void
shard_crit_block(shard_state_t *s, const char *ns)
{
    shard_csr_t *c = csr_get(s, ns);

    pthread_mutex_lock(&s->mu);
    c->crit = SHARD_CRIT_ALL;
    pthread_cond_broadcast(&s->crit_cv);
    pthread_mutex_unlock(&s->mu);
}

void
shard_crit_reset_all(shard_state_t *s)
{
    pthread_mutex_lock(&s->mu);
    for (shard_csr_t *c = s->csrs; c != NULL; c = c->next) {
        c->crit = SHARD_CRIT_NONE;
    }
    pthread_cond_broadcast(&s->crit_cv);
    pthread_mutex_unlock(&s->mu);
}

void
shard_crit_exit(shard_state_t *s, const char *ns)
{
    shard_csr_t *c = csr_get(s, ns);

    pthread_mutex_lock(&s->mu);
    c->crit = SHARD_CRIT_NONE;
    pthread_cond_broadcast(&s->crit_cv);
    pthread_mutex_unlock(&s->mu);
}

/* The writes carrying a databaseVersion in flight on the namespaces of 'db' (s->mu held):
 * writes to its sharded collections do not wait for a movePrimary. */
static int
db_inflight_locked(shard_state_t *s, const char *db)
{
    int n = 0;

    for (shard_csr_t *c = s->csrs; c != NULL; c = c->next) {
        if (name_in_db(c->ns, db)) {
            n += c->inflight_db_writes;
        }
    }
    return n;
}

int
shard_db_crit_enter(shard_state_t *s, shl_op_ctx_t *op, const char *db, int level, shl_status_t *st)
{
    int ret = 0;
    shard_db_crit_t *d;
    int was = SHARD_CRIT_NONE;

    pthread_mutex_lock(&s->mu);
    for (d = s->db_crits; d != NULL; d = d->next) {
        if (strcmp(d->db, db) == 0) {
            break;
        }
    }
    if (d == NULL) {
        d = bson_malloc0(sizeof(*d));
        d->db = bson_strdup(db);
        d->next = s->db_crits;
        s->db_crits = d;
    }
    was = d->level;
    d->level = level;
    while (db_inflight_locked(s, db) > 0) {
        if ((ret = shl_op_check_interrupt(op, st)) != 0) {
            d->level = was;
            pthread_cond_broadcast(&s->crit_cv);
            break;
        }
        timed_wait(&s->crit_cv, &s->mu, 100);
    }
    pthread_mutex_unlock(&s->mu);
    if (ret != 0 && was == SHARD_CRIT_NONE) {
        shard_db_crit_exit(s, db);
    }
    return ret;
}

void
shard_db_crit_exit(shard_state_t *s, const char *db)
{
    shard_db_crit_t **pp;

    pthread_mutex_lock(&s->mu);
    for (pp = &s->db_crits; *pp != NULL; pp = &(*pp)->next) {
        if (strcmp((*pp)->db, db) == 0) {
            shard_db_crit_t *d = *pp;
            *pp = d->next;
            bson_free(d->db);
            bson_free(d);
            break;
        }
    }
    pthread_cond_broadcast(&s->crit_cv);
    pthread_mutex_unlock(&s->mu);
}

/* Wait while the database critical section covering 'ns' blocks 'access' (requests that
 * carry a databaseVersion; DDL waits like a write). */
static int
db_crit_gate(shard_state_t *s, shl_op_ctx_t *op, const char *ns, shl_db_shard_access_t access,
             shl_status_t *st)
{
    int ret = 0;

    pthread_mutex_lock(&s->mu);
    while (crit_blocks(db_crit_level_locked(s, ns), access)) {
        if ((ret = shl_op_check_interrupt(op, st)) != 0) {
            break;
        }
        timed_wait(&s->crit_cv, &s->mu, 100);
    }
    pthread_mutex_unlock(&s->mu);
    return ret;
}

/* ---------------------------------------------------------------- version checks (2) */

/* ---------------------------------------------------------------- snapshot reads */

/*
 * The orphan filter of a snapshot read at a past time (docs/design/snapshot_reads.md): a
 * document is this shard's when its chunk belonged to this shard at that time, by the chunk
 * history of the current metadata (seeds/000 "The historical routing table"), so a donor
 * still returns a chunk it has migrated away since, and a recipient does not return one it
 * received after. A chunk whose history does not reach the time owns nothing here (the
 * router has already answered StaleChunkHistory for the chunks it targets).
 */
typedef struct meta_at {
    shl_db_orphan_filter_t filter;
    shard_coll_meta_t *m; /* reference */
    shl_ts_t at;
} meta_at_t;

static bool
meta_at_owns(const shl_db_orphan_filter_t *f, const bson_t *doc)
{
    const meta_at_t *a = (const meta_at_t *)f;
    const shard_coll_meta_t *m = a->m;
    shl_status_t st = SHL_STATUS_INIT;
    const char *shard = NULL;
    bson_t key;
    bool owns = false;

    if (shl_shard_key_extract_from_doc(shl_routing_table_key_pattern(m->rt), doc, &key, &st) == 0) {
        owns = shl_routing_table_shard_for_key(m->rt, &key, &a->at, &shard, &st) == 0 &&
               strcmp(shard, m->shard_name) == 0;
    }
    bson_destroy(&key);
    return owns;
}

static bool
meta_at_same_key(const shl_db_orphan_filter_t *f, const bson_t *x, const bson_t *y)
{
    const meta_at_t *a = (const meta_at_t *)f;
    return meta_same_key(&a->m->filter, x, y);
}

static void
meta_at_destroy(shl_db_orphan_filter_t *f)
{
    meta_at_t *a = (meta_at_t *)f;
    shard_meta_release(a->m);
    bson_free(a);
}

/* The atClusterTime of a snapshot read ({level: "snapshot", atClusterTime}); 0 otherwise. */
static uint64_t
snapshot_read_time(const shl_op_ctx_t *op)
{
    bson_iter_t it;
    bool snapshot = false;
    uint64_t at = 0;

    if (!op->has_read_concern || !bson_iter_init(&it, &op->read_concern)) {
        return 0;
    }
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), "level") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            snapshot = strcmp(bson_iter_utf8(&it, NULL), "snapshot") == 0;
        } else if (strcmp(bson_iter_key(&it), "atClusterTime") == 0 &&
                   BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            uint32_t t, i;
            bson_iter_timestamp(&it, &t, &i);
            at = ((uint64_t)t << 32) | i;
        }
    }
    return snapshot ? at : 0;
}

/* A filter over 'm' (a new reference) at cluster time 'at', judging with 'owns'
 * (meta_at_owns; the unversioned reads' counter_owns ignores 'at'). */
static shl_db_orphan_filter_t *
meta_at_new(shard_coll_meta_t *m, uint64_t at,
            bool (*owns)(const shl_db_orphan_filter_t *f, const bson_t *doc))
{
    meta_at_t *a = bson_malloc0(sizeof(*a));

    atomic_init(&a->filter.refs, 1);
    a->filter.owns = owns;
    a->filter.same_key = meta_at_same_key;
    a->filter.destroy = meta_at_destroy;
    a->m = meta_ref(m);
    a->at = shl_ts_from_u64(at);
    return &a->filter;
}

static int check_db_version(shard_state_t *s, const char *ns,
                            const shl_database_version_t *received, shl_status_t *st);

/*
 * The shard version check of 'ns' against 'received', which the request carries for it
 * (its own namespace: `shardVersion`; another one it reads or writes: an entry of
 * `$_involvedNamespaceVersions`). 'db_received' (NULL: none) is the databaseVersion sent
 * with it, checked again when a movePrimary's critical section held the request.
 */
static int
check_shard_version(shard_state_t *s, shl_op_ctx_t *op, const char *ns,
                    shl_db_shard_access_t access, const shl_shard_version_t *sv,
                    const shl_database_version_t *db_received, shl_db_orphan_filter_t **filter,
                    shl_status_t *st)
{
    int ret = 0;
    bool db_waited = false;
    shl_shard_version_t received = *sv;
    shard_coll_meta_t *m = NULL;
    shard_csr_t *c = NULL;

    if (access != SHL_DB_SHARD_DDL && access != SHL_DB_SHARD_CATALOG) {
        shard_csr_t *gate = csr_get(s, ns);
        SHL_ERR(crit_gate(s, op, gate, access, db_received != NULL, &received, &db_waited, st));
        if (access == SHL_DB_SHARD_WRITE) {
            c = gate; /* in flight from here: dropped below or by the guard */
        }
        if (db_waited) {
            /* A movePrimary's critical section held it: the primary may have moved. */
            SHL_ERR(check_db_version(s, ns, db_received, st));
        }
    }
    SHL_ERR(shard_meta_get(s, ns, &m, st));
    if (!shl_chunk_version_is_ignored(&received.placement) &&
        !shl_chunk_version_equal(&received.placement, &m->shard_version)) {
        if (!worth_refreshing(&received.placement, &m->shard_version)) {
            SHL_ERR(stale_config(ns, &received, m, st));
        }
        shard_meta_release(m);
        m = NULL;
        SHL_ERR(shard_meta_refresh(s, ns, &m, st));
        if (!shl_chunk_version_equal(&received.placement, &m->shard_version)) {
            SHL_ERR(stale_config(ns, &received, m, st));
        }
    }
    if (c != NULL) {
        write_guard_t *g = bson_malloc0(sizeof(*g));
        atomic_init(&g->filter.refs, 1);
        g->filter.owns = guard_owns;
        g->filter.same_key = guard_same_key;
        g->filter.destroy = guard_destroy;
        g->s = s;
        g->c = c;
        g->db_versioned = db_received != NULL;
        g->m = meta_ref(m);
        c = NULL;
        *filter = &g->filter;
    } else if (access == SHL_DB_SHARD_READ && m->rt != NULL && snapshot_read_time(op) != 0) {
        *filter = meta_at_new(m, snapshot_read_time(op), meta_at_owns);
    } else if (access != SHL_DB_SHARD_DDL && access != SHL_DB_SHARD_CATALOG && m->rt != NULL) {
        *filter = &meta_ref(m)->filter;
    }
done:
    if (c != NULL) {
        write_done(s, c, db_received != NULL);
    }
    shard_meta_release(m);
    return ret;
}

static int
stale_db(const char *db, const shl_database_version_t *received, const shl_cached_database_t *have,
         const char *why, shl_status_t *st)
{
    shl_stale_db_info_t info;

    memset(&info, 0, sizeof(info));
    snprintf(info.db, sizeof(info.db), "%s", db);
    info.received = *received;
    if (have != NULL) {
        info.has_wanted = true;
        info.wanted = have->version;
    }
    return shl_status_set_stale_db(st, &info, "%s %s", why, db);
}

/* The database version: equal to config.databases' (refreshed once if not) and this
 * shard the primary. */
static int
check_db_version(shard_state_t *s, const char *ns, const shl_database_version_t *db_received,
                 shl_status_t *st)
{
    int ret = 0;
    shl_database_version_t received = *db_received;
    shl_catalog_cache_t *cache = NULL;
    shl_cached_database_t have;
    char db[SHL_DB_NAME_MAX], shard_name[SHL_SHARD_ID_MAX];
    size_t n = strcspn(ns, ".");
    bool found = false;

    if (n >= sizeof(db)) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid namespace: %s", ns);
    }
    memcpy(db, ns, n);
    db[n] = '\0';
    SHL_ERR(get_cache(s, &cache, shard_name, st));
    for (int attempt = 0; attempt < 2; attempt++) {
        if (attempt == 1) {
            shl_catalog_cache_invalidate_database(cache, db);
        }
        ret = shl_catalog_cache_get_database(cache, db, &have, st);
        found = ret == 0;
        if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
            shl_status_clear(st);
            ret = 0;
        }
        SHL_ERR(ret);
        if (found && strcmp(have.primary, shard_name) == 0 &&
            shl_database_version_equal(&received, &have.version)) {
            goto done;
        }
        /* A version older than the one known is stale without asking again. */
        if (found && strcmp(have.primary, shard_name) == 0 &&
            shl_database_version_is_older_than(&received, &have.version)) {
            break;
        }
    }
    if (!found) {
        SHL_ERR(stale_db(db, &received, NULL, "database not found:", st));
    }
    if (strcmp(have.primary, shard_name) != 0) {
        SHL_ERR(
            stale_db(db, &received, NULL, "this shard is not the primary shard of database", st));
    }
    SHL_ERR(stale_db(db, &received, &have, "database version mismatch detected for", st));
done:
    return ret;
}

/* The version 'op' carries as 'field' ("shardVersion" or "databaseVersion"), which
 * op_context.c saw: into *sv or *dbv (the other NULL). */
static int
request_version(const shl_op_ctx_t *op, const char *field, shl_shard_version_t *sv,
                shl_database_version_t *dbv, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    if (!bson_iter_init_find(&it, op->body, field)) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "%s vanished from the request", field);
    }
    if (sv != NULL) {
        SHL_ERR(shl_shard_version_parse(&it, sv, st));
    } else {
        SHL_ERR(shl_database_version_parse(&it, dbv, st));
    }
done:
    return ret;
}

/*
 * An unversioned read's filter (bal16c), a meta_at_t whose 'at' is unused: it owns every
 * document -- an unversioned read sees orphans, as MongoDB's -- and only counts each document
 * it examines in its chunk's load counter, as the orphan filter of a versioned read does
 * (chunk_splitter.h). Its same_key and destroy are the snapshot filter's.
 */
static bool
counter_owns(const shl_db_orphan_filter_t *f, const bson_t *doc)
{
    const meta_at_t *a = (const meta_at_t *)f;

    shard_load_note_read(a->m, doc);
    return true;
}

/*
 * The counting filter for an unversioned find or aggregate of 'ns' while the load policy
 * counts reads and this shard already holds the namespace's metadata as sharded (no load, no
 * refresh: a namespace it has not seen is not counted), else NULL. Off the policy the cost is
 * one atomic load. A filter takes the query off the count and covered-projection fast paths,
 * so only the commands that return documents get one (count keeps its fast count).
 */
static shl_db_orphan_filter_t *
unversioned_read_counter(shard_state_t *s, const shl_op_ctx_t *op, const char *ns)
{
    shl_db_orphan_filter_t *f = NULL;
    bson_iter_t it;
    shard_coll_meta_t *m = NULL;
    bool wanted = shard_load_counting(s) && op->body != NULL && bson_iter_init(&it, op->body) &&
                  bson_iter_next(&it) && strchr(ns, '.') != NULL && !name_in_db(ns, "admin") &&
                  !name_in_db(ns, "config") && !name_in_db(ns, "local") &&
                  (strcmp(bson_iter_key(&it), "find") == 0 ||
                   strcmp(bson_iter_key(&it), "aggregate") == 0);

    if (wanted) {
        m = shard_meta_peek(s, ns);
    }
    if (m != NULL && m->rt != NULL && !m->owns_no_chunk) {
        f = meta_at_new(m, 0, counter_owns);
    }
    shard_meta_release(m);
    return f;
}

int
shard_check_versions(void *arg, shl_op_ctx_t *op, const char *ns, shl_db_shard_access_t access,
                     shl_db_orphan_filter_t **filter, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = arg;
    shl_shard_version_t sv;
    shl_database_version_t dbv;

    *filter = NULL;
    if (op->has_database_version || op->has_shard_version) {
        /* A new primary answers versioned requests once its step-up work is done. */
        SHL_ERR(shard_step_up_gate(s, op, st));
    }
    if (op->has_database_version) {
        SHL_ERR(db_crit_gate(s, op, ns, access, st));
        SHL_ERR(request_version(op, "databaseVersion", NULL, &dbv, st));
        SHL_ERR(check_db_version(s, ns, &dbv, st));
    }
    if (op->has_shard_version) {
        SHL_ERR(request_version(op, "shardVersion", &sv, NULL, st));
        SHL_ERR(check_shard_version(s, op, ns, access, &sv, op->has_database_version ? &dbv : NULL,
                                    filter, st));
    } else if (access == SHL_DB_SHARD_READ) {
        *filter = unversioned_read_counter(s, op, ns);
    }
done:
    return ret;
}

int
shard_check_involved(void *arg, shl_op_ctx_t *op, const char *ns, const bson_iter_t *shard_version,
                     const bson_iter_t *database_version, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = arg;
    shl_shard_version_t sv;
    shl_database_version_t dbv;
    shl_db_orphan_filter_t *filter = NULL;

    SHL_ERR(shl_shard_version_parse(shard_version, &sv, st));
    if (database_version != NULL) {
        SHL_ERR(shl_database_version_parse(database_version, &dbv, st));
        SHL_ERR(db_crit_gate(s, op, ns, SHL_DB_SHARD_READ, st));
        SHL_ERR(check_db_version(s, ns, &dbv, st));
    }
    /* The same verdict as for the request's own namespace: a namespace this shard does not
     * know yet is loaded from the config server, and an UNSHARDED received against another
     * UNSHARDED passes without asking, as the shard is told of every shardCollection. */
    SHL_ERR(check_shard_version(s, op, ns, SHL_DB_SHARD_READ, &sv,
                                database_version != NULL ? &dbv : NULL, &filter, st));
done:
    shl_db_orphan_filter_release(filter);
    return ret;
}

int
shard_ddl_check_db_version(void *arg, const char *ns, const bson_t *dbv, shl_status_t *st)
{
    shl_database_version_t v;
    int ret = 0;

    SHL_ERR(shl_database_version_parse_doc(dbv, &v, st));
    SHL_ERR(check_db_version(arg, ns, &v, st));
done:
    return ret;
}
