/*
 * lsid.h -- logical session ids (seeds/001 "Logical Sessions"): the `lsid` a client attaches,
 * {id: UUID[, uid: BinData(0, 32 bytes)]}, parsed with MongoDB's errors and completed with the
 * user digest, and the {id, uid} form the server keeps (config.system.sessions `_id`,
 * config.transactions `_id`, oplog entries' `lsid`).
 */
#ifndef SHL_NET_LSID_H
#define SHL_NET_LSID_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

#define SHL_LSID_UID_LEN 32

typedef struct shl_lsid {
    uint8_t id[16];                /* the UUID */
    uint8_t uid[SHL_LSID_UID_LEN]; /* SHA-256 of the user name ("" without authentication) */
    /* An internal (child) session of the session {id, uid} (seeds/000 "Internal
     * Transactions"): {id, uid, txnNumber?, txnUUID}. A child with txnNumber belongs to the
     * parent's retryable write of that number. Zero for an ordinary session. */
    bool child;
    uint8_t txn_uuid[16];
    bool has_parent_txn_number;
    int64_t parent_txn_number;
} shl_lsid_t;

/*
 * shl_lsid_parse --
 *     The lsid of a request ('doc', the `lsid` field's value). `uid` when given is kept
 *     (authentication is not enforced yet, so anyone may set it, as MongoDB allows without
 *     auth); otherwise it is the digest of the unauthenticated user. Errors as MongoDB's IDL
 *     parser gives them: IDLFailedToParse (40414) for a missing `id`, TypeMismatch (14) for
 *     an `id` that is not a UUID or a `uid` that is not 32 bytes of BinData, IDLUnknownField
 *     (40415) for another field.
 */
int shl_lsid_parse(const bson_t *doc, shl_lsid_t *out, shl_status_t *st);

/* shl_lsid_append -- append {id: UUID, uid: BinData(0)} (a child session: then txnNumber?,
 * txnUUID) as field 'key' of 'doc'. */
void shl_lsid_append(bson_t *doc, const char *key, const shl_lsid_t *lsid);

/* shl_lsid_equal / shl_lsid_hash -- identity of two lsids (a child session is not its
 * parent); a hash for tables (a child hashes as its parent). */
bool shl_lsid_equal(const shl_lsid_t *a, const shl_lsid_t *b);
uint64_t shl_lsid_hash(const shl_lsid_t *lsid);

/* shl_lsid_id_string -- the id as "xxxxxxxx-xxxx-..." into buf (>= 37 bytes). */
void shl_lsid_id_string(const shl_lsid_t *lsid, char buf[37]);

/*
 * shl_lsid_user_digest --
 *     The uid of sessions of the user named 'user_at_db' ("user@db", MongoDB's display name;
 *     "" for no user): its SHA-256.
 */
void shl_lsid_user_digest(const char *user_at_db, uint8_t out[SHL_LSID_UID_LEN]);

/* shl_lsid_new -- a fresh session id (random UUID) for the unauthenticated user. */
void shl_lsid_new(shl_lsid_t *out);

/* shl_lsid_parent -- the session itself, without the child fields. */
void shl_lsid_parent(const shl_lsid_t *lsid, shl_lsid_t *out);

/* shl_lsid_new_child -- a new internal session of 'parent' (a fresh txnUUID), for the
 * parent's retryable write 'parent_txn_number' when 'retryable'. */
void shl_lsid_new_child(const shl_lsid_t *parent, bool retryable, int64_t parent_txn_number,
                        shl_lsid_t *out);

#endif
