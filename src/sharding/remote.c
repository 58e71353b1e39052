/*
 * remote.c -- the outgoing-command interface (remote.h, issue 17 item 1): targets, the one
 * reply-to-status policy, write concern and the retry policy over a pluggable transport, and
 * the real transport (self in-process, others through one fan-out on the pool).
 */
#include "sharding/remote.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net/service.h"

static shl_remote_target_t
target_make(shl_remote_target_kind_t kind, const char *name)
{
    shl_remote_target_t t;

    memset(&t, 0, sizeof t);
    t.kind = kind;
    if (name != NULL) {
        bson_strncpy(t.name, name, sizeof t.name);
    }
    return t;
}

shl_remote_target_t
shl_remote_target_shard(const char *shard_id)
{
    return target_make(SHL_REMOTE_SHARD, shard_id);
}

shl_remote_target_t
shl_remote_target_self(void)
{
    return target_make(SHL_REMOTE_SELF, NULL);
}

shl_remote_target_t
shl_remote_target_config(void)
{
    return target_make(SHL_REMOTE_CONFIG, NULL);
}

shl_remote_target_t
shl_remote_target_host(const char *host)
{
    return target_make(SHL_REMOTE_HOST, host);
}

const char *
shl_remote_target_str(const shl_remote_target_t *t)
{
    const char *s = t->name;

    if (t->kind == SHL_REMOTE_SELF) {
        s = "self";
    } else if (t->kind == SHL_REMOTE_CONFIG) {
        s = "config";
    }
    return s;
}

int
shl_remote_reply_status(const bson_t *reply, shl_status_t *st)
{
    int ret = shl_status_from_reply(reply, st);

    if (ret == 0) {
        ret = shl_status_from_write_errors(reply, st);
    }
    if (ret == 0) {
        ret = shl_status_from_write_concern_error(reply, st);
    }
    return ret;
}

bool
shl_remote_is_retryable(int code)
{
    return code != 0 &&
           shl_code_in_category(code, SHL_CAT_NETWORK_ERROR | SHL_CAT_NOT_PRIMARY_ERROR |
                                          SHL_CAT_SHUTDOWN_ERROR | SHL_CAT_RETRIABLE_ERROR) &&
           code != SHL_CODE_INTERRUPTED_AT_SHUTDOWN;
}

/* The command with writeConcern {w, j} appended when 'opts' asks for one and 'cmd' has none. */
static void
with_write_concern(const bson_t *cmd, const shl_remote_options_t *opts, bson_t *out)
{
    bson_t wc;

    bson_copy_to(cmd, out);
    if (opts->w != NULL && !bson_has_field(cmd, "writeConcern")) {
        char *end = NULL;
        long n = strtol(opts->w, &end, 10);

        BSON_APPEND_DOCUMENT_BEGIN(out, "writeConcern", &wc);
        if (end != opts->w && *end == '\0') {
            BSON_APPEND_INT32(&wc, "w", (int32_t)n);
        } else {
            BSON_APPEND_UTF8(&wc, "w", opts->w);
        }
        if (opts->j) {
            BSON_APPEND_BOOL(&wc, "j", true);
        }
        bson_append_document_end(out, &wc);
    }
}

static void
sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

    while (ms > 0 && nanosleep(&ts, &ts) != 0) {
    }
}

void
shl_remote_run_many(const shl_remote_t *r, const shl_remote_request_t *reqs, size_t n,
                    const shl_remote_options_t *opts, shl_remote_result_t *results)
{
    shl_remote_options_t defaults;
    shl_remote_request_t *todo = bson_malloc0(sizeof *todo * (n ? n : 1));
    size_t *index = bson_malloc0(sizeof *index * (n ? n : 1));
    bson_t *cmds = bson_malloc0(sizeof *cmds * (n ? n : 1));
    shl_remote_result_t *tmp = bson_malloc0(sizeof *tmp * (n ? n : 1));
    size_t m = n;
    int attempts, attempt;
    int64_t backoff;

    memset(&defaults, 0, sizeof defaults);
    if (opts == NULL) {
        opts = &defaults;
    }
    attempts = opts->retry == SHL_REMOTE_RETRY_IDEMPOTENT
                   ? (opts->max_attempts > 0 ? opts->max_attempts : 5)
                   : 1;
    backoff = opts->backoff_ms;
    for (size_t i = 0; i < n; i++) {
        with_write_concern(reqs[i].cmd, opts, &cmds[i]);
        todo[i] = reqs[i];
        todo[i].cmd = &cmds[i];
        index[i] = i;
        results[i].code = 0;
        shl_status_clear(&results[i].status);
        bson_init(&results[i].reply);
    }
    for (attempt = 1; m > 0 && attempt <= attempts; attempt++) {
        size_t keep = 0;

        if (attempt > 1 && backoff > 0) {
            sleep_ms(backoff);
            backoff *= 2;
        }
        for (size_t k = 0; k < m; k++) {
            tmp[k].code = 0;
            shl_status_clear(&tmp[k].status);
            bson_init(&tmp[k].reply);
        }
        r->send(r->arg, todo, m, opts->timeout_ms, tmp);
        for (size_t k = 0; k < m; k++) {
            shl_remote_result_t *res = &results[index[k]];

            if (tmp[k].code == 0) {
                tmp[k].code = shl_remote_reply_status(&tmp[k].reply, &tmp[k].status);
            }
            bson_destroy(&res->reply);
            res->code = tmp[k].code;
            res->status = tmp[k].status;
            bson_steal(&res->reply, &tmp[k].reply);
            if (res->code != 0 && shl_remote_is_retryable(res->code)) {
                todo[keep] = todo[k];
                index[keep] = index[k];
                keep++;
            }
        }
        m = keep;
    }
    for (size_t i = 0; i < n; i++) {
        bson_destroy(&cmds[i]);
    }
    bson_free(tmp);
    bson_free(cmds);
    bson_free(index);
    bson_free(todo);
}

int
shl_remote_run(const shl_remote_t *r, const shl_remote_target_t *target, const char *db,
               const bson_t *cmd, const shl_remote_options_t *opts, bson_t *reply,
               shl_status_t *st)
{
    shl_remote_request_t req = {.target = *target, .db = db, .cmd = cmd};
    shl_remote_result_t res;
    int ret;

    shl_remote_run_many(r, &req, 1, opts, &res);
    ret = res.code;
    if (ret != 0 && st != NULL) {
        *st = res.status;
    }
    bson_steal(reply, &res.reply);
    return ret;
}

int
shl_remote_run_self(const shl_remote_t *r, const char *db, const bson_t *cmd,
                    const shl_remote_options_t *opts, bson_t *reply, shl_status_t *st)
{
    shl_remote_target_t t = shl_remote_target_self();

    return shl_remote_run(r, &t, db, cmd, opts, reply, st);
}

int
shl_remote_run_config(const shl_remote_t *r, const char *db, const bson_t *cmd,
                      const shl_remote_options_t *opts, bson_t *reply, shl_status_t *st)
{
    shl_remote_target_t t = shl_remote_target_config();

    return shl_remote_run(r, &t, db, cmd, opts, reply, st);
}

int
shl_remote_run_shard(const shl_remote_t *r, const char *shard_id, const char *db, const bson_t *cmd,
                     const shl_remote_options_t *opts, bson_t *reply, shl_status_t *st)
{
    shl_remote_target_t t = shl_remote_target_shard(shard_id);

    return shl_remote_run(r, &t, db, cmd, opts, reply, st);
}

void
shl_remote_results_cleanup(shl_remote_result_t *results, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bson_destroy(&results[i].reply);
    }
}

/* ------------------------------------------------------------------ the real transport */

/* The self requests of one send, run in-process while the remote ones are in flight. */
typedef struct self_batch {
    shl_remote_real_t *real;
    const shl_remote_request_t *reqs;
    shl_remote_result_t *results;
    const size_t *index; /* the self requests' positions in reqs */
    size_t n;
} self_batch_t;

static void
run_selves(void *arg)
{
    self_batch_t *b = arg;

    for (size_t k = 0; k < b->n; k++) {
        size_t i = b->index[k];

        bson_destroy(&b->results[i].reply);
        shl_service_run_command(b->real->svc, NULL, b->reqs[i].cmd, b->reqs[i].db,
                                &b->results[i].reply);
    }
}

static void
real_send(void *arg, const shl_remote_request_t *reqs, size_t n, int64_t timeout_ms,
          shl_remote_result_t *results)
{
    shl_remote_real_t *real = arg;
    shl_fanout_req_t *fr = bson_malloc0(sizeof *fr * (n ? n : 1));
    size_t *index = bson_malloc0(sizeof *index * (n ? n : 1));
    size_t *selves = bson_malloc0(sizeof *selves * (n ? n : 1));
    char (*hosts)[SHL_CLIENT_HOST_MAX] = bson_malloc0(sizeof *hosts * (n ? n : 1));
    self_batch_t batch = {.real = real, .reqs = reqs, .results = results, .index = selves};
    shl_client_local_t local = {.run = run_selves, .arg = &batch};
    size_t m = 0;

    for (size_t i = 0; i < n; i++) {
        const shl_remote_target_t *t = &reqs[i].target;
        shl_status_t *st = &results[i].status;

        if (t->kind == SHL_REMOTE_SELF) {
            if (real->svc == NULL) {
                results[i].code =
                    shl_status_set(st, SHL_CODE_HOST_UNREACHABLE, "no service for self commands");
            } else {
                selves[batch.n++] = i;
            }
            continue;
        }
        if (t->kind == SHL_REMOTE_HOST) {
            bson_strncpy(hosts[m], t->name, sizeof hosts[m]);
        } else if (real->registry == NULL) {
            results[i].code = shl_status_set(st, SHL_CODE_SHARD_NOT_FOUND,
                                             "no shard registry to resolve %s",
                                             shl_remote_target_str(t));
            continue;
        } else if (t->kind == SHL_REMOTE_CONFIG) {
            bson_strncpy(hosts[m], shl_shard_registry_config_host(real->registry),
                         sizeof hosts[m]);
        } else if ((results[i].code = shl_shard_registry_host_for(real->registry, t->name,
                                                                  hosts[m], sizeof hosts[m],
                                                                  st)) != 0) {
            continue;
        }
        fr[m].host = hosts[m];
        fr[m].db = reqs[i].db;
        fr[m].cmd = reqs[i].cmd;
        index[m] = i;
        m++;
    }
    if (m == 0) {
        run_selves(&batch);
    } else if (m == 1 && batch.n == 0) {
        /* One request alone: the client's single call, which also follows a replica set's
         * failover (a member refusing or gone: the next primary, net/client.h). */
        shl_remote_result_t *res = &results[index[0]];
        shl_status_t st = SHL_STATUS_INIT;
        int code;

        bson_destroy(&res->reply);
        code = shl_client_run(real->pool, fr[0].host, fr[0].db, fr[0].cmd, timeout_ms,
                              &res->reply, &st);
        if (res->reply.len <= 5 && code != 0) {
            res->code = code;
            res->status = st;
        }
    } else {
        shl_fanout_result_t *fres = bson_malloc0(sizeof *fres * m);

        /* Self requests (a coordinator's own participant) run while the others are in
         * flight: the call takes the slower of the two, not their sum. */
        shl_client_fanout_local(real->pool, fr, m, timeout_ms, batch.n > 0 ? &local : NULL, fres);
        for (size_t k = 0; k < m; k++) {
            shl_remote_result_t *res = &results[index[k]];

            bson_destroy(&res->reply);
            bson_steal(&res->reply, &fres[k].reply);
            bson_init(&fres[k].reply);
            /* A reply that arrived is judged by the caller's one policy; only a call
             * that got no reply carries its network error here. */
            if (res->reply.len <= 5 && fres[k].code != 0) {
                res->code = fres[k].code;
                res->status = fres[k].status;
            }
        }
        shl_fanout_results_cleanup(fres, m);
        bson_free(fres);
    }
    bson_free(hosts);
    bson_free(selves);
    bson_free(index);
    bson_free(fr);
}

void
shl_remote_init_real(shl_remote_t *r, shl_remote_real_t *real)
{
    r->send = real_send;
    r->arg = real;
}
