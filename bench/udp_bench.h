/* What the raw UDP benches (udp_ceiling.c, send_copy.c) share: the UDP offload options
 * older libc headers lack, and a clock reading in seconds. Each bench still builds with one
 * gcc command (this file is found beside the source). */
#ifndef UDP_BENCH_H
#define UDP_BENCH_H
#include <time.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* Clock `c` (CLOCK_MONOTONIC, CLOCK_PROCESS_CPUTIME_ID, ...) in seconds. */
static inline double seconds(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}
#endif
