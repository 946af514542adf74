//go:build !unix

package main

import (
	"context"
	"errors"
	"fmt"
)

// withFileLock reports that the server's secret file cannot be shared safely
// between processes on this system: it has no flock(2).
func withFileLock(context.Context, string, func() error) error {
	return fmt.Errorf("server: locking the secret file: %w", errors.ErrUnsupported)
}
