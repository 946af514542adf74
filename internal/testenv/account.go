package testenv

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// UnprivilegedName is the login of the unprivileged account that tests
// about what a task can reach run the runner and its tasks as (the suite
// itself runs as root in CI). make test creates it when missing: shell
// /bin/sh, password field "*" (not locked, so sshd with UsePAM no accepts
// it), no password.
const UnprivilegedName = "berthtest"

// Account is a local user account.
type Account struct {
	Name string
	UID  int
	GID  int
}

// lookupUnprivileged returns the unprivileged test account, if the machine
// has it.
func lookupUnprivileged() (Account, bool) {
	u, err := user.Lookup(UnprivilegedName)
	if err != nil {
		return Account{}, false
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil || uid == 0 {
		return Account{}, false
	}
	return Account{Name: u.Username, UID: uid, GID: gid}, true
}

// UnprivilegedAccount returns the unprivileged test account
// (UnprivilegedName). A test can act as it only when it runs as root; when
// the account is missing or the test is not root it calls Missing (a
// skip, or a failure under BERTH_REQUIRE_REAL=1).
func UnprivilegedAccount(t testing.TB) Account {
	t.Helper()
	a, ok := lookupUnprivileged()
	if !ok {
		Missing(t, "the unprivileged test account "+strconv.Quote(UnprivilegedName),
			"make test creates it: useradd --system --create-home --shell /bin/sh "+UnprivilegedName+" && usermod -p '*' "+UnprivilegedName, nil)
	}
	if os.Geteuid() != 0 {
		Missing(t, "acting as the unprivileged test account", "run the tests as root", nil)
	}
	return a
}

// Command returns cmd set up to run as the account (its uid and gid, no
// supplementary groups), as setpriv --reuid --regid --clear-groups would.
func (a Account) Command(cmd *exec.Cmd) *exec.Cmd {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(a.UID), Gid: uint32(a.GID), Groups: []uint32{}}
	return cmd
}

// Dir returns a new directory owned by the account (mode 0700) outside the
// test's root-only temp dir, removed at cleanup: a state directory or a
// home the account's processes may write.
func (a Account) Dir(t testing.TB) string {
	t.Helper()
	parent, err := os.MkdirTemp("", "berth-account-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o711); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	dir := filepath.Join(parent, a.Name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if err := os.Chown(dir, a.UID, a.GID); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return dir
}

// Install copies the executable at src into a new directory that the
// account may read and traverse (RunnerBinary's lives under a root-only
// temp dir) and returns the copy's path, mode 0755, owned by root so the
// account cannot change it. It is removed at cleanup.
func (a Account) Install(t testing.TB, src string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	dir, err := os.MkdirTemp("", "berth-bin-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	dst := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return dst
}
