package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/examples/internal/secretfile"
	"github.com/berthdev/berth/internal/testenv"
)

// execEnv, when set in the environment, makes the test binary run envctl's
// main with its arguments instead of the tests, so a test can start real
// envctl processes.
const execEnv = "BERTH_ENVCTL_EXEC"

// gateEnv names a file an envctl process started by a test waits for before
// it runs, so that concurrent processes start together.
const gateEnv = "BERTH_ENVCTL_GATE"

func TestMain(m *testing.M) {
	if os.Getenv(execEnv) == "1" {
		if gate := os.Getenv(gateEnv); gate != "" {
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if _, err := os.Stat(gate); err == nil {
					break
				}
			}
		}
		main()
		os.Exit(0)
	}
	code := m.Run()
	testenv.RemoveRunnerBinary()
	if err := testenv.StopPostgres(); err != nil { // the bench's lease rows start it
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// envctlProcess returns a command that runs envctl (this test binary) in a
// new process.
func envctlProcess(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), execEnv+"=1")
	return cmd
}

// Issue 11 item 3: eight envctl processes creating environments with pasted
// secrets at once lose nothing: every environment's secret reference opens
// to the value pasted for it. The first round runs on a database none of
// them has opened before, so the key file is created concurrently too; the
// processes of a round wait at a gate and start together.
func TestConcurrentProcessesLoseNoSecret(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "envctl.db")
	const procs, rounds = 8, 3
	const n = procs * rounds
	canary := func(i int) string { return fmt.Sprintf("CANARY-concurrent-%d-7f3a", i) }
	for r := range rounds {
		gate := filepath.Join(dir, fmt.Sprintf("gate-%d", r))
		var wg sync.WaitGroup
		errs := make([]error, procs)
		outs := make([][]byte, procs)
		for p := range procs {
			i := r*procs + p
			cfg := filepath.Join(dir, fmt.Sprintf("fake-%d.json", i))
			if err := os.WriteFile(cfg, []byte(`{"api_key":"`+canary(i)+`"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := envctlProcess(t.Context(), "--db", db, "--test-mode", "env", "create",
				"--name", fmt.Sprintf("sbx-%d", i), "--driver", "fake", "--config", cfg)
			cmd.Env = append(cmd.Env, gateEnv+"="+gate)
			wg.Go(func() { outs[p], errs[p] = cmd.CombinedOutput() })
		}
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for p := range procs {
			if errs[p] != nil {
				t.Errorf("round %d, envctl process %d: %v\n%s", r, p, errs[p], outs[p])
			}
		}
	}
	if t.Failed() {
		return
	}

	secrets, err := secretfile.Open(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	c := &cli{t: t, db: db}
	for i := range n {
		var view struct {
			Config struct {
				APIKey struct {
					ID      string `json:"$secret"`
					Version int64  `json:"version"`
				} `json:"api_key"`
			} `json:"config"`
		}
		c.okJSON(&view, "env", "show", fmt.Sprintf("sbx-%d", i))
		ref := config.SecretRef{ID: view.Config.APIKey.ID, Version: view.Config.APIKey.Version}
		got, err := secrets.Get(t.Context(), ref)
		if err != nil {
			t.Errorf("sbx-%d: its secret %s is lost: %v", i, ref, err)
			continue
		}
		if got != canary(i) {
			t.Errorf("sbx-%d: secret %s opens to another environment's value", i, ref)
		}
	}
}
