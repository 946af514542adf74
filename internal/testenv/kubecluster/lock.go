package kubecluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// takeLock takes the machine-wide lock, waiting while another test
// binary's cluster runs.
func takeLock(logf func(string, ...any)) (*os.File, error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		return f, nil
	}
	logf("kubecluster: waiting for another test binary's cluster to stop (lock %s)", lockPath)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", lockPath, err)
	}
	return f, nil
}

func unlock(f *os.File) {
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	f.Close()
}

// recoverStale cleans up after a cluster whose test binary died without
// its teardown (the state file is still there).
func recoverStale(ctx context.Context, logf func(string, ...any)) error {
	b, err := os.ReadFile(statePath)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil || !strings.HasPrefix(st.Base, os.TempDir()) {
		return fmt.Errorf("%s is not a cluster's state (%v): remove it if no cluster runs", statePath, err)
	}
	logf("kubecluster: cleaning up after a cluster whose test binary died (%s)", st.Base)
	if errs := cleanupDir(ctx, st.Base, st.Before); len(errs) > 0 {
		return fmt.Errorf("clean up after a dead cluster in %s: %w", st.Base, errors.Join(errs...))
	}
	return os.Remove(statePath)
}

// keepLogs copies the components' logs out of the cluster's directory
// (which the teardown removes) into a new temporary directory.
func keepLogs(d layout) (string, error) {
	kept, err := os.MkdirTemp("", "berth-kubecluster-logs-")
	if err != nil {
		return "", err
	}
	logs, _ := filepath.Glob(d.path("logs", "*.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(kept, filepath.Base(l)), b, 0o600); err != nil {
			return "", err
		}
	}
	return kept, nil
}
