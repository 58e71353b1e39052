/*
 * session_private.h -- what the session library's files share: a hash map of lsids (open
 * addressing, linear probing, backward-shift deletion) holding each session's last use. Not
 * thread-safe: the owner locks. Not used outside src/session.
 */
#ifndef SHL_SESSION_PRIVATE_H
#define SHL_SESSION_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/lsid.h"

typedef struct lsid_entry {
    bool used;
    shl_lsid_t lsid;
    int64_t last_use_ms;
} lsid_entry_t;

typedef struct lsid_map {
    lsid_entry_t *slots; /* cap slots, a power of two (0 before the first insert) */
    size_t cap;
    size_t n;
} lsid_map_t;

void lsid_map_init(lsid_map_t *m);
void lsid_map_cleanup(lsid_map_t *m);

/* lsid_map_get -- the entry of 'lsid', or NULL. Borrowed until the next change. */
lsid_entry_t *lsid_map_get(const lsid_map_t *m, const shl_lsid_t *lsid);

/* lsid_map_put -- the entry of 'lsid', added (last_use_ms 0) when absent (*added set). */
lsid_entry_t *lsid_map_put(lsid_map_t *m, const shl_lsid_t *lsid, bool *added);

/* lsid_map_remove -- remove 'lsid'; whether it was there. */
bool lsid_map_remove(lsid_map_t *m, const shl_lsid_t *lsid);

/* lsid_map_swap -- exchange the contents of two maps. */
void lsid_map_swap(lsid_map_t *a, lsid_map_t *b);

#endif
