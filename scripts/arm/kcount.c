/* kcount: a qemu-user TCG plugin that counts, between two markers the guest sets, how
 * often each translated block ran and how many guest instructions that was.
 *
 * scripts/support/kernels.py (in the guest) sets the markers; scripts/support/kernels.py
 * report (on the host) turns block addresses into symbols with the guest's own
 * /proc/self/maps and the libraries' ELF symbol tables. A function's calls are the runs
 * of the block that starts at its entry address (the micro-kernels' loops branch back
 * to later labels, not to the entry).
 *
 * A marker is a system call no program makes by accident: lseek(-1, N, MARKER_WHENCE).
 * The kernel answers EBADF, nothing changes in the guest; the plugin sees it first.
 *   N = 0   reset every counter (the segment starts)
 *   N > 0   append "segment N" and every block that ran since the reset to out=FILE
 *
 * Built against the plugin API of QEMU 7.2 (version 1: Debian bookworm's qemu-user).
 * The declarations below are the few this plugin uses, as that API defines them; no
 * QEMU header is needed (Debian ships none).
 *
 *   cc -O2 -shared -fPIC -o kcount.so kcount.c
 *   qemu-aarch64 -plugin ./kcount.so,out=counts.txt ...
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- QEMU 7.2 plugin API (include/qemu/qemu-plugin.h, QEMU_PLUGIN_VERSION 1) ---- */
#define QEMU_PLUGIN_EXPORT __attribute__((visibility("default")))
typedef uint64_t qemu_plugin_id_t;
typedef struct {
    const char *target_name;
    struct {
        int min;
        int cur;
    } version;
    bool system_emulation;
    union {
        struct {
            int smp_vcpus;
            int max_vcpus;
        } system;
    };
} qemu_info_t;
struct qemu_plugin_tb;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_vcpu_syscall_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_index,
                                              int64_t num, uint64_t a1, uint64_t a2,
                                              uint64_t a3, uint64_t a4, uint64_t a5,
                                              uint64_t a6, uint64_t a7, uint64_t a8);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
                                              void *ptr, uint64_t imm);
void qemu_plugin_register_vcpu_syscall_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_syscall_cb_t cb);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
/* ---- end of the API ---- */

QEMU_PLUGIN_EXPORT int qemu_plugin_version = 1;

#define AARCH64_LSEEK 62
#define MARKER_FD UINT64_MAX /* -1 */
#define MARKER_WHENCE 0x6b63 /* "kc" */
#define TABLE_BITS 21        /* 2M slots: a python + LiteRT run translates ~10^5 blocks */
#define TABLE_SIZE (1u << TABLE_BITS)
#define MAX_BLOCKS (TABLE_SIZE / 2)

struct block {
    uint64_t vaddr;
    uint64_t runs; /* added to inline by the translated code */
    uint64_t insns;
};

static struct block *blocks; /* never moved: translated code holds &runs */
static uint32_t *slots;      /* open addressing over blocks, 0 = empty, else index + 1 */
static uint32_t nblocks;
static bool full;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *out_path;

static uint32_t hash(uint64_t v) { return (uint32_t)((v * 0x9e3779b97f4a7c15ull) >> (64 - TABLE_BITS)); }

static struct block *find_or_add(uint64_t vaddr) {
    uint32_t i = hash(vaddr);
    for (;; i = (i + 1) & (TABLE_SIZE - 1)) {
        uint32_t s = slots[i];
        if (s == 0) break;
        if (blocks[s - 1].vaddr == vaddr) return &blocks[s - 1];
    }
    if (nblocks == MAX_BLOCKS) return NULL;
    struct block *b = &blocks[nblocks];
    b->vaddr = vaddr;
    slots[i] = ++nblocks;
    return b;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    pthread_mutex_lock(&lock);
    struct block *b = find_or_add(qemu_plugin_tb_vaddr(tb));
    if (b) {
        /* A block retranslated at the same address (a flush, another size) keeps its
         * counter; its instruction count is the latest translation's. */
        b->insns = qemu_plugin_tb_n_insns(tb);
        qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &b->runs, 1);
    } else {
        full = true;
    }
    pthread_mutex_unlock(&lock);
}

static void dump(uint64_t segment) {
    FILE *f = fopen(out_path, "a");
    if (!f) {
        perror(out_path);
        abort(); /* a count that cannot be written must not pass as zero */
    }
    fprintf(f, "segment %" PRIu64 " blocks %" PRIu32 " full %d\n", segment, nblocks, full);
    for (uint32_t i = 0; i < nblocks; i++)
        if (blocks[i].runs)
            fprintf(f, "%" PRIx64 " %" PRIu64 " %" PRIu64 "\n", blocks[i].vaddr, blocks[i].runs,
                    blocks[i].insns);
    fprintf(f, "end %" PRIu64 "\n", segment);
    fclose(f);
}

static void on_syscall(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, uint64_t a1,
                       uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                       uint64_t a7, uint64_t a8) {
    (void)id, (void)vcpu, (void)a4, (void)a5, (void)a6, (void)a7, (void)a8;
    if (num != AARCH64_LSEEK || a1 != MARKER_FD || a3 != MARKER_WHENCE) return;
    pthread_mutex_lock(&lock);
    if (a2 == 0)
        for (uint32_t i = 0; i < nblocks; i++) blocks[i].runs = 0;
    else
        dump(a2);
    pthread_mutex_unlock(&lock);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                           int argc, char **argv) {
    if (info->system_emulation) {
        fprintf(stderr, "kcount: qemu-user only\n");
        return -1;
    }
    for (int i = 0; i < argc; i++)
        if (strncmp(argv[i], "out=", 4) == 0) out_path = strdup(argv[i] + 4);
    if (!out_path) {
        fprintf(stderr, "kcount: needs out=FILE\n");
        return -1;
    }
    blocks = calloc(MAX_BLOCKS, sizeof *blocks);
    slots = calloc(TABLE_SIZE, sizeof *slots);
    if (!blocks || !slots) return -1;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
    return 0;
}
