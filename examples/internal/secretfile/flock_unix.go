//go:build unix

package secretfile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// withFileLock runs fn while this process holds an exclusive flock(2) on
// path (created 0600 if absent), so that processes sharing a database
// take turns. Waiting for the lock honours ctx. The lock is released when fn
// returns, or by the kernel if the process dies.
func withFileLock(ctx context.Context, path string, fn func() error) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("secretfile: lock file %s: %w", path, err)
	}
	defer f.Close()
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("secretfile: locking %s: %w", path, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("secretfile: waiting for the lock on %s: %w", path, ctx.Err())
		case <-t.C:
		}
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return fn()
}
