// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// weft's workload follower. A process whose tgid is in `followed` belongs
// to the workload. When such a process creates another (fork, vfork,
// clone without CLONE_THREAD), the child joins the workload; a child with
// memory of its own is sent SIGSTOP, which it takes before its first
// instruction. When such a process replaces its image (exec), it is sent
// SIGSTOP too, taken before the new image's first instruction. Each event
// goes to weft through `events`; weft does its work on the stopped process
// and sends SIGCONT. The layout of `struct event` is weft_workload's
// (crates/workload/src/lib.rs, `Event::parse`).

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define SIGSTOP 19

#define KIND_FORK 1
#define KIND_EXEC 2
#define KIND_EXIT 3

/* flags */
#define SHARES_MEMORY 1 /* the child shares its parent's memory (vfork, CLONE_VM) */
#define NOT_STOPPED 2   /* sending SIGSTOP failed: the process runs on */

struct mm_struct;

/* Only the fields read here; libbpf relocates their offsets against the
 * running kernel's BTF. */
typedef struct {
	int counter;
} atomic_t;

struct signal_struct {
	atomic_t live; /* threads of the group not yet exiting */
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct mm_struct *mm;
	struct signal_struct *signal;
} __attribute__((preserve_access_index));

enum pid_type { PIDTYPE_PID, PIDTYPE_TGID, PIDTYPE_PGID, PIDTYPE_SID, PIDTYPE_MAX };

extern int bpf_send_signal_task(struct task_struct *task, int sig, enum pid_type type,
				__u64 value) __ksym;

struct event {
	__u32 kind;
	__u32 pid;    /* the new process, the exec'ing one, the one that exited */
	__u32 parent; /* fork: the creating process */
	__u32 flags;
	__u32 thread; /* fork: the thread that forked (the child's one thread is its copy) */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 65536);
} followed SEC(".maps");

/* Processes this program stopped and weft has not resumed yet: weft's
 * watchdog resumes them if weft dies (crates/workload/src/watchdog.rs). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 65536);
} held SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

/* A ring entry is reserved before a process is stopped: a process is
 * never stopped without weft being told. */
static __always_inline struct event *reserve(__u32 kind, __u32 pid)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->kind = kind;
	e->pid = pid;
	e->parent = 0;
	e->flags = 0;
	e->thread = 0;
	e->pad = 0;
	return e;
}

SEC("tp_btf/sched_process_fork")
int on_fork(unsigned long long *ctx)
{
	struct task_struct *parent = (struct task_struct *)ctx[0];
	struct task_struct *child = (struct task_struct *)ctx[1];
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	__u32 one = 1;
	struct event *e;

	if (ctgid == ptgid || !bpf_map_lookup_elem(&followed, &ptgid))
		return 0; /* a thread, or not the workload's */
	bpf_map_update_elem(&followed, &ctgid, &one, BPF_ANY);
	e = reserve(KIND_FORK, ctgid);
	if (!e)
		return 0; /* the ring is full: the child runs on, in its parent's counts */
	e->parent = ptgid;
	e->thread = parent->pid;
	if (child->mm == parent->mm)
		e->flags |= SHARES_MEMORY;
	else if (bpf_send_signal_task(child, SIGSTOP, PIDTYPE_TGID, 0))
		e->flags |= NOT_STOPPED;
	else
		bpf_map_update_elem(&held, &ctgid, &one, BPF_ANY);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int on_exec(unsigned long long *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx[0];
	__u32 tgid = task->tgid, one = 1;
	struct event *e;

	if (!bpf_map_lookup_elem(&followed, &tgid))
		return 0;
	e = reserve(KIND_EXEC, tgid);
	if (!e)
		return 0;
	if (bpf_send_signal(SIGSTOP))
		e->flags |= NOT_STOPPED;
	else
		bpf_map_update_elem(&held, &tgid, &one, BPF_ANY);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* The process leaves the workload when its last thread exits (a main
 * thread that exits first, or one an exec in another thread replaces,
 * does not end it). */
SEC("tp_btf/sched_process_exit")
int on_exit(unsigned long long *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx[0];
	__u32 tgid = task->tgid;
	struct event *e;

	if (task->signal->live.counter != 0 || !bpf_map_lookup_elem(&followed, &tgid))
		return 0;
	bpf_map_delete_elem(&followed, &tgid);
	bpf_map_delete_elem(&held, &tgid);
	e = reserve(KIND_EXIT, tgid);
	if (e)
		bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
