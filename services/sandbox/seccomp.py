"""The seccomp filter every sandboxed process runs under, compiled to a BPF program by libseccomp.

A deny-list on top of the namespaces: calls that reach the kernel's wider attack surface or let the
code leave its namespaces fail with EPERM, and sockets other than AF_UNIX fail with EACCES, so "no
network" is reported as a clear permission error rather than a mysterious hang. Syscalls of foreign
ABIs (32-bit int 0x80, x32) kill the process: libseccomp's default for a filter of the native arch.
bwrap installs the program (`--seccomp FD`) right before it execs the runtime.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import tempfile

log = logging.getLogger(__name__)

# Mount, namespaces, kernel keyring, BPF, tracing other processes, modules, clocks, swap, reboot...
DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
    "open_by_handle_at", "name_to_handle_at",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd", "fanotify_init", "lookup_dcookie",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "syslog", "acct", "quotactl", "vhangup",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "sethostname", "setdomainname", "iopl", "ioperm",
)  # fmt: skip

# clone() flags that create namespaces: a new user namespace would hand the code capabilities again.
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
_TIOCSTI = 0x5412  # pushes bytes into a terminal's input: the classic sandbox escape via a shared tty


class SeccompUnavailable(RuntimeError):
    """libseccomp (Debian: libseccomp2) is missing, or this kernel has no seccomp filters."""


def build_program() -> bytes:
    """The filter as a BPF program (struct sock_filter[]), ready for `bwrap --seccomp FD`."""
    try:
        import pyseccomp as sc
    except (ImportError, RuntimeError, OSError) as exc:
        raise SeccompUnavailable(f"libseccomp is not available ({exc}); install libseccomp2") from None
    filt = sc.SyscallFilter(sc.ALLOW)
    eperm, eacces = sc.ERRNO(errno.EPERM), sc.ERRNO(errno.EACCES)
    for name in DENIED:
        _add(sc, filt, eperm, name)
    # Only AF_UNIX sockets (socketpair, local IPC inside the sandbox); the network namespace has no route anyway.
    _add(sc, filt, eacces, "socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
    _add(sc, filt, eperm, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, _TIOCSTI))
    for flag in _bits(NAMESPACE_FLAGS):
        _add(sc, filt, eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc fall back to clone().
    _add(sc, filt, sc.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as out:
        filt.export_bpf(out)
        out.seek(0)
        program = out.read()
    if not program or len(program) % 8:
        raise SeccompUnavailable("libseccomp produced no BPF program")
    return program


def program_fd(program: bytes) -> int:
    """A readable fd holding `program`, for one bwrap start (bwrap reads it to the end)."""
    r, w = os.pipe()
    try:
        os.write(w, program)  # a few hundred bytes: always fits in the pipe buffer
    finally:
        os.close(w)
    return r


def _add(sc, filt, action: int, name: str, *args) -> None:  # type: ignore[no-untyped-def]
    try:
        filt.add_rule(action, name, *args)
    except (OSError, ValueError, RuntimeError) as exc:
        # A syscall this libseccomp or arch does not know cannot be called here either.
        log.debug("seccomp: skipping %s: %s", name, exc)


def _bits(mask: int) -> list[int]:
    return [1 << i for i in range(64) if mask >> i & 1]
