/* A small MPI program that checks what it moves: a ping-pong of growing messages, an
 * allreduce, and a one-sided put into a window. Prints "mpi_check: all passed" from rank 0
 * when every check held; exits 1 (MPI_Abort) at the first that did not. Any even number
 * of ranks: rank r pairs with r + size/2 (with ranks filled host by host, each pair spans
 * two hosts). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

#define CHECK(cond, ...)                                                               \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "rank %d: FAIL: ", rank);                      \
			fprintf(stderr, __VA_ARGS__);                                  \
			fprintf(stderr, "\n");                                         \
			MPI_Abort(MPI_COMM_WORLD, 1);                                  \
		}                                                                      \
	} while (0)

/* The rank this one pairs with. */
static int peer(void)
{
	return (rank + size / 2) % size;
}

static void pingpong(void)
{
	int peer_rank = peer();
	for (int len = 1; len <= 1 << 20; len *= 8) {
		unsigned char *buf = malloc(len);
		for (int iter = 0; iter < 20; iter++) {
			if (rank < size / 2) {
				for (int i = 0; i < len; i++)
					buf[i] = (unsigned char)(i + iter + len);
				MPI_Send(buf, len, MPI_BYTE, peer_rank, iter, MPI_COMM_WORLD);
				MPI_Recv(buf, len, MPI_BYTE, peer_rank, iter, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (int i = 0; i < len; i++)
					CHECK(buf[i] == (unsigned char)(i + iter + len + 1),
					      "ping-pong %d B, byte %d", len, i);
			} else {
				MPI_Recv(buf, len, MPI_BYTE, peer_rank, iter, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (int i = 0; i < len; i++)
					buf[i]++;
				MPI_Send(buf, len, MPI_BYTE, peer_rank, iter, MPI_COMM_WORLD);
			}
		}
		free(buf);
	}
}

static void allreduce(void)
{
	enum { N = 4096 };
	long *in = malloc(N * sizeof(long)), *out = malloc(N * sizeof(long));
	for (int i = 0; i < N; i++)
		in[i] = (long)i * (rank + 1);
	MPI_Allreduce(in, out, N, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	long factor = (long)size * (size + 1) / 2;
	for (int i = 0; i < N; i++)
		CHECK(out[i] == (long)i * factor, "allreduce element %d", i);
	free(in);
	free(out);
}

static void one_sided_put(void)
{
	enum { N = 1 << 16 };
	unsigned char *base;
	MPI_Win win;
	MPI_Win_allocate(N, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
	memset(base, 0, N);
	unsigned char *src = malloc(N);
	for (int i = 0; i < N; i++)
		src[i] = (unsigned char)(i * 13 + rank);
	MPI_Win_fence(0, win);
	MPI_Put(src, N, MPI_BYTE, peer(), 0, N, MPI_BYTE, win);
	MPI_Win_fence(0, win);
	for (int i = 0; i < N; i++)
		CHECK(base[i] == (unsigned char)(i * 13 + peer()), "put byte %d", i);
	MPI_Win_free(&win);
	free(src);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	CHECK(size % 2 == 0, "run with an even number of ranks");
	pingpong();
	allreduce();
	one_sided_put();
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_check: all passed\n");
	MPI_Finalize();
	return 0;
}
