/*
 * wire_relay.c -- a router that does nothing: the floor under Shale's router in the real
 * topology (bench/cluster.sh). It accepts the driver's TCP connections and gives each its own
 * connection to the shard's Unix domain socket (<dir>/mongodb-<port>.sock, as the router
 * connects), then forwards every wire message unchanged: a request to the shard, the reply
 * back. No parsing, no routing, no versions: what remains is what one more process hop costs
 * here, with the real driver and the real shard on either side.
 *
 * Threads (the default): each connection has its thread; it blocks in recv on the client and
 * in poll on the shard, as the router's dedicated threads do.
 *
 * --epoll (issue 22): the shared executor's model with parked requests: one epoll set, one
 * worker per core; a client socket and its shard socket wait in the set (EPOLLONESHOT) and
 * whichever worker takes an event reads what came, forwards every whole message and arms
 * the other side. No thread sleeps per request; the floor under the router on the shared
 * executor (bench/cluster.sh prints it beside the router's figure).
 *
 * Usage: wire_relay LISTEN_PORT SHARD_PORT [SOCKET_DIR] [--epoll]   (SOCKET_DIR default /tmp)
 * Prints "ready" once listening; runs until killed.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_MESSAGE (48 * 1000 * 1000)

static char g_shard_path[108];

/* Read exactly n bytes (poll first when 'polled'); 0 on success. */
static int
read_all(int fd, uint8_t *buf, size_t n, int polled)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r;
        if (polled) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, -1) != 1) {
                return -1;
            }
        }
        r = recv(fd, buf + done, n - done, 0);
        if (r <= 0) {
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
}

static int
write_all(int fd, const uint8_t *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = send(fd, buf + done, n - done, MSG_NOSIGNAL);
        if (r <= 0) {
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
}

/* One whole wire message into *buf (grown as needed); its length, or -1. */
static long
read_message(int fd, uint8_t **buf, size_t *cap, int polled)
{
    uint32_t len;

    if (read_all(fd, *buf, 16, polled) != 0) {
        return -1;
    }
    memcpy(&len, *buf, 4); /* little-endian hosts only, as the bench machines are */
    if (len < 16 || len > MAX_MESSAGE) {
        return -1;
    }
    if (len > *cap) {
        uint8_t *b = realloc(*buf, len);
        if (b == NULL) {
            return -1;
        }
        *buf = b;
        *cap = len;
    }
    return read_all(fd, *buf + 16, len - 16, polled) == 0 ? (long)len : -1;
}

static void *
serve(void *arg)
{
    int client = (int)(intptr_t)arg, shard = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t cap = 1 << 16;
    uint8_t *buf = malloc(cap);
    long n;

    memcpy(sa.sun_path, g_shard_path, sizeof(sa.sun_path));
    if (shard >= 0 && buf != NULL && connect(shard, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        while ((n = read_message(client, &buf, &cap, 0)) > 0 &&
               write_all(shard, buf, (size_t)n) == 0 &&
               (n = read_message(shard, &buf, &cap, 1)) > 0 &&
               write_all(client, buf, (size_t)n) == 0) {
        }
    }
    if (shard >= 0) {
        close(shard);
    }
    close(client);
    free(buf);
    return NULL;
}

/* --epoll: a client connection and its shard connection, served by whichever worker. */
typedef struct pair {
    int fd[2]; /* 0: the client, 1: the shard */
    uint8_t *buf;
    size_t cap, have; /* buf[0, have): the message in flight towards the other side */
} pair_t;

static int g_epfd;

/* Arm side 'side' of 'p' for its next input; the event's data names the pair and side. */
static int
arm(pair_t *p, int side, int op)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT,
                             .data.u64 = (uint64_t)(uintptr_t)p | (uint64_t)side};
    return epoll_ctl(g_epfd, op, p->fd[side], &ev);
}

static void
pair_end(pair_t *p)
{
    close(p->fd[0]); /* closing removes both from the epoll set */
    close(p->fd[1]);
    free(p->buf);
    free(p);
}

/* Side 'side' of 'p' is readable: read what it has; once a whole message is held, send it to
 * the other side and wait there; else wait for the rest here. -1 when the pair must end. */
static int
pair_step(pair_t *p, int side)
{
    ssize_t r;
    uint32_t len = 0;

    if (p->have == p->cap) {
        uint8_t *b = realloc(p->buf, p->cap * 2);
        if (b == NULL) {
            return -1;
        }
        p->buf = b;
        p->cap *= 2;
    }
    do {
        r = recv(p->fd[side], p->buf + p->have, p->cap - p->have, MSG_DONTWAIT);
    } while (r < 0 && errno == EINTR);
    if (r == 0 || (r < 0 && errno != EAGAIN)) {
        return -1;
    }
    p->have += r > 0 ? (size_t)r : 0;
    if (p->have >= 16) {
        memcpy(&len, p->buf, 4);
        if (len < 16 || len > MAX_MESSAGE) {
            return -1;
        }
        if (len > p->cap) {
            uint8_t *b = realloc(p->buf, len);
            if (b == NULL) {
                return -1;
            }
            p->buf = b;
            p->cap = len;
        }
    }
    if (len == 0 || p->have < len) {
        return arm(p, side, EPOLL_CTL_MOD);
    }
    if (p->have > len || write_all(p->fd[1 - side], p->buf, len) != 0) {
        return -1; /* a pipelining peer: not what the drivers and the shard do */
    }
    p->have = 0;
    return arm(p, 1 - side, EPOLL_CTL_MOD);
}

static void *
epoll_worker(void *arg)
{
    (void)arg;
    for (;;) {
        struct epoll_event ev;
        if (epoll_wait(g_epfd, &ev, 1, -1) == 1) {
            pair_t *p = (pair_t *)(uintptr_t)(ev.data.u64 & ~(uint64_t)1);
            if (pair_step(p, (int)(ev.data.u64 & 1)) != 0) {
                pair_end(p);
            }
        }
    }
    return NULL;
}

/* --epoll: a new client gets its shard connection, both in the set (the shard's disarmed). */
static void
epoll_accept(int client)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    pair_t *p = calloc(1, sizeof(*p));
    int shard = socket(AF_UNIX, SOCK_STREAM, 0);

    memcpy(sa.sun_path, g_shard_path, sizeof(sa.sun_path));
    if (p == NULL || shard < 0 || connect(shard, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        (p->buf = malloc(1 << 16)) == NULL) {
        close(client);
        if (shard >= 0) {
            close(shard);
        }
        free(p);
        return;
    }
    p->fd[0] = client;
    p->fd[1] = shard;
    p->cap = 1 << 16;
    {
        struct epoll_event off = {.events = EPOLLONESHOT, .data.u64 = (uint64_t)(uintptr_t)p | 1};
        if (epoll_ctl(g_epfd, EPOLL_CTL_ADD, shard, &off) != 0 || arm(p, 0, EPOLL_CTL_ADD) != 0) {
            pair_end(p);
        }
    }
}

int
main(int argc, char **argv)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1, lfd;

    if (argc < 3) {
        fprintf(stderr, "usage: wire_relay LISTEN_PORT SHARD_PORT [SOCKET_DIR]\n");
        return 2;
    }
    bool use_epoll = strcmp(argv[argc - 1], "--epoll") == 0;
    if (use_epoll) {
        argc--;
    }
    snprintf(g_shard_path, sizeof(g_shard_path), "%s/mongodb-%s.sock", argc > 3 ? argv[3] : "/tmp",
             argv[2]);
    if (use_epoll) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        g_epfd = epoll_create1(EPOLL_CLOEXEC);
        for (long i = 0; g_epfd >= 0 && i < (cores < 1 ? 1 : cores); i++) {
            pthread_t t;
            if (pthread_create(&t, NULL, epoll_worker, NULL) == 0) {
                pthread_detach(t);
            }
        }
    }
    sa.sin_port = htons((uint16_t)atoi(argv[1]));
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 128) != 0) {
        perror("wire_relay: listen");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        pthread_t t;
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            continue;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (use_epoll) {
            epoll_accept(fd);
        } else if (pthread_create(&t, NULL, serve, (void *)(intptr_t)fd) == 0) {
            pthread_detach(t);
        } else {
            close(fd);
        }
    }
}
