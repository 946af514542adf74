package testenv_test

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/berthdev/berth/internal/testenv"
)

// The unprivileged account logs in to the test sshd with the client key,
// gets a home it owns, and a command run as it locally is not root.
func TestUnprivilegedAccountLogsInAndOwnsItsHome(t *testing.T) {
	a := testenv.UnprivilegedAccount(t)
	srv := testenv.SSHD(t)
	login, home := srv.UnprivilegedLogin(t)
	signer, err := ssh.ParsePrivateKey([]byte(srv.ClientKeyPEM()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ssh.Dial("tcp", srv.Addr(), &ssh.ClientConfig{User: login.Name, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(srv.HostKey())})
	if err != nil {
		t.Fatalf("login as %s: %v\n%s", login.Name, err, srv.Log())
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.CombinedOutput(`id -u; echo "$HOME"; touch "$HOME/w" && echo writable`)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := strings.Join([]string{itoa(a.UID), home, "writable"}, "\n") + "\n"
	if string(out) != want {
		t.Fatalf("got %q, want %q", out, want)
	}

	local, err := a.Command(exec.Command("id", "-u")).Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(local)) != itoa(a.UID) {
		t.Fatalf("local command ran as uid %s, want %d", local, a.UID)
	}
	dir := a.Dir(t)
	if out, err := a.Command(exec.Command("touch", dir+"/x")).CombinedOutput(); err != nil {
		t.Fatalf("the account cannot write its Dir: %v: %s", err, out)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
