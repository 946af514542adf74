//go:build !unix

package secretfile

import (
	"context"
	"errors"
	"fmt"
)

// withFileLock reports that envctl's secret file cannot be shared safely
// between processes on this system: it has no flock(2).
func withFileLock(context.Context, string, func() error) error {
	return fmt.Errorf("secretfile: locking the secret file: %w", errors.ErrUnsupported)
}
