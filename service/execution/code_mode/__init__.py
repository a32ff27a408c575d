"""Code mode: one JavaScript program calls many tools, inside budgets, through the same path as /execute.

    routes.py   POST /run
    runner.py   the queue of scripts, budgets, each call through Executor.execute with the caller and run id
    sandbox.py  the engine's child process as the service sees it
    worker.py   the child: one QuickJS context per script, JSON lines on stdin/stdout
    prelude.js  what the context runs before the script: tools, search_tools, console, the host functions hidden

The engine is QuickJS (PyPI `quickjs-ng`) in a child process per script, chosen over V8 (`mini-racer`) by a
measurement on this machine (medians): a fresh QuickJS context costs 0.12 ms (V8 6.8 ms and +48 MiB of
resident memory), a tool-call round trip in process 34 us (V8 218 us), and its memory limit stops a 32 MiB hog
at exactly 32 MiB allocated. V8 stops a plain loop at a 1.0 s wall-clock timeout in 1.002 s, but when a Python
async function it calls finishes while JavaScript is busy, mini-racer resolves the promise synchronously and
blocks the caller's event loop (3.0 s stall measured), and code after an `await` escapes the eval's timeout.
QuickJS's own time limit counts process CPU time (1.38-1.48 s wall for 1 s on this shared machine) and refuses
calls into Python while set, so the wall-clock budget is the service killing the child (exact to a few ms);
the child's CPU rlimit is a backstop. A child costs ~35 ms to start and ~14 MiB resident (~90 MiB of address
space, mostly reserved: importing quickjs starts a thread, and glibc reserves its malloc arena), under an
address-space rlimit (code_mode.process_memory_mib, 1024 MiB) that also bounds what QuickJS's heap limit does not
count: a script's values copied into Python. A full 256 MiB heap measured 345 MiB of address space.

The engine is an isolation convenience, not a security boundary: what a script may do is decided by the
caller's scope, approvals and rate limits, which apply to every call it makes.
"""

from .runner import CodeMode, code_mode

__all__ = ["CodeMode", "code_mode"]
