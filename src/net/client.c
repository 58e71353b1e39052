/*
 * client.c -- the internal client's connections and its one I/O engine (client.h).
 * Every call, a single command or a fan-out, is a set of "ops" driven by one poll(2)
 * loop over non-blocking sockets: connect, hello handshake, send, receive. A single
 * command is a fan-out of one, so there is one code path to get right.
 */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/client_private.h"
#include "net/fiber.h"
#include "net/message.h"
#include "net/rs_monitor.h"

#define DEFAULT_PORT "27017"

typedef enum phase {
    PH_CONNECTING, /* non-blocking connect in progress: wait for POLLOUT */
    PH_TLS,        /* TLS handshake in progress: wait for what it wants */
    PH_SENDING,    /* writing 'out': wait for POLLOUT */
    PH_RECEIVING,  /* reading a reply: wait for POLLIN */
    PH_DONE,
} phase_t;

/* One request in flight. Buffers are owned by the op; request fields are borrowed. */
typedef struct op {
    const char *host;
    const char *db;
    const bson_t *cmd;     /* NULL: connect and handshake only (checkout) */
    const uint8_t *op_key; /* NULL, or the clientOperationKey 'cmd' is sent with */
    const char *cmd_name;  /* the exchange in flight, for messages */
    bool sent;             /* the caller's command went (or started to go) out */
    shl_client_conn_t *conn;
    bool own_conn;                /* acquired here: release to the pool when done */
    shl_client_conn_t **conn_out; /* checkout: hand the connection over on success */
    struct addrinfo *ai_list;     /* name resolution, until connected */
    struct addrinfo *ai_cur;
    int connect_errno;           /* the last address's failure */
    int64_t connect_deadline_us; /* bound on connect + handshake; 0 once ready */
    bool handshake;              /* the exchange in flight is the hello */
    void *auth_state;            /* internal authentication in progress (shl_client_auth_t) */
    bool auth_step;              /* the exchange in flight is an authentication step */
    /* Send without the gossip hooks' fields: an authenticating handshake's $clusterTime
     * would be checked before the peer knows who sends it. */
    bool no_decorate;
    uint8_t *out;
    size_t out_len, out_off;
    int32_t request_id;
    uint8_t *in;           /* the whole reply, header included */
    size_t in_len, in_off; /* in_len 0 until the header is read */
    phase_t phase;
    short wait_events; /* what a TLS connection waits for; 0: what the phase implies */
    int code;
    shl_status_t *st;
    bson_t *reply; /* initialised by the public entry points */
    int64_t *micros;
    bool cut; /* ended by the caller's interruption before its reply arrived */
    /* The member a replica set connection string resolved to (rs_monitor.h); 'host' then
     * points here. */
    char resolved[SHL_CLIENT_HOST_MAX];
    /*
     * The reply's first bytes: one recv takes the header and, for a small reply, the
     * whole body (one syscall, not two). A peer sends one message per request, so
     * bytes beyond the header's length are a protocol error. Last, and never read before
     * it is written, so op_clear leaves it alone.
     */
    uint8_t head[1024];
} op_t;

/* Fan-outs this wide or narrower keep their ops and poll set on the stack. */
#define SMALL_FANOUT 4

/* Zero an op's fields; 'head' is scratch space filled by recv before any read. */
static void
op_clear(op_t *op)
{
    memset(op, 0, offsetof(op_t, head));
}

/* A cleared op that runs 'cmd' on 'host' in 'db', its status and reply going to st / reply. */
static void
op_init_cmd(op_t *op, const char *host, const char *db, const bson_t *cmd, shl_status_t *st,
            bson_t *reply)
{
    op_clear(op);
    op->host = host;
    op->db = db;
    op->cmd = cmd;
    op->st = st;
    op->reply = reply;
}

typedef struct engine {
    shl_conn_pool_t *pool;
    shl_client_hooks_t hooks;
    int64_t start_us;
    int64_t deadline_us;                /* 0: none */
    const shl_client_interrupt_t *intr; /* NULL: only the deadline ends the wait */
    const shl_client_local_t *local;    /* NULL: none; run once the requests are sent */
} engine_t;

/*
 * How long an interruptible call sleeps in poll(2) before it asks whether its operation was
 * killed. A reply that arrives sooner costs nothing extra (no syscall, no check); a call
 * that waits longer wakes this often, and a kill ends it within about this time.
 */
#define INTERRUPT_CHECK_US (20 * 1000)

static atomic_int next_request_id = 1;

/* The process's internal authentication: set once at start-up, then read-only. */
static const shl_client_auth_t *client_auth;

void
shl_client_set_auth(const shl_client_auth_t *auth)
{
    client_auth = auth;
}

/*
 * The shutdown's interrupt (shl_client_interrupt_all): the flag fails calls, and a byte
 * written to the pipe, which every poll also waits on and nobody reads, wakes those
 * already waiting. Both are set once and never reset.
 */
static atomic_bool interrupted;
static int interrupt_pipe[2] = {-1, -1};
static pthread_once_t interrupt_once = PTHREAD_ONCE_INIT;

static void
interrupt_pipe_init(void)
{
    /* Without a pipe (out of descriptors) the flag still ends calls at their next wake. */
    if (pipe2(interrupt_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        interrupt_pipe[0] = interrupt_pipe[1] = -1;
    }
}

void
shl_client_interrupt_all(void)
{
    char c = 1;

    pthread_once(&interrupt_once, interrupt_pipe_init);
    atomic_store(&interrupted, true);
    if (interrupt_pipe[1] >= 0) {
        ssize_t w = write(interrupt_pipe[1], &c, 1);
        (void)w;
    }
}

static int64_t
elapsed_ms(const engine_t *eng)
{
    return (shl_clock_mono_us() - eng->start_us) / 1000;
}

void
client_conn_close(shl_client_conn_t *conn)
{
    shl_tls_free(conn->tls);
    if (conn->fd >= 0) {
        close(conn->fd);
    }
    bson_free(conn);
}

const shl_client_peer_t *
shl_client_conn_peer(const shl_client_conn_t *conn)
{
    return &conn->peer;
}

const char *
shl_client_conn_host(const shl_client_conn_t *conn)
{
    return conn->host;
}

bool
shl_client_conn_failed(const shl_client_conn_t *conn)
{
    return conn->failed;
}

/*
 * Split "host:port", "[v6addr]:port" or "host" (port 27017) into name and port, with
 * MongoDB's FailedToParse for what cannot be a host. With name NULL, only check it.
 */
static int
parse_host(const char *host, char *name, size_t namesz, char *port, size_t portsz, shl_status_t *st)
{
    int ret = 0;
    const char *colon, *p_port = NULL, *n_start = host, *n_end;
    size_t len = strlen(host);

    if (len == 0 || len >= SHL_CLIENT_HOST_MAX) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Invalid HostAndPort \"%s\"", host);
    }
    if (host[0] == '[') {
        n_start = host + 1;
        n_end = strchr(host, ']');
        if (n_end == NULL || (n_end[1] != '\0' && n_end[1] != ':')) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Invalid HostAndPort \"%s\"", host);
        }
        p_port = n_end[1] == ':' ? n_end + 2 : NULL;
    } else {
        colon = strrchr(host, ':');
        if (colon != NULL && strchr(host, ':') == colon) {
            n_end = colon;
            p_port = colon + 1;
        } else {
            /* No colon, or a bare IPv6 address: the whole string is the name. */
            n_end = host + len;
        }
    }
    if (n_end == n_start) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "Empty host component parsing HostAndPort from \"%s\"", host);
    }
    if (name != NULL) {
        snprintf(name, namesz, "%.*s", (int)(n_end - n_start), n_start);
    }
    if (p_port == NULL) {
        if (name != NULL) {
            snprintf(port, portsz, "%s", DEFAULT_PORT);
        }
    } else {
        long v = 0;
        size_t i;
        for (i = 0; p_port[i] >= '0' && p_port[i] <= '9' && v <= 65535; i++) {
            v = v * 10 + (p_port[i] - '0');
        }
        if (i == 0 || p_port[i] != '\0' || v < 1 || v > 65535) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Port number \"%s\" out of range in \"%s\"",
                     p_port, host);
        }
        if (name != NULL) {
            snprintf(port, portsz, "%ld", v);
        }
    }
done:
    return ret;
}

/*
 * A pooled connection given back this recently is used without a liveness check. The check
 * (a MSG_PEEK recv) is a syscall on every routed request otherwise; a peer that went away
 * within the window shows up as a network error on the request instead of a reconnect.
 * MongoDB's own pool trusts a resting connection for far longer: mongos heartbeats one
 * only after ShardingTaskExecutorPoolRefreshRequirementMS (60 s by default).
 */
#define RECENTLY_USED_US (10 * 1000)

/* Whether an idle pooled socket is still usable: open, and holding no stray bytes. */
static bool
socket_alive(int fd)
{
    char b;
    ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* The end of an op: free its buffers and give its connection back (or away). */
static void
op_finish(engine_t *eng, op_t *op, int code)
{
    op->code = code;
    op->phase = PH_DONE;
    if (code != 0) {
        shl_rs_monitor_note_error(op->host, code);
    }
    if (op->auth_state != NULL) {
        client_auth->end(op->auth_state);
        op->auth_state = NULL;
    }
    bson_free(op->out);
    bson_free(op->in);
    op->out = op->in = NULL;
    if (op->ai_list != NULL) {
        freeaddrinfo(op->ai_list);
        op->ai_list = op->ai_cur = NULL;
    }
    if (op->micros != NULL) {
        *op->micros = shl_clock_mono_us() - eng->start_us;
    }
    if (op->conn != NULL) {
        if (op->conn_out != NULL && code == 0) {
            *op->conn_out = op->conn;
        } else if (op->own_conn) {
            client_pool_release(eng->pool, op->conn);
        }
        op->conn = NULL;
    }
}

/*
 * A network or protocol failure: the stream is in an unknown state, so the
 * connection is marked failed and never reused.
 */
__attribute__((format(printf, 4, 5))) static void
op_net_fail(engine_t *eng, op_t *op, int code, const char *fmt, ...)
{
    va_list ap;

    if (op->conn != NULL) {
        op->conn->failed = true;
    }
    op->st->code = code;
    op->st->labels = 0;
    op->st->extra_len = 0;
    va_start(ap, fmt);
    vsnprintf(op->st->reason, sizeof(op->st->reason), fmt, ap);
    va_end(ap);
    SHL_LOG_DEBUG(1, NETWORK, 4616101, "internal client network error", "hostAndPort",
                  BCON_UTF8(op->host), "code", BCON_INT32(code), "error",
                  BCON_UTF8(op->st->reason));
    op_finish(eng, op, code);
}

/* MongoDB's mapping of socket errors: resets become HostUnreachable, the rest SocketException. */
static void
op_errno_fail(engine_t *eng, op_t *op, const char *what, int err)
{
    int code = SHL_CODE_SOCKET_EXCEPTION;
    if (err == ECONNRESET || err == EPIPE || err == ENETRESET) {
        code = SHL_CODE_HOST_UNREACHABLE;
    }
    op_net_fail(eng, op, code, "Error %s %s :: caused by :: %s", what, op->host, strerror(err));
}

/* The connection's I/O: through its TLS when it has one, else the socket itself. */
static ssize_t
conn_send(shl_client_conn_t *conn, const uint8_t *buf, size_t n)
{
    return conn->tls != NULL ? shl_tls_write(conn->tls, buf, n)
                             : send(conn->fd, buf, n, MSG_NOSIGNAL);
}

static ssize_t
conn_recv(shl_client_conn_t *conn, uint8_t *buf, size_t n)
{
    return conn->tls != NULL ? shl_tls_read(conn->tls, buf, n) : recv(conn->fd, buf, n, 0);
}

/* Build the wire message for 'body' (caller's fields, the decorate hook's, then $db). */
static int
op_prepare_message(engine_t *eng, op_t *op, const bson_t *cmd, const uint8_t *key, const char *db)
{
    int ret = 0;
    bson_t body;
    bson_iter_t it;
    int32_t max_msg = SHL_MAX_MESSAGE_SIZE;
    size_t body_len;
    bool has_db, direct;

    bson_init(&body);
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it)) {
        SHL_FAIL(op->st, SHL_CODE_BAD_VALUE, "empty command document sent to %s", op->host);
    }
    op->cmd_name = shl_iter_key(&it);
    has_db = shl_bson_iter_find_key(&it, cmd, "$db");
    /* Nothing to add but $db (the usual case): the message is written straight from cmd. */
    direct = (eng->hooks.decorate == NULL || op->no_decorate) && !has_db;
    if (direct) {
        /* The $db element's size, and the key's (type, name, length, subtype, bytes). */
        body_len = (size_t)cmd->len + 10 + strlen(db) + (key != NULL ? 41 : 0);
    } else {
        if (has_db) {
            bson_copy_to_excluding_noinit(cmd, &body, "$db", NULL);
        } else {
            bson_concat(&body, cmd); /* the same bytes, in one copy */
        }
        if (eng->hooks.decorate != NULL && !op->no_decorate) {
            eng->hooks.decorate(eng->hooks.arg, op->host, op->cmd_name, &body);
        }
        if (key != NULL) {
            bson_append_binary(&body, "clientOperationKey", 18, BSON_SUBTYPE_UUID, key,
                               SHL_CLIENT_OP_KEY_LEN);
        }
        BSON_APPEND_UTF8(&body, "$db", db);
        body_len = body.len;
    }
    if (op->conn->ready && op->conn->peer.max_message_size_bytes > 0) {
        max_msg = op->conn->peer.max_message_size_bytes;
    }
    if (body_len > SHL_MAX_BSON_INTERNAL_SIZE ||
        body_len + SHL_MSG_HEADER_LEN + 5 > (size_t)max_msg) {
        SHL_FAIL(op->st, SHL_CODE_BSON_OBJECT_TOO_LARGE,
                 "command %s to %s is %u bytes, more than the limit", op->cmd_name, op->host,
                 (unsigned)body_len);
    }
    op->request_id = atomic_fetch_add(&next_request_id, 1);
    bson_free(op->out);
    op->out = direct ? shl_msg_build_op_msg_db(op->request_id, cmd, key, db, &op->out_len)
                     : shl_msg_build_op_msg(op->request_id, 0, 0, &body, &op->out_len);
    op->out_off = 0;
    op->in_len = op->in_off = 0;
    op->phase = PH_SENDING;
done:
    bson_destroy(&body);
    return ret;
}

/* Send the caller's command, or finish if this op only wanted a connection. */
static void
op_start_command(engine_t *eng, op_t *op)
{
    int ret;

    op->handshake = false;
    if (op->cmd == NULL) {
        op_finish(eng, op, 0);
        return;
    }
    op->sent = true;
    ret = op_prepare_message(eng, op, op->cmd, op->op_key, op->db);
    if (ret != 0) {
        /* Nothing was sent: the connection is still good. */
        op_finish(eng, op, ret);
    }
}

/* The connection is set up (and its TLS handshake done): send the internalClient hello. */
static void
op_send_hello(engine_t *eng, op_t *op)
{
    int ret;
    bson_t hello, ic;

    bson_init(&hello);
    BSON_APPEND_INT32(&hello, "hello", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&hello, "internalClient", &ic);
    BSON_APPEND_INT32(&ic, "minWireVersion", SHL_CLIENT_MIN_WIRE_VERSION);
    BSON_APPEND_INT32(&ic, "maxWireVersion", SHL_CLIENT_MAX_WIRE_VERSION);
    bson_append_document_end(&hello, &ic);
    if (client_auth != NULL) {
        op->auth_state = client_auth->begin(&hello);
        op->no_decorate = true;
    }
    op->handshake = true;
    ret = op_prepare_message(eng, op, &hello, NULL, "admin");
    bson_destroy(&hello);
    op->cmd_name = "hello"; /* the pointer into 'hello' is gone */
    if (ret != 0) {
        op->conn->failed = true;
        op_finish(eng, op, ret);
    }
}

/* The socket is connected: set it up, then start TLS (preferTLS, requireTLS; not on the
 * Unix domain socket, which the server keeps plain) or send the hello. */
static void
op_connected(engine_t *eng, op_t *op)
{
    int one = 1;

    if (op->ai_list != NULL) {
        freeaddrinfo(op->ai_list);
        op->ai_list = op->ai_cur = NULL;
    }
    if (!op->conn->is_unix) {
        setsockopt(op->conn->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    setsockopt(op->conn->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    if (!op->conn->is_unix && shl_tls_outgoing()) {
        op->conn->tls = shl_tls_connect_new(op->conn->fd, op->host, op->st);
        op->phase = PH_TLS;
    } else {
        op_send_hello(eng, op);
    }
}

/* Try the addresses from ai_cur on until one connects or is in progress. */
static void
op_try_connect(engine_t *eng, op_t *op)
{
    while (op->ai_cur != NULL) {
        struct addrinfo *ai = op->ai_cur;
        int fd =
            socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            op->connect_errno = errno;
            op->ai_cur = ai->ai_next;
            continue;
        }
        op->conn->fd = fd;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            op_connected(eng, op);
            return;
        }
        if (errno == EINPROGRESS) {
            op->phase = PH_CONNECTING;
            return;
        }
        op->connect_errno = errno;
        close(fd);
        op->conn->fd = -1;
        op->ai_cur = ai->ai_next;
    }
    op_net_fail(eng, op, SHL_CODE_HOST_UNREACHABLE, "Error connecting to %s :: caused by :: %s",
                op->host, strerror(op->connect_errno));
}

/*
 * A process on this machine listening on 'port' also listens on the Unix domain socket
 * <unixSocketPrefix>/mongodb-<port>.sock (as mongod does): connecting there skips the TCP
 * stack, which is most of a router's cost per forwarded request. True when the connection
 * is made (the op continues with the handshake); false to fall back to TCP (no such socket,
 * or a file left by a process that is gone).
 */
static bool
try_unix_socket(engine_t *eng, op_t *op, const char *name, const char *port)
{
    struct sockaddr_un sa;
    int fd, n;

    /* Under clusterAuthMode x509 a member proves itself with its TLS certificate, which the
     * (plain) Unix domain socket cannot carry. */
    if (shl_opt_bool(SHL_OPT_nounixsocket) ||
        strcmp(shl_opt_str(SHL_OPT_clusterAuthMode), "x509") == 0 ||
        (strcmp(name, "127.0.0.1") != 0 && strcmp(name, "localhost") != 0)) {
        return false;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/mongodb-%s.sock",
                 shl_opt_str(SHL_OPT_unixSocketPrefix), port);
    if (n <= 0 || (size_t)n >= sizeof(sa.sun_path)) {
        return false;
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return false;
    }
    /* A local stream socket connects at once or fails at once (no EINPROGRESS wait). */
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return false;
    }
    op->conn->fd = fd;
    op->conn->is_unix = true;
    op_connected(eng, op);
    return true;
}

static void
op_start_connect(engine_t *eng, op_t *op)
{
    char name[SHL_CLIENT_HOST_MAX], port[8];
    struct addrinfo hints;
    int rc;
    shl_status_t parse_st;

    op->connect_deadline_us =
        shl_clock_mono_us() + client_pool_connect_timeout_ms(eng->pool) * 1000;
    if (parse_host(op->host, name, sizeof(name), port, sizeof(port), &parse_st) != 0) {
        *op->st = parse_st;
        op_finish(eng, op, parse_st.code);
        return;
    }
    SHL_LOG_DEBUG(1, NETWORK, 22576, "Connecting", "hostAndPort", BCON_UTF8(op->host));
    if (try_unix_socket(eng, op, name, port)) {
        return;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    /* Name resolution blocks outside the deadline; cluster hosts are numeric or local. */
    rc = getaddrinfo(name, port, &hints, &op->ai_list);
    if (rc != 0) {
        op->ai_list = NULL;
        op_net_fail(eng, op, SHL_CODE_HOST_UNREACHABLE,
                    "Error connecting to %s :: caused by :: could not resolve '%s': %s", op->host,
                    name, gai_strerror(rc));
        return;
    }
    op->ai_cur = op->ai_list;
    op->connect_errno = ECONNREFUSED;
    op_try_connect(eng, op);
}

/* A replica set connection string becomes the member to send to (rs_monitor.h), chosen by
 * the command's $readPreference; no member within the call's deadline finishes the op. */
static void
op_resolve(engine_t *eng, op_t *op)
{
    int64_t wait_ms = 0;

    if (op->conn != NULL || !shl_rs_monitor_is_set(op->host)) {
        return;
    }
    if (eng->deadline_us != 0) {
        wait_ms = (eng->deadline_us - shl_clock_mono_us()) / 1000;
        wait_ms = wait_ms <= 0 ? 1 : wait_ms;
    }
    if (shl_rs_monitor_select(eng->pool, op->host, shl_rs_monitor_pref_of(op->cmd), wait_ms,
                              op->resolved, sizeof(op->resolved), op->st) != 0) {
        op_finish(eng, op, op->st->code);
        return;
    }
    op->host = op->resolved;
}

/* Take a connection (pooled and alive, or new) and start the op. */
static void
op_begin(engine_t *eng, op_t *op)
{
    op_resolve(eng, op);
    if (op->phase == PH_DONE) {
        return;
    }
    if (op->conn != NULL) {
        /* The caller's own checked-out connection. */
        if (op->conn->failed) {
            op_net_fail(eng, op, SHL_CODE_SOCKET_EXCEPTION,
                        "connection to %s failed earlier and cannot be reused", op->host);
        } else {
            op_start_command(eng, op);
        }
        return;
    }
    /* Refuse bad host strings before they get a pool entry. */
    if (parse_host(op->host, NULL, 0, NULL, 0, op->st) != 0) {
        op_finish(eng, op, op->st->code);
        return;
    }
    op->own_conn = true;
    for (;;) {
        op->conn = client_pool_acquire(eng->pool, op->host);
        if (!op->conn->ready || shl_clock_mono_us() - op->conn->idle_since_us < RECENTLY_USED_US ||
            socket_alive(op->conn->fd)) {
            break;
        }
        /* The peer closed it while it sat idle (e.g. it restarted): drop it, try again. */
        op->conn->failed = true;
        client_pool_release(eng->pool, op->conn);
    }
    if (op->conn->ready) {
        op_start_command(eng, op);
    } else {
        op_start_connect(eng, op);
    }
}

static void
read_int32_field(const bson_t *doc, const char *key, int32_t *out)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_NUMBER(&it)) {
        *out = (int32_t)bson_iter_as_int64(&it);
    }
}

/* Record what the peer said in hello and check that we speak a common wire version. */
static int
op_read_hello(op_t *op, const bson_t *reply)
{
    int ret = 0;
    shl_client_peer_t *peer = &op->conn->peer;
    bson_iter_t it;

    SHL_ERR(shl_status_from_reply(reply, op->st));
    memset(peer, 0, sizeof(*peer));
    peer->max_bson_object_size = SHL_MAX_BSON_SIZE;
    peer->max_message_size_bytes = SHL_MAX_MESSAGE_SIZE;
    peer->max_write_batch_size = SHL_MAX_WRITE_BATCH;
    read_int32_field(reply, "minWireVersion", &peer->min_wire_version);
    read_int32_field(reply, "maxWireVersion", &peer->max_wire_version);
    read_int32_field(reply, "maxBsonObjectSize", &peer->max_bson_object_size);
    read_int32_field(reply, "maxMessageSizeBytes", &peer->max_message_size_bytes);
    read_int32_field(reply, "maxWriteBatchSize", &peer->max_write_batch_size);
    if (bson_iter_init_find(&it, reply, "connectionId") && BSON_ITER_HOLDS_NUMBER(&it)) {
        peer->connection_id = bson_iter_as_int64(&it);
    }
    if (bson_iter_init_find(&it, reply, "msg") && BSON_ITER_HOLDS_UTF8(&it)) {
        peer->is_router = strcmp(bson_iter_utf8(&it, NULL), "isdbgrid") == 0;
    }
    if (bson_iter_init_find(&it, reply, "setName") && BSON_ITER_HOLDS_UTF8(&it)) {
        snprintf(peer->set_name, sizeof(peer->set_name), "%s", bson_iter_utf8(&it, NULL));
    }
    if (peer->min_wire_version > SHL_CLIENT_MAX_WIRE_VERSION ||
        peer->max_wire_version < SHL_CLIENT_MIN_WIRE_VERSION) {
        SHL_FAIL(op->st, SHL_CODE_INCOMPATIBLE_SERVER_VERSION,
                 "Server at %s speaks wire versions %d to %d; this process speaks %d to %d",
                 op->host, peer->min_wire_version, peer->max_wire_version,
                 SHL_CLIENT_MIN_WIRE_VERSION, SHL_CLIENT_MAX_WIRE_VERSION);
    }
done:
    return ret;
}

/* A whole reply is in op->in: parse it and move on. */
static void
op_on_message(engine_t *eng, op_t *op)
{
    shl_message_t msg;
    shl_status_t pst = SHL_STATUS_INIT;
    int ret;

    if (shl_msg_parse(op->in, op->in_len, &msg, &pst) != 0) {
        shl_msg_cleanup(&msg);
        op_net_fail(eng, op, SHL_CODE_PROTOCOL_ERROR, "Bad reply to '%s' from %s: %s", op->cmd_name,
                    op->host, pst.reason);
        return;
    }
    if (msg.flags & SHL_MSG_MORE_TO_COME) {
        shl_msg_cleanup(&msg);
        op_net_fail(eng, op, SHL_CODE_PROTOCOL_ERROR,
                    "Reply to '%s' from %s set moreToCome, which was not asked for", op->cmd_name,
                    op->host);
        return;
    }
    bson_free(op->in);
    op->in = NULL;
    if (eng->hooks.observe != NULL) {
        eng->hooks.observe(eng->hooks.arg, op->host, &msg.body);
    }
    if (op->handshake) {
        ret = op->auth_step ? 0 : op_read_hello(op, &msg.body);
        if (ret == 0 && op->auth_state != NULL) {
            /* Internal authentication: the hello carried its first step; go on until it
             * says it is complete, then run the caller's command. */
            bson_t next = BSON_INITIALIZER;
            ret = client_auth->step(op->auth_state, &msg.body, &next, op->st);
            if (ret == 0 && !bson_empty(&next)) {
                shl_msg_cleanup(&msg);
                op->auth_step = true;
                ret = op_prepare_message(eng, op, &next, NULL, "local");
                op->cmd_name = "saslContinue";
                bson_destroy(&next);
                if (ret != 0) {
                    op->conn->failed = true;
                    op_finish(eng, op, ret);
                }
                return;
            }
            bson_destroy(&next);
            if (ret == 0) {
                client_auth->end(op->auth_state);
                op->auth_state = NULL;
                op->auth_step = false;
                op->no_decorate = false;
            }
        }
        shl_msg_cleanup(&msg);
        if (ret != 0) {
            /* A connection whose handshake failed is not worth keeping. */
            op->conn->failed = true;
            op_finish(eng, op, ret);
            return;
        }
        op->conn->ready = true;
        op->connect_deadline_us = 0;
        op_start_command(eng, op);
        return;
    }
    /* The reply moves to the caller without a copy. */
    bson_destroy(op->reply);
    if (!bson_steal(op->reply, &msg.body)) {
        bson_copy_to(&msg.body, op->reply);
        shl_msg_cleanup(&msg);
    }
    op_finish(eng, op, shl_status_from_reply(op->reply, op->st));
}

/* Check a reply's header as soon as it is complete. */
static bool
op_check_header(engine_t *eng, op_t *op)
{
    shl_msg_header_t hdr;
    shl_status_t hst = SHL_STATUS_INIT;

    shl_msg_header_read(op->head, &hdr);
    if (shl_msg_header_check(&hdr, &hst) != 0) {
        op_net_fail(eng, op, SHL_CODE_PROTOCOL_ERROR, "Bad reply from %s: %s", op->host,
                    hst.reason);
        return false;
    }
    if (hdr.opcode != SHL_OP_MSG || hdr.response_to != op->request_id) {
        op_net_fail(eng, op, SHL_CODE_PROTOCOL_ERROR,
                    "Bad reply from %s: opcode %d responseTo %d, expected OP_MSG responseTo %d",
                    op->host, hdr.opcode, hdr.response_to, op->request_id);
        return false;
    }
    if ((size_t)hdr.length < op->in_off) {
        op_net_fail(eng, op, SHL_CODE_PROTOCOL_ERROR,
                    "Bad reply from %s: %zu bytes arrived for a message of %d", op->host,
                    op->in_off, hdr.length);
        return false;
    }
    op->in_len = (size_t)hdr.length;
    op->in = bson_malloc(op->in_len);
    memcpy(op->in, op->head, op->in_off);
    return true;
}

/* Make as much progress as the socket allows without blocking. Never inlined into
 * engine_run, whose frame spans a fiber's park (engine_poll says why). */
static __attribute__((noinline)) void
op_step(engine_t *eng, op_t *op)
{
    op->wait_events = 0;
    while (op->phase != PH_DONE) {
        int fd = op->conn->fd;
        if (op->phase == PH_CONNECTING) {
            int err = 0;
            socklen_t len = sizeof(err);
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
                err = errno;
            }
            if (err == EINPROGRESS || err == EALREADY) {
                return;
            }
            if (err != 0) {
                op->connect_errno = err;
                close(fd);
                op->conn->fd = -1;
                op->ai_cur = op->ai_cur->ai_next;
                op_try_connect(eng, op);
            } else {
                op_connected(eng, op);
            }
            if (op->phase == PH_CONNECTING || op->phase == PH_DONE) {
                return; /* a new connect attempt is in progress, or the op ended */
            }
            continue;
        }
        if (op->phase == PH_TLS) {
            int r = shl_tls_handshake(op->conn->tls, op->st);
            if (r == 0) {
                op->wait_events = shl_tls_want(op->conn->tls);
                return;
            }
            if (r < 0) {
                char why[sizeof(op->st->reason)];
                snprintf(why, sizeof(why), "%s", op->st->reason);
                op_net_fail(eng, op, SHL_CODE_SSL_HANDSHAKE_FAILED,
                            "Error connecting to %s :: caused by :: %s", op->host, why);
                return;
            }
            op_send_hello(eng, op);
            continue;
        }
        if (op->phase == PH_SENDING) {
            ssize_t w = conn_send(op->conn, op->out + op->out_off, op->out_len - op->out_off);
            if (w < 0) {
                if (errno == EINTR) {
                    continue;
                }
                if (errno != EAGAIN && errno != EWOULDBLOCK) {
                    op_errno_fail(eng, op, "sending a request to", errno);
                } else if (op->conn->tls != NULL) {
                    op->wait_events = shl_tls_want(op->conn->tls);
                }
                return;
            }
            op->out_off += (size_t)w;
            if (op->out_off == op->out_len) {
                bson_free(op->out);
                op->out = NULL;
                op->phase = PH_RECEIVING;
                /* The reply cannot be here yet: wait in poll, not in a recv that fails. */
                return;
            }
            continue;
        }
        /* PH_RECEIVING: the header first, then exactly the rest of the message. */
        {
            uint8_t *dst;
            size_t want;
            ssize_t r;
            if (op->in_len == 0) {
                dst = op->head + op->in_off;
                want = sizeof(op->head) - op->in_off;
            } else {
                dst = op->in + op->in_off;
                want = op->in_len - op->in_off;
            }
            r = conn_recv(op->conn, dst, want);
            if (r < 0) {
                if (errno == EINTR) {
                    continue;
                }
                if (errno != EAGAIN && errno != EWOULDBLOCK) {
                    op_errno_fail(eng, op, "receiving a reply from", errno);
                } else if (op->conn->tls != NULL) {
                    op->wait_events = shl_tls_want(op->conn->tls);
                }
                return;
            }
            if (r == 0) {
                op_net_fail(eng, op, SHL_CODE_HOST_UNREACHABLE,
                            "Connection closed by peer %s while waiting for the reply to '%s'",
                            op->host, op->cmd_name);
                return;
            }
            op->in_off += (size_t)r;
            if (op->in_len == 0 && op->in_off >= SHL_MSG_HEADER_LEN && !op_check_header(eng, op)) {
                return;
            }
            if (op->in_len != 0 && op->in_off == op->in_len) {
                op_on_message(eng, op);
            }
        }
    }
}

static int64_t
op_deadline_us(const engine_t *eng, const op_t *op)
{
    int64_t d = eng->deadline_us;
    if (op->connect_deadline_us != 0 && (d == 0 || op->connect_deadline_us < d)) {
        d = op->connect_deadline_us;
    }
    return d;
}

static void
op_time_out(engine_t *eng, op_t *op)
{
    if (!op->conn->ready) {
        op_net_fail(eng, op, SHL_CODE_NETWORK_TIMEOUT,
                    "Error connecting to %s :: caused by :: timed out after %lld ms", op->host,
                    (long long)elapsed_ms(eng));
    } else {
        op_net_fail(eng, op, SHL_CODE_NETWORK_TIMEOUT,
                    "Timed out waiting for the reply to '%s' from %s after %lld ms", op->cmd_name,
                    op->host, (long long)elapsed_ms(eng));
    }
}

/*
 * The caller's operation was interrupted while 'op' was still in flight: the reply (if any
 * comes) would arrive on a stream nobody reads, so the connection is closed, not pooled.
 */
static void
op_interrupt(engine_t *eng, op_t *op, const shl_status_t *why)
{
    if (op->conn != NULL) {
        op->conn->failed = true;
    }
    *op->st = *why;
    op->cut = true;
    SHL_LOG_DEBUG(1, NETWORK, 4616102, "internal client request interrupted", "hostAndPort",
                  BCON_UTF8(op->host), "command",
                  BCON_UTF8(op->cmd_name != NULL ? op->cmd_name : ""), "error",
                  BCON_UTF8(why->reason));
    op_finish(eng, op, why->code);
}

/*
 * Whether the one op waiting for its reply parks its fiber instead of polling (fiber.h: a
 * router's single-shard call on the shared executor): plain connections only, and only
 * with a bound on the wait so that the caller's checks still run. Parks and returns true
 * when it did.
 */
static bool
engine_park(const op_t *ops, size_t n, const size_t *which, size_t k, int timeout_ms)
{
    const op_t *op = &ops[which[0]];

    if (n != 1 || k != 1 || op->phase != PH_RECEIVING || op->conn->tls != NULL ||
        op->wait_events != 0 || timeout_ms == 0 || !shl_fiber_may_park()) {
        return false;
    }
    return shl_fiber_wait_readable(op->conn->fd, timeout_ms) > 0;
}

/*
 * poll(2) the k sockets and the interrupt pipe; *r is poll's result. False (each op failed)
 * when poll failed. Not inlined: errno is read in a frame of its own, never in one that
 * spans a fiber's park (the thread may differ after it, and errno's address with it).
 */
static __attribute__((noinline)) bool
engine_poll(engine_t *eng, op_t *ops, struct pollfd *pfds, const size_t *which, size_t k,
            int timeout_ms, int *r)
{
    *r = poll(pfds, (nfds_t)k + 1, timeout_ms);
    if (*r < 0 && errno != EINTR) {
        for (size_t j = 0; j < k; j++) {
            op_errno_fail(eng, &ops[which[j]], "polling the connection to", errno);
        }
        return false;
    }
    return true;
}

/*
 * Drive ops[0..n): start them all (connect or send), then poll every socket that is
 * still busy until each op is done or past its deadline.
 */
static void
engine_run(engine_t *eng, op_t *ops, size_t n)
{
    /* One more poll entry than ops: the shutdown's interrupt pipe. */
    struct pollfd pfds_small[SMALL_FANOUT + 1];
    size_t which_small[SMALL_FANOUT];
    struct pollfd *pfds = n <= SMALL_FANOUT ? pfds_small : bson_malloc((n + 1) * sizeof(*pfds));
    size_t *which = n <= SMALL_FANOUT ? which_small : bson_malloc(n * sizeof(*which));
    /* The first kill check comes one slice in: a fast reply never pays for it. */
    int64_t next_check = eng->intr != NULL ? eng->start_us + INTERRUPT_CHECK_US : 0;

    pthread_once(&interrupt_once, interrupt_pipe_init);
    for (size_t i = 0; i < n; i++) {
        op_begin(eng, &ops[i]);
        if (ops[i].phase == PH_SENDING || ops[i].phase == PH_TLS) {
            /* Usually the whole request fits the socket buffer: send it now. */
            op_step(eng, &ops[i]);
        }
    }
    if (eng->local != NULL) {
        /* The caller's own work runs while the remote requests are in flight; their replies
         * wait in the sockets' buffers meanwhile. */
        eng->local->run(eng->local->arg);
    }
    for (;;) {
        int64_t now = shl_clock_mono_us(), wake = 0;
        size_t k = 0;
        int timeout_ms, r;
        shl_status_t why;

        if (next_check != 0 && now >= next_check) {
            if (eng->intr->check(eng->intr->arg, &why) != 0) {
                for (size_t i = 0; i < n; i++) {
                    if (ops[i].phase != PH_DONE) {
                        op_interrupt(eng, &ops[i], &why);
                    }
                }
                break;
            }
            next_check = now + INTERRUPT_CHECK_US;
        }
        for (size_t i = 0; i < n; i++) {
            op_t *op = &ops[i];
            int64_t d;
            if (op->phase == PH_DONE) {
                continue;
            }
            if (atomic_load(&interrupted)) {
                op_net_fail(eng, op, SHL_CODE_INTERRUPTED_AT_SHUTDOWN,
                            "interrupted at shutdown waiting for %s", op->host);
                continue;
            }
            d = op_deadline_us(eng, op);
            if (d != 0 && now >= d) {
                op_time_out(eng, op);
                continue;
            }
            if (d != 0 && (wake == 0 || d < wake)) {
                wake = d;
            }
            pfds[k].fd = op->conn->fd;
            pfds[k].events = op->wait_events != 0        ? op->wait_events
                             : op->phase == PH_RECEIVING ? POLLIN
                                                         : POLLOUT;
            pfds[k].revents = 0;
            which[k++] = i;
        }
        if (k == 0) {
            break;
        }
        if (next_check != 0 && (wake == 0 || next_check < wake)) {
            wake = next_check;
        }
        /* Round up so we never wake just before a deadline and spin. */
        if (wake == 0) {
            timeout_ms = -1;
        } else if (wake - now >= (int64_t)INT_MAX * 1000) {
            timeout_ms = INT_MAX;
        } else {
            timeout_ms = (int)((wake - now + 999) / 1000);
        }
        pfds[k].fd = interrupt_pipe[0]; /* -1 (ignored by poll) if there is no pipe */
        pfds[k].events = POLLIN;
        pfds[k].revents = 0;
        if (engine_park(ops, n, which, k, timeout_ms)) {
            /* The request parked until its reply (or its next check) came (fiber.h). */
            r = 1;
            pfds[0].revents = POLLIN;
        } else if (!engine_poll(eng, ops, pfds, which, k, timeout_ms, &r)) {
            continue;
        }
        for (size_t j = 0; r > 0 && j < k; j++) {
            if (pfds[j].revents != 0) {
                op_step(eng, &ops[which[j]]);
            }
        }
    }
    if (pfds != pfds_small) {
        bson_free(pfds);
        bson_free(which);
    }
}

int
shl_client_conn_run(shl_client_conn_t *conn, const char *db, const bson_t *cmd, int64_t timeout_ms,
                    bson_t *reply_out, shl_status_t *st)
{
    engine_t eng;
    op_t op;

    bson_init(reply_out);
    SHL_INVARIANT(conn->ready);
    memset(&eng, 0, sizeof(eng));
    eng.pool = conn->pool;
    client_pool_hooks(conn->pool, &eng.hooks);
    eng.start_us = shl_clock_mono_us();
    eng.deadline_us = timeout_ms > 0 ? eng.start_us + timeout_ms * 1000 : 0;
    op_init_cmd(&op, conn->host, db, cmd, st, reply_out);
    op.conn = conn;
    engine_run(&eng, &op, 1);
    return op.code;
}

int
shl_conn_pool_checkout(shl_conn_pool_t *pool, const char *host, int64_t timeout_ms,
                       shl_client_conn_t **out, shl_status_t *st)
{
    engine_t eng;
    op_t op;
    bson_t unused;

    *out = NULL;
    bson_init(&unused);
    memset(&eng, 0, sizeof(eng));
    eng.pool = pool;
    client_pool_hooks(pool, &eng.hooks);
    eng.start_us = shl_clock_mono_us();
    eng.deadline_us = timeout_ms > 0 ? eng.start_us + timeout_ms * 1000 : 0;
    op_clear(&op);
    op.host = host;
    op.conn_out = out;
    op.st = st;
    op.reply = &unused;
    engine_run(&eng, &op, 1);
    bson_destroy(&unused);
    return op.code;
}

/* Whether a failed op to a replica set may go again to the member the monitor names next:
 * the command never left (its member's connect failed: a primary killed or gone), or the
 * member refused it without running it (not primary). Either way it did not run. */
static bool
set_op_may_retry(const op_t *op, const char *host)
{
    bool refused = op->code == SHL_CODE_NOT_WRITABLE_PRIMARY ||
                   op->code == SHL_CODE_NOT_PRIMARY_NO_SECONDARY_OK ||
                   op->code == SHL_CODE_NOT_PRIMARY_OR_SECONDARY;
    return op->code != 0 && shl_rs_monitor_is_set(host) && (!op->sent || refused);
}

int
shl_client_run(shl_conn_pool_t *pool, const char *host, const char *db, const bson_t *cmd,
               int64_t timeout_ms, bson_t *reply_out, shl_status_t *st)
{
    engine_t eng;
    op_t op;

    memset(&eng, 0, sizeof(eng));
    eng.pool = pool;
    client_pool_hooks(pool, &eng.hooks);
    eng.start_us = shl_clock_mono_us();
    eng.deadline_us = timeout_ms > 0 ? eng.start_us + timeout_ms * 1000 : 0;
    /* A set's failover (issue 18): up to 3 more tries, each after the monitor forgot the
     * member that failed, so the next one waits for the set's new primary. */
    for (int attempt = 0;; attempt++) {
        bson_init(reply_out);
        op_init_cmd(&op, host, db, cmd, st, reply_out);
        engine_run(&eng, &op, 1);
        if (attempt == 3 || !set_op_may_retry(&op, host) ||
            (eng.deadline_us != 0 && shl_clock_mono_us() >= eng.deadline_us)) {
            break;
        }
        bson_destroy(reply_out);
        shl_status_clear(st);
    }
    return op.code;
}

/* The fan-out engine's driver: every request sent, then 'local' (NULL: none), then the
 * replies as they arrive. Returns how many requests 'intr' cut off. */
static size_t
fanout_run(shl_conn_pool_t *pool, const shl_fanout_req_t *reqs, size_t n, int64_t timeout_ms,
           const shl_client_interrupt_t *intr, const shl_client_local_t *local,
           shl_fanout_result_t *results)
{
    engine_t eng;
    op_t ops_small[SMALL_FANOUT];
    op_t *ops;
    size_t cut = 0;

    if (n == 0) {
        if (local != NULL) {
            local->run(local->arg);
        }
        return 0;
    }
    ops = n <= SMALL_FANOUT ? ops_small : bson_malloc(n * sizeof(*ops));
    memset(&eng, 0, sizeof(eng));
    eng.pool = pool;
    client_pool_hooks(pool, &eng.hooks);
    eng.start_us = shl_clock_mono_us();
    eng.deadline_us = timeout_ms > 0 ? eng.start_us + timeout_ms * 1000 : 0;
    eng.intr = intr;
    eng.local = local;
    for (size_t i = 0; i < n; i++) {
        shl_status_clear(&results[i].status);
        bson_init(&results[i].reply);
        results[i].code = 0;
        results[i].micros = 0;
        results[i].interrupted = false;
        results[i].host[0] = '\0';
        op_clear(&ops[i]);
        ops[i].host = reqs[i].host;
        ops[i].db = reqs[i].db;
        ops[i].cmd = reqs[i].cmd;
        ops[i].op_key = reqs[i].op_key;
        ops[i].st = &results[i].status;
        ops[i].reply = &results[i].reply;
        ops[i].micros = &results[i].micros;
    }
    engine_run(&eng, ops, n);
    for (size_t i = 0; i < n; i++) {
        results[i].code = ops[i].code;
        results[i].interrupted = ops[i].cut;
        if (ops[i].host != NULL) {
            snprintf(results[i].host, sizeof(results[i].host), "%s", ops[i].host);
        }
        cut += ops[i].cut ? 1 : 0;
    }
    if (ops != ops_small) {
        bson_free(ops);
    }
    return cut;
}

void
shl_client_fanout(shl_conn_pool_t *pool, const shl_fanout_req_t *reqs, size_t n, int64_t timeout_ms,
                  shl_fanout_result_t *results)
{
    (void)shl_client_fanout_interruptible(pool, reqs, n, timeout_ms, NULL, results);
}

size_t
shl_client_fanout_interruptible(shl_conn_pool_t *pool, const shl_fanout_req_t *reqs, size_t n,
                                int64_t timeout_ms, const shl_client_interrupt_t *intr,
                                shl_fanout_result_t *results)
{
    return fanout_run(pool, reqs, n, timeout_ms, intr, NULL, results);
}

void
shl_client_fanout_local(shl_conn_pool_t *pool, const shl_fanout_req_t *reqs, size_t n,
                        int64_t timeout_ms, const shl_client_local_t *local,
                        shl_fanout_result_t *results)
{
    (void)fanout_run(pool, reqs, n, timeout_ms, NULL, local, results);
}

void
shl_fanout_results_cleanup(shl_fanout_result_t *results, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bson_destroy(&results[i].reply);
    }
}
