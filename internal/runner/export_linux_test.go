package runner

import "golang.org/x/sys/unix"

func unixGetpgid() (int, error) { return unix.Getpgid(0) }
