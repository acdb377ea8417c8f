// What the engine thread's sleep bookkeeping costs on this host, per call:
// epoll_ctl(EPOLL_CTL_MOD) on a UDP socket, timerfd_settime for a timer due in 200 us
// (earlier than the next scheduler tick: the kernel reprograms the clock event device,
// a VM exit in a guest) and in 5 ms (after the tick: no reprogramming), and an empty
// recvmmsg (what one busy poll of an idle device costs).
// Build and run: gcc -O2 -o /tmp/timer_cost bench/timer_cost.c && /tmp/timer_cost
#define _GNU_SOURCE
#include <netinet/in.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>

#define N 200000

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static double timer_ns(int fd, long after_ns) {
    struct itimerspec it = {0};
    double t0 = now_ns();
    for (int i = 0; i < N; i++) {
        it.it_value.tv_sec = after_ns / 1000000000;
        it.it_value.tv_nsec = after_ns % 1000000000 + (i & 1);
        timerfd_settime(fd, 0, &it, NULL);
    }
    return (now_ns() - t0) / N;
}

int main(void) {
    int ep = epoll_create1(0);
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct epoll_event e = {.events = EPOLLIN | EPOLLONESHOT};
    epoll_ctl(ep, EPOLL_CTL_ADD, s, &e);
    double t0 = now_ns();
    for (int i = 0; i < N; i++) {
        e.events = (i & 1) ? (EPOLLIN | EPOLLONESHOT) : EPOLLONESHOT;
        epoll_ctl(ep, EPOLL_CTL_MOD, s, &e);
    }
    printf("epoll_ctl MOD            %6.0f ns\n", (now_ns() - t0) / N);
    int t = timerfd_create(CLOCK_MONOTONIC, 0);
    printf("timerfd_settime 200 us   %6.0f ns\n", timer_ns(t, 200000));
    printf("timerfd_settime 5 ms     %6.0f ns\n", timer_ns(t, 5000000));
    struct mmsghdr m[8] = {0};
    t0 = now_ns();
    for (int i = 0; i < N; i++)
        recvmmsg(s, m, 8, MSG_DONTWAIT, NULL);
    printf("recvmmsg, nothing there  %6.0f ns\n", (now_ns() - t0) / N);
    return 0;
}
