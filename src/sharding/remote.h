/*
 * remote.h -- the one outgoing-command interface (issue 17 item 1): run a command on a
 * target (this process, the config server, a shard by id, a host) with options (deadline,
 * write concern, retry policy for idempotent commands) and turn the reply into a status
 * with ONE policy (ok: 0 -> code/errmsg/labels/extra; writeErrors; writeConcernError).
 * Below it sits a transport (shl_remote_t): the real one (shl_remote_init_real) runs self
 * in-process through the service entry point and the rest over the connection pool with
 * one fan-out; unit tests put the fake of remote_fake.h there instead.
 */
#ifndef SHL_SHARDING_REMOTE_H
#define SHL_SHARDING_REMOTE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "net/client.h"
#include "sharding/shard_registry.h"

struct shl_service_ctx;

typedef enum shl_remote_target_kind {
    SHL_REMOTE_SELF,   /* this process, in-process through the service entry point */
    SHL_REMOTE_CONFIG, /* the config server (the registry's config host) */
    SHL_REMOTE_SHARD,  /* a shard by id, resolved through the shard registry */
    SHL_REMOTE_HOST,   /* a "host:port" */
} shl_remote_target_kind_t;

#define SHL_REMOTE_NAME_MAX 256

/* A target; 'name' is the shard id or the host (unused for self and config). */
typedef struct shl_remote_target {
    shl_remote_target_kind_t kind;
    char name[SHL_REMOTE_NAME_MAX];
} shl_remote_target_t;

/* shl_remote_target_shard / _self / _config / _host -- build a target ('name' is copied). */
shl_remote_target_t shl_remote_target_shard(const char *shard_id);
shl_remote_target_t shl_remote_target_self(void);
shl_remote_target_t shl_remote_target_config(void);
shl_remote_target_t shl_remote_target_host(const char *host);

/* shl_remote_target_str -- "self", "config", the shard id or the host (borrowed from t). */
const char *shl_remote_target_str(const shl_remote_target_t *t);

/* The retry policy. Only commands the caller knows to be idempotent may ask for retries. */
typedef enum shl_remote_retry {
    SHL_REMOTE_NO_RETRY,
    SHL_REMOTE_RETRY_IDEMPOTENT, /* retry on network, not-primary, shutdown, retriable errors
                                  * and retriable write concern errors */
} shl_remote_retry_t;

typedef struct shl_remote_options {
    int64_t timeout_ms;       /* bound on each attempt (<= 0: none) */
    const char *w;            /* NULL: the command's own writeConcern (or none); else "majority"
                               * or a number as a string; appended as writeConcern.w */
    bool j;                   /* with 'w': writeConcern.j */
    shl_remote_retry_t retry; /* default NO_RETRY */
    int max_attempts;         /* with RETRY_IDEMPOTENT: attempts in all (0: 5) */
    int64_t backoff_ms;       /* pause between attempts, doubling (0: none) */
} shl_remote_options_t;

/* One request of shl_remote_run_many. Borrowed for the call. */
typedef struct shl_remote_request {
    shl_remote_target_t target;
    const char *db;
    const bson_t *cmd;
} shl_remote_request_t;

/* One outcome; 'reply' is always initialised and destroyed by shl_remote_results_cleanup. */
typedef struct shl_remote_result {
    int code;            /* 0 or status.code, after the reply-to-status policy */
    shl_status_t status; /* network error, or the reply's error by shl_remote_reply_status */
    bson_t reply;        /* the reply as received (empty if none) */
} shl_remote_result_t;

/*
 * The transport: send n requests at once (the real one: self in-process on the calling thread
 * while the rest are in flight in one fan-out) and fill results[i].reply with each raw reply;
 * results[i].code/status only for failures to get a reply at all (network, ShardNotFound).
 * Must be thread-safe.
 */
typedef struct shl_remote {
    void (*send)(void *arg, const shl_remote_request_t *reqs, size_t n, int64_t timeout_ms,
                 shl_remote_result_t *results);
    void *arg;
} shl_remote_t;

/*
 * shl_remote_reply_status --
 *     THE reply-to-status policy: ok: 0 -> its code, errmsg, errorLabels and other fields
 *     as extra; else the first writeErrors entry; else writeConcernError (with its labels'
 *     meaning kept in the code's category). Returns 0 or the code.
 */
int shl_remote_reply_status(const bson_t *reply, shl_status_t *st);

/*
 * shl_remote_is_retryable --
 *     Whether an idempotent command that failed with 'code' may be sent again: network,
 *     not-primary, shutdown, retriable and write-concern-retriable errors.
 */
bool shl_remote_is_retryable(int code);

/*
 * shl_remote_run --
 *     Run 'cmd' on 'db' at 'target' with 'opts' (NULL: defaults). *reply is always
 *     initialised by the callee and destroyed by the caller (the last attempt's reply).
 *     Returns 0 or the code after the reply-to-status policy. Blocks (between attempts too).
 */
int shl_remote_run(const shl_remote_t *r, const shl_remote_target_t *target, const char *db,
                   const bson_t *cmd, const shl_remote_options_t *opts, bson_t *reply,
                   shl_status_t *st);

/*
 * shl_remote_run_self / _config / _shard --
 *     shl_remote_run to this process, the config server, or shard 'shard_id'; the same
 *     contract (the same reply-to-status policy).
 */
int shl_remote_run_self(const shl_remote_t *r, const char *db, const bson_t *cmd,
                        const shl_remote_options_t *opts, bson_t *reply, shl_status_t *st);
int shl_remote_run_config(const shl_remote_t *r, const char *db, const bson_t *cmd,
                          const shl_remote_options_t *opts, bson_t *reply, shl_status_t *st);
int shl_remote_run_shard(const shl_remote_t *r, const char *shard_id, const char *db,
                         const bson_t *cmd, const shl_remote_options_t *opts, bson_t *reply,
                         shl_status_t *st);

/*
 * shl_remote_run_many --
 *     The same for n requests sent at once; each result is filled as shl_remote_run would.
 *     Retries (if asked for) resend only the requests that failed retryably. Blocks.
 */
void shl_remote_run_many(const shl_remote_t *r, const shl_remote_request_t *reqs, size_t n,
                         const shl_remote_options_t *opts, shl_remote_result_t *results);

/* shl_remote_results_cleanup -- destroy the replies of n results. */
void shl_remote_results_cleanup(shl_remote_result_t *results, size_t n);

/*
 * The real transport. 'svc' runs self commands (may be NULL: self is then HostUnreachable);
 * 'pool' and 'registry' (may be NULL: shard and config targets fail with ShardNotFound) are
 * borrowed and must outlive the transport.
 */
typedef struct shl_remote_real {
    struct shl_service_ctx *svc;
    shl_conn_pool_t *pool;
    shl_shard_registry_t *registry;
} shl_remote_real_t;

/* shl_remote_init_real -- make 'r' the real transport over 'real' (borrowed). */
void shl_remote_init_real(shl_remote_t *r, shl_remote_real_t *real);

#endif
