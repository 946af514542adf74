package controller_test

import (
	"context"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/testenv"
)

// secretsSeen connects to s with token from last_command_seq 0, reads up
// to command seq 1 and returns how many frames before it carried canary.
func secretsSeen(t *testing.T, s *server, token, canary string) int {
	t.Helper()
	rr := connectRaw(t, s, token, []prpwire.Capability{prpwire.CapTasks, prpwire.CapSecrets}, prpwire.Resume{})
	_, before := rr.until(prpwire.TypeCommand, func(e prpwire.Envelope) bool { return e.Seq == 1 })
	n := 0
	for _, e := range before {
		if e.Type == prpwire.TypeSecrets && strings.Contains(string(e.Body), canary) {
			n++
		}
	}
	rr.close(s)
	return n
}

// Issue 22 item 5: a secret value goes out at most once per command, also
// to a runner that reconnects three times asking for every command again
// (last_command_seq 0), and across two replicas on one PostgreSQL; a new
// command gets it (once).
func TestSecretValueGoesOutOncePerCommand(t *testing.T) {
	t.Parallel()
	canary := newCanary(t)
	res := mapResolver{values: map[string]string{"TOKEN": canary}}
	task := func(id string) prp.TaskStart {
		return prp.TaskStart{TaskID: id, Argv: []string{"true"}, Secrets: []prp.SecretUse{{Source: prp.SecretFromEnvironment, Ref: "TOKEN", Env: "TOKEN"}}}
	}
	t.Run("reconnects", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, serverOptions{Secrets: res})
		_, token := exchangeToken(t, s, s.ticket(t, prp.ScopeTask))
		rr := connectRaw(t, s, token, []prpwire.Capability{prpwire.CapTasks, prpwire.CapSecrets}, prpwire.Resume{})
		session := rr.session
		rr.close(s)
		if _, err := s.c.StartTask(context.Background(), operator, session, "c1", task("t1")); err != nil {
			t.Fatal(err)
		}
		total := 0
		for range 4 {
			total += secretsSeen(t, s, token, canary)
		}
		if total != 1 {
			t.Errorf("the value went out in %d secrets frames over four connections, want 1", total)
		}
		if _, err := s.c.StartTask(context.Background(), operator, session, "c2", task("t2")); err != nil {
			t.Fatal(err)
		}
		rr = connectRaw(t, s, token, []prpwire.Capability{prpwire.CapTasks, prpwire.CapSecrets}, prpwire.Resume{LastCommandSeq: 1})
		_, before := rr.until(prpwire.TypeCommand, func(e prpwire.Envelope) bool { return e.Seq == 2 })
		if len(before) != 1 || before[0].Type != prpwire.TypeSecrets || !strings.Contains(string(before[0].Body), canary) {
			t.Errorf("a new command's frames before it = %d, want its one secrets frame", len(before))
		}
	})
	t.Run("replicas", func(t *testing.T) {
		t.Parallel()
		url := testenv.Postgres(t)
		signer := testSigner(t)
		dataDir := t.TempDir()
		replica := func() *server {
			db := openStores(t, url)
			return newServer(t, serverOptions{Signer: signer, Secrets: res, Options: controller.Options{Tickets: db.Runners.(controller.RunnerStore), Store: db.Runners.(controller.RunnerStore), DataDir: dataDir}})
		}
		a, b := replica(), replica()
		_, token := exchangeToken(t, a, a.ticket(t, prp.ScopeTask))
		for _, s := range []*server{a, b} {
			// Each replica has seen the runner offer secrets.
			connectRaw(t, s, token, []prpwire.Capability{prpwire.CapTasks, prpwire.CapSecrets}, prpwire.Resume{}).close(s)
		}
		rr := connectRaw(t, a, token, []prpwire.Capability{prpwire.CapTasks, prpwire.CapSecrets}, prpwire.Resume{})
		id := rr.session
		rr.close(a)
		if _, err := b.c.StartTask(context.Background(), operator, id, "c1", task("t1")); err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, s := range []*server{a, b, a, b} {
			total += secretsSeen(t, s, token, canary)
		}
		if total != 1 {
			t.Errorf("the value went out in %d secrets frames over four connections to two replicas, want 1", total)
		}
	})
}
