/*
 * keys_client.c -- see keys_client.h.
 */
#include "sharding/keys_client.h"

#include <stdlib.h>

#include "sharding/config_reader.h"

void
shl_keys_client_docs(bson_t *const *docs, size_t ndocs, shl_hmac_key_t **keys, size_t *n)
{
    shl_hmac_key_t *out = calloc(ndocs > 0 ? ndocs : 1, sizeof(*out));

    SHL_INVARIANT(out != NULL);
    *n = 0;
    for (size_t i = 0; i < ndocs; i++) {
        if (shl_hmac_key_parse(docs[i], &out[*n])) {
            (*n)++;
        }
    }
    *keys = out;
}

int
shl_keys_client_load(void *arg, shl_hmac_key_t **keys, size_t *n, shl_status_t *st)
{
    const shl_keys_source_t *src = arg;
    shl_config_docs_t docs = {0};
    bson_t *filter = BCON_NEW("purpose", BCON_UTF8("HMAC"));
    int ret = 0;

    *keys = NULL;
    *n = 0;
    SHL_ERR(shl_config_read_db(src->pool, src->host, "admin", "system.keys", filter, NULL, &docs,
                               st));
    shl_keys_client_docs(docs.docs, docs.n, keys, n);
done:
    shl_config_docs_cleanup(&docs);
    bson_destroy(filter);
    return ret;
}
