// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// weft's schedule recorder. For every thread of a process in `traced`
// (its thread group id, with where its witness buffers lie), it writes a
// record when the thread is switched out or in (`sched_switch`) and when
// it enters or leaves a system call, with where its witness stream was:
// the cursor in its TCB (`fs:0x40`, weft_paths::rebuild::CURSOR), taken to
// a buffer of the pool and that buffer's handover number (its descriptor).
// The record layout is weft_abi::schedule's (crates/abi/src/schedule.rs);
// the numbers below repeat it and the pool's (crates/paths/src/pool.rs).

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define CURSOR 0x40
#define DESC 64
#define DESC_SEQ 8
#define NO_BUFFER (~0ull)

#define SWITCH_OUT 1
#define SWITCH_IN 2
#define SYSCALL_ENTRY 3
#define SYSCALL_EXIT 4

/* Only the fields read here; libbpf relocates their offsets against the
 * running kernel's BTF. */
struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct thread_struct thread;
} __attribute__((preserve_access_index));

struct pt_regs {
	unsigned long orig_ax;
} __attribute__((preserve_access_index));

struct record {
	__u64 ns;
	__u32 pid;
	__u32 tid;
	__u16 kind;
	__u16 cpu;
	__u32 nr;
	__u64 seq;
	__u64 offset;
};

/* Where a process's witness buffers are, in its address space. */
struct pool {
	__u64 first;   /* buffer 0 */
	__u64 stride;  /* from one buffer to the next */
	__u64 descs;   /* descriptor 0 */
	__u64 buffers; /* buffers handed to threads */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct pool);
	__uint(max_entries, 65536);
} traced SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} records SEC(".maps");

/* Records the ring had no room for. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} dropped SEC(".maps");

/* Where the stream of `t` (the running task) is. */
static __always_inline void position(struct task_struct *t, struct pool *p, struct record *r)
{
	r->seq = NO_BUFFER;
	r->offset = 0;
	__u64 fs = t->thread.fsbase;
	__u64 cursor = 0;
	if (fs == 0 || bpf_probe_read_user(&cursor, sizeof cursor, (void *)(fs + CURSOR)) != 0)
		return;
	if (cursor < p->first || p->stride == 0)
		return;
	__u64 rel = cursor - p->first;
	__u64 k = rel / p->stride;
	if (k >= p->buffers)
		return;
	__u64 seq;
	if (bpf_probe_read_user(&seq, sizeof seq, (void *)(p->descs + k * DESC + DESC_SEQ)) != 0)
		return;
	r->seq = seq;
	r->offset = rel - k * p->stride;
}

static __always_inline void note(struct task_struct *t, __u16 kind, __u32 nr, int running)
{
	__u32 tgid = t->tgid;
	struct pool *p = bpf_map_lookup_elem(&traced, &tgid);
	if (!p)
		return;
	struct record *r = bpf_ringbuf_reserve(&records, sizeof *r, 0);
	if (!r) {
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&dropped, &zero);
		if (n)
			__sync_fetch_and_add(n, 1);
		return;
	}
	r->ns = bpf_ktime_get_ns();
	r->pid = tgid;
	r->tid = t->pid;
	r->kind = kind;
	r->cpu = bpf_get_smp_processor_id();
	r->nr = nr;
	if (running) {
		position(t, p, r);
	} else {
		r->seq = NO_BUFFER;
		r->offset = 0;
	}
	bpf_ringbuf_submit(r, 0);
}

SEC("tp_btf/sched_switch")
int on_switch(__u64 *ctx)
{
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	/* The previous task is still the current one: its TCB is readable. */
	note(prev, SWITCH_OUT, 0, 1);
	note(next, SWITCH_IN, 0, 0);
	return 0;
}

SEC("tp_btf/sys_enter")
int on_syscall_entry(__u64 *ctx)
{
	struct task_struct *t = bpf_get_current_task_btf();
	note(t, SYSCALL_ENTRY, (__u32)ctx[1], 1);
	return 0;
}

SEC("tp_btf/sys_exit")
int on_syscall_exit(__u64 *ctx)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)ctx[0];
	note(t, SYSCALL_EXIT, (__u32)regs->orig_ax, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
