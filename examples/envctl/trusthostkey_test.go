package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"net"
	"strconv"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"
)

// handshakeServer serves the SSH handshake with a fresh ed25519 host key
// on a loopback port until the test ends (enough for a scan: the scan
// disconnects once it read the key), and returns the port and the key's
// fingerprint.
func handshakeServer(t *testing.T) (int, string) {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &gossh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _, _, _ = gossh.NewServerConn(c, cfg)
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, gossh.FingerprintSHA256(signer.PublicKey())
}

// envctl env trust-host-key (issue 53 item 3): it scans the key, prints
// its fingerprint, saves it in known_hosts only once confirmed, refuses a
// fingerprint that is not the one the server offers, and says so when
// the key is already trusted; another driver's environment is refused.
func TestTrustHostKey(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	port, fp := handshakeServer(t)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := `{"host":"127.0.0.1","port":` + strconv.Itoa(port) + `,"user":"nobody","private_key":` + strconv.Quote(string(pem.EncodeToMemory(block))) + `}`
	if out, errOut, err := c.exec(cfg, "env", "create", "--name", "box", "--driver", "ssh", "--config", "-"); err != nil {
		t.Fatalf("env create: %v\n%s%s", err, out, errOut)
	}

	// Not confirmed: printed, nothing saved.
	out, errOut, err := c.exec("no\n", "env", "trust-host-key", "box")
	if err == nil || !strings.Contains(out, fp) || !strings.Contains(errOut, "Type yes") || !strings.Contains(err.Error(), "not confirmed") {
		t.Errorf("trust-host-key answered no: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if show := c.ok("env", "show", "box"); strings.Contains(show, "known_hosts") {
		t.Errorf("a key was saved without confirmation:\n%s", show)
	}
	// A fingerprint that is not the server's: refused, nothing saved.
	_, msg := c.fail("env", "trust-host-key", "box", "--fingerprint", "SHA256:not-the-key")
	wantContains(t, "a wrong fingerprint", msg, "now offers the key "+fp, "scan again")
	// Confirmed by typing yes: saved.
	out, errOut, err = c.exec("yes\n", "env", "trust-host-key", "box")
	if err != nil || !strings.Contains(out, "trusts "+fp+" now (revision 2)") {
		t.Fatalf("trust-host-key answered yes: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	wantContains(t, "env show after trusting", c.ok("env", "show", "box"), `"known_hosts":["[127.0.0.1]:`+strconv.Itoa(port)+` ssh-ed25519 `)
	wantContains(t, "trust-host-key again", c.ok("env", "trust-host-key", "box", "--yes"), "already trusts this key")

	c.createFake("sandbox", `{}`)
	_, msg = c.fail("env", "trust-host-key", "sandbox", "--yes")
	wantContains(t, "a fake environment", msg, "no host key to trust")
}
