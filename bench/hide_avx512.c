/* Shim for `bench_cpu_accel.py --hide-avx512`, loaded first: the process sees
 * an AVX2 CPU. With CPUID faulting on (Linux arch_prctl(ARCH_SET_CPUID),
 * `cpuid_fault` in /proc/cpuinfo), every CPUID instruction traps; the
 * SIGSEGV handler below runs the real CPUID with faulting briefly off, clears
 * the AVX-512 and AMX feature bits (and AVX-VNNI, which Zen 3 lacks; with
 * TCC_HIDE_CPUID=avx512-keep-avxvnni not: an AVX2 CPU with AVX-VNNI such as
 * Intel's Alder Lake or a Xeon 6 E-core; with TCC_HIDE_CPUID=vnni only the
 * VNNI and AMX bits: an AVX-512 CPU without VNNI, Intel's Skylake-SP), writes
 * the result into the trapped thread's registers and steps over the
 * instruction. Libraries that pick their kernels from CPUID at load time
 * (onnxruntime's MLAS, OpenBLAS, LLVM's host CPU for the host path) then
 * choose what they would on an AVX2-only machine such as AMD Zen 3; the
 * core underneath still runs at its own clock, caches and memory speed.
 * The setting is per thread, inherited by threads created after it, and
 * reset by exec (the compilers tcc runs see the real CPU). The dynamic
 * loader and Python have read CPUID before, so glibc's string functions
 * keep their AVX-512 variants. */
#define _GNU_SOURCE
#include <cpuid.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define ARCH_SET_CPUID 0x1012

static struct sigaction g_prev;
enum { HIDE_AVX512, HIDE_AVX512_KEEP_AVXVNNI, HIDE_VNNI };
static int g_mode; /* TCC_HIDE_CPUID */

static long set_cpuid(int enabled) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, enabled); }

static void on_segv(int sig, siginfo_t *si, void *ctx) {
    ucontext_t *uc = ctx;
    greg_t *r = uc->uc_mcontext.gregs;
    const uint8_t *ip = (const uint8_t *)r[REG_RIP];
    /* a CPUID trap comes from the kernel (SI_KERNEL), at the instruction */
    if (si->si_code != SI_KERNEL || ip[0] != 0x0f || ip[1] != 0xa2) { /* else: the previous handler */
        sigaction(SIGSEGV, &g_prev, NULL);
        raise(sig);
        return;
    }
    unsigned leaf = (unsigned)r[REG_RAX], sub = (unsigned)r[REG_RCX], a, b, c, d;
    set_cpuid(1);
    __cpuid_count(leaf, sub, a, b, c, d);
    set_cpuid(0);
    if (leaf == 7 && sub == 0 && g_mode == HIDE_VNNI) {
        c &= ~(1u << 11);                                              /* ECX: VNNI */
        d &= ~((1u << 2) | (1u << 22) | (1u << 23) | (1u << 24) | (1u << 25)); /* EDX: 4VNNIW, AMX, FP16 */
    } else if (leaf == 7 && sub == 0) {
        /* EBX: AVX512F 16, DQ 17, IFMA 21, PF 26, ER 27, CD 28, BW 30, VL 31 */
        b &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | (1u << 31));
        /* ECX: VBMI 1, VBMI2 6, VNNI 11, BITALG 12, VPOPCNTDQ 14 */
        c &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
        /* EDX: 4VNNIW 2, 4FMAPS 3, VP2INTERSECT 8, AMX-BF16 22, FP16 23, AMX-TILE 24, AMX-INT8 25 */
        d &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) | (1u << 25));
    } else if (leaf == 7 && sub == 1) {
        a &= ~((g_mode == HIDE_AVX512_KEEP_AVXVNNI ? 0u : 1u << 4) | (1u << 5)); /* AVX-VNNI, AVX512_BF16 */
    }
    r[REG_RAX] = a;
    r[REG_RBX] = b;
    r[REG_RCX] = c;
    r[REG_RDX] = d;
    r[REG_RIP] += 2;
}

__attribute__((constructor)) static void hide_avx512(void) {
    struct sigaction sa;
    const char *mode = getenv("TCC_HIDE_CPUID");
    if (mode && *mode && strcmp(mode, "avx512")) {
        if (!strcmp(mode, "avx512-keep-avxvnni"))
            g_mode = HIDE_AVX512_KEEP_AVXVNNI;
        else if (!strcmp(mode, "vnni"))
            g_mode = HIDE_VNNI;
        else {
            fprintf(stderr, "hide_avx512: TCC_HIDE_CPUID=%s: unknown (avx512, avx512-keep-avxvnni or vnni)\n", mode);
            _exit(2);
        }
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &g_prev) != 0 || set_cpuid(0) != 0) {
        fprintf(stderr, "hide_avx512: CPUID faulting is not available on this machine\n");
        _exit(3);
    }
}
