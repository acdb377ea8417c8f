/* The conformance suite's driver: every case, for every transport, API and topology asked
 * for, one line each; exits 1 if any failed.
 *
 *   conformance [-d DEVICE] [-g GID_INDEX] [-t one-ctx,two-ctx,two-proc] [-c rc,uc,ud]
 *               [-a plain,ext] [-o SUBSTRING] [-e]
 *
 * -e: every end sleeps on a completion channel while its CQ is empty (perftest -e's way),
 * and each case's name says so ("plain+events").
 */
#include "conf.h"
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *topo_name[] = { "one-ctx", "two-ctx", "two-proc" };
static const char *api_name[] = { "plain", "ext" };

static int passed, failed;

static const char *type_name(enum ibv_qp_type t)
{
	return t == IBV_QPT_RC ? "rc" : t == IBV_QPT_UC ? "uc" : "ud";
}

/* Runs one case on fresh QPs; prints its line (in two processes, A's process prints, with
 * B's reason if B failed). */
static void run_case(struct config *cfg, struct side *proto, const int *local, int sock,
		     const struct kase *k)
{
	struct pair p = { .cfg = cfg, .sock = sock, .needs = k->needs };
	p.local[A] = local[A];
	p.local[B] = local[B];
	if (!make_pair(&p, cfg, proto))
		k->run(&p, k->arg);
	free_pair(&p);
	if (cfg->topo == TWO_PROC) {
		/* B's verdict and reason travel to A's process, which prints. */
		char theirs[sizeof(p.why) + 1] = { 0 }, mine[sizeof(p.why) + 1] = { 0 };
		mine[0] = (char)p.failed;
		memcpy(mine + 1, p.why, sizeof(p.why));
		exchange(&p, mine, theirs, sizeof(mine));
		if (theirs[0] && strstr(p.why, "(the other process failed)") == p.why) {
			memcpy(p.why, theirs + 1, sizeof(p.why));
			p.why[sizeof(p.why) - 1] = 0;
		}
		if (theirs[0] && !p.failed) {
			p.failed = 1;
			memcpy(p.why, theirs + 1, sizeof(p.why));
			p.why[sizeof(p.why) - 1] = 0;
		}
		if (!local[A])
			return;
	}
	printf("%s %s/%s/%s%s/%s%s%s\n", p.failed ? "FAIL" : "PASS", topo_name[cfg->topo],
	       type_name(cfg->type), api_name[cfg->api], cfg->events ? "+events" : "", k->name,
	       p.failed ? ": " : "", p.failed ? p.why : "");
	fflush(stdout);
	if (p.failed)
		failed++;
	else
		passed++;
}

static int listed(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *s = list; (s = strstr(s, name)); s += n)
		if ((s == list || s[-1] == ',') && (s[n] == ',' || s[n] == 0))
			return 1;
	return 0;
}

static void run_matrix(struct config *cfg, struct side *proto, const int *local, int sock,
		       const char *types, const char *apis)
{
	const enum ibv_qp_type all[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	for (int t = 0; t < 3; t++) {
		if (!listed(types, type_name(all[t])))
			continue;
		cfg->type = all[t];
		for (int a = PLAIN; a <= EXT; a++) {
			if (!listed(apis, api_name[a]))
				continue;
			cfg->api = (enum api)a;
			const struct kase *sets[] = { data_cases, bad_cases, more_cases };
			const int counts[] = { n_data_cases, n_bad_cases, n_more_cases };
			for (int s = 0; s < 3; s++)
				for (int i = 0; i < counts[s]; i++) {
					const struct kase *k = &sets[s][i];
					if (!(k->types & (1u << cfg->type)))
						continue;
					if (cfg->only && !strstr(k->name, cfg->only))
						continue;
					run_case(cfg, proto, local, sock, k);
				}
		}
	}
}

int main(int argc, char **argv)
{
	struct config cfg = { .dev = NULL };
	const char *topos = "one-ctx,two-ctx,two-proc", *types = "rc,uc,ud", *apis = "plain,ext";
	int opt;
	while ((opt = getopt(argc, argv, "d:g:t:c:a:o:e")) != -1) {
		switch (opt) {
		case 'd': cfg.dev = optarg; break;
		case 'g': cfg.gid_index = atoi(optarg); break;
		case 't': topos = optarg; break;
		case 'c': types = optarg; break;
		case 'a': apis = optarg; break;
		case 'o': cfg.only = optarg; break;
		case 'e': cfg.events = 1; break;
		default:
			fprintf(stderr, "usage: %s [-d dev] [-g gid] [-t topologies] [-c rc,uc,ud] "
					"[-a plain,ext] [-o substring] [-e]\n", argv[0]);
			return 2;
		}
	}
	if (!cfg.dev) {
		struct ibv_device **l = ibv_get_device_list(NULL);
		if (!l || !l[0]) {
			fprintf(stderr, "conformance: no RDMA device\n");
			return 2;
		}
		static char name[64];
		snprintf(name, sizeof(name), "%s", ibv_get_device_name(l[0]));
		cfg.dev = name;
		ibv_free_device_list(l);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int t = ONE_CTX; t <= TWO_PROC; t++) {
		if (!listed(topos, topo_name[t]))
			continue;
		cfg.topo = (enum topo)t;
		struct side proto[2] = {};
		if (t != TWO_PROC) {
			int local[2] = { 1, 1 };
			if (open_side(&proto[A], &cfg) || (t == TWO_CTX && open_side(&proto[B], &cfg)))
				return 2;
			run_matrix(&cfg, proto, local, -1, types, apis);
			close_side(&proto[A]);
			if (t == TWO_CTX)
				close_side(&proto[B]);
			continue;
		}
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
			return 2;
		fflush(stdout);
		pid_t child = fork();
		if (child < 0)
			return 2;
		int me = child == 0 ? B : A;
		int local[2] = { me == A, me == B };
		int sock = sv[me == A ? 0 : 1];
		close(sv[me == A ? 1 : 0]);
		if (open_side(&proto[me], &cfg))
			_exit(2);
		run_matrix(&cfg, proto, local, sock, types, apis);
		close_side(&proto[me]);
		close(sock);
		if (child == 0)
			_exit(0);
		int status = 0;
		waitpid(child, &status, 0);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			printf("FAIL two-proc: the second process ended with status %#x\n", status);
			failed++;
		}
	}
	printf("conformance: %d passed, %d failed", passed, failed);
	if (cfg.events)
		printf(" (events: %u taken by this process, %u of them before an empty CQ)",
		       wakeups, empty_wakeups);
	printf("\n");
	return failed ? 1 : 0;
}
