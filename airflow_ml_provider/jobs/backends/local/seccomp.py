"""The seccomp filter every sandboxed job runs under: system calls a training job never needs fail with EPERM.

What it refuses: mounting and changing root, new or joined namespaces, the kernel keyring, kernel modules and
kexec, ``ptrace`` and reading or writing another process's memory (a job cannot stop its sandbox's init or
read a peer's secrets), eBPF, perf events, userfaultfd, swap, reboot, accounting, quotas, file handles
(``open_by_handle_at`` walks around every mount) and raw port I/O. Everything else is allowed. A call from
another ABI (x32, or 32-bit ``int 0x80`` on x86-64) is refused whole, so no number is reachable twice.

The program is classic BPF, built here with ``struct`` (no libseccomp needed) and handed to bubblewrap's
``--seccomp FD``, which loads it after setting ``no_new_privs``, just before it runs the job's command.
Only x86-64 numbers are listed: elsewhere ``program()`` returns None and the job runs without the filter
(the namespaces, the unprivileged user and the read-only kernel interfaces still hold).
"""

from __future__ import annotations

import errno
import os
import struct

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
# syscall numbers of x86-64 (arch/x86/entry/syscalls/syscall_64.tbl)
REFUSED_X86_64 = {
    "ptrace": 101, "syslog": 103, "pivot_root": 155, "chroot": 161, "acct": 163, "mount": 165, "umount2": 166,
    "swapon": 167, "swapoff": 168, "reboot": 169, "iopl": 172, "ioperm": 173, "init_module": 175,
    "delete_module": 176, "quotactl": 179, "lookup_dcookie": 212, "kexec_load": 246, "add_key": 248,
    "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311,
    "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
}
_CLONE, _CLONE3 = 56, 435
_CLONE_NEWUSER = 0x10000000
_LD_ABS_W, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | errno.EPERM
_RET_ENOSYS = 0x00050000 | errno.ENOSYS  # clone3: its flags are out of a filter's reach; libc falls back to clone
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (the low half of args[0] on little-endian)


def program() -> bytes | None:
    """The filter as ``struct sock_filter`` records, or None where this machine's ABI has no table here.

    Besides the listed calls it refuses ``clone`` with ``CLONE_NEWUSER`` (a sandbox made by root has no user
    namespace of its own whose nesting bubblewrap could disable) and answers ``clone3`` with ENOSYS."""
    if os.uname().machine != "x86_64":
        return None
    numbers = sorted(set(REFUSED_X86_64.values()))
    code: list[tuple] = [(_LD_ABS_W, 0, 0, _ARCH), (_JEQ_K, 1, 0, _AUDIT_ARCH_X86_64), (_RET_K, 0, 0, _RET_EPERM),
                         (_LD_ABS_W, 0, 0, _NR), (_JGE_K, "refuse", 0, _X32_BIT), (_JEQ_K, "clone", 0, _CLONE),
                         (_JEQ_K, "enosys", 0, _CLONE3)]
    code += [(_JEQ_K, "refuse", 0, number) for number in numbers]
    code.append((_RET_K, 0, 0, _RET_ALLOW))
    labels = {"clone": len(code)}
    code += [(_LD_ABS_W, 0, 0, _ARG0), (_JSET_K, "refuse", 0, _CLONE_NEWUSER), (_RET_K, 0, 0, _RET_ALLOW)]
    labels["enosys"] = len(code)
    code.append((_RET_K, 0, 0, _RET_ENOSYS))
    labels["refuse"] = len(code)
    code.append((_RET_K, 0, 0, _RET_EPERM))
    resolved = [(op, labels[jt] - i - 1 if isinstance(jt, str) else jt, jf, k) for i, (op, jt, jf, k) in enumerate(code)]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in resolved)


def program_fd() -> int | None:
    """A readable descriptor holding ``program()`` (a pipe, closed-on-exec off so bwrap inherits it), or None."""
    data = program()
    if data is None:
        return None
    read, write = os.pipe()
    os.write(write, data)  # a few hundred bytes: far below a pipe's buffer
    os.close(write)
    os.set_inheritable(read, True)
    return read
