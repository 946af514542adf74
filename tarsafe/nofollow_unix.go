//go:build unix

package tarsafe

import "syscall"

// syscallNoFollow makes Create's open of a regular file fail on a link
// swapped in after the walk read the entry.
const syscallNoFollow = syscall.O_NOFOLLOW
