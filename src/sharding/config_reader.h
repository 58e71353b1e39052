/*
 * config_reader.h -- reading the sharding catalog from the config server: one `find` on a
 * config.* collection, following the cursor with getMore until it is exhausted. The one
 * place the shard registry and the catalog cache turn config.* into documents.
 */
#ifndef SHL_SHARDING_CONFIG_READER_H
#define SHL_SHARDING_CONFIG_READER_H

#include <bson/bson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "net/client.h"

/* How long one catalog read may take before it fails with NetworkTimeout. */
#define SHL_CONFIG_READ_TIMEOUT_MS 30000

/* Documents read from the config server; release with shl_config_docs_cleanup. */
typedef struct shl_config_docs {
    bson_t **docs;
    size_t n;
} shl_config_docs_t;

/*
 * shl_config_read --
 *     Run {find: coll, filter, sort?} on the "config" database of 'host' and collect every
 *     document (getMore until the cursor id is 0) into *out (always initialised; clean it
 *     up). 'sort' may be NULL. Blocks for up to SHL_CONFIG_READ_TIMEOUT_MS per round trip.
 *     Errors: network errors, the server's error, ProtocolError for a malformed reply.
 */
int shl_config_read(shl_conn_pool_t *pool, const char *host, const char *coll, const bson_t *filter,
                    const bson_t *sort, shl_config_docs_t *out, shl_status_t *st);

/* shl_config_read_db -- the same on database 'db' of the config server (admin.system.keys). */
int shl_config_read_db(shl_conn_pool_t *pool, const char *host, const char *db, const char *coll,
                       const bson_t *filter, const bson_t *sort, shl_config_docs_t *out,
                       shl_status_t *st);

void shl_config_docs_cleanup(shl_config_docs_t *docs);

#endif
