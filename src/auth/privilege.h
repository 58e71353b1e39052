/*
 * privilege.h -- privileges as MongoDB models them: an action set on a resource pattern
 * (a database, a collection, any normal collection, the cluster, any resource); the
 * built-in roles' privileges; and the privileges each command needs. Pure logic.
 * docs/design/auth.md "Authorization".
 */
#ifndef SHL_AUTH_PRIVILEGE_H
#define SHL_AUTH_PRIVILEGE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

typedef enum shl_action {
#define X(id, name) SHL_ACT_##id,
#include "auth/actions.def"
#undef X
    SHL_ACT_COUNT
} shl_action_t;

typedef struct shl_action_set {
    uint64_t bits[2];
} shl_action_set_t;

_Static_assert(SHL_ACT_COUNT <= 128, "shl_action_set_t holds 128 actions");

typedef enum shl_res_kind {
    SHL_RES_DB,          /* every normal collection of 'db' (and the database itself) */
    SHL_RES_COLL,        /* the collection db.coll */
    SHL_RES_COLL_ANY_DB, /* a collection named 'coll' in any database */
    SHL_RES_ANY_NORMAL,  /* every normal collection of every database */
    SHL_RES_CLUSTER,     /* the cluster */
    SHL_RES_ANY,         /* anyResource */
} shl_res_kind_t;

typedef struct shl_resource {
    shl_res_kind_t kind;
    char db[64];
    char coll[256];
} shl_resource_t;

typedef struct shl_privilege {
    shl_resource_t res;
    shl_action_set_t actions;
} shl_privilege_t;

/* A growable list of privileges (a user's, once its roles are resolved). */
typedef struct shl_privilege_list {
    shl_privilege_t *items;
    size_t n, cap;
} shl_privilege_list_t;

void shl_privilege_list_add(shl_privilege_list_t *l, const shl_privilege_t *p);
void shl_privilege_list_cleanup(shl_privilege_list_t *l);

static inline void
shl_action_set_add(shl_action_set_t *s, shl_action_t a)
{
    s->bits[a / 64] |= (uint64_t)1 << (a % 64);
}

static inline bool
shl_action_set_has(const shl_action_set_t *s, shl_action_t a)
{
    return (s->bits[a / 64] >> (a % 64)) & 1u;
}

/* shl_action_name / shl_action_parse -- MongoDB's spelling; parse returns false if unknown. */
const char *shl_action_name(shl_action_t a);
bool shl_action_parse(const char *name, shl_action_t *a);

/*
 * shl_privilege_parse --
 *     A privilege document {resource: {db, collection} | {cluster: true} |
 *     {anyResource: true}, actions: [names]}. Errors: BadValue / FailedToParse.
 */
int shl_privilege_parse(const bson_t *doc, shl_privilege_t *p, shl_status_t *st);

/* shl_privilege_append -- the document form of 'p' under 'key' of 'out'. */
void shl_privilege_append(bson_t *out, const char *key, const shl_privilege_t *p);

/* shl_builtin_role_is -- whether 'role' names a built-in role valid on database 'db'. */
bool shl_builtin_role_is(const char *role, const char *db);

/*
 * shl_builtin_role_privileges --
 *     Add the privileges of built-in role 'role' on 'db' to 'out'. Returns false when it
 *     is not a built-in role there.
 */
bool shl_builtin_role_privileges(const char *role, const char *db, shl_privilege_list_t *out);

/*
 * shl_privileges_allow --
 *     Whether 'privs' grant action 'a' on the resource 'need' (kind SHL_RES_COLL, SHL_RES_DB
 *     or SHL_RES_CLUSTER), matching as MongoDB does: a system collection is never covered by
 *     a database-wide or any-normal pattern.
 */
bool shl_privileges_allow(const shl_privilege_list_t *privs, const shl_resource_t *need,
                          shl_action_t a);

/* What a command needs: up to four (resource, action) pairs, all required. */
typedef struct shl_required {
    size_t n;
    shl_resource_t res[4];
    shl_action_t act[4];
} shl_required_t;

/*
 * shl_command_required_privileges --
 *     The privileges command 'name' needs when run as 'cmd' on database 'db': from a table
 *     of the commands this process runs (collection commands name their collection from
 *     the command's first value). Commands named _... or flagged internal need 'internal'
 *     on the cluster; a command the table does not know needs anyAction on the cluster
 *     (root's).
 */
void shl_command_required_privileges(const char *name, bool internal, const char *db,
                                     const bson_t *cmd, shl_required_t *out);

#endif
