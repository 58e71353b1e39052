/*
 * configsvr_keys.c -- the config server's key manager (seeds/000 "Key management";
 * docs/design/vector_clock.md): HMAC-SHA1 keys in admin.system.keys ({_id: long, purpose:
 * "HMAC", key: BinData(0) of 20 random bytes, expiresAt: Timestamp}), always a current key and
 * a reserve that takes over when it expires (KeysRotationIntervalSec each); old keys stay so
 * times signed with them can still be checked. The process's key cache reads them locally.
 */
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "bson/bson_util.h"
#include "config/config_private.h"
#include "db/repl_hooks.h"
#include "net/cluster_time.h"
#include "net/server.h"
#include "sharding/keys_client.h"
#include "storage/storage.h"

/* Every HMAC key of the local admin.system.keys. */
static int
read_keys(shl_hmac_key_t **keys, size_t *n, shl_status_t *st)
{
    int ret = 0;
    /* A secondary of the config server's set reads the keys its primary made. */
    bson_t *cmd = BCON_NEW("find", BCON_UTF8("system.keys"), "filter", "{", "purpose",
                           BCON_UTF8("HMAC"), "}", "batchSize", BCON_INT32(1000000),
                           "$readPreference", "{", "mode", BCON_UTF8("primaryPreferred"), "}");
    bson_t reply = BSON_INITIALIZER;
    bson_iter_t it, arr;
    bson_t **docs = NULL;
    size_t ndocs = 0, cap = 0;

    *keys = NULL;
    *n = 0;
    bson_destroy(&reply);
    SHL_ERR(shl_remote_run_self(&cfg_get()->remote, "admin", cmd, NULL, &reply, st));
    if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch", &it) &&
        BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &arr)) {
        while (bson_iter_next(&arr)) {
            const uint8_t *data;
            uint32_t len;
            if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
                continue;
            }
            bson_iter_document(&arr, &len, &data);
            if (ndocs == cap) {
                cap = cap == 0 ? 8 : cap * 2;
                docs = realloc(docs, cap * sizeof(*docs));
                SHL_INVARIANT(docs != NULL);
            }
            docs[ndocs++] = bson_new_from_data(data, len);
        }
    }
    shl_keys_client_docs(docs, ndocs, keys, n);
done:
    for (size_t i = 0; i < ndocs; i++) {
        bson_destroy(docs[i]);
    }
    free(docs);
    bson_destroy(cmd);
    bson_destroy(&reply);
    return ret;
}

static int
load_local(void *arg, shl_hmac_key_t **keys, size_t *n, shl_status_t *st)
{
    (void)arg;
    return read_keys(keys, n, st);
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/*
 * Insert the keys the rule asks for at the current ClusterTime and reload the cache;
 * *next_expiry gets the soonest expiresAt still ahead (when the next key is due).
 */
static int
generate(cfg_state_t *cfg, uint64_t *next_expiry, shl_status_t *st)
{
    int ret = 0;
    shl_hmac_key_t *keys = NULL;
    size_t n = 0, nvalid = 0, nnew = 0;
    uint64_t *valid = NULL;
    uint64_t now = shl_storage_clock_now(cfg->svc->storage);
    uint64_t wall = (uint64_t)(shl_clock_wall_ms() / 1000) << 32;
    cfg_new_key_t add[2];

    /* ClusterTime moves only with writes, and an idle config server writes nothing; the
     * next write will be stamped at least with the wall clock, which is "now" for keys. */
    if (wall > now) {
        now = wall;
    }
    *next_expiry = 0;
    SHL_ERR(read_keys(&keys, &n, st));
    valid = calloc(n + 1, sizeof(*valid));
    SHL_INVARIANT(valid != NULL);
    for (size_t i = 0; i < n; i++) {
        if (keys[i].expires_at > now) {
            valid[nvalid++] = keys[i].expires_at;
        }
    }
    qsort(valid, nvalid, sizeof(*valid), cmp_u64);
    cfg_keys_plan(now, shl_opt_int(SHL_OPT_KeysRotationIntervalSec), valid, nvalid, add, &nnew);
    if (!shl_db_repl_is_primary(cfg->svc)) {
        /* Only the set's primary makes keys; a secondary looks again soon for the ones it
         * replicates. */
        nnew = 0;
        nvalid = 0;
    }
    for (size_t i = 0; i < nnew; i++) {
        uint8_t k[SHL_HMAC_KEY_LEN];
        bson_t reply;
        bson_t *cmd;
        SHL_INVARIANT(RAND_bytes(k, sizeof(k)) == 1);
        cmd = BCON_NEW("insert", BCON_UTF8("system.keys"), "documents", "[", "{", "_id",
                       BCON_INT64(add[i].id), "purpose", BCON_UTF8("HMAC"), "key",
                       BCON_BIN(BSON_SUBTYPE_BINARY, k, sizeof(k)), "expiresAt",
                       BCON_TIMESTAMP((uint32_t)(add[i].expires_at >> 32),
                                      (uint32_t)add[i].expires_at),
                       "}", "]", "writeConcern", "{", "w", BCON_UTF8("majority"), "}");
        ret = shl_remote_run_self(&cfg_get()->remote, "admin", cmd, NULL, &reply, st);
        bson_destroy(cmd);
        bson_destroy(&reply);
        SHL_ERR(ret);
        SHL_LOG_INFO(SHARDING, 5000120, "generated a cluster time signing key", "keyId",
                     BCON_INT64(add[i].id), "expiresAtSecs",
                     BCON_INT64((int64_t)(add[i].expires_at >> 32)));
        if (nvalid == 0 || add[i].expires_at < valid[0]) {
            valid[0] = add[i].expires_at;
            nvalid = nvalid == 0 ? 1 : nvalid;
        }
    }
    *next_expiry = nvalid > 0 ? valid[0] : 0;
    if (nnew > 0 || n == 0 || !shl_db_repl_is_primary(cfg->svc)) {
        SHL_ERR(shl_cluster_time_refresh(cfg->svc->cluster_time, st));
    }
done:
    free(keys);
    free(valid);
    return ret;
}

static void *
keys_main(void *arg)
{
    cfg_state_t *cfg = arg;

    shl_log_set_thread_ctx("monitoring-keys-for-HMAC");
    pthread_mutex_lock(&cfg->keys_mu);
    while (!cfg->keys_stop) {
        shl_status_t st = SHL_STATUS_INIT;
        uint64_t next = 0;
        int64_t wait_s = 1;
        struct timespec ts;
        int rc;

        pthread_mutex_unlock(&cfg->keys_mu);
        rc = generate(cfg, &next, &st);
        if (rc != 0) {
            SHL_LOG_WARNING(SHARDING, 5000121, "could not generate cluster time signing keys",
                            "error", BCON_UTF8(st.reason));
        } else if (next != 0) {
            /* Wake when the current key expires, to put a new reserve behind its successor. */
            wait_s = (int64_t)(next >> 32) - shl_clock_wall_ms() / 1000 + 1;
            wait_s = wait_s < 1 ? 1 : wait_s > 3600 ? 3600 : wait_s;
        }
        pthread_mutex_lock(&cfg->keys_mu);
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += wait_s;
        while (!cfg->keys_stop && !cfg->keys_kicked) {
            if (pthread_cond_timedwait(&cfg->keys_cv, &cfg->keys_mu, &ts) != 0) {
                break;
            }
        }
        cfg->keys_kicked = false;
    }
    pthread_mutex_unlock(&cfg->keys_mu);
    return NULL;
}

/* Wake the key thread: to look again now, or ('stop') to end. */
static void
keys_signal(cfg_state_t *cfg, bool stop)
{
    pthread_mutex_lock(&cfg->keys_mu);
    if (stop) {
        cfg->keys_stop = true;
    } else {
        cfg->keys_kicked = true;
    }
    pthread_cond_signal(&cfg->keys_cv);
    pthread_mutex_unlock(&cfg->keys_mu);
}

void
cfg_keys_kick(cfg_state_t *cfg)
{
    if (cfg->keys_started) {
        keys_signal(cfg, false);
    }
}

int
cfg_keys_start(cfg_state_t *cfg, shl_status_t *st)
{
    int ret = 0;
    uint64_t next;

    pthread_mutex_init(&cfg->keys_mu, NULL);
    pthread_cond_init(&cfg->keys_cv, NULL);
    cfg->svc->cluster_time = shl_cluster_time_new();
    shl_cluster_time_set_loader(cfg->svc->cluster_time, load_local, cfg);
    if (shl_db_repl_is_primary(cfg->svc)) {
        SHL_ERR(generate(cfg, &next, st));
    }
    SHL_INVARIANT(pthread_create(&cfg->keys_thread, NULL, keys_main, cfg) == 0);
    cfg->keys_started = true;
done:
    return ret;
}

void
cfg_keys_stop(cfg_state_t *cfg)
{
    if (cfg->keys_started) {
        keys_signal(cfg, true);
        pthread_join(cfg->keys_thread, NULL);
        cfg->keys_started = false;
    }
}
