package ssh

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/google/go-cmp/cmp"
	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func genPEM(t testing.TB, passphrase string) (string, xssh.PublicKey) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	var block *pem.Block
	var err error
	if passphrase == "" {
		block, err = xssh.MarshalPrivateKey(priv, "")
	} else {
		block, err = xssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	sp, _ := xssh.NewPublicKey(pub)
	return string(pem.EncodeToMemory(block)), sp
}

// CFG-3: the schema validates without ever quoting the key.
func TestSchemaNormalize(t *testing.T) {
	t.Parallel()
	key, hostKey := genPEM(t, "")
	encrypted, _ := genPEM(t, "pw")
	line := knownhosts.Line([]string{"example.com:2222"}, hostKey)
	d := newDriver(nil)
	base := func() map[string]any {
		return map[string]any{fieldHost: "example.com", fieldUser: "dev", fieldPrivateKey: key}
	}
	tests := []struct {
		name    string
		edit    func(map[string]any)
		wantErr error
		field   string
	}{
		{"minimal config gets defaults", func(map[string]any) {}, nil, ""},
		{"full config", func(m map[string]any) {
			m[fieldPort] = 2222
			m[fieldKnownHosts] = []any{line, "# comment", ""}
			m[fieldWorkdir] = "~/ws"
			m[fieldConnectTimeout] = "3s"
			m[fieldKeepalive] = "30s"
			m[fieldMaxSessions] = 20
		}, nil, ""},
		{"secret reference is accepted unresolved", func(m map[string]any) {
			m[fieldPrivateKey] = map[string]any{"$secret": "k1", "version": float64(2)}
		}, nil, ""},
		{"missing key", func(m map[string]any) { delete(m, fieldPrivateKey) }, config.ErrCredentialsMissing, fieldPrivateKey},
		{"missing host", func(m map[string]any) { delete(m, fieldHost) }, config.ErrInvalid, fieldHost},
		{"port out of range", func(m map[string]any) { m[fieldPort] = 70000 }, config.ErrInvalid, fieldPort},
		{"user with @", func(m map[string]any) { m[fieldUser] = "a@b" }, config.ErrInvalid, fieldUser},
		{"garbage key", func(m map[string]any) { m[fieldPrivateKey] = "not a key" }, config.ErrInvalid, fieldPrivateKey},
		{"encrypted key", func(m map[string]any) { m[fieldPrivateKey] = encrypted }, config.ErrInvalid, fieldPrivateKey},
		{"bad known_hosts line", func(m map[string]any) { m[fieldKnownHosts] = []any{"example.com ssh-ed25519 AAAA!!"} }, config.ErrInvalid, fieldKnownHosts},
		{"cert-authority is not supported", func(m map[string]any) { m[fieldKnownHosts] = []any{"@cert-authority " + line} }, config.ErrInvalid, fieldKnownHosts},
		{"max_sessions below 2", func(m map[string]any) { m[fieldMaxSessions] = 1 }, config.ErrInvalid, fieldMaxSessions},
		{"unknown field", func(m map[string]any) { m["password"] = "x" }, config.ErrInvalid, "password"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := base()
			tc.edit(raw)
			cfg, err := d.Schema().Normalize(raw)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Normalize: %v", err)
				}
				if cfg.Int(fieldPort) == 0 || cfg.String(fieldWorkdir) == "" || cfg.Duration(fieldConnectTimeout) == 0 {
					t.Errorf("defaults missing: %v", d.Schema().Redact(cfg))
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v; want %v", err, tc.wantErr)
			}
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Errorf("error %v does not name field %q", err, tc.field)
			}
			for _, l := range strings.Split(key, "\n")[1:3] {
				if strings.Contains(err.Error(), l) {
					t.Fatalf("error quotes the key: %v", err)
				}
			}
		})
	}
	t.Run("identity and secret kinds", func(t *testing.T) {
		t.Parallel()
		kinds := map[string]config.Kind{}
		for _, f := range d.Schema().Fields {
			kinds[f.Name] = f.Kind
		}
		want := map[string]config.Kind{
			fieldHost: config.KindIdentity, fieldPort: config.KindIdentity, fieldUser: config.KindIdentity,
			fieldPrivateKey: config.KindSecret, fieldKnownHosts: config.KindIdentity, fieldWorkdir: config.KindIdentity,
			fieldConnectTimeout: config.KindKnob, fieldKeepalive: config.KindKnob, fieldMaxSessions: config.KindKnob,
			fieldForwarding: config.KindKnob,
		}
		if diff := cmp.Diff(want, kinds); diff != "" {
			t.Errorf("field kinds (-want +got):\n%s", diff)
		}
	})
}

func TestKnownHostsMatching(t *testing.T) {
	t.Parallel()
	_, k := genPEM(t, "")
	blob := strings.SplitN(knownhosts.Line([]string{"x"}, k), " ", 2)[1]
	hashed22 := knownhosts.HashHostname("h.example") // port 22 form
	hashed2222 := knownhosts.HashHostname("[h.example]:2222")
	tests := []struct {
		name  string
		hosts string
		host  string
		port  int
		want  bool
	}{
		{"plain host, port 22", "h.example", "h.example", 22, true},
		{"plain host does not match another port", "h.example", "h.example", 2222, false},
		{"bracketed host and port", "[h.example]:2222", "h.example", 2222, true},
		{"bracketed port must match", "[h.example]:2222", "h.example", 22, false},
		{"case-insensitive", "H.Example", "h.example", 22, true},
		{"wildcard", "*.example", "h.example", 22, true},
		{"question mark", "?.example", "h.example", 22, true},
		{"negation wins", "*.example,!h.example", "h.example", 22, false},
		{"list", "a,b,h.example", "h.example", 22, true},
		{"hashed port 22", hashed22, "h.example", 22, true},
		{"hashed other port", hashed2222, "h.example", 2222, true},
		{"hashed wrong host", hashed22, "other", 22, false},
		{"IPv6", "[::1]:2222", "::1", 2222, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, err := parseKnownHosts([]string{tc.hosts + " " + blob})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(db.trusted(tc.host, tc.port)) == 1; got != tc.want {
				t.Errorf("match(%q, %s:%d) = %v; want %v", tc.hosts, tc.host, tc.port, got, tc.want)
			}
		})
	}
}

func TestShQuoteRoundTripsThroughSh(t *testing.T) {
	t.Parallel()
	args := []string{"", "plain", "a b", "it's", `"dq"`, "$HOME", "`x`", "back\\slash", "new\nline", "*", "-n", "ünï"}
	script := "printf '%s\\0'"
	for _, a := range args {
		script += " " + shQuote(a)
	}
	out, err := exec.Command("/bin/sh", "-c", script).Output()
	if err != nil {
		t.Skipf("no /bin/sh: %v", err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if diff := cmp.Diff(args, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestSnifferStripsTheMarker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		chunks []string
		want   string
		pgid   int
	}{
		{"marker then output", []string{"berth-pgid:42\nerr\n"}, "err\n", 42},
		{"marker split across writes", []string{"berth-", "pgid:4", "2\r\nrest"}, "rest", 42},
		{"login shell noise before the marker is kept", []string{"motd\nberth-pgid:7\nx"}, "motd\nx", 7},
		{"no marker", []string{"partial"}, "partial", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			s := newSniffer(&out)
			for _, c := range tc.chunks {
				if _, err := s.Write([]byte(c)); err != nil {
					t.Fatal(err)
				}
			}
			s.flush()
			if out.String() != tc.want || s.group() != tc.pgid {
				t.Errorf("out %q pgid %d; want %q %d", out.String(), s.group(), tc.want, tc.pgid)
			}
		})
	}
}

// FuzzSniffer: however the stream is cut into writes, the output and the
// group are the same.
func FuzzSniffer(f *testing.F) {
	f.Add([]byte("noise\nberth-pgid:123\nout\nmore"), uint8(3))
	f.Add([]byte("berth-pgid:9\r\n"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		whole := func(chunk int) (string, int) {
			var out bytes.Buffer
			s := newSniffer(&out)
			for i := 0; i < len(data); i += chunk {
				_, _ = s.Write(data[i:min(i+chunk, len(data))])
			}
			s.flush()
			return out.String(), s.group()
		}
		o1, g1 := whole(len(data) + 1)
		o2, g2 := whole(int(step)%16 + 1)
		if o1 != o2 || g1 != g2 {
			t.Fatalf("chunking changed the result: %q/%d vs %q/%d", o1, g1, o2, g2)
		}
	})
}

// FuzzKnownHosts: parsing arbitrary text never panics and never accepts
// a key for a host when parsing failed.
func FuzzKnownHosts(f *testing.F) {
	f.Add("h.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHHt0RRsXTQ3kQmjYHl8DPRWG5M7UN0yOdBxBhWxuHv4")
	f.Add("|1|abc|def ssh-rsa AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		db, err := parseKnownHosts([]string{s})
		if err != nil && db != nil {
			t.Fatal("db returned with an error")
		}
		if err == nil {
			_ = db.trusted("h.example", 22)
		}
	})
}

// Non-POSIX login shells: scripts are wrapped for /bin/sh, and
// cancellation still ends the process group.
func TestWrappedScriptsForOtherLoginShells(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.acquire(t, e.config(t, nil))
	if !sb.c.posix.Load() {
		t.Fatalf("the test user's login shell (bash or sh) was not detected as POSIX")
	}
	sb.c.posix.Store(false)
	res, err := sb.Exec(testCtx(t), drivers.Command{Argv: []string{"sh", "-c", `echo "$0 $A"`, "it's"}, Env: map[string]string{"A": "b'c"}})
	if err != nil || string(res.Stdout) != "it's b'c\n" || len(res.Stderr) != 0 {
		t.Fatalf("wrapped exec: %v %+v", err, res)
	}
	cancelStreamedTree(t, sb)
}

// A start claim (Dropbear, startCommand): the script runs its command only
// when it makes the claim itself; once the driver holds the claim, the
// script of the unanswered session runs nothing; where no claim can be
// made at all it runs as without one.
func TestExecScriptClaim(t *testing.T) {
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	run := func(claim string) string {
		t.Helper()
		_ = os.Remove(ran)
		script, err := execScript("", nil, []string{"sh", "-c", `echo yes > "$0"`, ran}, false, "n-1", claim)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("/bin/sh", "-c", script).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		b, _ := os.ReadFile(ran)
		return string(b)
	}
	claim := filepath.Join(dir, "claim-1")
	if got := run(claim); got != "yes\n" {
		t.Fatalf("unclaimed: the command did not run (%q)", got)
	}
	if _, err := os.Stat(claim); err != nil {
		t.Fatalf("the script did not make its claim: %v", err)
	}
	if got := run(claim); got != "" {
		t.Fatalf("claimed by someone else: the command ran (%q)", got)
	}
	if got := run(filepath.Join(dir, "no-such-dir", "claim")); got != "yes\n" {
		t.Fatalf("a claim that cannot be made: the command did not run (%q)", got)
	}
}
