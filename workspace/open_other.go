//go:build !unix

package workspace

// openNoFollow is none where the flags do not exist; the opened file is
// still checked against the walked one.
const openNoFollow = 0
