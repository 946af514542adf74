package testenv

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHDPath is where Debian's openssh-server installs sshd.
const SSHDPath = "/usr/sbin/sshd"

// SSHServer is OpenSSH's sshd running for one test on 127.0.0.1, with a
// generated ed25519 host key and client key in a temp dir. The login user is
// the user running the test. It is stopped at the test's cleanup.
type SSHServer struct {
	dir        string
	port       int
	user       string
	clientPEM  string
	otherPEM   string
	hostKey    ssh.PublicKey
	otherHost  ssh.PublicKey
	knownHosts string // path of a known_hosts file holding KnownHostsLine
	clientFile string // path of the client private key file (0600)
	home       string // HOME of sessions
	authLine   string // the client key's authorized_keys line
	keysDir    string // AuthorizedKeysFile's directory: one file per login user
	unpriv     *Account
	unprivHome string
	// dropbear is set for a Dropbear server (Dropbear), whose sessions see
	// home at sessionHome.
	dropbear    bool
	sessionHome string

	cmd    *exec.Cmd
	logMu  sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
}

// SSHD starts sshd for t and stops it at cleanup. When sshd is not installed
// it calls Missing (a skip, or a failure under BERTH_REQUIRE_REAL=1).
// Readiness is awaited by dialing the port until sshd sends its banner.
func SSHD(t testing.TB) *SSHServer {
	t.Helper()
	if _, err := os.Stat(SSHDPath); err != nil {
		Missing(t, "OpenSSH sshd", "apt-get install openssh-server", err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatalf("testenv: current user: %v", err)
	}
	if os.Geteuid() == 0 {
		// Privilege separation needs this directory when sshd runs as root.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Fatalf("testenv: creating /run/sshd: %v", err)
		}
	}
	s := &SSHServer{dir: t.TempDir(), user: u.Username, exited: make(chan struct{})}
	s.home = filepath.Join(s.dir, "home")
	if err := os.Mkdir(s.home, 0o700); err != nil {
		t.Fatalf("testenv: %v", err)
	}

	hostPEM, hostPub := genKey(t)
	s.hostKey = hostPub
	s.clientPEM, _ = genKey(t)
	s.otherPEM, _ = genKey(t)
	_, s.otherHost = genKey(t)
	clientSigner, err := ssh.ParsePrivateKey([]byte(s.clientPEM))
	if err != nil {
		t.Fatalf("testenv: parsing generated client key: %v", err)
	}
	s.clientFile = filepath.Join(s.dir, "client_ed25519")
	write(t, filepath.Join(s.dir, "host_ed25519"), hostPEM)
	write(t, s.clientFile, s.clientPEM)
	s.authLine = string(ssh.MarshalAuthorizedKey(clientSigner.PublicKey()))
	s.setUpKeys(t)

	s.serve(t, "sshd", s.start)
	return s
}

// serve starts the server called name with start on a free port (five
// tries), writes the known_hosts file and stops the server at cleanup,
// logging its output when the test failed.
func (s *SSHServer) serve(t testing.TB, name string, start func(port int) error) {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("testenv: free port: %v", err)
		}
		if lastErr = start(port); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("testenv: starting %s: %v\n%s", name, lastErr, s.Log())
	}
	s.knownHosts = filepath.Join(s.dir, "known_hosts")
	write(t, s.knownHosts, s.KnownHostsLine()+"\n")
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("%s log:\n%s", name, s.Log())
		}
	})
}

func (s *SSHServer) start(port int) error {
	cfg := filepath.Join(s.dir, "sshd_config")
	conf := strings.Join([]string{
		"ListenAddress 127.0.0.1",
		"HostKey " + filepath.Join(s.dir, "host_ed25519"),
		"PidFile " + filepath.Join(s.dir, "sshd.pid"),
		"AuthorizedKeysFile " + filepath.Join(s.keysDir, "%u"),
		"UsePAM no",
		"StrictModes no",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PermitRootLogin prohibit-password",
		"PrintMotd no",
		"PrintLastLog no",
		"MaxStartups 100",
		"LogLevel ERROR",
		// Sessions get an empty home of their own: the machine's dotfiles
		// (a slow .bashrc) neither slow the tests down nor change them.
		"SetEnv HOME=" + s.home,
		"",
	}, "\n")
	if s.unpriv != nil {
		// Match blocks come last: the unprivileged account's sessions get a
		// home of their own that it may write.
		conf += "Match User " + s.unpriv.Name + "\n\tSetEnv HOME=" + s.unprivHome + "\n"
	}
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		return err
	}
	s.exited = make(chan struct{})
	s.logMu.Lock()
	s.log.Reset()
	s.logMu.Unlock()
	return s.launch("sshd", exec.Command(SSHDPath, "-D", "-e", "-f", cfg, "-p", strconv.Itoa(port)), port)
}

// launch starts cmd, the server called name listening on port, its output
// going to Log, and waits until it speaks SSH there.
func (s *SSHServer) launch(name string, cmd *exec.Cmd, port int) error {
	cmd.Stdout = (*lockedWriter)(s)
	cmd.Stderr = (*lockedWriter)(s)
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	s.port = port
	exited := s.exited
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if ready(port) {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited: %s", name, strings.TrimSpace(s.Log()))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("%s did not accept connections within 15s", name)
		}
	}
}

// ready reports whether something on port speaks SSH.
func ready(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 8)
	n, _ := c.Read(buf)
	return bytes.HasPrefix(buf[:n], []byte("SSH-"))
}

func (s *SSHServer) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
}

type lockedWriter SSHServer

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.logMu.Lock()
	defer w.logMu.Unlock()
	return w.log.Write(p)
}

// PID returns the process id of the listening sshd. Its children are the
// per-connection sshd processes: killing them drops every connection.
func (s *SSHServer) PID() int { return s.cmd.Process.Pid }

// Log returns what sshd wrote to its stderr so far.
func (s *SSHServer) Log() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.String()
}

// Host returns "127.0.0.1".
func (s *SSHServer) Host() string { return "127.0.0.1" }

// Port returns the port sshd listens on.
func (s *SSHServer) Port() int { return s.port }

// Addr returns "127.0.0.1:PORT".
func (s *SSHServer) Addr() string { return net.JoinHostPort(s.Host(), strconv.Itoa(s.port)) }

// User returns the login user (the user running the test).
func (s *SSHServer) User() string { return s.user }

// ClientKeyPEM returns the OpenSSH-format PEM of the authorized client key.
func (s *SSHServer) ClientKeyPEM() string { return s.clientPEM }

// ClientKeyFile returns the path of a 0600 file holding ClientKeyPEM, for
// OpenSSH's ssh client.
func (s *SSHServer) ClientKeyFile() string { return s.clientFile }

// UnauthorizedKeyPEM returns the PEM of a second client key that the server
// does not authorize.
func (s *SSHServer) UnauthorizedKeyPEM() string { return s.otherPEM }

// KnownHostsLine returns the known_hosts line trusting the server's host key
// for "[127.0.0.1]:PORT".
func (s *SSHServer) KnownHostsLine() string {
	return knownhosts.Line([]string{s.Addr()}, s.hostKey)
}

// KnownHostsFile returns the path of a known_hosts file holding
// KnownHostsLine, for OpenSSH's ssh client.
func (s *SSHServer) KnownHostsFile() string { return s.knownHosts }

// MismatchedKnownHostsLine returns a known_hosts line for the same address
// and key type but an unrelated key: the server's key will not match it.
func (s *SSHServer) MismatchedKnownHostsLine() string {
	return knownhosts.Line([]string{s.Addr()}, s.otherHost)
}

// HostKey returns the server's public host key.
func (s *SSHServer) HostKey() ssh.PublicKey { return s.hostKey }

// HostKeyFingerprint returns the SHA256 fingerprint of the host key
// ("SHA256:...").
func (s *SSHServer) HostKeyFingerprint() string { return ssh.FingerprintSHA256(s.hostKey) }

// Home returns the HOME directory sessions get (an empty temp dir, set with
// sshd's SetEnv so that the machine's dotfiles do not run), as this process
// sees it; Dropbear's sessions see it at SessionHome.
func (s *SSHServer) Home() string { return s.home }

// Dir returns the server's temp dir (keys, config, pid file).
func (s *SSHServer) Dir() string { return s.dir }

func genKey(t testing.TB) (string, ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("testenv: generating key: %v", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatalf("testenv: marshalling key: %v", err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatalf("testenv: public key: %v", err)
	}
	return string(pem.EncodeToMemory(block)), sp
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ForceCommand makes sshd run script (a POSIX sh script) in place of every
// command the client key asks for from the next login on; the command asked
// for is in $SSH_ORIGINAL_COMMAND. It rewrites authorized_keys with a
// command= option, which sshd reads at each login, so a test can make the
// server accept logins and then misbehave (e.g. never finish one command).
func (s *SSHServer) ForceCommand(t testing.TB, script string) {
	t.Helper()
	path := filepath.Join(s.dir, "force-command.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	s.writeKeys(t, `command="`+path+`" `+s.authLine)
}

// setUpKeys makes the directory sshd reads each login user's authorized
// keys from (AuthorizedKeysFile DIR/%u): a file for the user running the
// test and, when the machine has it (UnprivilegedAccount), one for the
// unprivileged test account, whose sessions get a home of their own. sshd
// reads a user's file as that user, so the directory lives outside the
// test's 0700 temp dir, world-traversable, and is removed at cleanup.
func (s *SSHServer) setUpKeys(t testing.TB) {
	t.Helper()
	dir, err := os.MkdirTemp("", "berth-sshd-keys-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	s.keysDir = dir
	if a, ok := lookupUnprivileged(); ok && os.Geteuid() == 0 {
		s.unpriv = &a
		s.unprivHome = filepath.Join(dir, "home-"+a.Name)
		if err := os.Mkdir(s.unprivHome, 0o700); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if err := os.Chown(s.unprivHome, a.UID, a.GID); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	s.writeKeys(t, s.authLine)
}

// writeKeys writes line as the authorized keys of every login user.
func (s *SSHServer) writeKeys(t testing.TB, line string) {
	t.Helper()
	if s.dropbear {
		s.dropbearKeys(t, line)
		return
	}
	write(t, filepath.Join(s.keysDir, s.user), line)
	if s.unpriv != nil {
		p := filepath.Join(s.keysDir, s.unpriv.Name)
		write(t, p, line)
		if err := os.Chown(p, s.unpriv.UID, s.unpriv.GID); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
}

// UnprivilegedLogin returns the unprivileged test account
// (UnprivilegedAccount) as a login user of this server, with the HOME its
// sessions get (a directory it owns), authorized with ClientKeyPEM like
// User. When the account is missing or the test does not run as root it
// calls Missing.
func (s *SSHServer) UnprivilegedLogin(t testing.TB) (a Account, home string) {
	t.Helper()
	if s.dropbear {
		Missing(t, "an unprivileged login on the test Dropbear server", "use SSHD", nil)
	}
	if s.unpriv == nil {
		UnprivilegedAccount(t) // ends the test with the reason
		Missing(t, "an sshd login as the unprivileged test account", "run the tests as root", nil)
	}
	return *s.unpriv, s.unprivHome
}
