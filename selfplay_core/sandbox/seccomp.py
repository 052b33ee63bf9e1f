"""The sandbox's seccomp filters: small BPF programs built here (no libseccomp), installed with
prctl. Stdlib only, and run as part of the worker's program (backends.worker_source), so it
defines nothing the worker does not use.

* base: installed once in every worker before its first job, so it holds for every child:
  refuses what would let a job keep state past itself or reach another job or the kernel's
  riskier interfaces (SysV IPC, POSIX message queues, keyrings, namespaces, ptrace class,
  mounts, bpf, perf, userfaultfd, io_uring, memfd, modules, system-wide switches), turns
  clone3 into ENOSYS (glibc falls back to clone, whose flags the filter can read) and clone
  with a namespace flag into EPERM, and kills a process making a system call through another
  ABI (x32, 32-bit entry points) whose numbers the filter would misread.
* pure: stacked on top in the child of a reference run under an import allow-list: also no
  files, processes, sockets, randomness, process identity or resource readings.

x86-64 only; elsewhere `build_filters()` is None and the worker says so in READY.
"""

# --------------------------------------------------------------------------------------------

_AUDIT_ARCH_X86_64 = 0xC000003E
_EPERM, _ENOSYS = 1, 38
_RET_ALLOW, _RET_ERRNO, _RET_KILL = 0x7FFF0000, 0x00050000, 0x80000000
_CLONE_NS = 0x7E020000   # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
_CLONE_THREAD = 0x00010000

# Always refused: kernel state that outlives a process or is shared across jobs (SysV IPC,
# POSIX message queues, keyrings), namespaces (unshare/setns, clone with CLONE_NEW*),
# other processes' memory (ptrace class), mounts, kernel interfaces with a history of bugs
# (bpf, perf, userfaultfd, io_uring), memory outside every rlimit (memfd), modules, and
# system-wide switches.
_DENY_BASE = {
    29: "shmget", 30: "shmat", 31: "shmctl", 67: "shmdt", 64: "semget", 65: "semop",
    66: "semctl", 220: "semtimedop", 68: "msgget", 69: "msgsnd", 70: "msgrcv", 71: "msgctl",
    240: "mq_open", 241: "mq_unlink", 242: "mq_timedsend", 243: "mq_timedreceive",
    244: "mq_notify", 245: "mq_getsetattr",
    248: "add_key", 249: "request_key", 250: "keyctl",
    272: "unshare", 308: "setns",
    101: "ptrace", 310: "process_vm_readv", 311: "process_vm_writev", 312: "kcmp",
    438: "pidfd_getfd", 440: "process_madvise",
    165: "mount", 166: "umount2", 155: "pivot_root", 161: "chroot", 428: "open_tree",
    429: "move_mount", 430: "fsopen", 431: "fsconfig", 432: "fsmount", 433: "fspick",
    442: "mount_setattr", 303: "name_to_handle_at", 304: "open_by_handle_at",
    321: "bpf", 298: "perf_event_open", 323: "userfaultfd", 425: "io_uring_setup",
    426: "io_uring_enter", 427: "io_uring_register",
    319: "memfd_create", 447: "memfd_secret",
    246: "kexec_load", 320: "kexec_file_load", 175: "init_module", 313: "finit_module",
    176: "delete_module", 167: "swapon", 168: "swapoff", 169: "reboot", 170: "sethostname",
    171: "setdomainname", 163: "acct", 179: "quotactl", 135: "personality", 172: "iopl",
    173: "ioperm", 154: "modify_ldt", 103: "syslog", 212: "lookup_dcookie", 134: "uselib",
    300: "fanotify_init",
}
# Reference programs under an import allow-list ("pure" runs) may compute, allocate and write
# to the fds they were given, nothing else: no files, processes, sockets or randomness.
_DENY_PURE = {
    2: "open", 257: "openat", 437: "openat2", 85: "creat", 59: "execve", 322: "execveat",
    57: "fork", 58: "vfork", 41: "socket", 53: "socketpair", 318: "getrandom",
    86: "link", 265: "linkat", 87: "unlink", 263: "unlinkat", 82: "rename", 264: "renameat",
    316: "renameat2", 83: "mkdir", 258: "mkdirat", 84: "rmdir", 88: "symlink",
    266: "symlinkat", 133: "mknod", 259: "mknodat", 90: "chmod", 268: "fchmodat",
    92: "chown", 94: "lchown", 260: "fchownat", 76: "truncate", 132: "utime", 235: "utimes",
    280: "utimensat", 261: "futimesat", 80: "chdir", 81: "fchdir", 253: "inotify_init",
    294: "inotify_init1", 99: "sysinfo", 100: "times", 98: "getrusage",
    # Process identity: pids in a worker's pid namespace repeat from worker to worker, so
    # they would not even show up as nondeterminism; refused, they read as -1 everywhere
    # (the kernel's -EPERM is -1, which CPython returns as is: a constant, never an error).
    39: "getpid", 110: "getppid", 186: "gettid", 121: "getpgid", 124: "getsid",
    111: "getpgrp",
    # Machine and process facts: the host's name and kernel (the UTS namespace starts as a
    # copy), the job's uid and scratch path, CPU placement. Refused: CPython raises OSError.
    63: "uname", 79: "getcwd", 204: "sched_getaffinity", 309: "getcpu",
    102: "getuid", 104: "getgid", 107: "geteuid", 108: "getegid", 118: "getresuid",
    120: "getresgid",
}


def _bpf(denied, clone_mask):
    """BPF bytes: kill foreign-arch/x32 syscalls, EPERM the denied ones, clone3 -> ENOSYS
    (glibc then falls back to clone, whose flags we can inspect), clone with any bit of
    `clone_mask` -> EPERM, everything else allowed."""
    import struct

    def stmt(code, k):
        return (code, 0, 0, k)

    def jeq(k, jt, jf):
        return (0x15, jt, jf, k)

    ld_abs, ret, and_k, jge = 0x20, 0x06, 0x54, 0x35
    nrs = sorted(denied)
    prog = [
        stmt(ld_abs, 4),                           # arch
        jeq(_AUDIT_ARCH_X86_64, 1, 0),
        stmt(ret, _RET_KILL),
        stmt(ld_abs, 0),                           # syscall number
        (jge, 0, 1, 0x40000000),                   # x32 ABI
        stmt(ret, _RET_KILL),
    ]
    # Each denied number jumps forward to the EPERM return placed after the list.
    n = len(nrs)
    for j, nr in enumerate(nrs):
        prog.append(jeq(nr, (n - j - 1) + 3, 0))
    prog.append(jeq(435, 1, 0))                    # clone3
    prog.append(jeq(56, 3, 2))                     # clone -> flag check
    prog.append(stmt(ret, _RET_ERRNO | _ENOSYS))
    prog.append(stmt(ret, _RET_ERRNO | _EPERM))
    prog.append(stmt(ret, _RET_ALLOW))
    prog.append(stmt(ld_abs, 16))                  # clone: low word of flags
    prog.append(stmt(and_k, clone_mask))
    prog.append(jeq(0, 1, 0))
    prog.append(stmt(ret, _RET_ERRNO | _EPERM))
    prog.append(stmt(ret, _RET_ALLOW))
    assert all(j < 256 for _, j, _, _ in prog)
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog), len(prog)


def _fix_pure_clone(code, count):
    # In the pure filter, clone without CLONE_THREAD (a new process) is refused too: the mask
    # test above is "flags & mask == 0 -> allow"; for pure runs we want "is a thread and has
    # no namespace flag", i.e. (flags & (NS|THREAD)) == THREAD. Patch the comparison constant.
    import struct
    ins = [struct.unpack_from("=HBBI", code, 8 * i) for i in range(count)]
    ins[-3] = (0x15, 1, 0, _CLONE_THREAD)
    return b"".join(struct.pack("=HBBI", *x) for x in ins)


def build_filters():
    """(libc, base program, pure program, buffers) for this machine, or None off x86-64."""
    import ctypes
    import platform
    if platform.machine() not in ("x86_64", "AMD64"):
        return None

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    out = []
    for pure in (False, True):
        denied = dict(_DENY_BASE)
        if pure:
            denied.update(_DENY_PURE)
        mask = _CLONE_NS | _CLONE_THREAD if pure else _CLONE_NS
        code, n = _bpf(denied, mask)
        if pure:
            code = _fix_pure_clone(code, n)
        buf = ctypes.create_string_buffer(code, len(code))
        prog = SockFprog(n, ctypes.addressof(buf))
        out.append((prog, buf))  # keep the buffer alive with the struct
    libc = ctypes.CDLL(None, use_errno=True)
    return libc, out[0][0], out[1][0], (out[0][1], out[1][1])


def install_filter(filters, which):
    """no_new_privs, then filter `which` ("base" or "pure") of `filters` (build_filters()).
    Raises on failure.

    The base filter is installed once in the worker itself (it needs none of the calls it
    refuses) and so holds for every child it forks; filters only ever add restrictions, so
    the pure one is stacked on top in a reference run's child."""
    import ctypes
    libc, base, strict, _ = filters
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
    prog = base if which == "base" else strict
    if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        raise OSError(ctypes.get_errno(), "seccomp filter refused")
