// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// weft's per-thread virtual CPU clock. At every context switch this program
// adds the time the outgoing thread ran to its entry (if the thread claimed
// one) and notes which CPU the incoming thread runs on, and the kernel's
// runtime of it then. The layout is
// weft_abi::vclock's (crates/abi/src/vclock.rs); the numbers below repeat
// it and a test of crates/vclock checks that they agree.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define MAGIC 0x4b435657u /* "WVCK" */
#define VERSION 1
#define CPUS 1024
#define SLOT_BITS 16
#define SLOTS (1u << SLOT_BITS)
#define PROBES 16
#define FIRST_CPU 1
#define FIRST_THREAD (FIRST_CPU + CPUS)
#define ENTRIES (FIRST_THREAD + SLOTS)
#define HASH 0x9E3779B1u

struct entry {
	__u32 tid; /* thread entries: the owner's tid, 0 if free */
	__u32 seq; /* odd while this program updates the entry */
	__u64 ns;  /* a thread's on-CPU ns, or a CPU's last switch */
	__u32 cpu; /* thread entries: 1 + the CPU it runs on, 0 if it does not */
	__u32 pad;
	__u64 base; /* thread entries: the kernel's runtime of the thread when it was switched in, 0 if unknown */
};

/* Only the fields read here; libbpf relocates their offsets against the
 * running kernel's BTF. */
struct sched_entity {
	__u64 sum_exec_runtime;
	__u64 prev_sum_exec_runtime;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	struct sched_entity se;
} __attribute__((preserve_access_index));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct entry);
	__uint(max_entries, ENTRIES);
} vclock SEC(".maps");

#define WRITE_ONCE(x, v) (*(volatile typeof(x) *)&(x) = (v))
#define READ_ONCE(x) (*(volatile typeof(x) *)&(x))

static __always_inline struct entry *find(__u32 tid)
{
	__u32 home = (tid * HASH) >> (32 - SLOT_BITS);
	if (tid == 0)
		return 0;
	for (__u32 i = 0; i < PROBES; i++) {
		__u32 key = FIRST_THREAD + ((home + i) & (SLOTS - 1));
		struct entry *e = bpf_map_lookup_elem(&vclock, &key);
		if (!e)
			return 0;
		__u32 owner = READ_ONCE(e->tid);
		if (owner == tid)
			return e;
		if (owner == 0)
			return 0;
	}
	return 0;
}

SEC("tp_btf/sched_switch")
int on_switch(__u64 *ctx)
{
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	__u64 now = bpf_ktime_get_ns();
	__u32 cpu = bpf_get_smp_processor_id();
	if (cpu >= CPUS)
		return 0;
	__u32 key = FIRST_CPU + cpu;
	struct entry *c = bpf_map_lookup_elem(&vclock, &key);
	if (!c)
		return 0;
	struct entry *p = find(prev->pid);
	if (p)
		WRITE_ONCE(p->seq, p->seq + 1);
	__u64 in = c->ns;
	WRITE_ONCE(c->ns, now);
	WRITE_ONCE(c->seq, c->seq + 1);
	if (p) {
		/* The time it ran, as the kernel accounts it (steal and the
		 * switch itself left out), from its runtime at the switch-in:
		 * noted here, or by the scheduler. */
		__u64 sum = prev->se.sum_exec_runtime;
		__u64 base = p->base;
		__u64 wall = (in != 0 && now > in) ? now - in : 0;
		__u64 ran = wall;
		if (base != 0 && sum >= base) {
			ran = sum - base;
		} else {
			/* Claimed while running: the fair class notes the
			 * runtime at the task's switch-in in
			 * prev_sum_exec_runtime (other classes leave it older:
			 * more than the stretch, so the clock is used). */
			__u64 since = prev->se.prev_sum_exec_runtime;
			if (sum >= since && sum - since <= wall)
				ran = sum - since;
		}
		WRITE_ONCE(p->ns, p->ns + ran);
		WRITE_ONCE(p->base, 0);
		WRITE_ONCE(p->cpu, 0);
		WRITE_ONCE(p->seq, p->seq + 1);
	}
	struct entry *n = find(next->pid);
	if (n) {
		WRITE_ONCE(n->base, next->se.sum_exec_runtime);
		WRITE_ONCE(n->cpu, cpu + 1);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
