/* Evict a buffer's cache lines from every level of the CPU's caches (the "cold" cache policy of
 * core/backends/cpu_cache.py): clflush on x86-64, "dc civac" on AArch64. Only the lines of the
 * buffers a timed call reads and writes are evicted, so the cost is proportional to the case, not
 * to the size of the last-level cache. */
#include <stddef.h>
#include <stdint.h>

#define LINE 64

void abebot_evict_lines(const void *base, size_t bytes) {
    const char *p = (const char *)((uintptr_t)base & ~(uintptr_t)(LINE - 1));
    const char *end = (const char *)base + bytes;
#if defined(__x86_64__) || defined(__i386__)
    for (; p < end; p += LINE)
        __asm__ volatile("clflush (%0)" : : "r"(p) : "memory");
    __asm__ volatile("mfence" : : : "memory");
#elif defined(__aarch64__)
    for (; p < end; p += LINE)
        __asm__ volatile("dc civac, %0" : : "r"(p) : "memory");
    __asm__ volatile("dsb ish" : : : "memory");
#else
#error "no cache-line eviction instruction for this architecture"
#endif
}
