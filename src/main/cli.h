/*
 * cli.h -- command-line parsing shared by the `shale` subcommands: flags from the
 * options table (--name value, --name=value, bare --flag for booleans) and
 * --setParameter name=value; also records getCmdLineOpts' argv and parsed.
 */
#ifndef SHL_MAIN_CLI_H
#define SHL_MAIN_CLI_H

#include <bson/bson.h>

#include "base/status.h"

/*
 * shl_cli_parse --
 *     Apply argv[first..argc) to the options table. *argv_out and *parsed_out
 *     receive new documents for getCmdLineOpts (caller destroys). Errors: BadValue
 *     for unknown flags, missing or malformed values.
 */
int shl_cli_parse(int argc, char **argv, int first, bson_t **argv_out, bson_t **parsed_out,
                  shl_status_t *st);

#endif
