/*
 * command_args.h -- checks and typed getters for command fields, with MongoDB's
 * (IDL-style) error messages: unknown fields, wrong types, missing required fields.
 * Generic arguments every command accepts (lsid, txnNumber, writeConcern, $db, ...)
 * are always allowed.
 */
#ifndef SHL_NET_COMMAND_ARGS_H
#define SHL_NET_COMMAND_ARGS_H

#include <bson/bson.h>
#include <stdbool.h>

#include "base/status.h"

/* shl_cmd_is_generic_arg -- whether 'field' is a generic argument of every command. */
bool shl_cmd_is_generic_arg(const char *field);

/*
 * shl_cmd_check_fields --
 *     Fail with IDLUnknownField (40415) "BSON field '<cmd>.<field>' is an unknown field."
 *     for any field of 'cmd' (after the first, the command name) that is neither
 *     generic nor in the NULL-terminated 'allowed' list.
 */
int shl_cmd_check_fields(const bson_t *cmd, const char *const *allowed, shl_status_t *st);

/*
 * shl_cmd_fields_present --
 *     Bit i is set when 'cmd' has a field named names[i] (a NULL-terminated list of at
 *     most 32 names): one pass over the command, so a parser asks the typed getters only
 *     for the fields that are there instead of searching the command once per field.
 */
uint32_t shl_cmd_fields_present(const bson_t *cmd, const char *const *names);

/* A found field (bson_iter_t is over-aligned, so arrays of it need a wrapper). */
typedef struct shl_cmd_field {
    bson_iter_t it;
} shl_cmd_field_t;

/*
 * shl_cmd_fields_find --
 *     shl_cmd_fields_present that also keeps where each field is: for every bit i set,
 *     found[i].it is at the first field named names[i] ('found' has room for as many
 *     entries as 'names' has names). The parser then reads them with shl_cmd_field_*.
 */
uint32_t shl_cmd_fields_find(const bson_t *cmd, const char *const *names, shl_cmd_field_t *found);

/* shl_cmd_name -- the command's name (its first field); "" if none. */
const char *shl_cmd_name(const bson_t *cmd);

/*
 * Typed getters. Each returns 0 and sets *out (or leaves it untouched with *found =
 * false when absent, if 'found' is given); a present field of the wrong type fails
 * with TypeMismatch (14) "BSON field '<cmd>.<field>' is the wrong type '<t>', expected
 * type '<u>'". Documents and arrays are returned as static views into 'cmd'.
 */
int shl_cmd_get_bool(const bson_t *cmd, const char *field, bool *out, shl_status_t *st);
int shl_cmd_get_int64(const bson_t *cmd, const char *field, int64_t *out, bool *found,
                      shl_status_t *st);
int shl_cmd_get_string(const bson_t *cmd, const char *field, const char **out, bool *found,
                       shl_status_t *st);
int shl_cmd_get_doc(const bson_t *cmd, const char *field, bson_t *out, bool *found,
                    shl_status_t *st);
int shl_cmd_get_array(const bson_t *cmd, const char *field, bson_t *out, bool *found,
                      shl_status_t *st);

/* The same getters on a field already found in 'cmd' (shl_cmd_fields_find): same checks,
 * same errors. */
int shl_cmd_field_bool(const bson_t *cmd, const bson_iter_t *it, bool *out, shl_status_t *st);
int shl_cmd_field_doc(const bson_t *cmd, const bson_iter_t *it, bson_t *out, shl_status_t *st);

/*
 * shl_cmd_collection_arg --
 *     The collection name given as the command's first field (a string, non-empty).
 *     Errors: InvalidNamespace (73) as MongoDB's "collection name has invalid type".
 */
int shl_cmd_collection_arg(const bson_t *cmd, const char **out, shl_status_t *st);

/*
 * shl_cmd_kill_cursors --
 *     The killCursors command's body, shared by data nodes and routers: check its fields,
 *     parse "cursors" (longs), call kill(arg, id) for each -- true when it killed one -- and
 *     append MongoDB's reply fields cursorsKilled / cursorsNotFound / cursorsAlive /
 *     cursorsUnknown. Errors: IDLUnknownField, IDLFailedToParse (no cursors), TypeMismatch.
 */
int shl_cmd_kill_cursors(const bson_t *cmd, bool (*kill)(void *arg, int64_t id), void *arg,
                         bson_t *reply, shl_status_t *st);

struct shl_op_ctx;

/*
 * shl_cmd_kill_cursors_owned --
 *     shl_cmd_kill_cursors after checking that 'op' may kill every cursor the command names
 *     that exists: owner(arg, id, out) gives a cursor's owner digest (false: no such
 *     cursor), and one that is another user's fails the whole command before any is killed
 *     (Unauthorized "not authorized to kill cursor on <ns>"; shl_op_may_use_owned).
 */
int shl_cmd_kill_cursors_owned(const struct shl_op_ctx *op, const char *ns, const bson_t *cmd,
                               bool (*kill)(void *arg, int64_t id),
                               bool (*owner)(void *arg, int64_t id, uint8_t *out), void *arg,
                               bson_t *reply, shl_status_t *st);

#endif
