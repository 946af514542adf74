package execrelay

// OpenConns returns how many connections Accept returned that have not
// ended on both sides.
func OpenConns(l *Listener) int64 { return l.live.Load() }
