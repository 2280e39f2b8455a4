/* slowfsync: an LD_PRELOAD library for the soak's "slow-fsync" fault. While the file
 * named by $DA3_SOAK_SLOW_FSYNC holds a number S, every fsync() and fdatasync() of the
 * process sleeps S seconds first, as an SD card that stalls does; without the file,
 * they pass straight through. scripts/support/soak/daemon.py builds it with gcc.
 *
 *   cc -O2 -shared -fPIC -o slowfsync.so slowfsync.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void stall(void) {
    const char *flag = getenv("DA3_SOAK_SLOW_FSYNC");
    FILE *f = flag ? fopen(flag, "r") : NULL;
    double s = 0;
    if (f == NULL) return;
    if (fscanf(f, "%lf", &s) != 1) s = 0;
    fclose(f);
    if (s > 0) {
        struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        nanosleep(&t, NULL);
    }
}

int fsync(int fd) {
    static int (*real)(int);
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    stall();
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    stall();
    return real(fd);
}
