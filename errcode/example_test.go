package errcode_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/berthdev/berth/errcode"
)

// A host maps any berth error to a status in one switch; errors.Is finds
// the code's one sentinel.
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
	err := fmt.Errorf("release lease %s: %w", "l_7", errcode.ErrNotFound)
	fmt.Println(errcode.Code(err), status(err), errors.Is(err, errcode.ErrNotFound))
	fmt.Println(errcode.Code(context.DeadlineExceeded), status(context.DeadlineExceeded))
	fmt.Println(errcode.Code(nil), status(nil))
	fmt.Println(errcode.Code(errors.New("disk full")), status(errors.New("disk full")))
	// Output:
	// not_found 404 true
	// timeout 504
	// ok 200
	// unknown 500
}

// An error for two readers: a program reads the code and the reason, a
// person the message, and the detail keeps the chain.
func ExampleError() {
	err := fmt.Errorf("acquire lease lse_1: %w", &errcode.Error{
		Code:    errcode.AuthFailed,
		Reason:  "host_key_unknown",
		Op:      "ssh",
		Target:  "root@10.0.0.5:22",
		Message: "The host key of root@10.0.0.5:22 is not trusted yet: check its fingerprint and trust it.",
		Err:     errors.New("server offered ssh-ed25519 key SHA256:abc"),
	})
	fmt.Println(errcode.Code(err), errcode.ReasonOf(err))
	fmt.Println(errcode.MessageOf(err))
	fmt.Println(err)
	fmt.Println(errcode.MessageOf(errors.New("disk full")))
	// Output:
	// auth_failed host_key_unknown
	// The host key of root@10.0.0.5:22 is not trusted yet: check its fingerprint and trust it.
	// acquire lease lse_1: ssh root@10.0.0.5:22: server offered ssh-ed25519 key SHA256:abc
	// The operation failed: the detail says why.
}
