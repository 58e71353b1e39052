/*
 * kill_sessions.c -- kill patterns and their matcher (kill_sessions.h).
 */
#include "session/kill_sessions.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>

void
shl_kill_matcher_init(shl_kill_matcher_t *m)
{
    memset(m, 0, sizeof(*m));
}

void
shl_kill_matcher_cleanup(shl_kill_matcher_t *m)
{
    bson_free(m->p);
    memset(m, 0, sizeof(*m));
}

void
shl_kill_matcher_add(shl_kill_matcher_t *m, const shl_kill_pattern_t *p)
{
    if (m->n == m->cap) {
        m->cap = m->cap == 0 ? 4 : m->cap * 2;
        m->p = bson_realloc(m->p, m->cap * sizeof(*m->p));
    }
    m->p[m->n++] = *p;
    if (p->kind == SHL_KILL_ALL) {
        m->all = true;
    }
}

void
shl_kill_matcher_add_lsid(shl_kill_matcher_t *m, const shl_lsid_t *lsid)
{
    shl_kill_pattern_t p;

    memset(&p, 0, sizeof(p));
    p.kind = SHL_KILL_LSID;
    p.lsid = *lsid;
    shl_kill_matcher_add(m, &p);
}

bool
shl_kill_matcher_match(void *arg, const shl_lsid_t *lsid)
{
    const shl_kill_matcher_t *m = arg;
    shl_lsid_t parent;

    if (m->all) {
        return true;
    }
    /* Killing a session kills its internal (child) sessions too. */
    shl_lsid_parent(lsid, &parent);
    for (size_t i = 0; i < m->n; i++) {
        const shl_kill_pattern_t *p = &m->p[i];
        if ((p->kind == SHL_KILL_LSID && shl_lsid_equal(&p->lsid, &parent)) ||
            (p->kind == SHL_KILL_UID && memcmp(p->uid, lsid->uid, SHL_LSID_UID_LEN) == 0)) {
            return true;
        }
    }
    return false;
}

void
shl_kill_matcher_append(const shl_kill_matcher_t *m, bson_t *arr)
{
    for (size_t i = 0; i < m->n; i++) {
        char key[16];
        const char *k;
        bson_t p;
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
        BSON_APPEND_DOCUMENT_BEGIN(arr, k, &p);
        if (m->p[i].kind == SHL_KILL_LSID) {
            shl_lsid_append(&p, "lsid", &m->p[i].lsid);
        } else if (m->p[i].kind == SHL_KILL_UID) {
            bson_append_binary(&p, "uid", 3, BSON_SUBTYPE_BINARY, m->p[i].uid, SHL_LSID_UID_LEN);
        }
        bson_append_document_end(arr, &p);
    }
}

void
shl_user_digest(const char *user, const char *db, uint8_t out[SHL_LSID_UID_LEN])
{
    char *name;

    /* MongoDB's getLogicalSessionUserDigestFor: no user is the empty name's digest; a user
     * is digested by its full name "user@db". */
    if (user[0] == '\0' && db[0] == '\0') {
        name = bson_strdup("");
    } else {
        name = bson_strdup_printf("%s@%s", user, db);
    }
    SHA256((const unsigned char *)name, strlen(name), out);
    bson_free(name);
}
