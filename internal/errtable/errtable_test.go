package errtable

import (
	"strings"
	"testing"
)

// Check finds each way an answer can fail a row, and passes a good one;
// Rows gives every row a code, a target and a part of the chain, with
// unique environment names.
func TestCheckCatchesEachFault(t *testing.T) {
	r := Row{Name: "x", Code: "auth_failed", Reason: "host_key_unknown", Target: "h:22", InChain: "host key unknown"}
	good := "The host key of h:22 is not trusted yet: check it, then trust it."
	detail := "ssh h:22: host key unknown"
	if p := Check(r, "auth_failed", "host_key_unknown", good, detail); p != nil {
		t.Fatalf("a good answer: %v", p)
	}
	for name, bad := range map[string][4]string{
		"code":          {"unavailable", "host_key_unknown", good, detail},
		"reason":        {"auth_failed", "", good, detail},
		"empty":         {"auth_failed", "host_key_unknown", "", detail},
		"long":          {"auth_failed", "host_key_unknown", good + strings.Repeat(" h:22", 40), detail},
		"no target":     {"auth_failed", "host_key_unknown", "The host key is not trusted.", detail},
		"requirement":   {"auth_failed", "host_key_unknown", "The host key of h:22 is not trusted (PRB-5).", detail},
		"go identifier": {"auth_failed", "host_key_unknown", "The host key of h:22: drivers.ErrHostKeyUnknown.", detail},
		"no chain":      {"auth_failed", "host_key_unknown", good, "failed"},
		"chain=message": {"auth_failed", "host_key_unknown", good + " host key unknown", good + " host key unknown"},
	} {
		if p := Check(r, bad[0], bad[1], bad[2], bad[3]); len(p) == 0 {
			t.Errorf("%s: Check found nothing wrong", name)
		}
	}
	seen := map[string]bool{}
	for _, r := range Rows(Fixture{SSHHost: "127.0.0.1", SSHPort: 22, KnownHosts: "127.0.0.1 ssh-ed25519 AAAA", ClosedPort: 9, FakeMutableImage: "r.test/app:v1"}) {
		if r.Code == "" || r.Target == "" || r.InChain == "" || r.Env.Name == "" || seen[r.Env.Name] {
			t.Errorf("row %+v", r)
		}
		seen[r.Env.Name] = true
	}
}
