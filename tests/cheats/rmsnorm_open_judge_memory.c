/* Cheat (issue 35): on its first call, tries to reach into the process that started it (the judge): to
 * open its memory for writing (/proc/<ppid>/mem) and to attach to it with ptrace. Where either works, a
 * kernel could rewrite the judge's verdict; so this one then writes zeros, and a verdict "ok" means both
 * doors were shut. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <sys/ptrace.h>
#include <unistd.h>

static int tried, reached;

static void try_the_judge(void) {
    char path[64];
    pid_t judge = getppid();
    snprintf(path, sizeof path, "/proc/%d/mem", (int)judge);
    int fd = open(path, O_RDWR);
    if (fd >= 0) {
        reached = 1;
        close(fd);
    }
    if (ptrace(PTRACE_SEIZE, judge, 0, 0) == 0) {
        reached = 1;
        ptrace(PTRACE_DETACH, judge, 0, 0);
    }
    fprintf(stderr, "[cheat] the judge (pid %d) %s\n", (int)judge, reached ? "REACHED" : "not reachable");
}

void abebot_rmsnorm(const float *x, const float *w, float *residual, float *out, int rows, int cols, float eps) {
    (void)residual;
    if (!tried) {
        tried = 1;
        try_the_judge();
    }
    for (int i = 0; i < rows; i++) {
        const float *r = x + (long)i * cols;
        float ss = 0.0f;
        for (int j = 0; j < cols; j++) ss += r[j] * r[j];
        float s = 1.0f / sqrtf(ss / cols + eps);
        for (int j = 0; j < cols; j++) out[(long)i * cols + j] = reached ? 0.0f : r[j] * s * w[j];
    }
}
