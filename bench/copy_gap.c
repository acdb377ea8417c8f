/* Why core's memory/bulk.rs copies with 32-byte moves where the CPU has AVX: 1 KiB and
 * 4 KiB copied by one `rep movsb`, by an 8-byte word loop and by four 32-byte moves a turn
 * (shared memory's three ways), at destination-minus-source gaps modulo 4 KiB, ns per copy
 * (median of 9 runs of 20,000 copies; cache-warm).
 *   gcc -O2 -o /tmp/copy_gap bench/copy_gap.c && /tmp/copy_gap
 * On AMD Zen 3, gaps of 4 to 28 bytes make `rep movsb` 10-40 times slower (4K aliasing);
 * the moves are as fast as it elsewhere and have no such gaps.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void movsb(void *d, const void *s, size_t n)
{
	__asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

static void words(void *d, const void *s, size_t n)
{
	volatile uint64_t *dw = d;
	const volatile uint64_t *sw = s;
	for (size_t i = 0; i < n / 8; i++)
		dw[i] = sw[i];
}

/* As bulk.rs's vector_copy: n >= 128; the last 128 bytes again if n is not a multiple. */
static void moves(void *d, const void *s, size_t n)
{
	for (size_t at = 0;; at += 128) {
		if (at + 128 > n)
			at = n - 128;
		__asm__ volatile("vmovdqu (%1), %%ymm0\n\tvmovdqu 32(%1), %%ymm1\n\t"
				 "vmovdqu 64(%1), %%ymm2\n\tvmovdqu 96(%1), %%ymm3\n\t"
				 "vmovdqu %%ymm0, (%0)\n\tvmovdqu %%ymm1, 32(%0)\n\t"
				 "vmovdqu %%ymm2, 64(%0)\n\tvmovdqu %%ymm3, 96(%0)"
				 :
				 : "r"((char *)d + at), "r"((const char *)s + at)
				 : "xmm0", "xmm1", "xmm2", "xmm3", "memory");
		if (at + 128 >= n)
			break;
	}
	__asm__ volatile("vzeroupper");
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double time_copy(void (*f)(void *, const void *, size_t), char *d, const char *s,
			size_t n)
{
	double runs[9];
	for (int r = 0; r < 9; r++) {
		double t0 = now();
		for (int i = 0; i < 20000; i++)
			f(d, s, n);
		runs[r] = (now() - t0) / 20000 * 1e9;
	}
	qsort(runs, 9, sizeof runs[0], cmp);
	return runs[4];
}

int main(void)
{
	char *buf = aligned_alloc(4096, 1 << 20);
	memset(buf, 1, 1 << 20);
	const int gaps[] = { 0, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 64, 4084 };
	printf("%6s %6s %12s %12s %12s\n", "bytes", "gap", "rep movsb", "words", "moves");
	for (size_t n = 1024; n <= 4096; n *= 4)
		for (size_t i = 0; i < sizeof gaps / sizeof gaps[0]; i++) {
			char *s = buf, *d = buf + 65536 + gaps[i];
			printf("%6zu %6d %12.0f %12.0f %12.0f\n", n, gaps[i], time_copy(movsb, d, s, n),
			       time_copy(words, d, s, n), time_copy(moves, d, s, n));
		}
	return 0;
}
