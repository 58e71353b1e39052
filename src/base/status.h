/*
 * status.h -- shl_status_t: an error code from MongoDB's catalogue, a reason, error
 * labels and optional extra info, plus the single-exit error macros.
 * See ../shared/STYLE.md "Errors" and DESIGN.md section 3.
 */
#ifndef SHL_BASE_STATUS_H
#define SHL_BASE_STATUS_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

/* Error categories, as in MongoDB's error_codes.yml. */
#define SHL_CAT_NETWORK_ERROR (1u << 0)
#define SHL_CAT_NETWORK_TIMEOUT_ERROR (1u << 1)
#define SHL_CAT_INTERRUPTION (1u << 2)
#define SHL_CAT_NOT_PRIMARY_ERROR (1u << 3)
#define SHL_CAT_STALE_SHARD_VERSION_ERROR (1u << 4)
#define SHL_CAT_NEED_RETARGETTING_ERROR (1u << 5)
#define SHL_CAT_WRITE_CONCERN_ERROR (1u << 6)
#define SHL_CAT_SHUTDOWN_ERROR (1u << 7)
#define SHL_CAT_CANCELLATION_ERROR (1u << 8)
#define SHL_CAT_CONNECTION_FATAL_MESSAGE_ERROR (1u << 9)
#define SHL_CAT_EXCEEDED_TIME_LIMIT_ERROR (1u << 10)
#define SHL_CAT_SNAPSHOT_ERROR (1u << 11)
#define SHL_CAT_VOTE_ABORT_ERROR (1u << 12)
#define SHL_CAT_RETRIABLE_ERROR (1u << 13)
#define SHL_CAT_CLOSE_CONNECTION_ERROR (1u << 14)
#define SHL_CAT_CURSOR_INVALIDATED_ERROR (1u << 15)
#define SHL_CAT_NON_RESUMABLE_CHANGE_STREAM_ERROR (1u << 16)
#define SHL_CAT_VALIDATION_ERROR (1u << 17)
#define SHL_CAT_INTERNAL_ONLY (1u << 18)
#define SHL_CAT_TENANT_MIGRATION_ERROR (1u << 19)
#define SHL_CAT_TENANT_MIGRATION_CONFLICT_ERROR (1u << 20)
#define SHL_CAT_NOT_PRIMARY_NO_SECONDARY_OK_ERROR (1u << 21)

/* Error codes: SHL_CODE_<NAME> = MongoDB's number. */
typedef enum shl_code {
#define X(e, n, s, c) SHL_CODE_##e = n,
#include "base/error_codes.def"
#undef X
} shl_code_t;

/* Error labels drivers act on; a status carries a set of them. */
#define SHL_LABELS(X)                                                                              \
    X(TRANSIENT_TRANSACTION_ERROR, "TransientTransactionError")                                    \
    X(RETRYABLE_WRITE_ERROR, "RetryableWriteError")                                                \
    X(UNKNOWN_TRANSACTION_COMMIT_RESULT, "UnknownTransactionCommitResult")                         \
    X(NO_WRITES_PERFORMED, "NoWritesPerformed")                                                    \
    X(RESUMABLE_CHANGE_STREAM_ERROR, "ResumableChangeStreamError")                                 \
    X(NON_RESUMABLE_CHANGE_STREAM_ERROR, "NonResumableChangeStreamError")

enum {
#define X(e, s) SHL_LABEL_BIT_##e,
    SHL_LABELS(X)
#undef X
        SHL_LABEL_COUNT
};
#define SHL_LABEL(e) (1u << SHL_LABEL_BIT_##e)

#define SHL_STATUS_REASON_MAX 512
#define SHL_STATUS_EXTRA_MAX 768

/*
 * shl_status_t -- plain data: copy by assignment, never freed (like bson_error_t).
 * 'extra' holds a serialized BSON document whose fields are appended to an error
 * reply (e.g. StaleConfig's ns/vReceived/vWanted/shardId); extra_len 0 means none
 * (a larger document: see shl_status_set_extra; read it with shl_status_extra_get).
 */
typedef struct shl_status {
    int32_t code;
    uint32_t labels;
    uint32_t extra_len;
    char reason[SHL_STATUS_REASON_MAX];
    uint8_t extra[SHL_STATUS_EXTRA_MAX];
} shl_status_t;

#define SHL_STATUS_INIT                                                                            \
    {                                                                                              \
        0                                                                                          \
    }

/*
 * shl_status_set --
 *     Set code and a printf-formatted reason; clears labels and extra. Returns code,
 *     so `return shl_status_set(st, ...)` reads naturally. 'st' may be NULL.
 */
int shl_status_set(shl_status_t *st, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* shl_status_clear -- reset to OK. */
void shl_status_clear(shl_status_t *st);

/*
 * shl_status_set_extra --
 *     Copy 'extra' (a document of fields for the error reply) into the status. A
 *     document larger than SHL_STATUS_EXTRA_MAX is kept in a slot of the calling thread
 *     instead (the thread's newest such document; the status names it): it reads through
 *     the status (and its copies) on that thread until the thread sets another large extra;
 *     elsewhere, or after that, the status has no extra (the reason still stands).
 */
void shl_status_set_extra(shl_status_t *st, const bson_t *extra);

/* shl_status_extra_get -- a borrowed view of the extra document; false if none. */
bool shl_status_extra_get(const shl_status_t *st, bson_t *view);

/* shl_status_add_label -- add an error label (SHL_LABEL(...)). */
void shl_status_add_label(shl_status_t *st, uint32_t label);

/*
 * shl_status_label_change_stream --
 *     Label the error of a change stream's getMore as MongoDB does, for drivers' automatic
 *     resume: NonResumableChangeStreamError for that category (ChangeStreamFatalError,
 *     ChangeStreamHistoryLost), ResumableChangeStreamError for network, shutdown, not-primary
 *     and stale-version errors, NetworkTimeout, ExceededTimeLimit, RetryChangeStream and
 *     FailedToSatisfyReadPreference.
 */
void shl_status_label_change_stream(shl_status_t *st);

/*
 * shl_code_name -- MongoDB's name for 'code' ("StaleConfig"); "Location<N>" for a code
 * outside the catalogue (valid until the next call on this thread).
 */
const char *shl_code_name(int code);

/* shl_code_from_name -- the code for a MongoDB error name, or -1. */
int shl_code_from_name(const char *name);

/* shl_code_in_category -- whether 'code' belongs to any of the SHL_CAT_* bits in 'cats'. */
bool shl_code_in_category(int code, uint32_t cats);

/* shl_label_name -- the label string for bit index 'bit'. */
const char *shl_label_name(int bit);

/*
 * shl_status_append_reply --
 *     Append the error reply fields of a failed status to 'reply': ok: 0, errmsg,
 *     code, codeName, the extra fields, and errorLabels if any. The one place an
 *     error becomes a reply.
 */
void shl_status_append_reply(const shl_status_t *st, bson_t *reply);

/*
 * shl_status_from_reply --
 *     Inverse of shl_status_append_reply for a reply received from another node:
 *     returns 0 if ok is truthy, else fills 'st' from errmsg/code/errorLabels and
 *     the remaining fields as extra info, and returns the code.
 */
int shl_status_from_reply(const bson_t *reply, shl_status_t *st);

/*
 * shl_status_from_write_errors --
 *     For a write command's reply that is ok: returns 0 when it has no writeErrors, else
 *     fills 'st' from the first one (its code, InternalError if it has none, and errmsg)
 *     and returns the code.
 */
int shl_status_from_write_errors(const bson_t *reply, shl_status_t *st);

/*
 * shl_status_from_write_concern_error --
 *     The same for a reply's writeConcernError: 0 when there is none, else its code (or
 *     InternalError) and errmsg in 'st', and the code returned.
 */
int shl_status_from_write_concern_error(const bson_t *reply, shl_status_t *st);

/*
 * Single-exit helpers (WiredTiger's WT_ERR pattern). A function declares
 * `int ret = 0;` and a `done:` label that releases everything on both paths.
 */
#define SHL_ERR(expr)                                                                              \
    do {                                                                                           \
        if ((ret = (expr)) != 0) {                                                                 \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

#define SHL_FAIL(st, code, ...)                                                                    \
    do {                                                                                           \
        ret = shl_status_set((st), (code), __VA_ARGS__);                                           \
        goto done;                                                                                 \
    } while (0)

/* Bugs are not statuses: always-on assertion that aborts with a backtrace. */
#define SHL_INVARIANT(cond)                                                                        \
    do {                                                                                           \
        if (__builtin_expect(!(cond), 0)) {                                                        \
            shl_invariant_failed(#cond, __FILE__, __LINE__, __func__);                             \
        }                                                                                          \
    } while (0)

__attribute__((noreturn)) void shl_invariant_failed(const char *expr, const char *file, int line,
                                                    const char *func);

#endif
