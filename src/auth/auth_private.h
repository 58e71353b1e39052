/*
 * auth_private.h -- what the files of src/auth share: the connection's authentication
 * state, the user and role store over the process's own commands, the generation that
 * invalidates cached privileges. docs/design/auth.md.
 */
#ifndef SHL_AUTH_PRIVATE_H
#define SHL_AUTH_PRIVATE_H

#include <bson/bson.h>
#include <stdatomic.h>

#include "auth/auth.h"
#include "auth/privilege.h"
#include "auth/scram.h"
#include "net/op_context.h"
#include "net/server.h"

/* A connection's authentication state (conn->auth); touched only by its own thread. */
typedef struct auth_conn {
    bool authed;
    char user[256];
    char db[64];
    bson_t roles;                /* the user's roles [{role, db}] when authed */
    shl_privilege_list_t privs;  /* resolved from 'roles' at generation 'gen' */
    uint64_t gen;
    int64_t resolved_us;         /* when 'privs' were resolved (monotonic) */
    /* The SASL conversation in progress (one at a time, conversationId 1). */
    bool conv_active;
    bool conv_wants_empty; /* server-final sent; the client still sends an empty step */
    bool conv_skip_empty;  /* saslStart's options.skipEmptyExchange */
    bool conv_speculative; /* begun by hello's speculativeAuthenticate */
    bson_t conv_roles;     /* the user's roles as saslStart read them */
    char conv_db[64];
    shl_scram_server_t scram;
} auth_conn_t;

/* The generation of users and roles: bumped by every change this process makes (and by
 * invalidateUserCache); connections re-resolve their privileges when it moved. */
extern atomic_uint_fast64_t auth_generation;

/* auth_conn_get -- the connection's state, made on first use; NULL for no connection. */
auth_conn_t *auth_conn_get(shl_op_ctx_t *op);

/* auth_conn_set_owner -- the connection's user digest and __system flag (server.h) from its
 * authentication state: what its sessions and cursors belong to. */
void auth_conn_set_owner(shl_conn_t *conn, const auth_conn_t *a);

/* auth_conn_is_localhost -- whether the connection comes from this host (localhost
 * exception). */
bool auth_conn_is_localhost(const shl_conn_t *conn);

/*
 * auth_run --
 *     Run 'cmd' on 'db' with the process's own dispatcher as an internal operation;
 *     *reply (initialised always) holds the reply. Returns its error as a status.
 */
int auth_run(shl_service_ctx_t *svc, const char *db, const bson_t *cmd, bson_t *reply,
             shl_status_t *st);

/*
 * auth_find_one --
 *     The document of admin.<coll> with _id 'id' into *out (initialised always; empty
 *     when there is none). Errors: those of the find.
 */
int auth_find_one(shl_service_ctx_t *svc, const char *coll, const char *id, bson_t *out,
                  bool *found, shl_status_t *st);

/* auth_find_many -- every document of admin.<coll> 'filter' matches, appended to the
 * array 'out' (begun by the caller) from index 0. */
int auth_find_many(shl_service_ctx_t *svc, const char *coll, const bson_t *filter, bson_t *out,
                   shl_status_t *st);

/* auth_any_user -- whether admin.system.users holds any user (localhost exception). */
bool auth_any_user(shl_service_ctx_t *svc);

/*
 * auth_resolve_roles --
 *     Add to 'out' the privileges of the roles in array 'roles' ([{role, db}]): built-in
 *     ones from the table, others from admin.system.roles with the roles they inherit
 *     (depth-bounded, each once). Unknown roles are skipped (as MongoDB's resolution of a
 *     dropped role). 'all_roles' (may be NULL) receives every role reached as {role, db}.
 */
int auth_resolve_roles(shl_service_ctx_t *svc, const bson_t *roles, shl_privilege_list_t *out,
                       bson_t *all_roles, shl_status_t *st);

/* auth_conn_refresh -- re-resolve a connection's privileges if the generation moved;
 * a dropped user leaves it without privileges. */
void auth_conn_refresh(shl_op_ctx_t *op, auth_conn_t *a);

/*
 * auth_check --
 *     Whether the operation's connection (an in-process operation: always) holds
 *     'a' on 'res'; auth off: always. Errors: Unauthorized "not authorized on <db> to
 *     execute command ...".
 */
int auth_check(shl_op_ctx_t *op, const shl_resource_t *res, shl_action_t a, shl_status_t *st);

/* auth_internal_init -- read --keyFile (if set), make __system's credentials and install
 * the internal client's authentication. Errors: BadValue for a bad key file. */
int auth_internal_init(shl_status_t *st);

/* auth_system_creds -- __system@local's credentials for 'mech' when a key file is in use;
 * false for any other user. */
bool auth_system_creds(const char *db, const char *user, shl_scram_mech_t mech,
                       shl_scram_creds_t *c);

/* auth_register_sasl_commands / auth_register_user_commands -- into 'reg'. */
void auth_register_sasl_commands(shl_command_registry_t *reg);
void auth_register_user_commands(shl_command_registry_t *reg);

/* auth_hello -- speculativeAuthenticate and saslSupportedMechs of a hello (hook). */
void auth_hello(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply);

#endif
