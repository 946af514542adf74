package driverkit

// Where a host account can create one (root on a host with a writable
// cgroup2 mount), LaunchRunnerByExec starts the runner, and so every task
// it starts, in a cgroup of its own per lease: berth/<lease> under
// the first cgroup2 mount of the host. The lease's release check
// (CgroupKillScript, run by the lease manager over a fresh session) kills
// it with cgroup.kill, waits until it is empty and removes it: evidence
// that no process of the runner is left (EvidenceCgroup) which a task
// cannot evade by clearing its environment. A task of an unprivileged
// account cannot move itself out of a root-owned cgroup; a task running as
// root can (root can do anything on its host). Where no cgroup can be made
// (not root, no writable cgroup2 mount) the runner runs without one and
// the check falls back to the tag scan (EvidenceTagScan).

// cgroupParent is the directory, under the host's cgroup2 mount, of the
// per-lease cgroups of runners.
const cgroupParent = "berth"

// cgroupEnterScript moves the shell running it into the lease's cgroup
// ("$lease" names it) when the account is root and a cgroup2 mount takes
// a new directory; it never fails: without a cgroup the runner runs as
// before. Its children (the runner, its tasks) inherit the cgroup.
const cgroupEnterScript = `if [ -n "$lease" ] && [ "$(id -u 2>/dev/null)" = 0 ] && [ -r /proc/self/mounts ]; then
	while read -r _ m t _; do
		[ "$t" = cgroup2 ] || continue
		d="$m/` + cgroupParent + `/$lease"
		mkdir -p "$d" 2>/dev/null && echo $$ > "$d/cgroup.procs" 2>/dev/null
		break
	done < /proc/self/mounts
fi
`

// CgroupKillScript ($1 = the lease id, a name without "/") ends the
// lease's cgroup from outside it: when cgroupParent/<lease> exists under
// the host's first cgroup2 mount, it writes cgroup.kill (where the kernel
// has it; else it SIGKILLs every pid in cgroup.procs, repeatedly), waits
// (up to about five seconds) until cgroup.events says "populated 0",
// removes the cgroup and prints "cgroup DIR: killed N process(es), empty,
// removed". Without such a cgroup it prints "no cgroup" and exits 0 (the
// caller relies on its tag scan alone). A cgroup that stays populated or
// cannot be removed prints why and exits 1. Its own shell is not in the
// cgroup (a fresh session), so it never counts itself.
const CgroupKillScript = `id=$1
case "$id" in ""|*/*|.|..) echo "bad lease id"; exit 2;; esac
d=
if [ -r /proc/self/mounts ]; then
	while read -r _ m t _; do
		[ "$t" = cgroup2 ] || continue
		[ -d "$m/` + cgroupParent + `/$id" ] && d="$m/` + cgroupParent + `/$id"
		break
	done < /proc/self/mounts
fi
[ -n "$d" ] || { echo "no cgroup"; exit 0; }
populated() { ! grep -qx 'populated 0' "$d/cgroup.events" 2>/dev/null; }
n=$(wc -l < "$d/cgroup.procs" 2>/dev/null | tr -d ' ')
i=0
while populated; do
	if [ -e "$d/cgroup.kill" ]; then echo 1 > "$d/cgroup.kill"
	else for p in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done; fi
	i=$((i+1)); if [ $i -ge 50 ]; then echo "cgroup $d still populated: $(tr '\n' ' ' < "$d/cgroup.procs" 2>/dev/null)"; exit 1; fi
	sleep 0.1 2>/dev/null || sleep 1
done
rmdir "$d" 2>/dev/null || { echo "cgroup $d empty but not removed"; exit 1; }
echo "cgroup $d: killed ${n:-0} process(es), empty, removed"`

// cgroupName reports whether lease can name a cgroup directory: letters,
// digits, '_', '-' and '.', not "." or "..".
func cgroupName(lease string) bool {
	if lease == "" || lease == "." || lease == ".." {
		return false
	}
	for _, r := range lease {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}
