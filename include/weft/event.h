/* weft rich events: WEFT_EVENT(provider, name, fields, values...) writes an
 * event with integers, strings and byte arrays straight into the calling
 * thread's weft ring buffer, with no trampoline, when weft traces it
 * (weft run/attach --trace event:provider:name). Off, a site costs one load
 * and one not-taken branch.
 *
 *     #include <weft/event.h>
 *     WEFT_EVENT(myapp, request, "id:i path:s body:b",
 *                WEFT_INT(id), WEFT_STR(path), WEFT_BYTES(buf, len));
 *
 * `fields` names the values in order, each NAME:KIND with KIND i (integer or
 * pointer, 64 bits), s (NUL-terminated string) or b (byte array); it must
 * agree with the WEFT_INT / WEFT_STR / WEFT_BYTES values that follow. From
 * 1 to 12 values. Strings and byte arrays are copied up to weft's --string-max
 * bytes each (4096 bytes in all per event); a longer one is cut and marked,
 * a null pointer is recorded as null.
 *
 * Each site is a descriptor in the section "weft_events" that weft finds in
 * the ELF file. To enable a site weft writes into the descriptor the event
 * id, the ring geometry and the address of a function, in weft's shared
 * region, that returns the calling thread's ring; to disable it, weft
 * clears that address. The record written here is the one weft's
 * trampolines write (crates/patch/src/region/ring.rs; docs/shared-region.md):
 * TSC, event id, shape (values | text bytes << 16), the values, then each
 * string's or array's bytes padded to 8. The _WEFT_ offsets and sizes below
 * are checked against weft's by crates/patch/tests/c_headers.rs. Plain C99 (also C++11) with GCC builtins; tested
 * with gcc and g++.
 */
#ifndef WEFT_EVENT_H
#define WEFT_EVENT_H

#include <sched.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "WEFTEVT1", little-endian. */
#define WEFT_EVENT_MAGIC 0x3154564554464557ULL

/* One site. The first four fields are the program's; weft writes the rest
 * while it traces the site and clears ring_of_thread when it stops. */
struct weft_event_site {
    uint64_t magic;
    const char *provider;
    const char *name;
    const char *fields;
    void *(*ring_of_thread)(void);
    uint64_t id;
    uint64_t cap;
    uint64_t ring_data;
    const uint64_t *wait_until;
    const uint64_t *overwrite;
    uint64_t clock; /* 0: the TSC; else the vDSO's clock_gettime (weft --clock monotonic) */
};

/* One value: kind 0 integer (value), 1 string (data), 2 bytes (data, value
 * bytes). */
struct weft_value {
    uint64_t value;
    const void *data;
    uint64_t kind;
};

#define WEFT_INT(x) { (uint64_t)(int64_t)(x), 0, 0 }
#define WEFT_STR(s) { 0, (const void *)(s), 1 }
#define WEFT_BYTES(p, n) { (uint64_t)(n), (const void *)(p), 2 }

/* The ring's header and a record's layout (region::ring). */
#define _WEFT_RING_HEAD 0
#define _WEFT_RING_TAIL 8
#define _WEFT_RING_DROPPED 16
#define _WEFT_RING_HEADER 64
#define _WEFT_R_TSC 0
#define _WEFT_R_EVENT 8
#define _WEFT_R_NARGS 12 /* the shape word: values | text bytes << 16 */
#define _WEFT_R_ARGS 16
#define _WEFT_SHAPE_VALUES 0xffff
#define _WEFT_SHAPE_TEXT_SHIFT 16
#define _WEFT_TEXT_ALIGN 8
#define _WEFT_MAX_VALUES 12
#define _WEFT_MAX_TEXT 4096
#define _WEFT_STR_TRUNCATED (1ULL << 62)
#define _WEFT_STR_NULL (1ULL << 63)
#define _WEFT_CLOCK_MONOTONIC 1

/* `n` bytes of text padded to _WEFT_TEXT_ALIGN. */
#define _WEFT_PAD(n) (((n) + _WEFT_TEXT_ALIGN - 1) & ~(uint64_t)(_WEFT_TEXT_ALIGN - 1))

static inline uint64_t _weft_load(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void _weft_store(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* The event's timestamp: the TSC, or CLOCK_MONOTONIC in nanoseconds read
 * through the clock_gettime whose address weft gave. */
static inline uint64_t _weft_now(const struct weft_event_site *site)
{
    if (site->clock) {
        struct { int64_t sec, nsec; } ts = {0, 0};
        ((int (*)(int, void *))(uintptr_t)site->clock)(_WEFT_CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.sec * 1000000000u + (uint64_t)ts.nsec;
    }
    return __builtin_ia32_rdtsc();
}

/* Makes room for `size` bytes in a full ring as weft's mode says: flight
 * (overwrite the oldest whole records, counting them), block (yield until
 * weft has made room or its deadline passes) or discard. Returns whether
 * the record may be written. */
static int _weft_make_room(const struct weft_event_site *site, unsigned char *ring, uint64_t head,
                           uint64_t size)
{
    uint64_t *tailp = (uint64_t *)(ring + _WEFT_RING_TAIL);
    uint64_t *dropped = (uint64_t *)(ring + _WEFT_RING_DROPPED);
    uint64_t data = site->ring_data;
    if (_weft_load(site->overwrite)) {
        uint64_t tail = _weft_load(tailp);
        while (head - tail > data - size) {
            uint32_t shape;
            memcpy(&shape, ring + _WEFT_RING_HEADER + (tail & (data - 1)) + _WEFT_R_NARGS, 4);
            tail += _WEFT_R_ARGS + 8 * (uint64_t)(shape & _WEFT_SHAPE_VALUES) +
                    (shape >> _WEFT_SHAPE_TEXT_SHIFT);
            _weft_store(dropped, _weft_load(dropped) + 1);
        }
        _weft_store(tailp, tail);
        return 1;
    }
    for (;;) {
        uint64_t deadline = _weft_load(site->wait_until);
        if (deadline == 0 || __builtin_ia32_rdtsc() >= deadline) {
            _weft_store(dropped, _weft_load(dropped) + 1);
            return 0;
        }
        sched_yield();
        if (head - _weft_load(tailp) <= data - size)
            return 1;
    }
}

__attribute__((noinline, cold, unused)) static void
_weft_emit(const struct weft_event_site *site, const struct weft_value *values, unsigned n)
{
    void *(*ring_of_thread)(void) = __atomic_load_n(&site->ring_of_thread, __ATOMIC_ACQUIRE);
    if (!ring_of_thread)
        return;
    unsigned char *ring = (unsigned char *)ring_of_thread();
    if (!ring)
        return; /* every thread slot is taken: weft counted it */
    if (n > _WEFT_MAX_VALUES)
        n = _WEFT_MAX_VALUES;
    uint64_t words[_WEFT_MAX_VALUES];
    uint64_t lens[_WEFT_MAX_VALUES];
    uint64_t text = 0;
    for (unsigned i = 0; i < n; i++) {
        const struct weft_value *v = &values[i];
        lens[i] = 0;
        if (v->kind == 0) {
            words[i] = v->value;
            continue;
        }
        if (!v->data) {
            words[i] = _WEFT_STR_NULL;
            continue;
        }
        uint64_t room = _WEFT_MAX_TEXT - text;
        uint64_t cap = site->cap < room ? site->cap : room;
        uint64_t len, cut;
        if (v->kind == 1) {
            const char *s = (const char *)v->data;
            len = 0;
            while (len < cap && s[len])
                len++;
            cut = len == cap && s[len] != 0;
        } else {
            len = v->value < cap ? v->value : cap;
            cut = v->value > cap;
        }
        lens[i] = len;
        words[i] = len | (cut ? _WEFT_STR_TRUNCATED : 0);
        text += _WEFT_PAD(len);
    }
    uint64_t size = _WEFT_R_ARGS + 8 * (uint64_t)n + text;
    uint64_t *headp = (uint64_t *)(ring + _WEFT_RING_HEAD);
    uint64_t head = *headp; /* only this thread writes it */
    uint64_t data = site->ring_data;
    if (head - _weft_load((uint64_t *)(ring + _WEFT_RING_TAIL)) > data - size &&
        !_weft_make_room(site, ring, head, size))
        return;
    unsigned char *rec = ring + _WEFT_RING_HEADER + (head & (data - 1));
    uint64_t tsc = _weft_now(site);
    uint32_t id = (uint32_t)site->id, shape = (uint32_t)(n | text << _WEFT_SHAPE_TEXT_SHIFT);
    memcpy(rec + _WEFT_R_TSC, &tsc, 8);
    memcpy(rec + _WEFT_R_EVENT, &id, 4);
    memcpy(rec + _WEFT_R_NARGS, &shape, 4);
    memcpy(rec + _WEFT_R_ARGS, words, 8 * n);
    unsigned char *at = rec + _WEFT_R_ARGS + 8 * n;
    for (unsigned i = 0; i < n; i++) {
        if (!lens[i])
            continue;
        memcpy(at, values[i].data, lens[i]);
        at += _WEFT_PAD(lens[i]);
    }
    _weft_store(headp, head + size); /* publish the record */
}

#define _WEFT_EVENT_STR(x) #x

#define WEFT_EVENT(provider, name, fields, ...)                                                  \
    do {                                                                                        \
        __attribute__((section("weft_events"), used, aligned(8))) static struct weft_event_site \
            _weft_site = {WEFT_EVENT_MAGIC, _WEFT_EVENT_STR(provider), _WEFT_EVENT_STR(name),    \
                          fields, 0, 0, 0, 0, 0, 0, 0};                                            \
        if (__builtin_expect(__atomic_load_n(&_weft_site.ring_of_thread, __ATOMIC_RELAXED) != 0,  \
                             0)) {                                                              \
            const struct weft_value _weft_values[] = {__VA_ARGS__};                             \
            _weft_emit(&_weft_site, _weft_values,                                               \
                       (unsigned)(sizeof _weft_values / sizeof _weft_values[0]));               \
        }                                                                                       \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
