/*
 * remote_fake.c -- the scripted fake remote of remote_fake.h, for unit tests only (linked
 * into test binaries, never into the server).
 */
#include "sharding/remote_fake.h"

#include <pthread.h>
#include <string.h>

typedef struct script {
    char target[SHL_REMOTE_NAME_MAX];
    char cmd[128];
    bson_t *reply; /* NULL: fail with 'code' */
    int code;
    int times; /* -1: forever */
    struct script *next;
} script_t;

typedef struct call {
    char target[SHL_REMOTE_NAME_MAX];
    char cmd[128];
    bson_t *body;
    struct call *next;
} call_t;

typedef struct stored {
    char coll[128];
    bson_t *doc;
    struct stored *next;
} stored_t;

struct shl_remote_fake {
    pthread_mutex_t mu;
    bool store_self;        /* guarded by mu */
    stored_t *stored;       /* guarded by mu */
    script_t *scripts;      /* guarded by mu; in order of addition */
    call_t *calls, **tail;  /* guarded by mu; in order of arrival */
    shl_remote_fake_handler_t handler; /* set before use */
    void *handler_arg;
};

static bool
matches(const char *pattern, const char *s)
{
    return strcmp(pattern, "*") == 0 || strcmp(pattern, s) == 0;
}

static const char *
cmd_name(const bson_t *cmd)
{
    bson_iter_t it;

    return bson_iter_init(&it, cmd) && bson_iter_next(&it) ? bson_iter_key(&it) : "";
}

shl_remote_fake_t *
shl_remote_fake_new(void)
{
    shl_remote_fake_t *f = bson_malloc0(sizeof *f);

    pthread_mutex_init(&f->mu, NULL);
    f->tail = &f->calls;
    return f;
}

static void
free_calls(shl_remote_fake_t *f)
{
    while (f->calls != NULL) {
        call_t *c = f->calls;
        f->calls = c->next;
        bson_destroy(c->body);
        bson_free(c);
    }
    f->tail = &f->calls;
}

void
shl_remote_fake_destroy(shl_remote_fake_t *f)
{
    if (f != NULL) {
        while (f->scripts != NULL) {
            script_t *s = f->scripts;
            f->scripts = s->next;
            if (s->reply != NULL) {
                bson_destroy(s->reply);
            }
            bson_free(s);
        }
        free_calls(f);
        while (f->stored != NULL) {
            stored_t *d = f->stored;
            f->stored = d->next;
            bson_destroy(d->doc);
            bson_free(d);
        }
        pthread_mutex_destroy(&f->mu);
        bson_free(f);
    }
}

static void
add_script(shl_remote_fake_t *f, const char *target, const char *cmd, bson_t *reply, int code,
           int times)
{
    script_t *s = bson_malloc0(sizeof *s), **p;

    bson_strncpy(s->target, target, sizeof s->target);
    bson_strncpy(s->cmd, cmd, sizeof s->cmd);
    s->reply = reply;
    s->code = code;
    s->times = times;
    pthread_mutex_lock(&f->mu);
    for (p = &f->scripts; *p != NULL; p = &(*p)->next) {
    }
    *p = s;
    pthread_mutex_unlock(&f->mu);
}

void
shl_remote_fake_script(shl_remote_fake_t *f, const char *target, const char *cmd,
                       const char *reply_json, int times)
{
    char *json = bson_strdup(reply_json);
    bson_error_t err;
    bson_t *reply;

    for (char *c = json; *c != '\0'; c++) {
        if (*c == '\'') {
            *c = '"';
        }
    }
    reply = bson_new_from_json((const uint8_t *)json, -1, &err);
    SHL_INVARIANT(reply != NULL);
    bson_free(json);
    add_script(f, target, cmd, reply, 0, times);
}

void
shl_remote_fake_script_error(shl_remote_fake_t *f, const char *target, const char *cmd, int code,
                             int times)
{
    add_script(f, target, cmd, NULL, code, times);
}

void
shl_remote_fake_set_handler(shl_remote_fake_t *f, shl_remote_fake_handler_t h, void *arg)
{
    f->handler = h;
    f->handler_arg = arg;
}

/* ------------------------------------------------------------- the in-memory store */

static void
store_put_locked(shl_remote_fake_t *f, const char *coll, const bson_t *doc)
{
    stored_t *d = bson_malloc0(sizeof *d), **p;

    bson_strncpy(d->coll, coll, sizeof d->coll);
    d->doc = bson_copy(doc);
    for (p = &f->stored; *p != NULL; p = &(*p)->next) {
    }
    *p = d;
}

/* The stored document of 'coll' whose _id equals the value at 'id', or NULL. */
static stored_t **
store_find_locked(shl_remote_fake_t *f, const char *coll, const bson_iter_t *id)
{
    bson_t want = BSON_INITIALIZER;
    stored_t **p;

    bson_append_iter(&want, "_id", 3, id);
    for (p = &f->stored; *p != NULL; p = &(*p)->next) {
        bson_iter_t it;
        if (strcmp((*p)->coll, coll) == 0 && bson_iter_init_find(&it, (*p)->doc, "_id")) {
            bson_t have = BSON_INITIALIZER;
            bool eq;
            bson_append_iter(&have, "_id", 3, &it);
            eq = bson_equal(&have, &want);
            bson_destroy(&have);
            if (eq) {
                break;
            }
        }
    }
    bson_destroy(&want);
    return p;
}

static void
sub_doc(const bson_iter_t *it, bson_t *out)
{
    const uint8_t *data;
    uint32_t len;

    bson_iter_document(it, &len, &data);
    SHL_INVARIANT(bson_init_static(out, data, len));
}

/* Answer a store command into 'reply' (empty on entry). */
static void
store_answer_locked(shl_remote_fake_t *f, const bson_t *cmd, bson_t *reply)
{
    bson_iter_t it, arr, id;
    const char *name, *coll;
    int64_t n = 0;

    bson_iter_init(&it, cmd);
    bson_iter_next(&it);
    name = bson_iter_key(&it);
    coll = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
    if (strcmp(name, "insert") == 0 && bson_iter_init_find(&it, cmd, "documents") &&
        bson_iter_recurse(&it, &arr)) {
        while (bson_iter_next(&arr)) {
            bson_t doc;
            sub_doc(&arr, &doc);
            if (bson_iter_init_find(&id, &doc, "_id") && *store_find_locked(f, coll, &id)) {
                bson_t we, e;
                BSON_APPEND_ARRAY_BEGIN(reply, "writeErrors", &we);
                BSON_APPEND_DOCUMENT_BEGIN(&we, "0", &e);
                BSON_APPEND_INT32(&e, "index", 0);
                BSON_APPEND_INT32(&e, "code", 11000);
                BSON_APPEND_UTF8(&e, "errmsg", "E11000 duplicate key error");
                bson_append_document_end(&we, &e);
                bson_append_array_end(reply, &we);
            } else {
                store_put_locked(f, coll, &doc);
                n++;
            }
        }
    } else if ((strcmp(name, "update") == 0 || strcmp(name, "delete") == 0)) {
        bool upd = name[0] == 'u';
        bson_iter_init(&it, cmd);
        if (bson_iter_find_descendant(&it, upd ? "updates.0.q._id" : "deletes.0.q._id", &id)) {
            stored_t **p = store_find_locked(f, coll, &id);
            if (*p != NULL) {
                stored_t *d = *p;
                n = 1;
                if (upd) {
                    bson_t u;
                    bson_iter_init(&it, cmd);
                    bson_iter_find_descendant(&it, "updates.0.u", &arr);
                    sub_doc(&arr, &u);
                    bson_destroy(d->doc);
                    d->doc = bson_copy(&u);
                } else {
                    *p = d->next;
                    bson_destroy(d->doc);
                    bson_free(d);
                }
            }
        }
    } else if (strcmp(name, "find") == 0) {
        bson_t cur, batch;
        char key[24];
        size_t k = 0;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
        BSON_APPEND_ARRAY_BEGIN(&cur, "firstBatch", &batch);
        for (stored_t *d = f->stored; d != NULL; d = d->next) {
            if (strcmp(d->coll, coll) == 0) {
                snprintf(key, sizeof key, "%zu", k++);
                BSON_APPEND_DOCUMENT(&batch, key, d->doc);
            }
        }
        bson_append_array_end(&cur, &batch);
        BSON_APPEND_INT64(&cur, "id", 0);
        bson_append_document_end(reply, &cur);
    }
    if (strcmp(name, "find") != 0) {
        BSON_APPEND_INT64(reply, "n", n);
    }
    BSON_APPEND_DOUBLE(reply, "ok", 1);
}

void
shl_remote_fake_store_self(shl_remote_fake_t *f)
{
    pthread_mutex_lock(&f->mu);
    f->store_self = true;
    pthread_mutex_unlock(&f->mu);
}

void
shl_remote_fake_store_insert(shl_remote_fake_t *f, const char *coll, const bson_t *doc)
{
    pthread_mutex_lock(&f->mu);
    store_put_locked(f, coll, doc);
    pthread_mutex_unlock(&f->mu);
}

size_t
shl_remote_fake_store_count(shl_remote_fake_t *f, const char *coll)
{
    size_t n = 0;

    pthread_mutex_lock(&f->mu);
    for (stored_t *d = f->stored; d != NULL; d = d->next) {
        n += strcmp(d->coll, coll) == 0;
    }
    pthread_mutex_unlock(&f->mu);
    return n;
}

bool
shl_remote_fake_store_nth(shl_remote_fake_t *f, const char *coll, size_t n, bson_t *out)
{
    bool found = false;

    pthread_mutex_lock(&f->mu);
    for (stored_t *d = f->stored; d != NULL && !found; d = d->next) {
        if (strcmp(d->coll, coll) == 0 && n-- == 0) {
            bson_copy_to(d->doc, out);
            found = true;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return found;
}

/* ------------------------------------------------------------------------ answering */

static void
answer(shl_remote_fake_t *f, const shl_remote_request_t *req, shl_remote_result_t *res)
{
    const char *target = shl_remote_target_str(&req->target);
    const char *name = cmd_name(req->cmd);
    call_t *c = bson_malloc0(sizeof *c);
    bool handled = false;

    bson_strncpy(c->target, target, sizeof c->target);
    bson_strncpy(c->cmd, name, sizeof c->cmd);
    c->body = bson_copy(req->cmd);
    pthread_mutex_lock(&f->mu);
    *f->tail = c;
    f->tail = &c->next;
    if (f->store_self && req->target.kind == SHL_REMOTE_SELF &&
        (strcmp(name, "insert") == 0 || strcmp(name, "update") == 0 ||
         strcmp(name, "delete") == 0 || strcmp(name, "find") == 0)) {
        store_answer_locked(f, req->cmd, &res->reply);
        handled = true;
    }
    pthread_mutex_unlock(&f->mu);

    if (!handled && f->handler != NULL) {
        bson_t reply;
        if (f->handler(f->handler_arg, req, &reply)) {
            bson_destroy(&res->reply);
            bson_steal(&res->reply, &reply);
            handled = true;
        }
    }
    if (!handled) {
        script_t *s;

        pthread_mutex_lock(&f->mu);
        for (s = f->scripts; s != NULL; s = s->next) {
            if (s->times != 0 && matches(s->target, target) && matches(s->cmd, name)) {
                break;
            }
        }
        if (s == NULL) {
            BCON_APPEND(&res->reply, "ok", BCON_DOUBLE(1));
        } else {
            if (s->times > 0) {
                s->times--;
            }
            if (s->reply != NULL) {
                bson_concat(&res->reply, s->reply);
            } else {
                res->code = shl_status_set(&res->status, s->code, "fake network error to %s",
                                           target);
            }
        }
        pthread_mutex_unlock(&f->mu);
    }
}

static void
fake_send(void *arg, const shl_remote_request_t *reqs, size_t n, int64_t timeout_ms,
          shl_remote_result_t *results)
{
    (void)timeout_ms;
    for (size_t i = 0; i < n; i++) {
        answer(arg, &reqs[i], &results[i]);
    }
}

shl_remote_t
shl_remote_fake_remote(shl_remote_fake_t *f)
{
    shl_remote_t r = {.send = fake_send, .arg = f};
    return r;
}

size_t
shl_remote_fake_count(shl_remote_fake_t *f, const char *target, const char *cmd)
{
    size_t n = 0;

    pthread_mutex_lock(&f->mu);
    for (call_t *c = f->calls; c != NULL; c = c->next) {
        n += matches(target, c->target) && matches(cmd, c->cmd);
    }
    pthread_mutex_unlock(&f->mu);
    return n;
}

bool
shl_remote_fake_nth(shl_remote_fake_t *f, const char *target, const char *cmd, size_t n,
                    bson_t *out)
{
    bool found = false;

    pthread_mutex_lock(&f->mu);
    for (call_t *c = f->calls; c != NULL && !found; c = c->next) {
        if (matches(target, c->target) && matches(cmd, c->cmd)) {
            if (n == 0) {
                bson_copy_to(c->body, out);
                found = true;
            } else {
                n--;
            }
        }
    }
    pthread_mutex_unlock(&f->mu);
    return found;
}

void
shl_remote_fake_reset_calls(shl_remote_fake_t *f)
{
    pthread_mutex_lock(&f->mu);
    free_calls(f);
    pthread_mutex_unlock(&f->mu);
}
