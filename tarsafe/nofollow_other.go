//go:build !unix

package tarsafe

// syscallNoFollow is 0 where the system has no O_NOFOLLOW; Create's
// os.SameFile check still refuses a file swapped in.
const syscallNoFollow = 0
