package berth_test

import (
	"testing"

	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/internal/testenv"
)

func sshWorkspaceConfig(t *testing.T, srv *testenv.SSHServer) map[string]any {
	return map[string]any{"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
		"private_key": srv.ClientKeyPEM(), "known_hosts": []any{srv.KnownHostsLine()}, "workdir": t.TempDir()}
}

// The workspace's life and a Git source over SSH, to OpenSSH's sshd and
// to Dropbear (no SFTP: tar over the session).
func TestWorkspaceSSH(t *testing.T) {
	for name, start := range map[string]func(testing.TB, ...string) *testenv.SSHServer{
		"openssh":  func(t testing.TB, _ ...string) *testenv.SSHServer { return testenv.SSHD(t) },
		"dropbear": testenv.Dropbear,
	} {
		t.Run(name, func(t *testing.T) {
			srv := start(t)
			t.Run("life", func(t *testing.T) { testWorkspaceLife(t, ssh.New(nil), sshWorkspaceConfig(t, srv)) })
			t.Run("git", func(t *testing.T) { testWorkspaceGit(t, ssh.New(nil), sshWorkspaceConfig(t, srv), true) })
		})
	}
}
