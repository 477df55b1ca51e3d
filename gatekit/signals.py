"""Holding back termination signals while cleanup or a journal write must finish; the one place gatekit
installs signal handlers.

A signal gatekit finds ignored (SIG_IGN) is left ignored everywhere here: whoever started the gate asked for
that — `nohup` ignores SIGHUP so that a closed terminal does not stop the job, a shell without job control
ignores SIGINT in a background job (`gate run … &`), and their trainers inherit the same.

Depends on no other gatekit module, so the disk writer (storage) and the plugin API (driver) can both use it.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

# SIGHUP does not exist on Windows, where only the commands that start no trainer run (docs/install.md)
DEFERRED_SIGNALS: tuple[signal.Signals, ...] = tuple(
    sig for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if sig is not None)
INTERRUPTING_SIGNALS = DEFERRED_SIGNALS[1:]  # turned into KeyboardInterrupt like SIGINT (Python's own)


def handled(signals: tuple[signal.Signals, ...]) -> tuple[signal.Signals, ...]:
    """Those of `signals` that are not ignored now: the ones gatekit may give a handler of its own."""
    return tuple(sig for sig in signals if signal.getsignal(sig) != signal.SIG_IGN)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold back SIGINT/SIGTERM/SIGHUP while the block runs; they are delivered when it ends.

    Used around cleanup and journal writes: a second Ctrl-C must not leave a trainer running or tear an
    event in half. Python runs signal handlers in the main thread whichever thread the OS picked (the
    sampler's, often), so the handlers are swapped for one that notes the signal; a blocked mask would
    only cover the main thread. Outside the main thread this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[signal.Signals] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signal.Signals(signum)))
                for sig in handled(DEFERRED_SIGNALS)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for sig in dict.fromkeys(caught):
            signal.raise_signal(sig)  # now handled as if it had just arrived


def default_handlers_in_child() -> None:
    """In a process forked from the gate: the gate's own handlers are not its own, so they go back to the
    default; a signal the gate inherited ignored stays ignored there too."""
    for sig in handled(DEFERRED_SIGNALS):
        signal.signal(sig, signal.SIG_DFL)


def ignore_further_interrupts() -> None:
    """Once an interrupt is being handled (trainer stopped, journal written), later signals are ignored:
    pressing Ctrl-C again must not cut the journaling short or turn exit 130 into a traceback."""
    if threading.current_thread() is threading.main_thread():
        for sig in DEFERRED_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


@contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP (a closed terminal or ssh session) into KeyboardInterrupt, so a stopped
    series is cleaned up and journaled like Ctrl-C instead of leaving its trainer running. One that is
    ignored when the block starts (`nohup`'s SIGHUP) stays ignored."""
    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        # SIGINT's handler is saved too: handling an interrupt ignores further ones until this block ends.
        previous = {sig: signal.getsignal(sig) for sig in DEFERRED_SIGNALS}
        for sig in handled(INTERRUPTING_SIGNALS):
            signal.signal(sig, raise_interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
