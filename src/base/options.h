/*
 * options.h -- the options table (options.def) as typed values: command-line flags,
 * --setParameter, getParameter/setParameter. Values are atomics, safe to read anywhere.
 */
#ifndef SHL_BASE_OPTIONS_H
#define SHL_BASE_OPTIONS_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

#define SHL_OPT_CMDLINE 1u
#define SHL_OPT_STARTUP 2u
#define SHL_OPT_RUNTIME 4u
#define SHL_OPT_TEST 8u /* settable only with enableTestCommands */

typedef enum shl_opt_id {
#define X(name, type, def, flags, help) SHL_OPT_##name,
#include "base/options.def"
#undef X
    SHL_OPT_COUNT
} shl_opt_id_t;

/* shl_options_init -- set every option to its default. Call once before parsing. */
void shl_options_init(void);

/* Typed reads. Thread-safe. The string is valid until the option is set again. */
int64_t shl_opt_int(shl_opt_id_t id);
bool shl_opt_bool(shl_opt_id_t id);
double shl_opt_double(shl_opt_id_t id);
const char *shl_opt_str(shl_opt_id_t id);

/* shl_opt_find -- id of the option named 'name' (exact), or -1. */
int shl_opt_find(const char *name);

/* shl_opt_flags -- the SHL_OPT_* flags of an option. */
uint32_t shl_opt_flags(shl_opt_id_t id);

/* shl_opt_name -- the option's name. */
const char *shl_opt_name(shl_opt_id_t id);

/*
 * shl_opt_set_string --
 *     Parse 'value' for the option's type and set it (command line / --setParameter).
 *     Errors: BadValue.
 */
int shl_opt_set_string(shl_opt_id_t id, const char *value, shl_status_t *st);

/*
 * shl_opt_set_iter --
 *     Set from a BSON value (setParameter command), converting numbers and bools.
 *     Errors: TypeMismatch, BadValue.
 */
int shl_opt_set_iter(shl_opt_id_t id, const bson_iter_t *value, shl_status_t *st);

/* shl_opt_append -- append the option's value to 'doc' under its name. */
void shl_opt_append(shl_opt_id_t id, bson_t *doc);

#endif
