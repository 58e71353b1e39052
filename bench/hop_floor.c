/*
 * hop_floor.c -- what one extra process hop costs on this machine, with no work at all:
 * the floor under the router's added latency (bench/cluster.sh prints it next to the
 * router's overhead, same run).
 *
 * Three processes, mirroring the cluster bench's topology:
 *   echo   answers every request with a reply of REPLY_LEN bytes (the "shard");
 *   relay  reads a request from its TCP client, forwards it to echo over a Unix domain
 *          socket, reads the reply and sends it back (the "router", doing nothing else);
 *   client times N request/reply round trips over TCP, first straight to echo's TCP port
 *          ("direct"), then through the relay ("relayed").
 * Every process blocks in recv/poll exactly as the servers do. Prints one JSON line:
 *   {"direct_p50_us":..,"relayed_p50_us":..,"hop_p50_us":..} plus p99s.
 *
 * Usage: hop_floor [iterations]   (default 20000)
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REQUEST_LEN 205 /* a driver's find by _id */
#define REPLY_LEN 464   /* its reply with one small document */

static int64_t
now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int
io_all(int fd, void *buf, size_t n, int sending)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = sending ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL)
                            : recv(fd, (char *)buf + done, n - done, 0);
        if (r <= 0) {
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
}

static int
tcp_listener(int *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 8) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        perror("tcp listener");
        exit(1);
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

static int
tcp_connect(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((uint16_t)port)};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("tcp connect");
        exit(1);
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static int
accept_nodelay(int lfd)
{
    int one = 1, fd = accept(lfd, NULL, NULL);
    if (fd < 0) {
        perror("accept");
        exit(1);
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* Wait for input in poll, then read: how the servers wait on a Unix socket. */
static int
recv_polled(int fd, void *buf, size_t n)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, -1) == 1 ? io_all(fd, buf, n, 0) : -1;
}

/* echo: serve one TCP connection (direct), then one Unix connection (from the relay). */
static void
run_echo(int tcp_lfd, int unix_fd)
{
    char req[REQUEST_LEN], rep[REPLY_LEN];
    int fd = accept_nodelay(tcp_lfd);
    memset(rep, 'r', sizeof(rep));
    while (io_all(fd, req, sizeof(req), 0) == 0 && io_all(fd, rep, sizeof(rep), 1) == 0) {
    }
    close(fd);
    while (recv_polled(unix_fd, req, sizeof(req)) == 0 &&
           io_all(unix_fd, rep, sizeof(rep), 1) == 0) {
    }
    exit(0);
}

static void
run_relay(int tcp_lfd, int unix_fd)
{
    char req[REQUEST_LEN], rep[REPLY_LEN];
    int fd = accept_nodelay(tcp_lfd);
    while (io_all(fd, req, sizeof(req), 0) == 0 && io_all(unix_fd, req, sizeof(req), 1) == 0 &&
           recv_polled(unix_fd, rep, sizeof(rep)) == 0 && io_all(fd, rep, sizeof(rep), 1) == 0) {
    }
    exit(0);
}

static int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Time n round trips on fd; lat gets the sorted latencies. */
static void
time_round_trips(int fd, int n, int64_t *lat)
{
    char req[REQUEST_LEN], rep[REPLY_LEN];
    memset(req, 'q', sizeof(req));
    for (int i = 0; i < n; i++) {
        int64_t t0 = now_us();
        if (io_all(fd, req, sizeof(req), 1) != 0 || io_all(fd, rep, sizeof(rep), 0) != 0) {
            fprintf(stderr, "hop_floor: connection lost\n");
            exit(1);
        }
        lat[i] = now_us() - t0;
    }
    qsort(lat, (size_t)n, sizeof(*lat), cmp_i64);
}

int
main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    int echo_port, relay_port, sv[2], fd;
    int echo_lfd = tcp_listener(&echo_port), relay_lfd = tcp_listener(&relay_port);
    int64_t *direct = calloc((size_t)n, sizeof(int64_t)),
            *relayed = calloc((size_t)n, sizeof(int64_t));
    pid_t echo_pid, relay_pid;

    if (n < 100 || direct == NULL || relayed == NULL ||
        socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        fprintf(stderr, "usage: hop_floor [iterations >= 100]\n");
        return 2;
    }
    echo_pid = fork();
    if (echo_pid == 0) {
        close(sv[1]);
        run_echo(echo_lfd, sv[0]);
    }
    relay_pid = fork();
    if (relay_pid == 0) {
        close(sv[0]);
        run_relay(relay_lfd, sv[1]);
    }
    close(sv[0]);
    close(sv[1]);

    fd = tcp_connect(echo_port);
    time_round_trips(fd, n / 10, direct); /* warm-up */
    time_round_trips(fd, n, direct);
    close(fd);
    fd = tcp_connect(relay_port);
    time_round_trips(fd, n / 10, relayed);
    time_round_trips(fd, n, relayed);
    close(fd);
    waitpid(relay_pid, NULL, 0);
    waitpid(echo_pid, NULL, 0);

    printf("{\"tool\": \"hop_floor\", \"iterations\": %d, \"direct_p50_us\": %lld, "
           "\"direct_p99_us\": %lld, \"relayed_p50_us\": %lld, \"relayed_p99_us\": %lld, "
           "\"hop_p50_us\": %lld}\n",
           n, (long long)direct[n / 2], (long long)direct[n * 99 / 100], (long long)relayed[n / 2],
           (long long)relayed[n * 99 / 100], (long long)(relayed[n / 2] - direct[n / 2]));
    free(direct);
    free(relayed);
    return 0;
}
