package testenv

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// DropbearPath is where Debian's dropbear-bin installs the Dropbear server.
const DropbearPath = "/usr/sbin/dropbear"

// Dropbear starts the Dropbear SSH server (Debian's dropbear-bin, 2022.83
// here) for t on 127.0.0.1 and stops it at cleanup: a second real SSH
// server, unlike OpenSSH in what matters to the SSH driver (sessions stay
// in the server's process group; only TCP is forwarded, never unix
// sockets). It returns an SSHServer with the same accessors as SSHD: a
// generated ed25519 host key (dropbearkey) and client key, the login user
// the user running the test.
//
// Dropbear reads only ~/.ssh/authorized_keys of the login user, so it runs
// in a private mount namespace (unshare --mount) in which the login user's
// home is a bind mount of an empty directory of the test (Home): the
// authorized key is written there, and the machine's real home and its
// files are neither read nor touched. Sessions get HOME as the passwd
// entry says (the bound directory, so the machine's dotfiles do not run).
// It needs root (the mount) and unshare; when dropbear, dropbearkey or
// unshare is missing, or the test is not root, it calls Missing.
// ForceCommand works as with sshd (authorized_keys command=);
// UnprivilegedLogin does not (it calls Missing). args are added to
// dropbear's command line (e.g. "-k": no remote forwarding).
func Dropbear(t testing.TB, args ...string) *SSHServer {
	t.Helper()
	for _, p := range []string{DropbearPath, "/usr/bin/dropbearkey"} {
		if _, err := os.Stat(p); err != nil {
			Missing(t, "Dropbear", "apt-get install dropbear-bin", err)
		}
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		Missing(t, "unshare (for Dropbear's private mount namespace)", "apt-get install util-linux", err)
	}
	if os.Geteuid() != 0 {
		Missing(t, "a Dropbear server with a home of its own", "run the tests as root (it bind-mounts the login user's home in a private mount namespace)", nil)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatalf("testenv: current user: %v", err)
	}
	if fi, err := os.Stat(u.HomeDir); err != nil || !fi.IsDir() {
		Missing(t, "a Dropbear server with a home of its own", "the login user's home "+u.HomeDir+" must exist (it is the mount point)", err)
	}
	s := &SSHServer{dir: t.TempDir(), user: u.Username, exited: make(chan struct{}), dropbear: true, sessionHome: u.HomeDir}
	s.home = filepath.Join(s.dir, "home")
	if err := os.MkdirAll(filepath.Join(s.home, ".ssh"), 0o700); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if err := os.Chmod(s.home, 0o700); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	hostKey := filepath.Join(s.dir, "host_ed25519")
	if out, err := exec.Command("dropbearkey", "-t", "ed25519", "-f", hostKey).CombinedOutput(); err != nil {
		t.Fatalf("testenv: dropbearkey: %v\n%s", err, out)
	}
	out, err := exec.Command("dropbearkey", "-y", "-f", hostKey).Output()
	if err != nil {
		t.Fatalf("testenv: dropbearkey -y: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "ssh-") {
			if s.hostKey, _, _, _, err = ssh.ParseAuthorizedKey([]byte(l)); err != nil {
				t.Fatalf("testenv: dropbear host key %q: %v", l, err)
			}
		}
	}
	if s.hostKey == nil {
		t.Fatalf("testenv: dropbearkey -y printed no public key:\n%s", out)
	}
	s.clientPEM, _ = genKey(t)
	s.otherPEM, _ = genKey(t)
	_, s.otherHost = genKey(t)
	clientSigner, err := ssh.ParsePrivateKey([]byte(s.clientPEM))
	if err != nil {
		t.Fatalf("testenv: parsing generated client key: %v", err)
	}
	s.clientFile = filepath.Join(s.dir, "client_ed25519")
	write(t, s.clientFile, s.clientPEM)
	s.authLine = string(ssh.MarshalAuthorizedKey(clientSigner.PublicKey()))
	s.writeKeys(t, s.authLine)

	s.serve(t, "dropbear", func(port int) error { return s.startDropbear(unshare, hostKey, port, args) })
	return s
}

// startDropbear runs dropbear in the foreground (-F, log to stderr -E) in a
// private mount namespace whose login home is the test's; -s refuses
// passwords. Remote and local forwarding stay on (Dropbear's defaults).
func (s *SSHServer) startDropbear(unshare, hostKey string, port int, args []string) error {
	s.exited = make(chan struct{})
	s.logMu.Lock()
	s.log.Reset()
	s.logMu.Unlock()
	script := `h=$1 home=$2; shift 2; mount --bind "$h" "$home" && exec "$@"`
	argv := append([]string{unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh",
		s.home, s.sessionHome, DropbearPath, "-F", "-E", "-s", "-p", "127.0.0.1:" + strconv.Itoa(port), "-r", hostKey,
		"-P", filepath.Join(s.dir, "dropbear.pid")}, args...)
	return s.launch("dropbear", exec.Command(argv[0], argv[1:]...), port)
}

// Dropbear reports whether the server is Dropbear (Dropbear) rather than
// OpenSSH's sshd (SSHD).
func (s *SSHServer) Dropbear() bool { return s.dropbear }

// SessionHome returns HOME as the server's sessions see it: Home for sshd;
// for Dropbear the login user's home path, at which Home is mounted in the
// server's namespace.
func (s *SSHServer) SessionHome() string {
	if s.dropbear {
		return s.sessionHome
	}
	return s.home
}

// dropbearKeys writes line as the login user's ~/.ssh/authorized_keys in
// the bound home.
func (s *SSHServer) dropbearKeys(t testing.TB, line string) {
	t.Helper()
	write(t, filepath.Join(s.home, ".ssh", "authorized_keys"), line)
}
