/*
 * wire_relay.c -- a router that does nothing: the floor under Shale's router in the real
 * topology (bench/cluster.sh). It accepts the driver's TCP connections and gives each its own
 * connection to the shard's Unix domain socket (<dir>/mongodb-<port>.sock, as the router
 * connects), then forwards every wire message unchanged: a request to the shard, the reply
 * back. No parsing, no routing, no versions: what remains is what one more process hop costs
 * here, with the real driver and the real shard on either side.
 *
 * Each connection has its thread; it blocks in recv on the client and in poll on the shard,
 * as the router's threads do.
 *
 * Usage: wire_relay LISTEN_PORT SHARD_PORT [SOCKET_DIR]   (SOCKET_DIR default /tmp)
 * Prints "ready" once listening; runs until killed.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int
main(int argc, char **argv)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1, lfd;

    if (argc < 3) {
        fprintf(stderr, "usage: wire_relay LISTEN_PORT SHARD_PORT [SOCKET_DIR]\n");
        return 2;
    }
    snprintf(g_shard_path, sizeof(g_shard_path), "%s/mongodb-%s.sock", argc > 3 ? argv[3] : "/tmp",
             argv[2]);
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
        if (pthread_create(&t, NULL, serve, (void *)(intptr_t)fd) == 0) {
            pthread_detach(t);
        } else {
            close(fd);
        }
    }
}
