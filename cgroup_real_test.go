package berth_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/proctest"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
)

// escapeScript ($1 = pid file, $2 = sleep marker) leaves a process that
// evades the runner and the tag scan: a double fork into a session of its
// own, re-executed with a cleared environment (no BERTH_LEASE, no runner
// mark), then the task exits 0.
const escapeScript = `( setsid env -i /bin/sh -c 'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep "$2"' escaped "$1" "$2" </dev/null >/dev/null 2>&1 & ); exit 0`

// issue 22 item 3: on a host lease whose account is root (a cgroup can be
// made: this machine's cgroup2 mount), the runner and its tasks run in the
// lease's cgroup, and the release's check over a fresh session kills a
// task that escaped its group and cleared its environment: the receipt
// says cgroup. On an unprivileged account (no cgroup) the same escape
// evades the tag scan, and the receipt says tag_scan and names the
// evasion.
func TestHostLeaseReceiptsNameTheirEvidence(t *testing.T) {
	bin, _ := testenv.RunnerBinarySum(t)
	type target struct {
		driver string
		config map[string]any
		dir    string // where the task may write its pid file
		want   drivers.EvidenceKind
	}
	targets := map[string]func(t *testing.T) target{
		"local-root": func(t *testing.T) target {
			return target{"local", map[string]any{"workdir": t.TempDir()}, t.TempDir(), drivers.EvidenceCgroup}
		},
		"ssh-root": func(t *testing.T) target {
			srv := testenv.SSHD(t)
			return target{"ssh", map[string]any{
				"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
				"private_key": srv.ClientKeyPEM(), "known_hosts": []any{srv.KnownHostsLine()}, "workdir": t.TempDir(),
			}, t.TempDir(), drivers.EvidenceCgroup}
		},
		"ssh-unprivileged": func(t *testing.T) target {
			srv := testenv.SSHD(t)
			acct, home := srv.UnprivilegedLogin(t)
			return target{"ssh", map[string]any{
				"host": srv.Host(), "port": srv.Port(), "user": acct.Name,
				"private_key": srv.ClientKeyPEM(), "known_hosts": []any{srv.KnownHostsLine()}, "workdir": home,
			}, acct.Dir(t), drivers.EvidenceTagScan}
		},
	}
	for name, mk := range targets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if os.Geteuid() != 0 {
				testenv.Missing(t, "root (a cgroup for the lease)", "run the tests as root", nil)
			}
			tg := mk(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{ssh.New(nil), local.New(nil)}, RunnerBinary: bin})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sys.Close() })
			h, att, _ := attachRunner(t, ctx, sys, "evidence-"+name, tg.driver, tg.config)
			pidFile := filepath.Join(tg.dir, "escaped.pid")
			marker := "7" + strconv.Itoa(int(time.Now().UnixNano()%1e6)+1e6)
			task, err := att.Start(ctx, realOperator, controller.TaskSpec{TaskStart: prp.TaskStart{TaskID: "escape",
				Argv: []string{"sh", "-c", escapeScript, "escape", pidFile, marker}}})
			if err != nil {
				t.Fatal(err)
			}
			if exit, err := task.Wait(ctx); err != nil || exit.Code != 0 {
				t.Fatalf("the escaping task: %+v, %v", exit, err)
			}
			pid := 0
			for deadline := time.Now().Add(30 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
				if b, err := os.ReadFile(pidFile); err == nil {
					pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				}
				if pid == 0 && time.Now().After(deadline) {
					t.Fatal("the escaped process never wrote its pid")
				}
			}
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
			if err != nil || strings.Contains(string(env), "BERTH_LEASE"+"=") {
				t.Fatalf("escaped process %d: environ %q, %v; want it running without the lease's tag", pid, env, err)
			}

			// The runner, found as the release's check finds it: by its
			// --lease= argument (it is not dumpable: on an unprivileged
			// account nothing else of the account reads its environment).
			runner := "\x00--lease=" + h.ID() + "\x00"
			if pids := proctest.LivePIDs(runner); len(pids) != 1 {
				t.Fatalf("runner processes of lease %s: %v, want one", h.ID(), pids)
			}

			l, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
			if err != nil {
				t.Fatalf("Release: %v", err)
			}
			t.Logf("%s receipt: %s: %s", name, l.CleanupEvidenceKind, l.CleanupEvidence)
			if pids := proctest.LivePIDs(runner); len(pids) != 0 {
				t.Errorf("the lease's runner outlived its confirmed release: processes %v", pids)
			}
			if l.Cleanup != "confirmed" || l.CleanupEvidenceKind != tg.want {
				t.Fatalf("receipt %s by %q (%s), want confirmed by %s", l.Cleanup, l.CleanupEvidenceKind, l.CleanupEvidence, tg.want)
			}
			if !strings.Contains(l.CleanupEvidence, string(drivers.EvidenceRunnerAttested)) {
				t.Errorf("receipt %q does not name the runner's part as runner_attested", l.CleanupEvidence)
			}
			switch tg.want {
			case drivers.EvidenceCgroup:
				if !strings.Contains(l.CleanupEvidence, "cgroup ") || !strings.Contains(l.CleanupEvidence, "/berth/"+h.ID()) {
					t.Errorf("receipt %q does not name the lease's cgroup", l.CleanupEvidence)
				}
				if alive(pid) {
					t.Errorf("the escaped process %d survived the cgroup check", pid)
				}
			case drivers.EvidenceTagScan:
				if !strings.Contains(l.CleanupEvidence, "no cgroup for the lease") || !strings.Contains(l.CleanupEvidence, "evade") {
					t.Errorf("a tag_scan receipt %q that does not name its evasion", l.CleanupEvidence)
				}
				// What the receipt warns of: the escape survives the scan.
				if !alive(pid) {
					t.Errorf("the escaped process %d is gone without a cgroup; the evasion this test documents did not happen", pid)
				}
			}
		})
	}
}

// alive reports whether pid is a live process (zombies do not count).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z") && !strings.HasPrefix(s[i+1:], " X")
}
