package kubecluster

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
)

// sysctls are the kernel settings a kubelet changes (its kernel
// tunables) and the CNI bridge may: they are put back as they were.
var sysctls = []string{
	"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.ipv4.ip_forward",
}

// hostPaths are the host's directories a kubelet, containerd or the CNI
// plugins write whatever their configured directories: each one absent
// before the cluster is removed after it.
var hostPaths = []string{
	"/var/lib/kubelet", "/var/lib/kubelet/device-plugins", "/var/lib/kubelet/plugins",
	"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/pod-resources",
	"/var/log/containers", "/var/log/pods", "/var/lib/cni", "/run/netns", "/var/run/netns",
	"/etc/cni", "/opt/cni", "/opt/containerd", "/etc/kubernetes", "/var/run/kubernetes", "/run/kubernetes",
}

// hostState is what the cluster may change on the machine, limited to what
// is the cluster's (Docker and other tests change the machine too: their
// iptables chains and mounts are not compared).
type hostState struct {
	Sysctls map[string]string `json:"sysctls"`
	// Paths are the hostPaths that exist.
	Paths []string `json:"paths"`
	// Chains are the iptables chains named KUBE-* or CNI-* ("iptables
	// filter KUBE-FIREWALL"), and the rules that jump to one.
	Chains []string `json:"chains"`
	// Cgroups are the directories named cgroupParent or kubepods at the
	// top of a cgroup hierarchy.
	Cgroups []string `json:"cgroups"`
	// Mounts are the mount points under the cluster's directory, the
	// kubelet's default root or /run/netns.
	Mounts []string `json:"mounts"`
	// Links are the network interfaces named bridgeName.
	Links []string `json:"links"`
}

// snapshotHost reads the host's state; base is the cluster's directory.
func snapshotHost(ctx context.Context, base string) hostState {
	s := hostState{Sysctls: map[string]string{}}
	for _, k := range sysctls {
		if b, err := os.ReadFile(sysctlPath(k)); err == nil {
			s.Sysctls[k] = strings.TrimSpace(string(b))
		}
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil {
			s.Paths = append(s.Paths, p)
		}
	}
	s.Chains = kubeChains(ctx)
	for _, h := range cgroupHierarchies() {
		for _, n := range []string{cgroupParent, "kubepods", "kubepods.slice"} {
			if _, err := os.Stat(filepath.Join(h, n)); err == nil {
				s.Cgroups = append(s.Cgroups, filepath.Join(h, n))
			}
		}
	}
	s.Mounts = mountsUnder(clusterMountRoots(base))
	if _, err := os.Stat("/sys/class/net/" + bridgeName); err == nil {
		s.Links = append(s.Links, bridgeName)
	}
	return s
}

// diff lists, one line each, how now differs from s ("" when the same).
func (s hostState) diff(now hostState) []string {
	var d []string
	for _, k := range sysctls {
		if s.Sysctls[k] != now.Sysctls[k] {
			d = append(d, fmt.Sprintf("sysctl %s = %q, was %q", k, now.Sysctls[k], s.Sysctls[k]))
		}
	}
	list := func(what string, before, after []string) {
		for _, x := range after {
			if !slices.Contains(before, x) {
				d = append(d, fmt.Sprintf("%s %s appeared", what, x))
			}
		}
		for _, x := range before {
			if !slices.Contains(after, x) {
				d = append(d, fmt.Sprintf("%s %s is gone", what, x))
			}
		}
	}
	list("path", s.Paths, now.Paths)
	list("iptables", s.Chains, now.Chains)
	list("cgroup", s.Cgroups, now.Cgroups)
	list("mount", s.Mounts, now.Mounts)
	list("network interface", s.Links, now.Links)
	return d
}

func sysctlPath(k string) string { return "/proc/sys/" + strings.ReplaceAll(k, ".", "/") }

// restoreHost puts back what the cluster changed since before: it
// unmounts the cluster's mounts, deletes its bridge, removes its cgroups,
// its iptables chains, the host paths that were absent, and writes back
// the sysctls. It does what it can and returns every failure.
func restoreHost(ctx context.Context, base string, before hostState) []error {
	var errs []error
	// Mounts, deepest first, detached (a busy one goes when its last user does).
	mounts := mountsUnder(clusterMountRoots(base))
	sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
	for _, m := range mounts {
		if slices.Contains(before.Mounts, m) {
			continue
		}
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	if _, err := os.Stat("/sys/class/net/" + bridgeName); err == nil && !slices.Contains(before.Links, bridgeName) {
		if _, err := run(ctx, "ip", "link", "delete", bridgeName); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeCgroups(before); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, removeChains(ctx, before.Chains)...)
	for _, p := range hostPaths {
		if slices.Contains(before.Paths, p) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	for k, v := range before.Sysctls {
		b, err := os.ReadFile(sysctlPath(k))
		if err != nil || strings.TrimSpace(string(b)) == v {
			continue
		}
		if err := os.WriteFile(sysctlPath(k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("put back sysctl %s=%s: %w", k, v, err))
		}
	}
	return errs
}

// clusterMountRoots are the directories under which every mount is the
// cluster's.
func clusterMountRoots(base string) []string {
	return []string{base, "/var/lib/kubelet", "/run/netns", "/var/run/netns"}
}

// mountsUnder lists the mount points under any of roots (or equal to one).
func mountsUnder(roots []string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		for _, r := range roots {
			if mp == r || strings.HasPrefix(mp, r+"/") {
				out = append(out, mp)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupHierarchies lists the mounted cgroup hierarchies under
// /sys/fs/cgroup (each v1 controller's, the named ones, the unified one;
// or /sys/fs/cgroup itself on a cgroup v2 machine).
func cgroupHierarchies() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	ents, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.Type()&fs.ModeSymlink != 0 || !e.IsDir() {
			continue
		}
		out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
	}
	return out
}

// cgroupDirs are the cluster's cgroups, one per hierarchy.
func cgroupDirs() []string {
	var out []string
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h, cgroupParent)); err == nil {
			out = append(out, filepath.Join(h, cgroupParent))
		}
	}
	return out
}

// makeCgroups creates cgroupParent in every hierarchy (the kubelet
// requires its cgroup root to exist), with the root's CPUs and memory
// nodes in the cpuset one.
func makeCgroups() error {
	for _, h := range cgroupHierarchies() {
		d := filepath.Join(h, cgroupParent)
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
					return fmt.Errorf("write %s: %w", filepath.Join(d, f), err)
				}
			}
		}
		if h == "/sys/fs/cgroup" { // cgroup v2: let the kubelet use the controllers below
			if b, err := os.ReadFile(filepath.Join(h, "cgroup.subtree_control")); err == nil {
				var ctl []string
				for _, c := range strings.Fields(string(b)) {
					ctl = append(ctl, "+"+c)
				}
				_ = os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte(strings.Join(ctl, " ")), 0o644)
			}
		}
	}
	return nil
}

// removeCgroups removes the cgroups that were not there before, deepest
// first (a cgroup is removed with rmdir once it holds no process).
func removeCgroups(before hostState) error {
	var errs []string
	for _, h := range cgroupHierarchies() {
		for _, n := range []string{cgroupParent, "kubepods", "kubepods.slice"} {
			top := filepath.Join(h, n)
			if slices.Contains(before.Cgroups, top) {
				continue
			}
			var dirs []string
			_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, path)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := syscall.Rmdir(dirs[i]); err != nil && err != syscall.ENOENT {
					errs = append(errs, fmt.Sprintf("rmdir %s: %v", dirs[i], err))
				}
			}
		}
	}
	if errs != nil {
		return fmt.Errorf("remove the cluster's cgroups: %s", strings.Join(errs, "; "))
	}
	return nil
}

// iptablesFamilies are the iptables commands (each with its -save), IPv4
// and IPv6, nftables and legacy back ends: a machine may hold both (Docker
// on one, the kubelet's iptables on the other).
var iptablesFamilies = []string{"iptables", "ip6tables", "iptables-legacy", "ip6tables-legacy"}

// kubeChains lists the KUBE-* and CNI-* chains ("iptables filter
// KUBE-FIREWALL") and the rules of other chains that jump to one
// ("iptables filter -A INPUT -j KUBE-FIREWALL").
func kubeChains(ctx context.Context) []string {
	var out []string
	for _, fam := range iptablesFamilies {
		b, err := exec.CommandContext(ctx, fam+"-save").Output()
		if err != nil {
			continue
		}
		table := ""
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(line, "*"):
				table = line[1:]
			case strings.HasPrefix(line, ":"):
				name := strings.Fields(line[1:])[0]
				if ours(name) {
					out = append(out, fam+" "+table+" "+name)
				}
			case strings.HasPrefix(line, "-A "):
				f := strings.Fields(line)
				if len(f) > 1 && !ours(f[1]) && slices.ContainsFunc(f, ours) {
					out = append(out, fam+" "+table+" "+line)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func ours(chain string) bool {
	return strings.HasPrefix(chain, "KUBE-") || strings.HasPrefix(chain, "CNI-")
}

// removeChains deletes the rules and chains kubeChains lists that before
// does not: the jumps first, then each chain, flushed.
func removeChains(ctx context.Context, before []string) []error {
	var errs []error
	now := kubeChains(ctx)
	for _, c := range now { // the jumps
		if slices.Contains(before, c) {
			continue
		}
		fam, table, rest := split3(c)
		if !strings.HasPrefix(rest, "-A ") {
			continue
		}
		args, err := splitRule(rest)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		args[0] = "-D"
		if _, err := run(ctx, fam, append([]string{"-w", "-t", table}, args...)...); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range now { // the chains
		if slices.Contains(before, c) {
			continue
		}
		fam, table, rest := split3(c)
		if strings.HasPrefix(rest, "-A ") {
			continue
		}
		if _, err := run(ctx, fam, "-w", "-t", table, "-F", rest); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range now {
		if slices.Contains(before, c) {
			continue
		}
		fam, table, rest := split3(c)
		if strings.HasPrefix(rest, "-A ") {
			continue
		}
		if _, err := run(ctx, fam, "-w", "-t", table, "-X", rest); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func split3(s string) (a, b, rest string) {
	f := strings.SplitN(s, " ", 3)
	return f[0], f[1], f[2]
}

// splitRule splits an iptables-save rule into arguments: words, with
// double-quoted ones (a comment) taken whole.
func splitRule(s string) ([]string, error) {
	var args []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && inQuote && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == '"':
			inQuote, have = !inQuote, true
		case c == ' ' && !inQuote:
			if have {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if inQuote {
		return nil, fmt.Errorf("iptables rule %q: unterminated quote", s)
	}
	if have {
		args = append(args, cur.String())
	}
	return args, nil
}
