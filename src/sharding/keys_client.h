/*
 * keys_client.h -- how shards and routers read the cluster's HMAC keys (seeds/000 "Key
 * management"): admin.system.keys lives on the config server, so their key cache
 * (net/cluster_time.h) loads {purpose: "HMAC"} from there with one find.
 */
#ifndef SHL_SHARDING_KEYS_CLIENT_H
#define SHL_SHARDING_KEYS_CLIENT_H

#include <stddef.h>

#include "base/status.h"
#include "net/client.h"
#include "net/cluster_time.h"

/* Where the keys are: the config server 'host' over 'pool' (both outlive the cache). */
typedef struct shl_keys_source {
    shl_conn_pool_t *pool;
    char host[SHL_CLIENT_HOST_MAX];
} shl_keys_source_t;

/*
 * shl_keys_client_load --
 *     A shl_keys_loader_fn over a shl_keys_source_t: every HMAC key of the config server's
 *     admin.system.keys (malformed documents skipped). Blocks on the network. Errors: the
 *     network's and the config server's.
 */
int shl_keys_client_load(void *arg, shl_hmac_key_t **keys, size_t *n, shl_status_t *st);

/*
 * shl_keys_client_docs --
 *     The HMAC keys among 'docs' (admin.system.keys documents) as a new array (*keys,
 *     malloc'd) of *n. Pure; the config server's own loader uses it too.
 */
void shl_keys_client_docs(bson_t *const *docs, size_t ndocs, shl_hmac_key_t **keys, size_t *n);

#endif
