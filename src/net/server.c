/*
 * server.c -- listener and per-connection threads, or the shared executor's workers (see
 * server.h). A connection's thread reads a whole message, hands it to the service
 * dispatcher and writes the reply; a malformed message closes that connection only.
 */
#include "net/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "base/options.h"
#include "net/client.h"
#include "net/fiber.h"
#include "net/op_context.h"
#include "net/service.h"
#include "net/topology.h"

#define MAX_LISTENERS 8
#define CONN_STACK_SIZE (4 * 1024 * 1024)
/* How long operations the shutdown interrupted get to send their replies. */
#define KILLED_OPS_WAIT_MS 1000

typedef struct server {
    int listen_fds[MAX_LISTENERS];
    int nlisten;
    int wake_pipe[2];    /* written to start a shutdown (signal-safe) */
    char unix_path[108]; /* the Unix domain socket we created, "" if none; read-only */
    pthread_t listener;
    pthread_mutex_t lock; /* guards conns, next_conn_id, done, shutdown_taken */
    pthread_cond_t cond;  /* signalled when a connection goes idle or leaves, and when the
                             listener took a shutdown request */
    shl_conn_t *conns;    /* guarded by lock */
    int64_t next_conn_id; /* guarded by lock */
    bool done;            /* guarded by lock */
    /* The listener has taken a shutdown request (a router is in quiesce mode); guarded by
     * lock. */
    bool shutdown_taken;
    /* The shutdown command's timeout; -1: the option's, read when the shutdown starts. */
    atomic_llong shutdown_timeout_ms;
} server_t;

/* Holds a router in quiesce mode until switched off (MongoDB's fail point of that name). */
SHL_FAILPOINT_DEFINE(hangDuringQuiesceMode)

/* One server per process; reached from the signal handler. */
static server_t *the_server;
static shl_service_ctx_t *the_svc;
/* A shutdown was requested (possibly before the_server existed); set from a signal handler. */
static atomic_bool shutdown_requested;

/*
 * A connection reads into one buffer as many bytes as the socket has, so a request
 * usually costs one recv, not one for its header and one for its body (this
 * showed in perf: recv was a quarter of the server's time under ping load).
 */
#define READ_BUF_SIZE (16 * 1024)
/* Above this, a buffer grown for a large message is given back once it is handled. */
#define READ_BUF_KEEP (1024 * 1024)

/*
 * Receive into buf[*have, cap) until at least 'want' bytes are held.
 *
 * 'poll_first': wait for data in poll(2), not in a blocking recv. On a Unix domain
 * socket, the peer reading what this side sent frees buffers this socket owns, and
 * the kernel then wakes every thread sleeping on this socket -- a thread blocked in
 * recv wakes for nothing and goes back to sleep, once per reply (perf on the router:
 * a tenth of its time). poll(POLLIN) sleeps on the same queue but is only woken for
 * input. TCP has no such wake-up, so TCP connections keep the single blocking recv.
 *
 * A Unix socket's read starts with poll when nothing of the next message is buffered: its
 * peers (routers, other cluster members) send a request only after reading the last reply,
 * so a first recv would nearly always fail with EAGAIN (strace on a shard under routed point
 * finds: 8 in 10 did, 3.6 syscalls per request; poll first makes it 3). Bytes already held
 * (a pipelining peer, or a message's rest) are read at once.
 */
static bool
fill(shl_conn_t *conn, uint8_t *buf, size_t cap, size_t *have, size_t want)
{
    bool ok = true;
    bool poll_first = conn->unix_socket;
    bool wait = poll_first && *have == 0;
    while (ok && *have < want) {
        ssize_t r;
        if (wait) {
            struct pollfd pfd = {.fd = conn->fd, .events = POLLIN};
            ok = poll(&pfd, 1, -1) >= 0 || errno == EINTR;
            wait = false;
            continue;
        }
        r = conn->tls != NULL ? shl_tls_read(conn->tls, buf + *have, cap - *have)
                              : recv(conn->fd, buf + *have, cap - *have,
                                     poll_first ? MSG_DONTWAIT : 0);
        if (r > 0) {
            *have += (size_t)r;
        } else if (r < 0 && errno == EINTR) {
            continue;
        } else if (r < 0 && poll_first && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            wait = true;
        } else {
            ok = false;
        }
    }
    return ok;
}

/*
 * Decide whether the connection speaks TLS, before its first message: under allowTLS and
 * preferTLS from the first bytes the client sent (a TLS handshake record or a wire-protocol
 * header), under requireTLS always. Connections on the Unix domain socket (mode 0700, this
 * user only) stay plain, as the internal client's. False when the connection must close.
 */
static bool
conn_start_tls(shl_conn_t *conn)
{
    shl_tls_mode_t mode = shl_tls_mode();
    shl_status_t st = SHL_STATUS_INIT;
    unsigned char first[2];
    ssize_t r;
    bool ok = true;

    if (mode == SHL_TLS_DISABLED || conn->unix_socket) {
        return true;
    }
    do {
        r = recv(conn->fd, first, sizeof(first), MSG_PEEK | MSG_WAITALL);
    } while (r < 0 && errno == EINTR);
    if (r < (ssize_t)sizeof(first)) {
        return false; /* closed before it sent anything */
    }
    if (shl_tls_looks_like_tls(first)) {
        conn->tls = shl_tls_accept(conn->fd, &st);
        ok = conn->tls != NULL;
    } else if (mode == SHL_TLS_REQUIRE) {
        shl_status_set(&st, SHL_CODE_SSL_HANDSHAKE_FAILED,
                       "The server is configured to only allow SSL connections");
        ok = false;
    }
    if (!ok) {
        char err[sizeof(st.reason) + 32];
        snprintf(err, sizeof(err), "%s: %s", shl_code_name(st.code), st.reason);
        SHL_LOG_INFO(NETWORK, 22988,
                     "Error receiving request from client. Ending connection from remote", "error",
                     BCON_UTF8(err), "remote", BCON_UTF8(conn->remote), "connectionId",
                     BCON_INT64(conn->id));
    }
    return ok;
}

/* Send iov[0, n) whole (advancing it), as sendmsg allows partial writes. */
static bool
send_iov(int fd, struct iovec *iov, int n)
{
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    bool ok = true;

    while (ok && mh.msg_iovlen > 0) {
        ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            ok = errno == EINTR;
            continue;
        }
        while (mh.msg_iovlen > 0 && (size_t)w >= mh.msg_iov->iov_len) {
            w -= (ssize_t)mh.msg_iov->iov_len;
            mh.msg_iov++;
            mh.msg_iovlen--;
        }
        if (mh.msg_iovlen > 0) {
            mh.msg_iov->iov_base = (uint8_t *)mh.msg_iov->iov_base + w;
            mh.msg_iov->iov_len -= (size_t)w;
        }
    }
    return ok;
}

bool
shl_conn_write_all(shl_conn_t *conn, const uint8_t *buf, size_t n)
{
    return shl_conn_write_msg(conn, buf, n, NULL, 0);
}

bool
shl_conn_write_msg(shl_conn_t *conn, const uint8_t *prefix, size_t prefix_len,
                   const uint8_t *body, size_t body_len)
{
    bool ok = true;

    if (conn->tls != NULL) {
        /* One TLS record for the message: join the parts (TLS stays on the simple path). */
        size_t n = prefix_len + body_len, sent = 0;
        uint8_t *joined = bson_malloc(n);
        memcpy(joined, prefix, prefix_len);
        if (body_len > 0) {
            memcpy(joined + prefix_len, body, body_len);
        }
        while (ok && sent < n) {
            ssize_t w = shl_tls_write(conn->tls, joined + sent, n - sent);
            if (w > 0) {
                sent += (size_t)w;
            } else {
                ok = w < 0 && errno == EINTR;
            }
        }
        bson_free(joined);
    } else {
        /* sendmsg does not write through iov_base; the casts only drop const. */
        struct iovec iov[2] = {{.iov_base = (void *)(uintptr_t)prefix, .iov_len = prefix_len},
                               {.iov_base = (void *)(uintptr_t)body, .iov_len = body_len}};
        ok = send_iov(conn->fd, iov, body_len > 0 ? 2 : 1);
    }
    if (ok) {
        atomic_fetch_add(&conn->svc->counters.bytes_out, (long long)(prefix_len + body_len));
    }
    return ok;
}

static void
unlink_conn(server_t *srv, shl_conn_t *conn)
{
    pthread_mutex_lock(&srv->lock);
    for (shl_conn_t **p = &srv->conns; *p != NULL; p = &(*p)->next) {
        if (*p == conn) {
            *p = conn->next;
            break;
        }
    }
    pthread_cond_broadcast(&srv->cond);
    pthread_mutex_unlock(&srv->lock);
}

/* The length of the message whose header starts 'buf'; false (logged) when it is invalid. */
static bool
header_length(shl_conn_t *conn, const uint8_t *buf, size_t *len)
{
    shl_msg_header_t hdr;
    shl_status_t st = SHL_STATUS_INIT;
    bool ok;

    shl_msg_header_read(buf, &hdr);
    ok = shl_msg_header_check(&hdr, &st) == 0;
    if (!ok) {
        SHL_LOG_WARNING(NETWORK, 4615638, "Error receiving request from client; closing",
                        "error", BCON_UTF8(st.reason), "remote", BCON_UTF8(conn->remote));
    }
    *len = ok ? (size_t)hdr.length : 0;
    return ok;
}

/* Handle one whole message buf[0, len) of 'conn'; false when the connection must close. */
static bool
handle_one(shl_conn_t *conn, const uint8_t *buf, size_t len)
{
    shl_service_ctx_t *svc = conn->svc;
    bool keep;

    atomic_fetch_add(&svc->counters.bytes_in, (long long)len);
    atomic_fetch_add(&svc->counters.num_requests, 1);
    atomic_store(&conn->in_op, true);
    atomic_fetch_add(&svc->counters.conn_active, 1);
    keep = shl_service_handle_message(svc, conn, buf, len);
    atomic_fetch_sub(&svc->counters.conn_active, 1);
    atomic_store(&conn->in_op, false);
    if (atomic_load(&svc->shutting_down)) {
        pthread_mutex_lock(&the_server->lock);
        pthread_cond_broadcast(&the_server->cond);
        pthread_mutex_unlock(&the_server->lock);
    }
    return keep;
}

/* The end of a connection: leave the server's list, close, free. */
static void
conn_end(shl_conn_t *conn)
{
    shl_service_ctx_t *svc = conn->svc;

    SHL_LOG_INFO(NETWORK, 22944, "Connection ended", "remote", BCON_UTF8(conn->remote),
                 "connectionId", BCON_INT64(conn->id), "connectionCount",
                 BCON_INT64(atomic_load(&svc->counters.conn_current) - 1));
    /*
     * Leave the list before closing: shutdown calls shutdown(2) on listed fds, and a
     * closed fd number may already belong to a new connection.
     */
    atomic_fetch_sub(&svc->counters.conn_current, 1);
    unlink_conn(the_server, conn);
    shl_tls_free(conn->tls);
    close(conn->fd);
    if (svc->hooks.conn_end != NULL) {
        svc->hooks.conn_end(conn);
    }
    if (conn->client_metadata != NULL) {
        bson_destroy(conn->client_metadata);
    }
    bson_free(conn->rbuf);
    bson_free(conn);
}

static void *
conn_main(void *arg)
{
    shl_conn_t *conn = arg;
    shl_service_ctx_t *svc = conn->svc;
    uint8_t *buf = bson_malloc(READ_BUF_SIZE);
    size_t cap = READ_BUF_SIZE, have = 0; /* buf[0, have) is received, not yet handled */
    char ctx[32];

    snprintf(ctx, sizeof(ctx), "conn%lld", (long long)conn->id);
    shl_log_set_thread_ctx(ctx);

    bool tls_ok = conn_start_tls(conn);
    while (tls_ok && !atomic_load(&conn->close_now) && !atomic_load(&svc->shutting_down)) {
        size_t len;

        if (!fill(conn, buf, cap, &have, SHL_MSG_HEADER_LEN)) {
            break;
        }
        if (!header_length(conn, buf, &len)) {
            break;
        }
        if (len > cap) {
            cap = len;
            buf = bson_realloc(buf, cap);
        }
        if (!fill(conn, buf, cap, &have, len)) {
            break;
        }
        if (!handle_one(conn, buf, len)) {
            break;
        }
        /* Keep the bytes of the next message(s) that arrived with this one. */
        have -= len;
        if (have > 0) {
            memmove(buf, buf + len, have);
        }
        if (cap > READ_BUF_KEEP && have <= READ_BUF_SIZE) {
            /* Do not keep a large buffer alive on an idle connection. */
            uint8_t *small = bson_malloc(READ_BUF_SIZE);
            memcpy(small, buf, have);
            bson_free(buf);
            buf = small;
            cap = READ_BUF_SIZE;
        }
    }
    bson_free(buf);
    conn_end(conn);
    return NULL;
}

/*
 * The shared service executor (--serviceExecutor shared; MongoDB's transport "shared"
 * mode): connections wait in one epoll set, not in a thread each, and a small pool of
 * workers (one per core, at least two) takes whichever connection has input, handles its
 * whole messages and re-arms it. Under load a worker finishing a request finds the next
 * ready connection without sleeping, and a request costs no thread wake-up of its own.
 *
 * A request that waits long (an awaitable or streaming hello, an awaitData getMore, a
 * lock or write concern wait, a client that stopped reading its replies) keeps its worker
 * as a dedicated thread would: the monitor counts a worker busy on one request for longer
 * than SHARED_BLOCKED_US as blocked and starts another, so that at least 'base' workers
 * can always take ready connections; a worker idle for SHARED_IDLE_EXIT_MS leaves while
 * more than 'base' run. TLS connections (their handshake and reads block) get a dedicated
 * thread, as every connection does under the default executor.
 */
#define SHARED_MAX_WORKERS 4096
#define SHARED_BLOCKED_US 2000
#define SHARED_MONITOR_MS 1       /* the monitor's period while a request nears blocked */
#define SHARED_MONITOR_IDLE_MS 10 /* ... and while all are idle */
#define SHARED_IDLE_EXIT_MS 1000

typedef struct shared_exec {
    int epfd;
    int base;             /* workers kept while idle; immutable */
    pthread_mutex_t lock; /* guards nworkers and the allocation of slots */
    int nworkers;
    atomic_int nslots; /* slots ever used: the monitor looks at [0, nslots) */
    /* Per worker slot: 0 idle, -1 free (no worker), else when its request began (mono us). */
    _Atomic int64_t busy_since[SHARED_MAX_WORKERS];
} shared_exec_t;

static shared_exec_t *the_exec; /* NULL: dedicated threads; set once at start-up */

/* Arm 'conn' for its next input (op: EPOLL_CTL_ADD or MOD); false if epoll refused. */
static bool
shared_arm(shl_conn_t *conn, int op)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = conn};
    return epoll_ctl(the_exec->epfd, op, conn->fd, &ev) == 0;
}

/* End a connection the calling worker holds. */
static void
shared_end(shl_conn_t *conn)
{
    epoll_ctl(the_exec->epfd, EPOLL_CTL_DEL, conn->fd, NULL);
    conn_end(conn);
}

/*
 * Read what 'conn' has, handle every whole message received, then re-arm it (or end it).
 * One recv per wake-up: clients send their next request after reading the reply, so a
 * second recv would nearly always find nothing.
 */
static void
shared_serve(shl_conn_t *conn)
{
    shl_service_ctx_t *svc = conn->svc;
    bool ok = true;
    size_t need = 0; /* the length of a message received in part */
    ssize_t r;
    char ctx[32];

    /* The worker that armed it last may not have left its epoll_ctl yet. */
    while (atomic_load_explicit(&conn->arming, memory_order_acquire)) {
        sched_yield();
    }
    atomic_fetch_add_explicit(&conn->handover, 1, memory_order_acq_rel);
    snprintf(ctx, sizeof(ctx), "conn%lld", (long long)conn->id);
    shl_log_set_thread_ctx(ctx);
    if (conn->rbuf == NULL) {
        conn->rcap = READ_BUF_SIZE;
        conn->rbuf = bson_malloc(conn->rcap);
    }
    do {
        r = recv(conn->fd, conn->rbuf + conn->rhave, conn->rcap - conn->rhave, MSG_DONTWAIT);
    } while (r < 0 && errno == EINTR);
    if (r > 0) {
        conn->rhave += (size_t)r;
    } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        ok = false;
    }
    while (ok && conn->rhave >= SHL_MSG_HEADER_LEN) {
        size_t len;

        if (!header_length(conn, conn->rbuf, &len)) {
            ok = false;
            break;
        }
        if (len > conn->rcap) {
            conn->rcap = len;
            conn->rbuf = bson_realloc(conn->rbuf, conn->rcap);
        }
        if (conn->rhave < len) {
            need = len; /* the rest comes with a later wake-up */
            break;
        }
        ok = handle_one(conn, conn->rbuf, len) && !atomic_load(&conn->close_now) &&
             !atomic_load(&svc->shutting_down);
        conn->rhave -= len;
        if (conn->rhave > 0) {
            memmove(conn->rbuf, conn->rbuf + len, conn->rhave);
        }
    }
    if (ok && conn->rcap > READ_BUF_KEEP && need <= READ_BUF_SIZE &&
        conn->rhave <= READ_BUF_SIZE) {
        /* Do not keep a large buffer alive on an idle connection. */
        uint8_t *small = bson_malloc(READ_BUF_SIZE);
        memcpy(small, conn->rbuf, conn->rhave);
        bson_free(conn->rbuf);
        conn->rbuf = small;
        conn->rcap = READ_BUF_SIZE;
    }
    ok = ok && !atomic_load(&conn->close_now);
    atomic_fetch_add_explicit(&conn->handover, 1, memory_order_acq_rel);
    if (ok) {
        /* Once armed another worker may hold (and even end) the connection: the store
         * clearing 'arming' is the last touch of it here (the next holder waits for it). */
        atomic_store(&conn->arming, true);
        ok = shared_arm(conn, EPOLL_CTL_MOD);
        if (ok) {
            atomic_store_explicit(&conn->arming, false, memory_order_release);
        } else {
            atomic_store(&conn->arming, false);
        }
    }
    if (!ok) {
        shared_end(conn);
    }
}

/*
 * The fiber driver (fiber.h): a parked request's shard socket waits in the executor's set,
 * once (EPOLLONESHOT), tagged with its fiber; the first wait adds the socket, later ones
 * (the pooled connection's next requests) re-arm it. A kick also asks for EPOLLOUT, which a
 * connected socket with room to send reports at once.
 */
static bool
fiber_arm(int fd, uint64_t tag, bool kick)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT | (kick ? EPOLLOUT : 0),
                             .data.u64 = tag};
    bool ok = epoll_ctl(the_exec->epfd, EPOLL_CTL_MOD, fd, &ev) == 0;
    if (!ok && errno == ENOENT) {
        ok = epoll_ctl(the_exec->epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
    }
    return ok;
}

static const shl_fiber_driver_t fiber_driver = {fiber_arm};

static void
shared_serve_fiber(void *conn)
{
    shared_serve(conn);
}

static void *
shared_worker(void *arg)
{
    shared_exec_t *ex = the_exec;
    int slot = (int)(intptr_t)arg;
    bool stop = false;

    shl_log_set_thread_ctx("worker");
    while (!stop) {
        struct epoll_event ev;
        int n = epoll_wait(ex->epfd, &ev, 1, SHARED_IDLE_EXIT_MS);
        if (n == 0) {
            pthread_mutex_lock(&ex->lock);
            if (ex->nworkers > ex->base) {
                ex->nworkers--;
                atomic_store(&ex->busy_since[slot], -1);
                stop = true;
            }
            pthread_mutex_unlock(&ex->lock);
        } else if (n > 0) {
            atomic_store(&ex->busy_since[slot], shl_clock_mono_us());
            if (shl_fiber_is_tag(ev.data.u64)) {
                shl_fiber_event(ev.data.u64); /* a parked request's reply came */
            } else if (shl_fiber_active()) {
                shl_fiber_run(shared_serve_fiber, ev.data.ptr);
            } else {
                shared_serve(ev.data.ptr);
            }
            atomic_store(&ex->busy_since[slot], 0);
        }
    }
    shl_fiber_thread_exit();
    return NULL;
}

/* Start a worker in a free slot; false when none is free or the thread cannot start. */
static bool
shared_spawn(shared_exec_t *ex)
{
    pthread_attr_t attr;
    pthread_t t;
    int slot = -1;
    bool ok = false;

    pthread_mutex_lock(&ex->lock);
    for (int i = 0; i < SHARED_MAX_WORKERS && slot < 0; i++) {
        if (atomic_load(&ex->busy_since[i]) == -1) {
            slot = i;
        }
    }
    if (slot >= 0) {
        atomic_store(&ex->busy_since[slot], 0);
        if (slot >= atomic_load(&ex->nslots)) {
            atomic_store(&ex->nslots, slot + 1);
        }
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, CONN_STACK_SIZE);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        ok = pthread_create(&t, &attr, shared_worker, (void *)(intptr_t)slot) == 0;
        pthread_attr_destroy(&attr);
        if (ok) {
            ex->nworkers++;
        } else {
            atomic_store(&ex->busy_since[slot], -1);
        }
    }
    pthread_mutex_unlock(&ex->lock);
    return ok;
}

/* Keeps 'base' workers free to take ready connections (see above). */
static void *
shared_monitor(void *arg)
{
    shared_exec_t *ex = arg;

    int busy = 0, near = 0;
    int64_t wake_at;
    int next_wake_ms = SHARED_MONITOR_IDLE_MS; /* until the next parked request's timeout */

    shl_log_set_thread_ctx("executor");
    for (;;) {
        int64_t now;
        int running = 0, blocked = 0, n;

        /* Every 1 ms only while a request is half-way to counting as blocked: one that
         * began just after a look is seen at the next (2 ms) and, if still running, counted
         * at the one after, as with a look every 1 ms -- at half the wake-ups under load. */
        shl_sleep_ms(near > 0   ? SHARED_MONITOR_MS
                     : busy > 0 ? SHARED_BLOCKED_US / 1000
                                : next_wake_ms);
        now = shl_clock_mono_us();
        /* Parked requests (fiber.h) are woken by their timeouts: sleep until the next one. */
        wake_at = shl_fiber_expire(now);
        next_wake_ms = wake_at == 0 || wake_at - now >= SHARED_MONITOR_IDLE_MS * 1000
                           ? SHARED_MONITOR_IDLE_MS
                           : (int)((wake_at - now) / 1000) + 1;
        n = atomic_load(&ex->nslots);
        busy = 0;
        near = 0;
        for (int i = 0; i < n; i++) {
            int64_t b = atomic_load_explicit(&ex->busy_since[i], memory_order_relaxed);
            if (b != -1) {
                running++;
                busy += b > 0;
                blocked += b > 0 && now - b > SHARED_BLOCKED_US;
                near += b > 0 && now - b >= SHARED_BLOCKED_US / 2 && now - b <= SHARED_BLOCKED_US;
            }
        }
        if (running - blocked < ex->base && !shared_spawn(ex)) {
            shl_sleep_ms(100); /* out of threads or slots: try again later */
        }
    }
    return NULL;
}

/* Start the shared executor (--serviceExecutor shared). */
static int
shared_start(shl_status_t *st)
{
    int ret = 0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    shared_exec_t *ex = bson_malloc0(sizeof(*ex));
    pthread_t t;

    ex->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (ex->epfd < 0) {
        bson_free(ex);
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "epoll_create1(): %s", strerror(errno));
    }
    ex->base = cores < 2 ? 2 : (int)cores;
    pthread_mutex_init(&ex->lock, NULL);
    for (int i = 0; i < SHARED_MAX_WORKERS; i++) {
        atomic_init(&ex->busy_since[i], -1);
    }
    the_exec = ex;
    shl_fiber_set_driver(&fiber_driver);
    for (int i = 0; i < ex->base; i++) {
        if (!shared_spawn(ex)) {
            SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "cannot start the service executor's workers");
        }
    }
    if (pthread_create(&t, NULL, shared_monitor, ex) != 0) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "cannot start the service executor's monitor");
    }
    pthread_detach(t);
done:
    return ret;
}

static void
describe_addr(const struct sockaddr_storage *sa, char *out, size_t n)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
    } else if (sa->ss_family == AF_UNIX) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)sa;
        /* MongoDB's name for a peer on the Unix socket. */
        snprintf(out, n, "%.*s", (int)(n > 0 ? n - 1 : 0),
                 un->sun_path[0] != '\0' ? un->sun_path : "anonymous unix socket");
        return;
    }
    snprintf(out, n, "%s:%d", host, port);
}

static void
accept_one(server_t *srv, shl_service_ctx_t *svc, int lfd)
{
    struct sockaddr_storage sa = {0}, la = {0}; /* a Unix peer fills no sun_path */
    socklen_t salen = sizeof(sa), lalen = sizeof(la);
    int fd = accept4(lfd, (struct sockaddr *)&sa, &salen, SOCK_CLOEXEC);
    int one = 1;
    pthread_attr_t attr;
    shl_conn_t *conn;
    bool started;

    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            /*
             * Out of descriptors or memory: the pending connection stays in the backlog
             * and poll() would report it again at once. Back off instead of spinning.
             */
            SHL_LOG_WARNING(NETWORK, 23003, "Error accepting new connection", "error",
                            BCON_UTF8(strerror(errno)));
            shl_sleep_ms(100);
        }
        return;
    }
    if (atomic_load(&svc->counters.conn_current) >= shl_opt_int(SHL_OPT_maxConns)) {
        SHL_LOG_WARNING(NETWORK, 22942,
                        "Connection refused because there are too many open "
                        "connections");
        close(fd);
        return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    conn = bson_malloc0(sizeof(*conn));
    conn->fd = fd;
    conn->unix_socket = sa.ss_family == AF_UNIX;
    conn->svc = svc;
    shl_lsid_user_digest("", conn->user_digest);
    describe_addr(&sa, conn->remote, sizeof(conn->remote));
    getsockname(fd, (struct sockaddr *)&la, &lalen);
    describe_addr(&la, conn->local, sizeof(conn->local));

    pthread_mutex_lock(&srv->lock);
    conn->id = ++srv->next_conn_id;
    conn->next = srv->conns;
    srv->conns = conn;
    pthread_mutex_unlock(&srv->lock);
    atomic_fetch_add(&svc->counters.conn_current, 1);
    atomic_fetch_add(&svc->counters.conn_total, 1);
    SHL_LOG_INFO(NETWORK, 22943, "Connection accepted", "remote", BCON_UTF8(conn->remote),
                 "connectionId", BCON_INT64(conn->id), "connectionCount",
                 BCON_INT64(atomic_load(&svc->counters.conn_current)));

    if (the_exec != NULL && (shl_tls_mode() == SHL_TLS_DISABLED || conn->unix_socket)) {
        started = shared_arm(conn, EPOLL_CTL_ADD); /* the workers serve it from now on */
    } else {
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, CONN_STACK_SIZE);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        started = pthread_create(&conn->thread, &attr, conn_main, conn) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!started) {
        SHL_LOG_ERROR(NETWORK, 22948, "Failed to create a connection thread");
        unlink_conn(srv, conn);
        close(fd);
        atomic_fetch_sub(&svc->counters.conn_current, 1);
        bson_free(conn);
    }
}

static bool
any_op_running(server_t *srv)
{
    bool running = false;
    /* A connection already closing (the one that sent shutdown) is not waited for. */
    for (shl_conn_t *c = srv->conns; c != NULL && !running; c = c->next) {
        running = atomic_load(&c->in_op) && !atomic_load(&c->close_now);
    }
    return running;
}

/* Whether a client connection other than the one that asked for the shutdown is open
 * (cluster processes, which said internalClient, do not count). Under srv->lock. */
static bool
any_client_connected(server_t *srv)
{
    bool any = false;
    for (shl_conn_t *c = srv->conns; c != NULL && !any; c = c->next) {
        any = !c->internal && !atomic_load(&c->close_now);
    }
    return any;
}

/*
 * A router's quiesce mode (seeds/000 "Quiesce mode on shutdown"): the topology version moves,
 * waiting awaitable hellos answer ShutdownInProgress at once and so does every new hello,
 * while new and running operations go on -- the listener keeps accepting -- until the
 * period is over. Drivers that see the error route to another router. Shale ends the period
 * early once no client connection is left: nobody remains to serve (mongos sleeps the whole
 * period). Returns the monotonic time the period ends.
 */
static int64_t
quiesce_begin(server_t *srv)
{
    int64_t ms = atomic_load(&srv->shutdown_timeout_ms);

    /* The shutdown command's timeoutSecs, or for a signal the option as it is now
     * (setParameter may have changed it; the signal handler cannot read options). */
    if (ms < 0) {
        ms = shl_opt_int(SHL_OPT_mongosShutdownTimeoutMillisForSignaledShutdown);
    }
    shl_topology_change(the_svc, true);
    SHL_LOG_INFO(CONTROL, 4695701, "Entering quiesce mode for router shutdown", "quiesceTimeMillis",
                 BCON_INT64(ms));
    return shl_clock_mono_us() + ms * 1000;
}

/* Whether the quiesce period ending at 'end_us' is over (hangDuringQuiesceMode holds it). */
static bool
quiesce_over(server_t *srv, int64_t end_us)
{
    bool over = false;

    if (!SHL_FAILPOINT_FIRES(hangDuringQuiesceMode)) {
        pthread_mutex_lock(&srv->lock);
        over = shl_clock_mono_us() >= end_us || !any_client_connected(srv);
        pthread_mutex_unlock(&srv->lock);
    }
    if (over) {
        SHL_LOG_INFO(CONTROL, 4695702, "Exiting quiesce mode for router shutdown");
    }
    return over;
}

/* The shutdown sequence, run on the listener thread once woken. */
static void
shut_down(server_t *srv, shl_service_ctx_t *svc)
{
    int64_t timeout_ms = atomic_load(&srv->shutdown_timeout_ms);
    int64_t deadline;

    if (svc->role == SHL_ROLE_ROUTER) {
        /* As mongos: once quiesce mode is over, what still runs is interrupted. */
        timeout_ms = 0;
    } else if (timeout_ms < 0) {
        timeout_ms = shl_opt_int(SHL_OPT_shutdownTimeoutMillisForSignaledShutdown);
    }
    deadline = shl_clock_mono_us() + timeout_ms * 1000;

    SHL_LOG_INFO(CONTROL, 4784900, "Shutting down", "timeoutMillis", BCON_INT64(timeout_ms));
    atomic_store(&svc->shutting_down, true);
    if (svc->role != SHL_ROLE_ROUTER) {
        /* A data node stops being primary (it has no secondary to hand over to): a topology
         * change, so awaitable hellos answer now rather than hold the shutdown up. */
        shl_topology_change(svc, false);
    }
    for (int i = 0; i < srv->nlisten; i++) {
        close(srv->listen_fds[i]);
    }
    if (srv->unix_path[0] != '\0') {
        unlink(srv->unix_path);
    }
    /* Let running operations finish, up to the bound. */
    pthread_mutex_lock(&srv->lock);
    while (any_op_running(srv) && shl_clock_mono_us() < deadline) {
        shl_cond_timedwait_ms(&srv->cond, &srv->lock, 50);
    }
    /*
     * Interrupt what still runs, as MongoDB kills every operation at shutdown: one blocked
     * where only its kill flag is watched (a hang fail point) or waiting for another node
     * (a router's forwarded command; also a background thread's call, which the role's
     * shutdown hook then joins) would otherwise keep its thread past the wait below, and
     * storage or the connection pools would go under it. Operations get a moment to send
     * their InterruptedAtShutdown replies.
     */
    pthread_mutex_unlock(&srv->lock);
    shl_client_interrupt_all();
    pthread_mutex_lock(&srv->lock);
    if (any_op_running(srv)) {
        pthread_mutex_unlock(&srv->lock);
        int killed = shl_op_kill_all(svc);
        SHL_LOG_INFO(CONTROL, 4615640, "Interrupting operations at shutdown", "count",
                     BCON_INT32(killed));
        pthread_mutex_lock(&srv->lock);
        deadline = shl_clock_mono_us() + KILLED_OPS_WAIT_MS * 1000;
        while (any_op_running(srv) && shl_clock_mono_us() < deadline) {
            shl_cond_timedwait_ms(&srv->cond, &srv->lock, 50);
        }
    }
    /* Wake every connection thread and wait for all of them to leave. */
    for (shl_conn_t *c = srv->conns; c != NULL; c = c->next) {
        atomic_store(&c->close_now, true);
        shutdown(c->fd, SHUT_RDWR);
    }
    deadline = shl_clock_mono_us() + 10 * 1000 * 1000;
    while (srv->conns != NULL && shl_clock_mono_us() < deadline) {
        shl_cond_timedwait_ms(&srv->cond, &srv->lock, 50);
    }
    pthread_mutex_unlock(&srv->lock);
    if (svc->hooks.shutdown != NULL) {
        svc->hooks.shutdown(svc);
    }
    SHL_LOG_INFO(CONTROL, 20565, "Now exiting");
    pthread_mutex_lock(&srv->lock);
    srv->done = true;
    pthread_cond_broadcast(&srv->cond);
    pthread_mutex_unlock(&srv->lock);
}

static void *
listener_main(void *arg)
{
    shl_service_ctx_t *svc = arg;
    server_t *srv = the_server;
    struct pollfd pfds[MAX_LISTENERS + 1];
    bool stop = false, quiescing = false;
    int64_t quiesce_end_us = 0;

    shl_log_set_thread_ctx("listener");
    while (!stop) {
        int n = 0;
        for (int i = 0; i < srv->nlisten; i++) {
            pfds[n].fd = srv->listen_fds[i];
            pfds[n].events = POLLIN;
            n++;
        }
        pfds[n].fd = srv->wake_pipe[0];
        pfds[n].events = POLLIN;
        /* In quiesce mode the listener also watches the period, in 50 ms slices. */
        if (poll(pfds, (nfds_t)n + 1, quiescing ? 50 : -1) < 0) {
            continue;
        }
        if (pfds[n].revents & POLLIN) {
            char c;
            ssize_t r = read(srv->wake_pipe[0], &c, 1);
            (void)r;
            if (svc->role != SHL_ROLE_ROUTER) {
                stop = true;
            } else if (!quiescing) {
                /* A router quiesces first, still accepting; a second request changes
                 * nothing. */
                quiescing = true;
                quiesce_end_us = quiesce_begin(srv);
            }
            pthread_mutex_lock(&srv->lock);
            srv->shutdown_taken = true;
            pthread_cond_broadcast(&srv->cond);
            pthread_mutex_unlock(&srv->lock);
        }
        for (int i = 0; i < n && !stop; i++) {
            if (pfds[i].revents & POLLIN) {
                accept_one(srv, svc, pfds[i].fd);
            }
        }
        stop = stop || (quiescing && quiesce_over(srv, quiesce_end_us));
    }
    shut_down(srv, svc);
    return NULL;
}

static int
bind_one(server_t *srv, const char *host, int port, shl_status_t *st)
{
    int ret = 0;
    struct addrinfo hints = {0}, *res = NULL;
    char portstr[16];
    int fd = -1, one = 1, rc;

    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(portstr, sizeof(portstr), "%d", port);
    if ((rc = getaddrinfo(host, portstr, &hints, &res)) != 0) {
        SHL_FAIL(st, SHL_CODE_SOCKET_EXCEPTION, "cannot resolve bind address %s: %s", host,
                 gai_strerror(rc));
    }
    if (srv->nlisten == MAX_LISTENERS) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "too many bind addresses");
    }
    fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        SHL_FAIL(st, SHL_CODE_SOCKET_EXCEPTION, "socket(): %s", strerror(errno));
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0) {
        SHL_FAIL(st, SHL_CODE_SOCKET_EXCEPTION, "Failed to set up listener on %s:%d: %s", host,
                 port, strerror(errno));
    }
    if (listen(fd, 1024) != 0) {
        SHL_FAIL(st, SHL_CODE_SOCKET_EXCEPTION, "listen(): %s", strerror(errno));
    }
    srv->listen_fds[srv->nlisten++] = fd;
    fd = -1;
done:
    if (fd >= 0) {
        close(fd);
    }
    if (res != NULL) {
        freeaddrinfo(res);
    }
    return ret;
}

/*
 * The Unix domain socket <unixSocketPrefix>/mongodb-<port>.sock, as mongod creates one
 * (0700): local clients -- routers and shards on the same machine -- skip the TCP stack.
 * A file left by a process that died is replaced. Failure to create it is logged, not
 * fatal (MongoDB's behaviour is the same unless the path is unusable).
 */
static void
bind_unix(server_t *srv, int port)
{
    struct sockaddr_un sa;
    int fd = -1;
    int n;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/mongodb-%d.sock",
                 shl_opt_str(SHL_OPT_unixSocketPrefix), port);
    if (n <= 0 || (size_t)n >= sizeof(sa.sun_path) || srv->nlisten == MAX_LISTENERS) {
        SHL_LOG_WARNING(NETWORK, 23010, "Unix socket path too long", "prefix",
                        BCON_UTF8(shl_opt_str(SHL_OPT_unixSocketPrefix)));
        return;
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        unlink(sa.sun_path);
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && chmod(sa.sun_path, 0700) == 0 &&
            listen(fd, 1024) == 0) {
            srv->listen_fds[srv->nlisten++] = fd;
            snprintf(srv->unix_path, sizeof(srv->unix_path), "%s", sa.sun_path);
            fd = -1;
        } else {
            SHL_LOG_WARNING(NETWORK, 23011, "cannot listen on the Unix socket", "path",
                            BCON_UTF8(sa.sun_path), "error", BCON_UTF8(strerror(errno)));
        }
    }
    if (fd >= 0) {
        close(fd);
    }
}

int
shl_server_start(shl_service_ctx_t *svc, const char *bind_ip, int port, shl_status_t *st)
{
    int ret = 0;
    server_t *srv = bson_malloc0(sizeof(*srv));
    char *ips = bson_strdup(bind_ip), *save = NULL;

    pthread_mutex_init(&srv->lock, NULL);
    pthread_cond_init(&srv->cond, NULL);
    atomic_store(&srv->shutdown_timeout_ms, -1);
    if (pipe2(srv->wake_pipe, O_CLOEXEC) != 0) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "pipe(): %s", strerror(errno));
    }
    for (char *ip = strtok_r(ips, ",", &save); ip != NULL; ip = strtok_r(NULL, ",", &save)) {
        while (*ip == ' ') {
            ip++;
        }
        SHL_ERR(bind_one(srv, ip, port, st));
    }
    if (srv->nlisten == 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "no bind address");
    }
    if (!shl_opt_bool(SHL_OPT_nounixsocket)) {
        bind_unix(srv, port);
    }
    if (strcmp(shl_opt_str(SHL_OPT_serviceExecutor), "shared") == 0) {
        SHL_ERR(shared_start(st));
    } else if (strcmp(shl_opt_str(SHL_OPT_serviceExecutor), "dedicated") != 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "serviceExecutor must be dedicated or shared, not '%s'",
                 shl_opt_str(SHL_OPT_serviceExecutor));
    }
    the_server = srv;
    the_svc = svc;
    if (pthread_create(&srv->listener, NULL, listener_main, svc) != 0) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "cannot start the listener thread");
    }
    SHL_LOG_INFO(NETWORK, 23016, "Waiting for connections", "port", BCON_INT32(port), "ssl",
                 BCON_UTF8(shl_tls_mode() == SHL_TLS_DISABLED ? "off" : "on"));
    if (atomic_load(&shutdown_requested)) {
        /* A signal arrived during start-up, before there was a server to stop. */
        shl_server_request_shutdown(svc, -1);
    }
done:
    bson_free(ips);
    if (ret != 0) {
        for (int i = 0; i < srv->nlisten; i++) {
            close(srv->listen_fds[i]);
        }
        the_server = NULL;
        bson_free(srv);
    }
    return ret;
}

int
shl_server_wait(shl_service_ctx_t *svc)
{
    server_t *srv = the_server;
    pthread_join(srv->listener, NULL);
    return atomic_load(&svc->shutdown_exit_code);
}

void
shl_server_request_shutdown(shl_service_ctx_t *svc, int64_t timeout_ms)
{
    char c = 1;
    (void)svc;
    atomic_store(&shutdown_requested, true);
    if (the_server == NULL) {
        return;
    }
    if (timeout_ms >= 0) {
        atomic_store(&the_server->shutdown_timeout_ms, timeout_ms);
    }
    ssize_t w = write(the_server->wake_pipe[1], &c, 1);
    (void)w;
}

void
shl_server_shutdown_and_wait(shl_service_ctx_t *svc, int64_t timeout_ms)
{
    shl_server_request_shutdown(svc, timeout_ms);
    if (the_server != NULL) {
        pthread_mutex_lock(&the_server->lock);
        while (!the_server->shutdown_taken) {
            shl_cond_timedwait_ms(&the_server->cond, &the_server->lock, 50);
        }
        pthread_mutex_unlock(&the_server->lock);
    }
}

static void
on_signal(int sig)
{
    (void)sig;
    shl_server_request_shutdown(the_svc, -1);
}

bool
shl_server_shutdown_requested(void)
{
    return atomic_load(&shutdown_requested);
}

void
shl_server_install_signal_handlers(shl_service_ctx_t *svc)
{
    struct sigaction sa;
    the_svc = svc;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}
