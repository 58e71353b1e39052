/*
 * kill_sessions.h -- which sessions a kill names (MongoDB's KillAllSessionsByPattern and
 * SessionKiller::Matcher): a set of patterns, each one session (lsid), every session of one
 * user (uid, the SHA-256 digest of "user@db"), or every session. killSessions,
 * killAllSessions, killAllSessionsByPattern, endSessions' cursor kills and expiry all kill
 * by a matcher; a router sends its patterns on to the shards as killAllSessionsByPattern.
 */
#ifndef SHL_SESSION_KILL_SESSIONS_H
#define SHL_SESSION_KILL_SESSIONS_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/lsid.h"

typedef enum shl_kill_pattern_kind {
    SHL_KILL_ALL,  /* every session */
    SHL_KILL_LSID, /* one session */
    SHL_KILL_UID,  /* every session of one user */
} shl_kill_pattern_kind_t;

typedef struct shl_kill_pattern {
    shl_kill_pattern_kind_t kind;
    shl_lsid_t lsid;               /* SHL_KILL_LSID */
    uint8_t uid[SHL_LSID_UID_LEN]; /* SHL_KILL_UID */
} shl_kill_pattern_t;

typedef struct shl_kill_matcher {
    shl_kill_pattern_t *p;
    size_t n, cap;
    bool all; /* an SHL_KILL_ALL pattern is among them */
} shl_kill_matcher_t;

void shl_kill_matcher_init(shl_kill_matcher_t *m);
void shl_kill_matcher_cleanup(shl_kill_matcher_t *m);
void shl_kill_matcher_add(shl_kill_matcher_t *m, const shl_kill_pattern_t *p);
void shl_kill_matcher_add_lsid(shl_kill_matcher_t *m, const shl_lsid_t *lsid);

/*
 * shl_kill_matcher_match --
 *     Whether 'lsid' is named by any pattern of the matcher 'arg' (a shl_kill_matcher_t *;
 *     the signature fits the cursor managers' and op list's kill callbacks). Pure.
 */
bool shl_kill_matcher_match(void *arg, const shl_lsid_t *lsid);

/*
 * shl_kill_matcher_append --
 *     The patterns as the killAllSessionsByPattern array a router sends to the shards: {}
 *     (all), {lsid: {id, uid}}, {uid: BinData}, into the array 'arr'.
 */
void shl_kill_matcher_append(const shl_kill_matcher_t *m, bson_t *arr);

/* shl_user_digest -- SHA-256 of "user@db" (the empty string for user "" and db ""): the uid of
 * that user's sessions, as MongoDB digests a user name. */
void shl_user_digest(const char *user, const char *db, uint8_t out[SHL_LSID_UID_LEN]);

#endif
