/*
 * log.h -- structured logging in MongoDB's JSON format, one line per event:
 * {"t":{"$date":...},"s":"I","c":"NETWORK","id":N,"ctx":"conn12","msg":...,"attr":{...}}
 * Attributes are BCON key/value pairs rendered as compact JSON (shl_log_json_from_bson).
 */
#ifndef SHL_BASE_LOG_H
#define SHL_BASE_LOG_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum shl_log_component {
    SHL_LOG_COMP_DEFAULT,
    SHL_LOG_COMP_CONTROL,
    SHL_LOG_COMP_NETWORK,
    SHL_LOG_COMP_COMMAND,
    SHL_LOG_COMP_STORAGE,
    SHL_LOG_COMP_RECOVERY,
    SHL_LOG_COMP_QUERY,
    SHL_LOG_COMP_WRITE,
    SHL_LOG_COMP_SHARDING,
    SHL_LOG_COMP_REPL,
    SHL_LOG_COMP_TXN,
    SHL_LOG_COMP_ASSERT,
    SHL_LOG_COMP_ACCESS,
    SHL_LOG_COMP_COUNT
} shl_log_component_t;

typedef enum shl_log_severity {
    SHL_SEV_FATAL,
    SHL_SEV_ERROR,
    SHL_SEV_WARNING,
    SHL_SEV_INFO,
    SHL_SEV_DEBUG1,
    SHL_SEV_DEBUG2,
    SHL_SEV_DEBUG3,
} shl_log_severity_t;

/*
 * shl_log_open --
 *     Send logs to 'path' (appending), or stderr when NULL. Call once at start-up,
 *     before threads start. Returns 0 or an errno value.
 */
int shl_log_open(const char *path);

/*
 * shl_log_rotate --
 *     MongoDB's logRotate (--logRotate rename): rename the log file to
 *     <path>.<YYYY-MM-DDTHH-MM-SS> (".<n>" appended if that exists) and reopen <path>, so
 *     later lines go to a fresh file; *rotated says whether it happened and 'renamed'
 *     (size 'n') receives the old file's new name. Without --logpath (stderr) nothing is
 *     rotated. Thread-safe. Returns 0 or an errno value.
 */
int shl_log_rotate(char *renamed, size_t n, bool *rotated);

/* shl_log_set_verbosity -- 0 = info; 1..3 enable debug levels (logLevel parameter). */
void shl_log_set_verbosity(int level);
int shl_log_get_verbosity(void);

/* shl_log_set_thread_ctx -- the "ctx" of this thread's lines ("conn12", "main"). */
void shl_log_set_thread_ctx(const char *ctx);
const char *shl_log_get_thread_ctx(void);

/* shl_log_enabled -- whether a line of this severity would be written. */
bool shl_log_enabled(shl_log_severity_t sev);

/*
 * shl_log_emit --
 *     Write one line. After 'msg' come BCON key/value pairs, terminated by NULL
 *     (the macros add it). Thread-safe; a line is written with one write(2).
 */
void shl_log_emit(shl_log_severity_t sev, shl_log_component_t comp, int id, const char *msg, ...);

/* The last lines written, for getLog: fills 'arr' with up to 'max' strings. */
void shl_log_recent(bson_t *arr, int max);

/* shl_log_lines_written -- how many lines were written since start (getLog's totalLinesWritten). */
int64_t shl_log_lines_written(void);

/*
 * shl_log_json_from_bson --
 *     Render 'doc' (as an array when 'array') as compact relaxed extended JSON, the
 *     way log lines show values: no spaces, strings escaped (bytes that are not UTF-8
 *     become U+FFFD), numbers plain, dates {"$date":"...Z"}, ObjectIds {"$oid":...}.
 *     Nesting deeper than 100 levels is elided. Returns a NUL-terminated string the
 *     caller frees with bson_free; *len (if not NULL) receives its length. Thread-safe.
 */
char *shl_log_json_from_bson(const bson_t *doc, bool array, size_t *len);

#define SHL_LOG_(sev, comp, id, ...)                                                               \
    do {                                                                                           \
        if (shl_log_enabled(sev)) {                                                                \
            shl_log_emit(sev, SHL_LOG_COMP_##comp, id, __VA_ARGS__, NULL);                         \
        }                                                                                          \
    } while (0)

#define SHL_LOG_ERROR(comp, id, ...) SHL_LOG_(SHL_SEV_ERROR, comp, id, __VA_ARGS__)
#define SHL_LOG_WARNING(comp, id, ...) SHL_LOG_(SHL_SEV_WARNING, comp, id, __VA_ARGS__)
#define SHL_LOG_INFO(comp, id, ...) SHL_LOG_(SHL_SEV_INFO, comp, id, __VA_ARGS__)
#define SHL_LOG_DEBUG(level, comp, id, ...) SHL_LOG_(SHL_SEV_INFO + (level), comp, id, __VA_ARGS__)

#endif
