/*
 * lsid_map.c -- the lsid hash map of session_private.h.
 */
#include <bson/bson.h>
#include <string.h>

#include "session/session_private.h"

void
lsid_map_init(lsid_map_t *m)
{
    memset(m, 0, sizeof(*m));
}

void
lsid_map_cleanup(lsid_map_t *m)
{
    bson_free(m->slots);
    memset(m, 0, sizeof(*m));
}

static size_t
home(const lsid_map_t *m, const shl_lsid_t *lsid)
{
    return (size_t)shl_lsid_hash(lsid) & (m->cap - 1);
}

lsid_entry_t *
lsid_map_get(const lsid_map_t *m, const shl_lsid_t *lsid)
{
    if (m->cap == 0) {
        return NULL;
    }
    for (size_t i = home(m, lsid);; i = (i + 1) & (m->cap - 1)) {
        lsid_entry_t *e = &m->slots[i];
        if (!e->used) {
            return NULL;
        }
        if (shl_lsid_equal(&e->lsid, lsid)) {
            return e;
        }
    }
}

static void
grow(lsid_map_t *m)
{
    lsid_map_t bigger;

    bigger.cap = m->cap == 0 ? 16 : m->cap * 2;
    bigger.n = 0;
    bigger.slots = bson_malloc0(bigger.cap * sizeof(*bigger.slots));
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].used) {
            bool added;
            lsid_entry_t *e = lsid_map_put(&bigger, &m->slots[i].lsid, &added);
            e->last_use_ms = m->slots[i].last_use_ms;
        }
    }
    bson_free(m->slots);
    *m = bigger;
}

lsid_entry_t *
lsid_map_put(lsid_map_t *m, const shl_lsid_t *lsid, bool *added)
{
    lsid_entry_t *e;

    *added = false;
    if ((e = lsid_map_get(m, lsid)) != NULL) {
        return e;
    }
    /* At most half full, so probe runs stay short. */
    if ((m->n + 1) * 2 > m->cap) {
        grow(m);
    }
    for (size_t i = home(m, lsid);; i = (i + 1) & (m->cap - 1)) {
        e = &m->slots[i];
        if (!e->used) {
            e->used = true;
            e->lsid = *lsid;
            e->last_use_ms = 0;
            m->n++;
            *added = true;
            return e;
        }
    }
}

bool
lsid_map_remove(lsid_map_t *m, const shl_lsid_t *lsid)
{
    lsid_entry_t *e = lsid_map_get(m, lsid);
    size_t hole, i;

    if (e == NULL) {
        return false;
    }
    /* Backward-shift deletion: move later members of the probe run into the hole when their
     * home slot is not between the hole and them (cyclically), so no tombstones are needed. */
    hole = (size_t)(e - m->slots);
    m->slots[hole].used = false;
    m->n--;
    for (i = (hole + 1) & (m->cap - 1); m->slots[i].used; i = (i + 1) & (m->cap - 1)) {
        size_t h = home(m, &m->slots[i].lsid);
        bool movable = hole <= i ? (h <= hole || h > i) : (h <= hole && h > i);
        if (movable) {
            m->slots[hole] = m->slots[i];
            m->slots[i].used = false;
            hole = i;
        }
    }
    return true;
}

void
lsid_map_swap(lsid_map_t *a, lsid_map_t *b)
{
    lsid_map_t t = *a;

    *a = *b;
    *b = t;
}
