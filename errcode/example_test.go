package errcode_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/berthdev/berth/errcode"
)

// ErrNotFound is declared as a package declares its sentinels.
var ErrNotFound = errcode.New(errcode.NotFound, "lease: not found")

// A host maps any berth error to a status in one switch; errors.Is still
// finds the one sentinel.
func Example() {
	status := func(err error) int {
		switch errcode.Code(err) {
		case errcode.OK:
			return 200
		case errcode.NotFound:
			return 404
		case errcode.Denied:
			return 403
		case errcode.Timeout:
			return 504
		default:
			return 500
		}
	}
	err := fmt.Errorf("release lease %s: %w", "l_7", ErrNotFound)
	fmt.Println(errcode.Code(err), status(err), errors.Is(err, ErrNotFound))
	fmt.Println(errcode.Code(context.DeadlineExceeded), status(context.DeadlineExceeded))
	fmt.Println(errcode.Code(nil), status(nil))
	fmt.Println(errcode.Code(errors.New("disk full")), status(errors.New("disk full")))
	// Output:
	// not_found 404 true
	// timeout 504
	// ok 200
	// unknown 500
}
