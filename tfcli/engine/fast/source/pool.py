"""The threads that share a product's weight rows: a small pool in LLVM IR, compiled with the jobs
(build.py) and started by load/kernels.py.

A job's chunks (jobs.py) are handed out by one atomic counter: the caller's thread takes chunks
too, and waits until every worker has finished its last one. Between products a worker spins
(`pause`) on the pool's generation number for up to SPIN_CYCLES of the time-stamp counter, about a
millisecond, so that the 120-odd products of a decode step hand over in well under a microsecond
each; then it sleeps on a futex, and the caller wakes it when it finds a sleeper. OpenMP's threads
wait the same way (GOMP_SPINCOUNT), as do llama.cpp's.

The pool is an int64 array (kernels._Pool) whose fields (Field) sit a cache line apart; GEN is the
int32 the futex waits on. A job is called with numba's native calling convention: status = job(return
slot, exception slot, a, c), 0 when it went well. The IR is put together from one small function per
piece below (source() lists them), each a few lines a reader can follow with the LLVM language
reference at hand.
"""

from __future__ import annotations

import platform
from enum import IntEnum

SPIN_CYCLES = 1 << 22
FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}  # the futex syscall's number on Linux
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129  # linux/futex.h: FUTEX_WAIT or FUTEX_WAKE | FUTEX_PRIVATE_FLAG
LINE = 64  # bytes between two fields: each on a cache line of its own


class Field(IntEnum):
    """The pool's fields, in order, LINE bytes apart (at(field) is a field's byte offset)."""

    GEN = 0  # int32: the job's generation, which the workers watch (and the futex waits on)
    JOB = 1  # the job's address
    ARGS = 2  # its argument array's
    CHUNKS = 3  # how many chunks it has
    NEXT = 4  # the next chunk to take
    PENDING = 5  # workers not done with the job
    SLEEPERS = 6  # workers asleep on the futex
    WORKERS = 7  # how many workers there are
    STATUS = 8  # int32: a failing chunk's status, else 0


SIZE = LINE * len(Field)  # bytes


def at(field: Field) -> int:
    return LINE * field


def futex_number() -> int | None:
    """The futex syscall's number here; None where there is no futex (then the pool has no workers)."""
    import sys

    return FUTEX.get(platform.machine().lower()) if sys.platform.startswith("linux") else None


def _field(name: str, field: Field, pool: str = "%p") -> str:
    """%{name} = the address of a pool's field."""
    return f"  %{name} = getelementptr i8, ptr {pool}, i64 {at(field)}"


def _declarations(x86: bool) -> str:
    pause = "declare void @llvm.x86.sse2.pause()" if x86 else ""
    return "declare i64 @syscall(i64, ...)\ndeclare i64 @llvm.readcyclecounter()\n" + pause


def _call_job() -> str:
    """A job called with numba's convention: its status, 0 when it went well."""
    return """define internal i32 @call_job(ptr %job, ptr %a, i64 %c) {
  %ret = alloca i64, align 8
  %exc = alloca ptr, align 8
  %s = call i32 %job(ptr %ret, ptr %exc, ptr %a, i64 %c)
  ret i32 %s
}"""


def _take_chunks() -> str:
    """Take chunks until none is left; a failing chunk's status is kept in STATUS."""
    return "\n".join([
        "define internal void @take_chunks(ptr %p, ptr %job, ptr %a, i64 %n) {",
        "entry:",
        _field("next", Field.NEXT),
        _field("status", Field.STATUS),
        "  br label %loop",
        "loop:",
        "  %c = atomicrmw add ptr %next, i64 1 seq_cst",
        "  %more = icmp slt i64 %c, %n",
        "  br i1 %more, label %body, label %done",
        "body:",
        "  %s = call i32 @call_job(ptr %job, ptr %a, i64 %c)",
        "  %bad = icmp ne i32 %s, 0",
        "  br i1 %bad, label %fail, label %loop",
        "fail:",
        "  store atomic i32 %s, ptr %status monotonic, align 4",
        "  br label %loop",
        "done:",
        "  ret void",
        "}",
    ])  # fmt: skip


def _run_first() -> list[str]:
    """tfcli_run's start: the job run once before the chunks (quantizing x), if there is one."""
    return [
        "entry:",
        "  %has_first = icmp ne ptr %first, null",
        "  br i1 %has_first, label %run_first, label %dispatch",
        "run_first:",
        "  %s0 = call i32 @call_job(ptr %first, ptr %a, i64 0)",
        "  %bad0 = icmp ne i32 %s0, 0",
        "  br i1 %bad0, label %failed_first, label %dispatch",
        "failed_first:",
        "  ret i32 %s0",
        "dispatch:",
        "  %no_pool = icmp eq ptr %p, null",
        "  br i1 %no_pool, label %serial, label %has_pool",
        "has_pool:",
        _field("workers_at", Field.WORKERS),
        "  %workers = load i64, ptr %workers_at, align 8",
        "  %alone = icmp eq i64 %workers, 0",
        "  br i1 %alone, label %serial, label %parallel",
    ]  # fmt: skip


def _run_serial() -> list[str]:
    """No pool, or one without workers: every chunk on the caller's thread, through a pool of this
    call's own."""
    return [
        "serial:",
        f"  %own = alloca [{SIZE} x i8], align 64",
        _field("own_next", Field.NEXT, "%own"),
        "  store i64 0, ptr %own_next, align 8",
        _field("own_status", Field.STATUS, "%own"),
        "  store i32 0, ptr %own_status, align 4",
        "  call void @take_chunks(ptr %own, ptr %job, ptr %a, i64 %n)",
        "  %serial_status = load i32, ptr %own_status, align 4",
        "  ret i32 %serial_status",
    ]  # fmt: skip


def _run_parallel(futex: int) -> list[str]:
    """Post the job (its fields, then a new generation), wake the sleepers, take chunks too."""
    return [
        "parallel:",
        _field("job_at", Field.JOB),
        "  store ptr %job, ptr %job_at, align 8",
        _field("args_at", Field.ARGS),
        "  store ptr %a, ptr %args_at, align 8",
        _field("chunks_at", Field.CHUNKS),
        "  store i64 %n, ptr %chunks_at, align 8",
        _field("next_at", Field.NEXT),
        "  store i64 0, ptr %next_at, align 8",
        _field("status_at", Field.STATUS),
        "  store i32 0, ptr %status_at, align 4",
        _field("pending_at", Field.PENDING),
        "  store i64 %workers, ptr %pending_at, align 8",
        "  %g = atomicrmw add ptr %p, i32 1 seq_cst",  # GEN, at the pool's start
        _field("sleepers_at", Field.SLEEPERS),
        "  %sleepers = load atomic i64, ptr %sleepers_at seq_cst, align 8",
        "  %asleep = icmp ne i64 %sleepers, 0",
        "  br i1 %asleep, label %wake, label %work",
        "wake:",
        f"  %woken = call i64 (i64, ...) @syscall(i64 {futex}, ptr %p, i64 {FUTEX_WAKE_PRIVATE}, i64 2147483647)",
        "  br label %work",
        "work:",
        "  call void @take_chunks(ptr %p, ptr %job, ptr %a, i64 %n)",
        "  br label %wait",
    ]  # fmt: skip


def _run_wait(pause: str) -> list[str]:
    """Wait, spinning, until every worker has finished its last chunk; the job's status."""
    return [
        "wait:",
        "  %pending = load atomic i64, ptr %pending_at acquire, align 8",
        "  %busy = icmp ne i64 %pending, 0",
        "  br i1 %busy, label %spin, label %finish",
        "spin:",
        f"  {pause}",
        "  br label %wait",
        "finish:",
        "  %st = load atomic i32, ptr %status_at monotonic, align 4",
        "  ret i32 %st",
    ]  # fmt: skip


def _run(pause: str, futex: int) -> str:
    """tfcli_run(pool, first, job, a, chunks) -> status, run by the caller (pool null: every chunk
    on the caller's thread)."""
    body = _run_first() + _run_serial() + _run_parallel(futex) + _run_wait(pause)
    return "\n".join(["define i32 @tfcli_run(ptr %p, ptr %first, ptr %job, ptr %a, i64 %n) {", *body, "}"])


def _work(pause: str, futex: int) -> str:
    """tfcli_work(pool, seen): a worker's loop for life. It spins on GEN until a new job is posted,
    for up to SPIN_CYCLES, then sleeps on the futex; it takes the job's chunks, then says it is done."""
    return "\n".join([
        "define i32 @tfcli_work(ptr %p, i32 %seen0) {",
        "entry:",
        _field("sleepers_at", Field.SLEEPERS),
        _field("pending_at", Field.PENDING),
        _field("job_at", Field.JOB),
        _field("args_at", Field.ARGS),
        _field("chunks_at", Field.CHUNKS),
        "  br label %idle",
        "idle:",
        "  %seen = phi i32 [%seen0, %entry], [%g, %run]",
        "  %t0 = call i64 @llvm.readcyclecounter()",
        "  br label %poll",
        "poll:",
        "  %g = load atomic i32, ptr %p acquire, align 4",
        "  %same = icmp eq i32 %g, %seen",
        "  br i1 %same, label %waiting, label %run",
        "waiting:",
        f"  {pause}",
        "  %t = call i64 @llvm.readcyclecounter()",
        "  %dt = sub i64 %t, %t0",
        f"  %long = icmp ugt i64 %dt, {SPIN_CYCLES}",
        "  br i1 %long, label %sleep, label %poll",
        "sleep:",
        "  %s1 = atomicrmw add ptr %sleepers_at, i64 1 seq_cst",
        "  %expected = zext i32 %seen to i64",
        f"  %slept = call i64 (i64, ...) @syscall(i64 {futex}, ptr %p, i64 {FUTEX_WAIT_PRIVATE}, i64 %expected, i64 0)",
        "  %s2 = atomicrmw sub ptr %sleepers_at, i64 1 seq_cst",
        "  br label %poll",
        "run:",
        "  %job = load ptr, ptr %job_at, align 8",
        "  %a = load ptr, ptr %args_at, align 8",
        "  %n = load i64, ptr %chunks_at, align 8",
        "  call void @take_chunks(ptr %p, ptr %job, ptr %a, i64 %n)",
        "  %left = atomicrmw sub ptr %pending_at, i64 1 release",
        "  br label %idle",
        "}",
    ])  # fmt: skip


def source(x86: bool, futex: int) -> str:
    """The pool's LLVM IR: tfcli_run and tfcli_work, and the two helpers they share."""
    pause = "call void @llvm.x86.sse2.pause()" if x86 else "fence seq_cst"
    pieces = [_declarations(x86), _call_job(), _take_chunks(), _run(pause, futex), _work(pause, futex)]
    return "\n\n".join(pieces) + "\n"
