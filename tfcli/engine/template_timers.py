"""The two timers that stop a chat template's render at its deadline where the budget's own checks
(template_budget.py) never run: inside a loop that calls nothing, or inside a library a filter
calls. On the main thread a signal (_alarm); elsewhere a watchdog thread (_Watchdog)."""

from __future__ import annotations

import signal
import threading
import time

from .template_budget import _Expired, _Limits


class _alarm:
    """On the main thread, a timer that interrupts the render at its deadline even inside a loop
    that calls nothing (the checks above never run there). Restored on the way out."""

    def __init__(self, limits: _Limits):
        self.limits = limits
        self.armed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")

    def __enter__(self):
        if self.armed:

            def expire(signum, frame):
                self.limits.expired = True
                self.limits.check()

            try:
                self.previous = signal.signal(signal.SIGALRM, expire)
                signal.setitimer(signal.ITIMER_REAL, max(self.limits.deadline - time.monotonic(), 0.001))
            except (ValueError, OSError):  # not allowed here (an embedded interpreter)
                self.armed = False
        return self

    def __exit__(self, *exc):
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
        return False


class _Watchdog:
    """Off the main thread, where no signal can be delivered: from the deadline on, a timer thread
    raises _Expired in the rendering thread (PyThreadState_SetAsyncExc, which takes effect at the
    thread's next Python instruction), again every REPEAT seconds until the render has ended: an
    exception that strikes inside a weakref callback or a __del__ is printed and dropped by Python,
    so one is not enough. The checks in the template's own loops and calls stop it first; this stops
    Python code of a library the template called that loops a long time (textwrap in `wordwrap`,
    `urlize`, `unique`, `batch`). A pending exception is withdrawn on the way out, under the lock
    the timer raises under, so it can never strike after the render."""

    REPEAT = 0.2

    def __init__(self, limits: _Limits):
        self.limits = limits
        self.armed = threading.current_thread() is not threading.main_thread()
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.active = self.fired = False

    def _raise(self, exc) -> None:
        import ctypes

        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread), ctypes.py_object(exc) if exc else None)

    def _watch(self) -> None:
        delay = max(self.limits.deadline - time.monotonic(), 0) + 0.1
        while not self.done.wait(delay):
            with self.lock:
                if not self.active:
                    return
                self.limits.expired = self.fired = True
                self._raise(_Expired)
            delay = self.REPEAT

    def __enter__(self):
        if self.armed:
            self.thread, self.active = threading.get_ident(), True
            self.timer = threading.Thread(target=self._watch, name="tfcli-template-watchdog", daemon=True)
            self.timer.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def stop(self) -> None:
        """No exception raised from here on; one pending is withdrawn. Safe to call again (the
        render calls it once more on its way out, in case one struck as this began)."""
        while self.armed:
            try:
                self.done.set()
                with self.lock:
                    self.active = False
                    if self.fired:
                        self._raise(None)  # withdraw one that has not struck yet
                return
            except _Expired:  # struck while stopping: stop again
                continue
