//go:build unix

package workspace

import "syscall"

// openNoFollow opens neither a symbolic link planted in place of a file
// nor blocks on a fifo planted there.
const openNoFollow = syscall.O_NOFOLLOW | syscall.O_NONBLOCK
