"""What the tests look at on the machine where execd runs: processes and cgroups.

Plain functions over /proc and /sys/fs/cgroup, standard library only (os), no
json: with EXECD_REMOTE set (execd in a VM, see execd_client.Machine) this
whole file is sent to the guest's python3 with one call appended, and the
result comes back as its repr(). Locally the same functions run in-process,
so both paths run the same code. Nothing here may import a module the
guest's python3-minimal lacks.
"""

import os

# execd's spare launchers (pty/launcher): processes waiting in spare cgroups
# to become the next command. No test means them when it counts commands'
# processes, so every scan here leaves them out unless asked.
SPARE_COMM = "execd-spare"


def is_spare(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip() == SPARE_COMM
    except OSError:
        return False


def proc_table(cgroups=True, rss=True, spares=False):
    """(pid, state, ppid, cmdline, cgroup, rss_kib) of every process (execd's
    spare launchers only with `spares`).

    cmdline has its NULs turned into spaces; cgroup is /proc/PID/cgroup's
    text ("" unless `cgroups`); rss_kib is VmRSS (0 for kernel threads, and
    unless `rss`). Processes that vanish while being read are left out.
    """
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            cg = ""
            if cgroups:
                with open("/proc/%s/cgroup" % d) as f:
                    cg = f.read()
            kib = 0
            if rss:
                with open("/proc/%s/status" % d) as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            kib = int(line.split()[1])
                            break
        except OSError:
            continue
        # comm may contain spaces and parentheses: split after the last ')'
        if not spares and stat[stat.find("(") + 1:stat.rfind(")")] == SPARE_COMM:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        out.append((int(d), rest[0], int(rest[1]), cmd, cg, kib))
    return out


def find_dirs(root, name, max_depth, skip_prefix=""):
    """Every directory called `name` under `root`, at most `max_depth` levels
    down; below a match, and into directories starting with `skip_prefix`
    (when given), it does not descend."""
    found = []
    base = root.count("/")
    for top, dirs, _ in os.walk(root):
        if top.count("/") > base + max_depth:
            dirs[:] = []
            continue
        if name in dirs:
            found.append(os.path.join(top, name))
            dirs.remove(name)
        if skip_prefix:
            dirs[:] = [d for d in dirs if not d.startswith(skip_prefix)]
    return found


def listdir(path):
    return os.listdir(path)


def cgroup_procs(bases, prefix="cmd-", spares=False):
    """Every pid in cgroup.procs of each `prefix`* child of each base (spare
    launchers only with `spares`)."""
    out = set()
    for base in bases:
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            if name.startswith(prefix):
                try:
                    with open(os.path.join(base, name, "cgroup.procs")) as f:
                        out.update(int(x) for x in f.read().split() if spares or not is_spare(int(x)))
                except OSError:
                    pass
    return out


def read_text(path):
    with open(path) as f:
        return f.read()


def rmdir(path):
    """True if removed (the kernel refuses a cgroup with members)."""
    try:
        os.rmdir(path)
        return True
    except OSError:
        return False


def kill(pid, sig):
    os.kill(pid, sig)


def exists(path):
    return os.path.exists(path)


def unlink(path):
    os.unlink(path)


def spare_pids(parent):
    """execd's spare launchers: children of `parent` named SPARE_COMM."""
    out = []
    for pid, state, ppid, _, _, _ in proc_table(False, False, True):
        if ppid == parent and state != "Z" and is_spare(pid):
            out.append(pid)
    return sorted(out)
