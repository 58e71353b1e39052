/*
 * repl_listeners.c -- step-up / step-down notifications for the layers above repl (shard,
 * config): docs/design/replication.md "Step-up and step-down work". One thread per process
 * watches this member's state and calls the registered listeners, in registration order, each
 * time the member becomes PRIMARY or stops being it. repl never calls upward otherwise.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "db/repl_hooks.h"
#include "repl/repl_private.h"

#define LISTENERS_MAX 8
#define LISTENERS_POLL_MS 200

/* The process's listeners. 'mu' guards every field; the callbacks run without it. */
static struct {
    pthread_mutex_t mu;
    shl_db_repl_listener_t v[LISTENERS_MAX];
    int n;
    bool started, stop;
    bool primary; /* the state the listeners were last told of */
    pthread_t thread;
} g_listeners = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Wait (up to a poll interval) for this member's state to differ from 'primary' or for the
 * coordinator to stop; the answer is the state now. */
static bool
await_change(repl_coord_t *rc, bool primary, bool *stopping)
{
    struct timespec ts;
    bool now;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += LISTENERS_POLL_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&rc->mu);
    now = atomic_load(&rc->state) == SHL_REPL_PRIMARY;
    if (now == primary && !rc->stop) {
        pthread_cond_timedwait(&rc->progress, &rc->mu, &ts);
        now = atomic_load(&rc->state) == SHL_REPL_PRIMARY;
    }
    *stopping = rc->stop;
    pthread_mutex_unlock(&rc->mu);
    return now;
}

static void *
listeners_main(void *arg)
{
    repl_coord_t *rc = arg;

    shl_log_set_thread_ctx("ReplStateListeners");
    pthread_mutex_lock(&g_listeners.mu);
    while (!g_listeners.stop) {
        bool was = g_listeners.primary, now, stopping = false;
        shl_db_repl_listener_t v[LISTENERS_MAX];
        int n;

        pthread_mutex_unlock(&g_listeners.mu);
        now = await_change(rc, was, &stopping);
        pthread_mutex_lock(&g_listeners.mu);
        if (stopping || g_listeners.stop) {
            break;
        }
        if (now == was) {
            continue;
        }
        g_listeners.primary = now;
        n = g_listeners.n;
        memcpy(v, g_listeners.v, sizeof(v));
        pthread_mutex_unlock(&g_listeners.mu);
        SHL_LOG_INFO(REPL, 2180063, now ? "running step-up work" : "running step-down work",
                     "listeners", BCON_INT32(n));
        for (int i = 0; i < n; i++) {
            void (*fn)(void *) = now ? v[i].step_up : v[i].step_down;
            if (fn != NULL) {
                fn(v[i].arg);
            }
        }
        pthread_mutex_lock(&g_listeners.mu);
    }
    pthread_mutex_unlock(&g_listeners.mu);
    return NULL;
}

bool
repl_add_listener(void *arg, const shl_db_repl_listener_t *l)
{
    repl_coord_t *rc = arg;
    bool primary;

    pthread_mutex_lock(&g_listeners.mu);
    SHL_INVARIANT(g_listeners.n < LISTENERS_MAX);
    g_listeners.v[g_listeners.n++] = *l;
    if (!g_listeners.started) {
        g_listeners.primary = shl_repl_is_primary(rc->svc);
        g_listeners.stop = false;
        SHL_INVARIANT(pthread_create(&g_listeners.thread, NULL, listeners_main, rc) == 0);
        g_listeners.started = true;
        primary = g_listeners.primary;
    } else {
        primary = g_listeners.primary;
    }
    pthread_mutex_unlock(&g_listeners.mu);
    return primary;
}

void
repl_stop_listeners(void *arg)
{
    bool join;

    (void)arg;
    pthread_mutex_lock(&g_listeners.mu);
    g_listeners.stop = true;
    join = g_listeners.started;
    g_listeners.started = false;
    g_listeners.n = 0;
    pthread_mutex_unlock(&g_listeners.mu);
    if (join) {
        pthread_join(g_listeners.thread, NULL);
    }
}
