/*
 * auth.h -- authentication and authorization (issue 19): SCRAM conversations, the
 * connection's authenticated user, users and roles kept in admin.system.users /
 * admin.system.roles, MongoDB's built-in roles and the per-command privilege check.
 * Layer: above net (the dispatcher reaches it through service hooks), below every role.
 * docs/design/auth.md.
 */
#ifndef SHL_AUTH_AUTH_H
#define SHL_AUTH_AUTH_H

#include <stdbool.h>

#include "base/status.h"
#include "net/command.h"
#include "net/service_context.h"

/*
 * shl_auth_init --
 *     Register the authentication and user-management commands in 'reg' (saslStart,
 *     saslContinue, authenticate, logout, connectionStatus, createUser, updateUser,
 *     dropUser, dropAllUsersFromDatabase, usersInfo, grantRolesToUser, revokeRolesFromUser,
 *     createRole, updateRole, dropRole, rolesInfo, grantPrivilegesToRole,
 *     revokePrivilegesFromRole) and install the service hooks: with --auth (or --keyFile)
 *     every command is checked against the connection's privileges (Unauthorized, 13); a
 *     hello carrying speculativeAuthenticate / saslSupportedMechs gets its answer; a closed
 *     connection's state is freed. Users are read and written with the process's own
 *     commands on the admin database (shl_service_run_command), so the same code serves a
 *     data node and a router. Call before the role starts (its outgoing connections
 *     authenticate from the first), and before serving.
 *     Errors: BadValue for a bad keyFile (missing, permissions open to others, bad content).
 */
int shl_auth_init(shl_service_ctx_t *svc, shl_command_registry_t *reg, shl_status_t *st);

/*
 * shl_auth_read_key_file --
 *     The key in 'path' (whitespace removed) into 'out' (n bytes), checked as MongoDB does:
 *     no group or other permission bits, base64 characters only, 6 to 1024 of them.
 *     Errors: BadValue naming the problem.
 */
int shl_auth_read_key_file(const char *path, char *out, size_t n, shl_status_t *st);

/*
 * shl_auth_client_init --
 *     Read the key file 'path' and make every outgoing connection of this process's
 *     internal client authenticate as __system with it (`shale up|status` on a cluster
 *     started with --auth). Errors: those of shl_auth_read_key_file.
 */
int shl_auth_client_init(const char *path, shl_status_t *st);

/*
 * shl_auth_client_init_user --
 *     Make every outgoing connection of this process authenticate as user@db with 'pwd'
 *     (SCRAM-SHA-256; `shale status --username`). Errors: BadValue (SASLprep).
 */
int shl_auth_client_init_user(const char *user, const char *db, const char *pwd,
                              shl_status_t *st);

/*
 * shl_auth_key_file_create --
 *     Write a new random key (756 random bytes, base64, as MongoDB's docs suggest) to
 *     'path', readable by its owner only; an existing file is left alone and *created is
 *     false. Errors: FileOpenFailed.
 */
int shl_auth_key_file_create(const char *path, bool *created, shl_status_t *st);

/* shl_auth_random_password -- 24 random URL-safe characters into 'out' (n >= 25). */
void shl_auth_random_password(char *out, size_t n);

/* shl_auth_enabled -- whether access control is on (--auth or --keyFile). */
bool shl_auth_enabled(void);

#endif
