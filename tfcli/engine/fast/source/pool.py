"""The threads that share a product's weight rows: a small pool in LLVM IR, compiled with the jobs
(build.py) and started by kernels.py.

A job's chunks (jobs.py) are handed out by one atomic counter: the caller's thread takes chunks
too, and waits until every worker has finished its last one. Between products a worker spins
(`pause`) on the pool's generation number for up to SPIN_CYCLES of the time-stamp counter, about a
millisecond, so that the 120-odd products of a decode step hand over in well under a microsecond
each; then it sleeps on a futex, and the caller wakes it when it finds a sleeper. OpenMP's threads
wait the same way (GOMP_SPINCOUNT), as do llama.cpp's.

The pool is an int64 array (kernels._Pool) whose fields sit a cache line apart, at these byte
offsets; GEN is the int32 the futex waits on. A job is called with numba's native calling
convention: status = job(return slot, exception slot, a, c), 0 when it went well.
"""

from __future__ import annotations

import platform

GEN, JOB, ARGS, CHUNKS, NEXT, PENDING, SLEEPERS, WORKERS, STATUS = (64 * i for i in range(9))
SIZE = 64 * 9  # bytes
SPIN_CYCLES = 1 << 22
FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}  # the futex syscall's number on Linux


def futex_number() -> int | None:
    """The futex syscall's number here; None where there is no futex (then the pool has no workers)."""
    import sys

    return FUTEX.get(platform.machine().lower()) if sys.platform.startswith("linux") else None


def source(x86: bool, futex: int) -> str:
    """The pool's LLVM IR: tfcli_run(pool, first, job, a, chunks) -> status, run by the caller (pool
    null: every chunk on the caller's thread), and tfcli_work(pool, seen), a worker's loop for life."""
    pause = "call void @llvm.x86.sse2.pause()" if x86 else "fence seq_cst"
    declare_pause = "declare void @llvm.x86.sse2.pause()" if x86 else ""
    return f"""
declare i64 @syscall(i64, ...)
declare i64 @llvm.readcyclecounter()
{declare_pause}

define internal i32 @call_job(ptr %job, ptr %a, i64 %c) {{
  %ret = alloca i64, align 8
  %exc = alloca ptr, align 8
  %s = call i32 %job(ptr %ret, ptr %exc, ptr %a, i64 %c)
  ret i32 %s
}}

; take chunks until none is left; a failing chunk's status is kept in STATUS
define internal void @take_chunks(ptr %p, ptr %job, ptr %a, i64 %n) {{
entry:
  %next = getelementptr i8, ptr %p, i64 {NEXT}
  %status = getelementptr i8, ptr %p, i64 {STATUS}
  br label %loop
loop:
  %c = atomicrmw add ptr %next, i64 1 seq_cst
  %more = icmp slt i64 %c, %n
  br i1 %more, label %body, label %done
body:
  %s = call i32 @call_job(ptr %job, ptr %a, i64 %c)
  %bad = icmp ne i32 %s, 0
  br i1 %bad, label %fail, label %loop
fail:
  store atomic i32 %s, ptr %status monotonic, align 4
  br label %loop
done:
  ret void
}}

define i32 @tfcli_run(ptr %p, ptr %first, ptr %job, ptr %a, i64 %n) {{
entry:
  %has_first = icmp ne ptr %first, null
  br i1 %has_first, label %run_first, label %dispatch
run_first:
  %s0 = call i32 @call_job(ptr %first, ptr %a, i64 0)
  %bad0 = icmp ne i32 %s0, 0
  br i1 %bad0, label %failed_first, label %dispatch
failed_first:
  ret i32 %s0
dispatch:
  %no_pool = icmp eq ptr %p, null
  br i1 %no_pool, label %serial, label %has_pool
has_pool:
  %workers_at = getelementptr i8, ptr %p, i64 {WORKERS}
  %workers = load i64, ptr %workers_at, align 8
  %alone = icmp eq i64 %workers, 0
  br i1 %alone, label %serial, label %parallel
serial:  ; every chunk here, through a pool of this call's own with no workers
  %own = alloca [{SIZE} x i8], align 64
  %own_next = getelementptr i8, ptr %own, i64 {NEXT}
  store i64 0, ptr %own_next, align 8
  %own_status = getelementptr i8, ptr %own, i64 {STATUS}
  store i32 0, ptr %own_status, align 4
  call void @take_chunks(ptr %own, ptr %job, ptr %a, i64 %n)
  %serial_status = load i32, ptr %own_status, align 4
  ret i32 %serial_status
parallel:
  %job_at = getelementptr i8, ptr %p, i64 {JOB}
  store ptr %job, ptr %job_at, align 8
  %args_at = getelementptr i8, ptr %p, i64 {ARGS}
  store ptr %a, ptr %args_at, align 8
  %chunks_at = getelementptr i8, ptr %p, i64 {CHUNKS}
  store i64 %n, ptr %chunks_at, align 8
  %next_at = getelementptr i8, ptr %p, i64 {NEXT}
  store i64 0, ptr %next_at, align 8
  %status_at = getelementptr i8, ptr %p, i64 {STATUS}
  store i32 0, ptr %status_at, align 4
  %pending_at = getelementptr i8, ptr %p, i64 {PENDING}
  store i64 %workers, ptr %pending_at, align 8
  %g = atomicrmw add ptr %p, i32 1 seq_cst
  %sleepers_at = getelementptr i8, ptr %p, i64 {SLEEPERS}
  %sleepers = load atomic i64, ptr %sleepers_at seq_cst, align 8
  %asleep = icmp ne i64 %sleepers, 0
  br i1 %asleep, label %wake, label %work
wake:
  %woken = call i64 (i64, ...) @syscall(i64 {futex}, ptr %p, i64 129, i64 2147483647)
  br label %work
work:
  call void @take_chunks(ptr %p, ptr %job, ptr %a, i64 %n)
  br label %wait
wait:
  %pending = load atomic i64, ptr %pending_at acquire, align 8
  %busy = icmp ne i64 %pending, 0
  br i1 %busy, label %spin, label %finish
spin:
  {pause}
  br label %wait
finish:
  %st = load atomic i32, ptr %status_at monotonic, align 4
  ret i32 %st
}}

define i32 @tfcli_work(ptr %p, i32 %seen0) {{
entry:
  %sleepers_at = getelementptr i8, ptr %p, i64 {SLEEPERS}
  %pending_at = getelementptr i8, ptr %p, i64 {PENDING}
  %job_at = getelementptr i8, ptr %p, i64 {JOB}
  %args_at = getelementptr i8, ptr %p, i64 {ARGS}
  %chunks_at = getelementptr i8, ptr %p, i64 {CHUNKS}
  br label %idle
idle:
  %seen = phi i32 [%seen0, %entry], [%g, %run]
  %t0 = call i64 @llvm.readcyclecounter()
  br label %poll
poll:
  %g = load atomic i32, ptr %p acquire, align 4
  %same = icmp eq i32 %g, %seen
  br i1 %same, label %waiting, label %run
waiting:
  {pause}
  %t = call i64 @llvm.readcyclecounter()
  %dt = sub i64 %t, %t0
  %long = icmp ugt i64 %dt, {SPIN_CYCLES}
  br i1 %long, label %sleep, label %poll
sleep:
  %s1 = atomicrmw add ptr %sleepers_at, i64 1 seq_cst
  %expected = zext i32 %seen to i64
  %slept = call i64 (i64, ...) @syscall(i64 {futex}, ptr %p, i64 128, i64 %expected, i64 0)
  %s2 = atomicrmw sub ptr %sleepers_at, i64 1 seq_cst
  br label %poll
run:
  %job = load ptr, ptr %job_at, align 8
  %a = load ptr, ptr %args_at, align 8
  %n = load i64, ptr %chunks_at, align 8
  call void @take_chunks(ptr %p, ptr %job, ptr %a, i64 %n)
  %left = atomicrmw sub ptr %pending_at, i64 1 release
  br label %idle
}}
"""
